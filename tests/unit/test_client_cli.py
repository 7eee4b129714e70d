"""The user CLI (session_core_client/cli): command-line arguments → HTTP requests, image files
→ data URIs by magic bytes, SSE parsing, readable Item lines, exit codes."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import pytest

from session_core_client.cli import main as cli
from session_core_client.cli import render
from session_core_client.cli.bodies import UsageError, data_uri, sniff_media_type, tool_result_body

PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
JPEG_BYTES = b"\xff\xd8\xff\xe0" + b"\x00" * 8
SID = "session_" + "e" * 32


def uri(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    out = {}
    for name, data in (("cat.png", PNG_BYTES), ("photo.jpg", JPEG_BYTES),
                       ("misnamed.png", JPEG_BYTES), ("notes.txt", b"hello")):
        (tmp_path / name).write_bytes(data)
        out[name] = str(tmp_path / name)
    return out


class FakeApi:
    instance: FakeApi
    calls: list[tuple[str, str, Any, Any]]
    answer: tuple[int, Any] = (201, {"id": SID, "items": []})

    def __init__(self, base: str, key: str | None, timeout: float = 30.0) -> None:
        self.base, self.key = base, key
        FakeApi.instance = self

    def call(self, method: str, path: str, body: Any = None, params: Any = None
             ) -> tuple[int, Any]:
        FakeApi.calls.append((method, path, body, params))
        return FakeApi.answer


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> type[FakeApi]:
    FakeApi.calls = []
    FakeApi.answer = (201, {"id": SID, "items": []})
    monkeypatch.setattr(cli, "Api", FakeApi)
    return FakeApi


def test_sniffing_uses_magic_bytes_not_names() -> None:
    assert sniff_media_type(PNG_BYTES) == "image/png"
    assert sniff_media_type(JPEG_BYTES) == "image/jpeg"
    assert sniff_media_type(b"GIF89a") is None
    assert data_uri(PNG_BYTES) == uri(PNG_BYTES, "image/png")
    with pytest.raises(UsageError, match="not a PNG or JPEG"):
        data_uri(b"GIF89a")


def test_create_keeps_part_order_and_builds_data_uris(api: type[FakeApi],
                                                     files: dict[str, str]) -> None:
    code = cli.run(["create", "--harness", "claude_code", "--placement", "self_hosted",
                    "--text", "look", "--image", files["cat.png"], "--text", "and",
                    "--image", files["misnamed.png"], "--next-message", "--text", "second",
                    "--client-request-id", "req-1", "--metadata", '{"k": 1}'])
    assert code == 0
    method, path, body, _ = api.calls[0]
    assert (method, path) == ("POST", "/v1/sessions")
    assert body == {
        "harness": "claude_code",
        "placement": "self_hosted",
        "input": [
            {"role": "user", "type": "message", "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": uri(PNG_BYTES, "image/png")},
                {"type": "input_text", "text": "and"},
                {"type": "input_image", "image_url": uri(JPEG_BYTES, "image/jpeg")},
            ]},
            {"role": "user", "type": "message", "content": [
                {"type": "input_text", "text": "second"}]},
        ],
        "client_request_id": "req-1",
        "metadata": {"k": 1},
    }


def test_create_string_input_and_whitespace_kept(api: type[FakeApi]) -> None:
    assert cli.run(["create", "--harness", "codex", "--text", " \t", "--string-input"]) == 0
    body = dict(api.calls[0][2])
    minted = body.pop("client_request_id")
    assert body == {"harness": "codex", "placement": "none", "input": " \t"}
    assert uuid.UUID(minted).version == 4, "the CLI mints an idempotency id when none is given"


def test_ids_are_minted_once_per_command_and_differ_between_commands(api: type[FakeApi]
                                                                     ) -> None:
    api.answer = (202, {"event_id": "evt_1", "delivery": "steered", "items": []})
    assert cli.run(["send", SID, "--text", "a"]) == 0
    assert cli.run(["send", SID, "--text", "a"]) == 0
    assert cli.run(["result", SID, "call_1", "--success"]) == 0
    ids = [c[2]["client_event_id"] for c in api.calls]
    assert len(set(ids)) == 3 and all(uuid.UUID(i).version == 4 for i in ids)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["create", "--harness", "codex"], "give the input"),
        (["create", "--harness", "codex", "--image", "NOTES"], "not a PNG or JPEG"),
        (["create", "--harness", "codex", "--image", "/nonexistent.png"], "nonexistent"),
        (["create", "--harness", "codex", "--text", "a", "--text", "b", "--string-input"],
         "exactly one --text"),
    ],
)
def test_usage_errors_exit_2_without_a_request(
    api: type[FakeApi], files: dict[str, str], capsys: pytest.CaptureFixture[str],
    argv: list[str], message: str,
) -> None:
    argv = [files["notes.txt"] if a == "NOTES" else a for a in argv]
    assert cli.run(argv) == 2
    assert api.calls == []
    assert message in capsys.readouterr().err


def test_send_with_wait(api: type[FakeApi], files: dict[str, str]) -> None:
    api.answer = (200, {"event_id": "evt_1", "delivery": "steered", "items": []})
    code = cli.run(["send", SID, "--text", "more", "--image", files["photo.jpg"], "--wait",
                    "--timeout-ms", "5000", "--client-event-id", "ev-1"])
    assert code == 0
    method, path, body, params = api.calls[0]
    assert (method, path) == ("POST", f"/v1/sessions/{SID}/events")
    assert params == {"wait": "true", "timeout_ms": "5000"}
    assert body == {
        "type": "agent.session.input.message",
        "input": [{"role": "user", "type": "message", "content": [
            {"type": "input_text", "text": "more"},
            {"type": "input_image", "image_url": uri(JPEG_BYTES, "image/jpeg")}]}],
        "client_event_id": "ev-1",
    }


def test_wait_budget_running_out_exits_1(api: type[FakeApi]) -> None:
    api.answer = (202, {"event_id": "evt_1", "delivery": "started", "items": []})
    assert cli.run(["send", SID, "--text", "x", "--wait"]) == 1


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--success", "--output", "sunny"], {"success": True, "output": "sunny"}),
        (["--success", "--output", "sunny", "--output-parts"],
         {"success": True, "output": [{"type": "input_text", "text": "sunny"}]}),
        (["--failure", "--error", "boom"], {"success": False, "error": "boom"}),
        (["--failure", "--output", "", "--error", ""],
         {"success": False, "output": "", "error": ""}),
        (["--success"], {"success": True}),
        (["--success", "--output", "chart", "--output-image", "PNG", "--output", "end"],
         {"success": True, "output": [
             {"type": "input_text", "text": "chart"},
             {"type": "input_image", "image_url": uri(PNG_BYTES, "image/png")},
             {"type": "input_text", "text": "end"}]}),
    ],
)
def test_result_body(api: type[FakeApi], files: dict[str, str], flags: list[str],
                     expected: dict[str, Any]) -> None:
    api.answer = (202, {"event_id": "evt_1", "delivery": "resumed", "items": []})
    flags = [files["cat.png"] if f == "PNG" else f for f in flags]
    assert cli.run(["result", SID, "call_1", *flags]) == 0
    body = dict(api.calls[0][2])
    assert uuid.UUID(body.pop("client_event_id")).version == 4
    assert body == {"type": "agent.session.input.tool_result", "call_id": "call_1", **expected}


def test_result_needs_success_or_failure() -> None:
    with pytest.raises(SystemExit):
        cli.run(["result", SID, "call_1"])


def test_output_absent_and_error_absent_are_not_sent() -> None:
    body = tool_result_body(call_id="c", success=True)
    assert "output" not in body and "error" not in body


@pytest.mark.parametrize(
    ("argv", "path", "params"),
    [
        (["items", SID, "--after", "3", "--limit", "10"], f"/v1/sessions/{SID}/items",
         {"after": "3", "limit": "10"}),
        (["call", SID, "call_9"], f"/v1/sessions/{SID}/tool_results/call_9", None),
        (["session", SID], f"/v1/sessions/{SID}", None),
    ],
)
def test_reads(api: type[FakeApi], argv: list[str], path: str, params: Any) -> None:
    api.answer = (200, {"items": [], "has_more": False, "next_after": 0, "call_id": "call_9",
                        "id": SID})
    assert cli.run(argv) == 0
    assert api.calls[0][:2] == ("GET", path) and api.calls[0][3] == params


def test_items_all_follows_pages(api: type[FakeApi], monkeypatch: pytest.MonkeyPatch) -> None:
    pages = iter([
        (200, {"items": [{"sequence": 1, "type": "turn"}], "has_more": True, "next_after": 1}),
        (200, {"items": [{"sequence": 2, "type": "turn"}], "has_more": False, "next_after": 2}),
    ])

    def call(self: FakeApi, method: str, path: str, body: Any = None, params: Any = None
             ) -> tuple[int, Any]:
        FakeApi.calls.append((method, path, body, params))
        return next(pages)

    monkeypatch.setattr(api, "call", call)
    assert cli.run(["items", SID, "--all", "--limit", "1"]) == 0
    assert [c[3]["after"] for c in api.calls] == ["0", "1"]


def test_api_key_and_base_from_flags_and_env(api: type[FakeApi],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    api.answer = (200, {"id": SID})
    monkeypatch.setenv("SESSION_CORE_API", "http://env:1")
    monkeypatch.setenv("SESSION_CORE_API_KEY", "k-env")
    assert cli.run(["session", SID]) == 0
    assert (FakeApi.instance.base, FakeApi.instance.key) == ("http://env:1", "k-env")
    assert cli.run(["session", SID, "--api", "http://flag:2", "--api-key", "k2"]) == 0
    assert (FakeApi.instance.base, FakeApi.instance.key) == ("http://flag:2", "k2")


def test_error_answer_prints_type_and_param_and_exits_1(
    api: type[FakeApi], capsys: pytest.CaptureFixture[str]
) -> None:
    api.answer = (400, {"error": {"type": "unsupported_or_invalid_configuration",
                                  "message": "no whitespace-only", "param": "input[0]"}})
    assert cli.run(["create", "--harness", "claude_code", "--text", " "]) == 1
    assert capsys.readouterr().err.strip() == (
        "error 400 unsupported_or_invalid_configuration: no whitespace-only (param: input[0])")


def test_sse_parsing() -> None:
    lines = ["event: session", 'data: {"id": "s"}', "", ": keep-alive", "",
             "event: item", 'data: {"sequence": 1}', "", "data: not json", ""]
    assert list(cli.sse_events(iter(lines))) == [
        ("session", {"id": "s"}), ("item", {"sequence": 1}), ("message", "not json")]


@pytest.mark.parametrize(
    ("item", "line_part"),
    [
        ({"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "hi"},
            {"type": "input_image", "image_url": uri(PNG_BYTES, "image/png")}]},
         'user: "hi" [image/png 16 B]'),
        ({"type": "turn", "turn_id": "turn_1", "state": "failed", "reason": "bound"},
         "turn_1 FAILED — bound"),
        ({"type": "function_call", "name": "f", "arguments": {"a": 1}, "call_id": "c"},
         'f({"a": 1}) call_id=c'),
        ({"type": "function_call_output", "call_id": "c", "success": False, "output": None,
          "error": "e"}, 'call_id=c FAILURE output=null error="e"'),
        ({"type": "function_call_application", "call_id": "c", "state": "uncertain",
          "reason": "timeout"}, "call_id=c UNCERTAIN — timeout"),
    ],
)
def test_item_lines(item: dict[str, Any], line_part: str) -> None:
    line = render.item_line({"sequence": 7, "created_at": "2026-01-01T10:00:00.000Z", **item})
    assert line.startswith("#7")
    assert line_part in line


def test_create_with_wait_and_envelope(api: type[FakeApi]) -> None:
    api.answer = (200, {"id": SID, "items": []})
    code = cli.run(["create", "--harness", "codex", "--text", "hi", "--wait", "--timeout-ms",
                    "9000", "--metadata", '{"thread": "42"}', "--tag", "a", "--tag", "b",
                    "--actor", "slack:U1:Alice: the admin"])
    assert code == 0
    method, path, body, params = api.calls[0]
    assert (method, path, params) == ("POST", "/v1/sessions",
                                      {"wait": "true", "timeout_ms": "9000"})
    assert body["metadata"] == {"thread": "42"} and body["tags"] == ["a", "b"]
    assert body["external_actor"] == {"source": "slack", "actor_id": "U1",
                                      "actor_name": "Alice: the admin"}
    api.answer = (202, {"id": SID, "items": []})
    assert cli.run(["create", "--harness", "codex", "--text", "hi", "--wait"]) == 1


def test_event_bodies_carry_the_envelope(api: type[FakeApi]) -> None:
    api.answer = (202, {"event_id": "evt_1", "delivery": "resumed", "items": []})
    assert cli.run(["result", SID, "call_1", "--success", "--tag", "ci",
                    "--actor", "github:bot"]) == 0
    assert api.calls[0][2]["tags"] == ["ci"]
    assert api.calls[0][2]["external_actor"] == {"source": "github", "actor_id": "bot"}
    assert cli.run(["send", SID, "--text", "x", "--metadata", "{}"]) == 0
    assert api.calls[1][2]["metadata"] == {}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["send", SID, "--text", "x", "--actor", "slack"], "SOURCE:ACTOR_ID"),
        (["send", SID, "--text", "x", "--actor", ":U1"], "SOURCE:ACTOR_ID"),
        (["send", SID, "--text", "x", "--metadata", "[1]"], "JSON object"),
        (["create", "--harness", "codex", "--text", "x", "--stream", "--wait"], "combined"),
    ],
)
def test_envelope_usage_errors(api: type[FakeApi], capsys: pytest.CaptureFixture[str],
                               argv: list[str], message: str) -> None:
    assert cli.run(argv) == 2
    assert api.calls == []
    assert message in capsys.readouterr().err


def test_item_line_shows_the_envelope() -> None:
    line = render.item_line({"sequence": 1, "type": "message", "role": "user",
                             "content": [{"type": "input_text", "text": "hi"}],
                             "tags": ["x"], "metadata": {"k": 1},
                             "external_actor": {"source": "slack", "actor_id": "U1",
                                                "actor_name": "Alice"}})
    assert line.endswith(' from slack:U1 (Alice) #x meta={"k": 1}')
