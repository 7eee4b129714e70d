"""The whitespace set of the whitespace-only rule: the union of Go's ``unicode.IsSpace`` and
ECMAScript's ``String.prototype.trim`` set (primary spec, "Whitespace-only text").

Core admission and the Claude bridge use the same set, so it is spelled out here from the two
source definitions rather than borrowed from Python: ``str.isspace`` is a *different* set (it
counts U+001C..U+001F as space and does not count U+FEFF).

Zs ("Space_Separator") is the one part that depends on a Unicode version. It is frozen below as
literals, and ``tests/unit/test_whitespace.py`` checks the literals against ``unicodedata`` of the
running interpreter, so a Unicode update that moves a code point in or out of Zs fails a test
instead of silently changing admission.
"""

from __future__ import annotations

# --- Go: unicode.IsSpace -------------------------------------------------------------
# https://pkg.go.dev/unicode#IsSpace: "IsSpace reports whether the rune is a space character as
# defined by Unicode's White Space property; in the Latin-1 space this is
#     '\t', '\n', '\v', '\f', '\r', ' ', U+0085 (NEL), U+00A0 (NBSP).
# Other definitions of spacing characters are set by category Z and property Pattern_White_Space."
# In practice (unicode/graphic.go) the code outside Latin-1 is ``isExcludingLatin(White_Space, r)``,
# the White_Space table of unicode/tables.go (from PropList.txt):
#     0x0009-0x000d, 0x0020, 0x0085, 0x00a0, 0x1680, 0x2000-0x200a, 0x2028-0x2029,
#     0x202f, 0x205f, 0x3000
GO_LATIN1_SPACE: frozenset[str] = frozenset("\t\n\v\f\r \x85\xa0")
GO_WHITE_SPACE_BEYOND_LATIN1: frozenset[str] = frozenset(
    [
        "\u1680",  # OGHAM SPACE MARK
        *(chr(c) for c in range(0x2000, 0x200B)),  # EN QUAD .. HAIR SPACE
        "\u2028",  # LINE SEPARATOR
        "\u2029",  # PARAGRAPH SEPARATOR
        "\u202f",  # NARROW NO-BREAK SPACE
        "\u205f",  # MEDIUM MATHEMATICAL SPACE
        "\u3000",  # IDEOGRAPHIC SPACE
    ]
)
GO_IS_SPACE: frozenset[str] = GO_LATIN1_SPACE | GO_WHITE_SPACE_BEYOND_LATIN1

# --- ECMAScript: String.prototype.trim -----------------------------------------------
# ECMA-262 §22.1.3.32 String.prototype.trim → TrimString(S, start+end) removes the longest
# prefix/suffix of WhiteSpace and LineTerminator code points.
# §12.2 WhiteSpace: <TAB> U+0009, <VT> U+000B, <FF> U+000C, <ZWNBSP> U+FEFF, and <USP> = "any code
# point in general category Space_Separator (Zs)". (Earlier editions also listed <SP> U+0020 and
# <NBSP> U+00A0 by name; both are Zs, so the set is the same.)
# §12.3 LineTerminator: <LF> U+000A, <CR> U+000D, <LS> U+2028, <PS> U+2029.
ECMA_WHITESPACE_NAMED: frozenset[str] = frozenset("\t\v\f\ufeff")
# Zs in Unicode 15.1 (the same since Unicode 6.3, when U+180E left Zs); checked against
# unicodedata by the tests.
UNICODE_ZS: frozenset[str] = frozenset(
    [
        "\u0020",  # SPACE
        "\u00a0",  # NO-BREAK SPACE
        "\u1680",  # OGHAM SPACE MARK
        *(chr(c) for c in range(0x2000, 0x200B)),  # EN QUAD .. HAIR SPACE
        "\u202f",  # NARROW NO-BREAK SPACE
        "\u205f",  # MEDIUM MATHEMATICAL SPACE
        "\u3000",  # IDEOGRAPHIC SPACE
    ]
)
ECMA_LINE_TERMINATORS: frozenset[str] = frozenset("\n\r\u2028\u2029")
ECMA_TRIM: frozenset[str] = ECMA_WHITESPACE_NAMED | UNICODE_ZS | ECMA_LINE_TERMINATORS

# --- the union --------------------------------------------------------------------------
WHITESPACE: frozenset[str] = GO_IS_SPACE | ECMA_TRIM
_WHITESPACE_CHARS: str = "".join(sorted(WHITESPACE))


def is_whitespace(ch: str) -> bool:
    """One code point: is it in the union set?"""
    return ch in WHITESPACE


def is_whitespace_only(text: str) -> bool:
    """True when every code point of ``text`` is whitespace (vacuously true for ``""``)."""
    return not text.strip(_WHITESPACE_CHARS)


def has_non_whitespace(text: str) -> bool:
    """True when ``text`` has at least one code point outside the whitespace set."""
    return bool(text.strip(_WHITESPACE_CHARS))
