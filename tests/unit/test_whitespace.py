"""The whitespace set = Go unicode.IsSpace ∪ ECMAScript String.prototype.trim, checked over all of
Unicode against an independent statement of both definitions (typed out here as ranges, not
imported from the module under test)."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from shared.domain import whitespace as ws

# Go: unicode.IsSpace. Latin-1: '\t' '\n' '\v' '\f' '\r' ' ' U+0085 U+00A0; beyond Latin-1 the
# White_Space property (Go's unicode.White_Space range table, PropList.txt).
GO_RANGES = [
    (0x0009, 0x000D),
    (0x0020, 0x0020),
    (0x0085, 0x0085),
    (0x00A0, 0x00A0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
]
# ECMAScript WhiteSpace (TAB, VT, FF, ZWNBSP, USP = Zs) and LineTerminator (LF, CR, LS, PS).
ECMA_NAMED = [0x0009, 0x000B, 0x000C, 0xFEFF, 0x000A, 0x000D, 0x2028, 0x2029]


def go_is_space(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in GO_RANGES)


def ecma_trim_space(cp: int) -> bool:
    return cp in ECMA_NAMED or unicodedata.category(chr(cp)) == "Zs"


def test_union_agrees_with_both_definitions_over_all_of_unicode() -> None:
    mismatches = []
    members = 0
    for cp in range(0x110000):
        expected = go_is_space(cp) or ecma_trim_space(cp)
        got = ws.is_whitespace(chr(cp))
        members += expected
        if expected != got or ws.is_whitespace_only(chr(cp)) != expected:
            mismatches.append(hex(cp))
    assert mismatches == []
    assert members == len(ws.WHITESPACE) == 26


def test_each_source_set_separately() -> None:
    go = {chr(cp) for cp in range(0x110000) if go_is_space(cp)}
    ecma = {chr(cp) for cp in range(0x110000) if ecma_trim_space(cp)}
    assert ws.GO_IS_SPACE == go
    assert ws.ECMA_TRIM == ecma
    # each contributes something the other lacks: NEL from Go, ZWNBSP from ECMAScript
    assert go - ecma == {"\x85"}
    assert ecma - go == {"\ufeff"}


def test_frozen_zs_literals_match_this_unicode_version() -> None:
    zs = {chr(cp) for cp in range(0x110000) if unicodedata.category(chr(cp)) == "Zs"}
    assert ws.UNICODE_ZS == zs, unicodedata.unidata_version


def test_python_isspace_is_a_different_set() -> None:
    # U+001C..U+001F are str.isspace() but neither Go nor ECMAScript whitespace
    for ch in "\x1c\x1d\x1e\x1f":
        assert ch.isspace() and not ws.is_whitespace(ch)
    # U+FEFF is ECMAScript whitespace, not str.isspace()
    assert not "\ufeff".isspace() and ws.is_whitespace("\ufeff")
    # U+180E left Zs in Unicode 6.3; U+200B ZERO WIDTH SPACE is Cf, in neither set
    assert not ws.is_whitespace("\u180e") and not ws.is_whitespace("\u200b")


def test_whitespace_only_examples() -> None:
    assert ws.is_whitespace_only(" ")
    assert ws.is_whitespace_only("\n\t")
    assert ws.is_whitespace_only("\u0085\ufeff\u3000\u2028")
    assert ws.is_whitespace_only("")  # vacuous; admission's empty-text rule comes first
    assert not ws.is_whitespace_only(" a ")
    assert not ws.is_whitespace_only("\x1c")
    assert ws.has_non_whitespace(" x") and not ws.has_non_whitespace("\v\f\r")


@given(st.text())
def test_whitespace_only_is_every_code_point(s: str) -> None:
    assert ws.is_whitespace_only(s) == all(
        go_is_space(ord(c)) or ecma_trim_space(ord(c)) for c in s
    )
    assert ws.has_non_whitespace(s) == (not ws.is_whitespace_only(s))


@given(st.lists(st.sampled_from(sorted(ws.WHITESPACE))).map("".join), st.characters())
def test_whitespace_strings(sp: str, other: str) -> None:
    assert ws.is_whitespace_only(sp)
    assert ws.is_whitespace_only(sp + other + sp) == ws.is_whitespace(other)
