"""``metadata``, ``tags`` and ``external_actor`` (CONTRACT §1): the same limits and ``param``
paths on Session creation, message events and tool results; stored and echoed byte for byte."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.admission.domain.validation import (
    AdmittedCreate,
    AdmittedMessageEvent,
    AdmittedToolResult,
    Limits,
    validate_create,
    validate_event,
)
from services.storage.domain.sessions import (
    SessionState,
    decide_create,
    decide_message,
    decide_tool_result,
)
from shared.domain.errors import ApiError
from shared.storecodec import item_doc, item_from_doc, pack, unpack
from tests.support.budget import examples
from tests.support.builders import assert_error

LIMITS = Limits()
INVALID = (400, "invalid_request")
NOW = "2026-01-01T00:00:00.000Z"

CREATE = {"harness": "codex", "placement": "none", "input": "hi"}
MESSAGE = {"type": "agent.session.input.message",
           "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}
RESULT = {"type": "agent.session.input.tool_result", "call_id": "call_1", "success": True,
          "output": "ok"}
BODIES = {"create": CREATE, "message": MESSAGE, "tool_result": RESULT}


def validate(kind: str, extra: dict[str, Any]) -> Any:
    body = {**BODIES[kind], **extra}
    if kind == "create":
        return validate_create(body, LIMITS)
    return validate_event(body, "codex", "none", LIMITS)


def actor(**fields: Any) -> dict[str, Any]:
    return {"source": "slack", "actor_id": "U0123456789", **fields}


BIG_VALUE = "x" * (16 * 1024)  # with its key and braces: over 16 KiB

# (extra fields, the param of the 400)
BAD: list[tuple[dict[str, Any], str]] = [
    ({"metadata": {"k": BIG_VALUE}}, "metadata"),
    ({"metadata": {f"k{i}": i for i in range(65)}}, "metadata"),
    ({"metadata": [1]}, "metadata"),
    ({"metadata": {"a": {"b": float("nan")}}}, "metadata.a.b"),
    ({"tags": ["t"] * 21}, "tags[20]"),
    ({"tags": ["ok", "x" * 65]}, "tags[1]"),
    ({"tags": ["ok", 3]}, "tags[1]"),
    ({"tags": "bug"}, "tags"),
    ({"external_actor": []}, "external_actor"),
    ({"external_actor": {"actor_id": "U1"}}, "external_actor.source"),
    ({"external_actor": {"source": "slack"}}, "external_actor.actor_id"),
    ({"external_actor": actor(source="")}, "external_actor.source"),
    ({"external_actor": actor(actor_id=None)}, "external_actor.actor_id"),
    ({"external_actor": actor(source="s" * 256)}, "external_actor.source"),
    ({"external_actor": actor(actor_id="u" * 256)}, "external_actor.actor_id"),
    ({"external_actor": actor(actor_name="n" * 256)}, "external_actor.actor_name"),
    ({"external_actor": actor(actor_name=["Alice"])}, "external_actor.actor_name"),
    ({"external_actor": actor(metadata="team")}, "external_actor.metadata"),
    ({"external_actor": actor(metadata={"k": BIG_VALUE})}, "external_actor.metadata"),
    ({"external_actor": actor(metadata={"x": 2**70})}, "external_actor.metadata.x"),
    ({"external_actor": actor(team_id="T1")}, "external_actor.team_id"),
]
GOOD: list[dict[str, Any]] = [
    {"metadata": {"k": "x" * (16 * 1024 - 8)}},  # exactly 16 KiB as compact JSON
    {"metadata": {f"k{i}": i for i in range(64)}},
    {"metadata": {}},
    {"tags": ["t" * 64] * 20},
    {"tags": []},
    {"external_actor": actor()},
    {"external_actor": actor(actor_name=None, metadata=None)},
    {"external_actor": actor(actor_name="Alice", metadata={"team_id": "T1"})},
    {"metadata": None, "tags": None, "external_actor": None},
]


@pytest.mark.parametrize("kind", BODIES)
@pytest.mark.parametrize(("extra", "param"), BAD)
def test_bad_envelope(kind: str, extra: dict[str, Any], param: str) -> None:
    assert_error(validate(kind, extra), *INVALID, param)


@pytest.mark.parametrize("kind", BODIES)
@pytest.mark.parametrize("extra", GOOD)
def test_good_envelope(kind: str, extra: dict[str, Any]) -> None:
    result = validate(kind, extra)
    assert not isinstance(result, ApiError), result
    rec = result.record()
    for k, v in extra.items():
        assert json.dumps(rec[k]) == json.dumps(v)


def test_metadata_limit_is_the_compact_utf8_size() -> None:
    exact = {"k": "x" * (16 * 1024 - 8)}
    assert len(json.dumps(exact, separators=(",", ":")).encode()) == 16 * 1024
    assert not isinstance(validate("create", {"metadata": exact}), ApiError)
    over = {"k": "é" * (8 * 1024 - 3)}  # 2 bytes each in UTF-8: over by a few bytes
    assert_error(validate("create", {"metadata": over}), *INVALID, "metadata")


# ---- round trip: admitted → Item → stored document → read back, byte for byte -------------

JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
)
JSON = st.recursive(
    JSON_LEAF,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(alphabet=st.characters(codec="utf-8"), max_size=8), children,
                        max_size=4),
    ),
    max_leaves=20,
)
METADATA = st.dictionaries(st.text(alphabet=st.characters(codec="utf-8"), max_size=8), JSON,
                           max_size=8)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(metadata=METADATA, actor_meta=METADATA, tags=st.lists(st.text(max_size=64), max_size=20),
       kind=st.sampled_from(sorted(BODIES)))
def test_envelope_round_trips_byte_for_byte(metadata: dict[str, Any],
                                            actor_meta: dict[str, Any], tags: list[str],
                                            kind: str) -> None:
    sent = json.loads(_dumps({"metadata": metadata, "tags": tags,
                              "external_actor": actor(metadata=actor_meta)}))
    result = validate(kind, sent)
    assert isinstance(result, AdmittedCreate | AdmittedMessageEvent | AdmittedToolResult)
    record = {"request_id": "req_1", "event_id": "evt_1", "session_id": "session_1",
              "fingerprint": "fp", **json.loads(_dumps(result.record()))}
    if isinstance(result, AdmittedCreate):
        record["messages"] = record.pop("input")
        d = decide_create(record, NOW)
    else:
        state = SessionState("session_1", "codex", "none", NOW, turn_id="turn_1",
                             turn_running=True, open_calls={"call_1": "f"})
        if isinstance(result, AdmittedToolResult):
            record["submission"] = result.submission()
            record["submission_fingerprint"] = "sfp"
            d = decide_tool_result(state, record, NOW)
        else:
            record["messages"] = record.pop("input")
            d = decide_message(state, record, NOW)
    echoed = [it for it in d.items if it["type"] in ("message", "function_call_output")]
    assert echoed
    for item in echoed:
        back = item_from_doc(json.loads(_dumps(item_doc(item, "req:1"))))
        for k in ("metadata", "tags", "external_actor"):
            assert _dumps(back[k]) == _dumps(sent[k])
    if isinstance(result, AdmittedCreate):  # the Session document's metadata, packed as text
        assert d.state is not None
        doc = unpack(pack(d.state.to_doc()))
        assert doc is not None and _dumps(doc["metadata"]) == _dumps(metadata)
