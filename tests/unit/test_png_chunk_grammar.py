"""PNG chunk order as a PNG decoder reads it (issue 57 item 4).

Primary spec, "Images": the decoded image must match the declared type. A PNG that libpng
refuses is not a PNG a provider can read, and Core must not admit it (a provider would fail the
Turn after admission). libpng refuses, and so does Core: an indexed-colour image (colour type 3)
without ``PLTE`` before its ``IDAT``; an unknown *critical* chunk (first letter upper case:
the decoder cannot skip what it does not know); ``PLTE`` after ``IDAT``; a second ``PLTE``; a
``PLTE`` whose length is not 3 × 1..256. Unknown *ancillary* chunks (first letter lower case)
are skipped by every decoder and admitted.
"""

from __future__ import annotations

import io
import random
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from services.admission.domain.images import ImageInfo, check_image_bytes
from shared.domain.errors import ApiError
from tests.support.budget import examples

SIG = b"\x89PNG\r\n\x1a\n"
Chunks = list[tuple[bytes, bytes]]


def chunk(ctype: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + ctype + body + struct.pack(">I", zlib.crc32(ctype + body))


def chunks_of(png: bytes) -> Chunks:
    out, pos = [], 8
    while pos < len(png):
        n = int.from_bytes(png[pos : pos + 4], "big")
        out.append((png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + n]))
        pos += 12 + n
    return out


def build(parts: Chunks) -> bytes:
    return SIG + b"".join(chunk(t, b) for t, b in parts)


def png(mode: str) -> Chunks:
    im = Image.frombytes("RGB", (9, 7), random.Random(3).randbytes(9 * 7 * 3)).convert(mode)
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return chunks_of(buf.getvalue())


def names(parts: Chunks) -> list[bytes]:
    return [t for t, _ in parts]


def without(parts: Chunks, name: bytes) -> Chunks:
    return [(t, b) for t, b in parts if t != name]


def move_after_idat(parts: Chunks, name: bytes) -> Chunks:
    moved = [(t, b) for t, b in parts if t == name]
    rest = without(parts, name)
    last_idat = max(i for i, (t, _) in enumerate(rest) if t == b"IDAT")
    return rest[: last_idat + 1] + moved + rest[last_idat + 1 :]


def insert_before_idat(parts: Chunks, extra: tuple[bytes, bytes]) -> Chunks:
    first = names(parts).index(b"IDAT")
    return [*parts[:first], extra, *parts[first:]]


def check(data: bytes) -> ImageInfo | ApiError:
    return check_image_bytes(data, "png", 40_000_000, "p")


P = png("P")
RGB = png("RGB")
PLTE = next(b for t, b in P if t == b"PLTE")

# (name, chunks, the reason's key word or None when admitted)
CASES: list[tuple[str, Chunks, str | None]] = [
    ("indexed, as Pillow writes it", P, None),
    ("truecolour, as Pillow writes it", RGB, None),
    ("truecolour with a suggested palette", insert_before_idat(RGB, (b"PLTE", PLTE)), None),
    ("indexed without PLTE", without(P, b"PLTE"), "PLTE"),
    ("indexed with PLTE after IDAT", move_after_idat(P, b"PLTE"), "PLTE"),
    ("truecolour with PLTE after IDAT", move_after_idat(
        insert_before_idat(RGB, (b"PLTE", PLTE)), b"PLTE"), "PLTE"),
    ("indexed with two PLTE", insert_before_idat(P, (b"PLTE", PLTE)), "PLTE"),
    ("indexed with an empty PLTE", [(t, b"" if t == b"PLTE" else b) for t, b in P], "PLTE"),
    ("indexed with a PLTE of 3n+1 bytes", [(t, b + b"\0" if t == b"PLTE" else b)
                                           for t, b in P], "PLTE"),
    ("an unknown critical chunk before IDAT", insert_before_idat(RGB, (b"CRIT", b"x")),
     "critical"),
    ("an unknown critical chunk after IDAT", move_after_idat(
        insert_before_idat(RGB, (b"CRIT", b"")), b"CRIT"), "critical"),
    ("an unknown ancillary chunk", insert_before_idat(RGB, (b"zzZz", b"anything")), None),
]


@pytest.mark.parametrize(("parts", "word"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_png_chunk_grammar(parts: Chunks, word: str | None) -> None:
    got = check(build(parts))
    if word is None:
        assert isinstance(got, ImageInfo), got
    else:
        assert isinstance(got, ApiError), f"admitted: {names(parts)}"
        assert word in got.message, got.message


letter = st.sampled_from(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
KNOWN = {b"IHDR", b"PLTE", b"IDAT", b"IEND"}


@settings(max_examples=examples(200), deadline=None)
@given(st.tuples(letter, letter, letter, letter), st.binary(max_size=16), st.data(),
       st.sampled_from(["P", "RGB", "L"]))
def test_an_extra_chunk_is_refused_exactly_when_it_is_critical(
        name: tuple[int, int, int, int], body: bytes, data: st.DataObject, mode: str) -> None:
    """Anywhere between IHDR and IEND: an unknown chunk whose first letter is upper case
    (critical) is refused, one whose first letter is lower case (ancillary) is admitted."""
    ctype = bytes(name)
    if ctype in KNOWN or ctype in (b"tRNS", b"bKGD", b"sBIT", b"hIST"):
        return  # known chunks with rules of their own
    parts = png(mode)
    at = data.draw(st.integers(1, len(parts) - 1))  # after IHDR, before IEND
    got = check(build([*parts[:at], (ctype, body), *parts[at:]]))
    if ctype[0] & 0x20:
        assert isinstance(got, ImageInfo), (ctype, at, got)
    else:
        assert isinstance(got, ApiError) and "critical" in got.message, (ctype, at, got)
