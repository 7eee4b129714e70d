"""The whole path on the real stack: HTTP → admission → storage → dispatcher → a test Runtime
→ observations → storage and the receipt tracker → Items."""

from __future__ import annotations

import pytest

from tests.support.builders import msg, text
from tests.support.system import System

pytestmark = pytest.mark.integration


async def test_function_call_confirmed_end_to_end(system: System) -> None:
    rt = await system.runtime("claude_code")
    r = await system.create("claude_code", "please call lookup")
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    d = await rt.next_delivery()
    assert d["kind"] == "start"
    assert d["messages"] == [{"role": "user", "content": [text("please call lookup")]}]
    await rt.observe(sid, {"type": "assistant", "uuid": "u1", "session_id": "native-1",
                           "parent_tool_use_id": None, "message": {"content": [
                               {"type": "tool_use", "id": "toolu_1", "name": "lookup",
                                "input": {"q": 1}}]}}, turn_id=d["turn_id"])
    call = await system.items.wait_for(sid, lambda i: i["type"] == "function_call")
    assert call["call_id"] == "toolu_1" and call["arguments"] == {"q": 1}
    r = await system.event(sid, {"type": "agent.session.input.tool_result", "call_id": "toolu_1",
                                 "success": True, "output": "42"})
    assert r.status_code == 202, r.text
    assert r.json()["delivery"] == "resumed"
    d2 = await rt.next_delivery()
    assert d2["kind"] == "function_result" and d2["content"] == [text("42")]
    await rt.observe(sid, {"type": "user", "uuid": "u2", "session_id": "native-1",
                           "parent_tool_use_id": None, "isReplay": False, "isSynthetic": False,
                           "message": {"role": "user", "content": [{
                               "type": "tool_result", "tool_use_id": "toolu_1",
                               "is_error": False, "content": [{"type": "text", "text": "42"}]}]}})
    app = await system.items.wait_for(sid, lambda i: i["type"] == "function_call_application")
    assert app["state"] == "applied", app
    r = await system.http.get(f"/v1/sessions/{sid}/tool_results/toolu_1")  # type: ignore[union-attr]
    assert r.json()["submission"] == {"call_id": "toolu_1", "success": True, "output": "42"}
    assert r.json()["state"] == "applied"
    await rt.observe(sid, {"type": "result", "session_id": "native-1", "subtype": "success"},
                     turn_id=d["turn_id"])
    done = await system.items.wait_for(sid, lambda i: i["type"] == "turn"
                                       and i["state"] == "completed")
    assert done["turn_id"] == d["turn_id"]
    seqs = [i["sequence"] for i in system.items.by_session[sid]]
    assert seqs == list(range(1, len(seqs) + 1))
    _ = msg
