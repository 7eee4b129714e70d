"""Strict request-body parsing shared by HTTP and session.input
(services/admission/domain/jsonbody.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.admission.domain.jsonbody import parse_json
from shared.domain.errors import ApiError


@pytest.mark.parametrize(("raw", "param", "fragment"), [
    (b'{"a": 1, "a": 2}', None, "duplicate key 'a'"),
    (b'{"a": {"b": 1, "b": 1}}', None, "duplicate key 'b'"),
    (b'{"a": NaN}', None, "NaN"),
    (b'{"a": Infinity}', None, "Infinity"),
    # a number that overflows to infinity is no number JSON can carry back (docs/reliability.md:
    # "NaN, Infinity, -Infinity → 400 (1e999 too)")
    (b'{"metadata": {"n": 1e999}}', None, "1e999"),
    (b'{"a": [-1e999]}', None, "-1e999"),
    (b'{"a": 1.5e309}', None, "out of range"),
    (b'{"a": "\xff"}', None, "UTF-8"),
    (b'{"a": ', None, "malformed JSON"),
    (b'{"input": [{"content": [{"text": "\\ud800"}]}]}', "input[0].content[0].text",
     "unpaired surrogate"),
    # a bad key is named escaped: a raw surrogate in the param could not be rendered (a 500)
    (b'{"k\\udc00": 1}', "k\\udc00", "unpaired surrogate"),
    (b'{"metadata": {"\\udfff": 1}}', "metadata.\\udfff", "unpaired surrogate"),
    (b'"\\udfff"', None, "unpaired surrogate"),
])
def test_rejections(raw: bytes, param: str | None, fragment: str) -> None:
    got = parse_json(raw)
    assert isinstance(got, ApiError)
    assert got.type == "invalid_request" and got.status == 400
    assert got.param == param
    assert fragment in got.message
    json.dumps(got.body(), ensure_ascii=False).encode("utf-8")  # the 400 can be rendered


@pytest.mark.parametrize("raw", [b"1e308", b"-1.7976931348623157e308", b"1e-999", b"0.1"])
def test_large_but_finite_numbers_are_fine(raw: bytes) -> None:
    assert parse_json(b'{"n": ' + raw + b"}") == {"n": float(raw)}


def test_pairs_and_escaped_backslashes_are_fine() -> None:
    assert parse_json(b'{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}
    assert parse_json(b'{"a": "\\\\ud800"}') == {"a": "\\ud800"}  # a backslash, then text
    assert parse_json('{"a": "☃ 𝄞"}'.encode()) == {"a": "☃ 𝄞"}


texts = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF,
                                       categories=None), max_size=8)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | texts,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(texts, c, max_size=4),
    max_leaves=12,
)


def _has_surrogate(v: object) -> bool:
    if isinstance(v, str):
        return any(0xD800 <= ord(ch) <= 0xDFFF for ch in v)
    if isinstance(v, list):
        return any(_has_surrogate(x) for x in v)
    if isinstance(v, dict):
        return any(_has_surrogate(k) or _has_surrogate(x) for k, x in v.items())
    return False


@given(values)
def test_rejects_exactly_the_values_with_unpaired_surrogates(v: object) -> None:
    raw = json.dumps(v, ensure_ascii=True).encode()  # surrogates travel as \\u escapes
    got = parse_json(raw)
    decoded = json.loads(raw)  # an adjacent high+low pair decodes to one valid character
    if _has_surrogate(decoded):
        assert isinstance(got, ApiError) and "surrogate" in got.message
    else:
        assert got == decoded


# ---- nesting depth (hostile HTTP input) ----------------------------------------------

@pytest.mark.parametrize("raw", [
    b"[" * 10_000 + b"]" * 10_000,  # exhausted the parser's recursion: was a 500
    b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
    b'{"metadata":' + b"[" * 5_000 + b"]" * 5_000 + b"}",
])
def test_a_body_too_deep_for_the_parser_is_a_400_not_a_crash(raw: bytes) -> None:
    err = parse_json(raw)
    assert isinstance(err, ApiError)
    assert err.status == 400 and err.type == "invalid_request"
    assert "nested too deeply" in err.message
