"""Sealed deliveries (shared/sealing.py): a delivery's content opens only with the keys it was
sealed to, only on the delivery it was sealed for, and comes back exactly as it was sent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import sealing
from shared.domain import wire
from shared.sealing import KeyPair, SealError


def result(text: str = "the result", **kw: Any) -> dict[str, Any]:
    return wire.function_result_delivery(
        delivery_id="dlv_1", runtime_id="rt_a", session_id="session_1", turn_id="turn_1",
        call_id="call_1", name="lookup", success=True, output=text, error=None, **kw)


def start(text: str = "hello") -> dict[str, Any]:
    return wire.message_delivery(
        delivery_id="dlv_2", runtime_id="rt_a", session_id="session_1", turn_id="turn_1",
        kind="start", messages=[{"role": "user", "content": [{"type": "input_text",
                                                              "text": text}]}])


RUNTIME, CORE, OTHER = KeyPair.generate(), KeyPair.generate(), KeyPair.generate()


def test_the_content_leaves_the_record_and_what_core_routes_by_stays() -> None:
    d = result("secret 42")
    s = sealing.seal(d, [RUNTIME.public, CORE.public])
    assert "content" not in s and "secret 42" not in json.dumps(s)
    for k in ("schema", "delivery_id", "runtime_id", "session_id", "turn_id", "kind",
              "call_id", "name", "success"):
        assert s[k] == d[k]
    m = sealing.seal(start("secret hello"), [RUNTIME.public])
    assert "messages" not in m and "secret hello" not in json.dumps(m)


def test_each_recipient_opens_it_and_gets_the_delivery_back_exactly() -> None:
    d = result("secret 42")
    s = sealing.seal(d, [RUNTIME.public, CORE.public])
    assert sealing.unseal(s, RUNTIME) == d
    assert sealing.unseal(s, CORE) == d


def test_a_key_it_was_not_sealed_to_does_not_open_it() -> None:
    s = sealing.seal(start(), [RUNTIME.public, CORE.public])
    with pytest.raises(SealError, match="not addressed"):
        sealing.unseal(s, OTHER)


def test_another_key_claiming_a_recipients_id_does_not_open_it() -> None:
    s = sealing.seal(start(), [RUNTIME.public])
    s["sealed"]["to"][0]["kid"] = sealing.key_id(OTHER.public)
    with pytest.raises(SealError, match="does not open"):
        sealing.unseal(s, OTHER)


@pytest.mark.parametrize("field,value", [
    ("session_id", "session_2"), ("delivery_id", "dlv_9"), ("runtime_id", "rt_b"),
    ("turn_id", "turn_2"), ("call_id", "call_2"), ("kind", "steer")])
def test_a_sealed_body_moved_to_another_delivery_does_not_open(field: str, value: str) -> None:
    s = sealing.seal(result(), [RUNTIME.public])
    s[field] = value
    with pytest.raises(SealError, match="does not open"):
        sealing.unseal(s, RUNTIME)


def test_an_altered_ciphertext_does_not_open() -> None:
    s = sealing.seal(result(), [RUNTIME.public])
    ct = s["sealed"]["ciphertext"]
    s["sealed"]["ciphertext"] = ("A" if ct[0] != "A" else "B") + ct[1:]
    with pytest.raises(SealError):
        sealing.unseal(s, RUNTIME)


@pytest.mark.parametrize("sealed", [None, "x", {"alg": "rot13"}, {"alg": sealing.ALG},
                                    {"alg": sealing.ALG, "to": [{"kid": "k"}]}])
def test_a_malformed_seal_is_refused_with_a_reason(sealed: Any) -> None:
    d = {**result(), "sealed": sealed}
    del d["content"]
    with pytest.raises(SealError):
        sealing.unseal(d, RUNTIME)


@pytest.mark.parametrize("key", [None, 7, "", "not base64!", "AAAA",
                                 KeyPair.generate().public + "AA"],
                         ids=["none", "int", "empty", "not base64", "3 bytes", "34 bytes"])
def test_only_a_32_byte_public_key_is_one_core_seals_to(key: Any) -> None:
    with pytest.raises(SealError):
        sealing.check_public(key)


def test_a_private_key_setting_gives_back_the_same_pair() -> None:
    again = KeyPair.from_private(CORE.private_text)
    assert again.public == CORE.public
    s = sealing.seal(start(), [CORE.public])
    assert sealing.unseal(s, again) == start()


content_part = st.one_of(
    st.builds(lambda t: {"type": "input_text", "text": t}, st.text()),
    st.builds(lambda u: {"type": "input_image", "image_url": u},
              st.text(min_size=1).map(lambda x: "data:image/png;base64," + x)))


@settings(max_examples=60, deadline=None)
@given(messages=st.lists(st.lists(content_part, min_size=1, max_size=4), min_size=1,
                         max_size=3))
def test_any_content_round_trips_byte_for_byte(messages: list[list[dict[str, str]]]) -> None:
    d = wire.message_delivery(
        delivery_id="dlv_3", runtime_id="rt_a", session_id="session_1", turn_id="turn_1",
        kind="steer", messages=[{"role": "user", "content": c} for c in messages])
    s = sealing.seal(d, [RUNTIME.public])
    opened = sealing.unseal(json.loads(json.dumps(s)), RUNTIME)  # through the wire's JSON
    assert json.dumps(opened, ensure_ascii=False).encode() == \
        json.dumps(d, ensure_ascii=False).encode()


def test_an_interrupt_carries_no_content_and_stays_as_it_is() -> None:
    d = wire.interrupt_delivery(delivery_id="int_1", runtime_id="rt_a", session_id="session_1",
                                turn_id="turn_1", reason="the input was refused")
    assert sealing.seal(d, [RUNTIME.public]) == d


def test_the_records_model_names_the_same_algorithm() -> None:
    from typing import get_args

    from shared.messages import runtime

    for model in (runtime.Sealed, runtime.SealedDeliveries):
        assert get_args(model.model_fields["alg"].annotation) == (sealing.ALG,)
