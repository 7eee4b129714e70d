"""A scripted local model server: the provider APIs the real harnesses talk to, offline.

``script`` holds the pure part (scripts, matching, the request log); ``server`` is the HTTP app
(Responses API for Codex in ``responses_api``, Messages API for Claude Code in ``messages_api``,
and a small control API so a test, the demo or the bench can register scripts and read what the
model really received). Never a network model: tests, the demo and the bench point the harnesses
here; production points them at real providers.
"""
