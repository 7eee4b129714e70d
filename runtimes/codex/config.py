"""What the Codex Runtime hands the binary: its private ``config.toml``, the public functions as
dynamic tools, and (conformance only) the deliberately broken adapter's content."""

from __future__ import annotations

from typing import Any

from runtimes.simulation import ALTERED_SUFFIX

Json = dict[str, Any]


def config_toml(base_url: str, model: str, env_key: str, *, subagents: bool = False) -> str:
    """The private ``CODEX_HOME/config.toml``: one provider, the Responses API, and Codex's own
    tools off (shell / exec, web search, sub-agents, goals, apps, plugins): the model then sees
    the Session's public functions plus ``view_image`` and ``request_user_input``, which 0.169
    does not let a config turn off (docs/harnesses.md). Sub-agents are off twice: the
    ``multi_agent`` feature (0.169 calls it deprecated, "it still controls the V1 fallback") and
    ``[agents] enabled = false``, which 0.169 says "disables subagent tools even when the model
    selects a subagent version". ``subagents=True`` only for recording what a sub-agent prints
    (tests/golden/record_codex.py)."""
    agents = "" if subagents else "[agents]\nenabled = false\n"
    return (
        f'model = "{model}"\n'
        'model_provider = "core"\n'
        'approval_policy = "never"\n'
        'sandbox_mode = "read-only"\n'
        'web_search = "disabled"\n'
        "[features]\n"
        "shell_tool = false\n"
        "unified_exec = false\n"
        f"multi_agent = {'true' if subagents else 'false'}\n"
        "goals = false\n"
        "apps = false\n"
        "plugins = false\n"
        f"{agents}"
        "[model_providers.core]\n"
        'name = "core"\n'
        f'base_url = "{base_url}"\n'
        'wire_api = "responses"\n'
        f'env_key = "{env_key}"\n'
    )


def dynamic_tools(functions: list[Json]) -> list[Json]:
    return [{"type": "function", "name": f["name"], "description": f.get("description", ""),
             "inputSchema": f.get("parameters") or {"type": "object", "properties": {}}}
            for f in functions]


def corrupt_items(items: list[Json], how: str | None, image: str, text: str) -> list[Json]:
    """Conformance's broken adapter: drop every image, or alter the first text."""
    if how == "drop_image":
        return [i for i in items if i.get("type") != image]
    if how == "alter_text":
        out = list(items)
        for n, i in enumerate(out):
            if i.get("type") == text:
                out[n] = {**i, "text": i["text"] + ALTERED_SUFFIX}
                break
        return out
    return items
