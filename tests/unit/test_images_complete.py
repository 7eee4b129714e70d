"""Short or corrupt image data is refused, never admitted half-decoded.

Primary spec, "Images": "The base64 must be canonical and the decoded image must match the
declared type"; docs/admission.md promises 400 for a truncated image. Pillow's ``load()`` zero-fills
what is missing when the container is closed properly — a JPEG whose scan data is cut and then
closed with EOI, a PNG whose (CRC-valid) IDAT holds a complete zlib stream of only half the
scanlines — so these are built here exactly that way and must be refused.

The fuzz below makes real PNG/JPEG files with Pillow (modes, bit depths, interlacing, progressive,
restart markers) and cuts or flips them: a cut of the image data is always refused; a flip is
refused or the image decodes fully (Pillow's own ``load()`` succeeds on it too).
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from services.admission.domain.images import ImageInfo, check_image_bytes
from services.admission.domain.validation import Limits, validate_create
from shared.domain.errors import ApiError
from tests.support.budget import examples
from tests.support.builders import assert_error, create_body, data_uri, image, msg

P = "input[0].content[0].image_url"
SIG = b"\x89PNG\r\n\x1a\n"


def admit(url: str) -> object:
    return validate_create(create_body([msg(image(url))]), Limits())


def check(data: bytes, fmt: str) -> ImageInfo | ApiError:
    return check_image_bytes(data, fmt, 40_000_000, "p")  # type: ignore[arg-type]


# --- building blocks ---------------------------------------------------------------------


def chunk(ctype: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + ctype + body + struct.pack(">I", zlib.crc32(ctype + body))


def chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    out, pos = [], 8
    while pos < len(png):
        n = int.from_bytes(png[pos : pos + 4], "big")
        out.append((png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + n]))
        pos += 12 + n
    return out


def rebuild(parts: list[tuple[bytes, bytes]]) -> bytes:
    return SIG + b"".join(chunk(t, b) for t, b in parts)


def with_idat(png: bytes, idat: bytes) -> bytes:
    """The same PNG with one IDAT holding ``idat`` (every CRC valid, IEND last)."""
    parts = [(t, b) for t, b in chunks(png) if t != b"IDAT"]
    at = next(i for i, (t, _) in enumerate(parts) if t == b"IEND")
    return rebuild([*parts[:at], (b"IDAT", idat), *parts[at:]])


def idat_of(png: bytes) -> bytes:
    return b"".join(b for t, b in chunks(png) if t == b"IDAT")


def rgb_noise(w: int, h: int, seed: int = 1) -> Image.Image:
    return Image.frombytes("RGB", (w, h), random.Random(seed).randbytes(w * h * 3))


def png_of(im: Image.Image, **opts: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG", **opts)
    return buf.getvalue()


def jpeg_of(im: Image.Image, **opts: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "JPEG", **opts)
    return buf.getvalue()


def scan_span(jpeg: bytes) -> tuple[int, int]:
    """(start, end) of the entropy-coded data of the last scan: after the last SOS header, up to
    the EOI at the end."""
    sos = jpeg.rfind(b"\xff\xda")
    length = int.from_bytes(jpeg[sos + 2 : sos + 4], "big")
    assert jpeg.endswith(b"\xff\xd9")
    return sos + 2 + length, len(jpeg) - 2


def raw_scanlines(w: int, h: int, data: bytes, bpp: int) -> bytes:
    stride = w * bpp
    return b"".join(b"\x00" + data[y * stride : (y + 1) * stride] for y in range(h))


# --- the two cases of the issue, and their relatives ----------------------------------------

W, H = 48, 40
IM = rgb_noise(W, H)
PNG = png_of(IM)
RAW = raw_scanlines(W, H, IM.tobytes(), 3)  # filter byte 0 + RGB per row
JPEG = jpeg_of(IM, quality=90)
S0, S1 = scan_span(JPEG)


def test_fixtures_are_admitted() -> None:
    assert isinstance(check(PNG, "png"), ImageInfo)
    assert isinstance(check(with_idat(PNG, zlib.compress(RAW)), "png"), ImageInfo)
    assert isinstance(check(JPEG, "jpeg"), ImageInfo)


SHORT_PNG = {
    # a valid zlib stream (Adler-32 and all) of only half the scanlines, CRC-valid IDAT, IEND
    "half the scanlines": with_idat(PNG, zlib.compress(RAW[: len(RAW) // 2])),
    "all rows but the last": with_idat(PNG, zlib.compress(RAW[: -(W * 3 + 1)])),
    "one byte short": with_idat(PNG, zlib.compress(RAW[:-1])),
    "one byte too many": with_idat(PNG, zlib.compress(RAW + b"\x00")),
    "a row too many": with_idat(PNG, zlib.compress(RAW + RAW[: W * 3 + 1])),
    "zlib stream cut (no Adler-32)": with_idat(PNG, zlib.compress(RAW)[:-4]),
    "zlib stream cut in half": with_idat(PNG, zlib.compress(RAW)[: len(zlib.compress(RAW)) // 2]),
    "bytes after the zlib stream": with_idat(PNG, zlib.compress(RAW) + b"\x00\x00"),
    "filter type 5": with_idat(PNG, zlib.compress(b"\x05" + RAW[1:])),
    "filter type 255 on the last row": with_idat(
        PNG, zlib.compress(RAW[: -(W * 3 + 1)] + b"\xff" + RAW[-(W * 3) :])),
    "empty IDAT": with_idat(PNG, b""),
    "no IDAT": rebuild([(t, b) for t, b in chunks(PNG) if t != b"IDAT"]),
    "zlib stream of nothing": with_idat(PNG, zlib.compress(b"")),
}


@pytest.mark.parametrize("data", SHORT_PNG.values(), ids=SHORT_PNG.keys())
def test_png_with_short_or_wrong_image_data_is_refused(data: bytes) -> None:
    assert_error(admit(data_uri(data)), 400, "invalid_request", P)


SHORT_JPEG = {
    "scan cut in half, closed with EOI": JPEG[: S0 + (S1 - S0) // 2] + b"\xff\xd9",
    "scan cut after 1 byte, closed with EOI": JPEG[: S0 + 1] + b"\xff\xd9",
    "scan cut by 1 byte, closed with EOI": JPEG[: S1 - 1] + b"\xff\xd9",
    "scan cut by 4 bytes, closed with EOI": JPEG[: S1 - 4] + b"\xff\xd9",
    "scan empty, closed with EOI": JPEG[:S0] + b"\xff\xd9",
    "scan half, no EOI": JPEG[: S0 + (S1 - S0) // 2],
}


@pytest.mark.parametrize("data", SHORT_JPEG.values(), ids=SHORT_JPEG.keys())
def test_jpeg_with_short_scan_data_is_refused(data: bytes) -> None:
    assert_error(admit(data_uri(data, "jpeg")), 400, "invalid_request", P)


def test_the_issue_cases_are_refused_with_a_reason() -> None:
    png = check(SHORT_PNG["half the scanlines"], "png")
    jpeg = check(SHORT_JPEG["scan cut in half, closed with EOI"], "jpeg")
    assert isinstance(png, ApiError) and "truncated or corrupt" in png.message
    assert isinstance(jpeg, ApiError) and "truncated or corrupt" in jpeg.message


# --- the kinds of image that must still pass -----------------------------------------------

def _gray16() -> Image.Image:
    return Image.frombytes("I;16", (13, 7), random.Random(3).randbytes(13 * 7 * 2))


GOOD = {
    "png RGB": png_of(rgb_noise(17, 9)),
    "png RGBA": png_of(rgb_noise(5, 11).convert("RGBA")),
    "png L": png_of(rgb_noise(9, 9).convert("L")),
    "png LA": png_of(rgb_noise(9, 3).convert("LA")),
    "png 1-bit": png_of(rgb_noise(13, 5).convert("1")),
    "png P (palette)": png_of(rgb_noise(10, 10).convert("P")),
    "png P 4-bit": png_of(rgb_noise(7, 7).convert("P", colors=16), bits=4),
    "png P 2-bit": png_of(rgb_noise(7, 3).convert("P", colors=4), bits=2),
    "png 16-bit gray": png_of(_gray16()),
    "png 1x1": png_of(Image.new("RGB", (1, 1))),
    "png optimized": png_of(rgb_noise(30, 30), optimize=True),
    "png level 0": png_of(rgb_noise(30, 30), compress_level=0),
    "jpeg baseline": jpeg_of(rgb_noise(33, 17)),
    "jpeg progressive": jpeg_of(rgb_noise(33, 17), progressive=True),
    "jpeg optimized": jpeg_of(rgb_noise(33, 17), optimize=True),
    "jpeg 4:4:4": jpeg_of(rgb_noise(33, 17), subsampling=0),
    "jpeg grayscale": jpeg_of(rgb_noise(20, 20).convert("L")),
    "jpeg CMYK": jpeg_of(rgb_noise(20, 20).convert("CMYK")),
    "jpeg RGB (no YCbCr)": jpeg_of(rgb_noise(20, 20), keep_rgb=True),
    "jpeg restart markers": jpeg_of(rgb_noise(64, 64), restart_marker_blocks=2),
    "jpeg 1x1": jpeg_of(Image.new("RGB", (1, 1))),
    "jpeg with bytes after EOI": jpeg_of(rgb_noise(16, 16)) + b"camera trailer",
}


@pytest.mark.parametrize("name", GOOD.keys())
def test_complete_images_of_every_kind_are_admitted(name: str) -> None:
    data = GOOD[name]
    fmt = "png" if name.startswith("png") else "jpeg"
    got = check(data, fmt)
    assert isinstance(got, ImageInfo), (name, got)
    with Image.open(io.BytesIO(data)) as im:
        assert (got.width, got.height) == im.size


def test_an_interlaced_png_is_admitted_and_cut_interlaced_data_is_not() -> None:
    """Adam7: seven passes, each with its own scanlines and filter bytes (Pillow does not write
    interlaced PNGs, so the test lays the passes out itself and Pillow reads them back)."""
    for w, h in [(1, 1), (3, 2), (8, 8), (9, 17), (33, 5)]:
        im = rgb_noise(w, h)
        base = png_of(im)
        raw = b""
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                  (1, 0, 2, 2), (0, 1, 1, 2)]
        px = im.tobytes()
        for x0, y0, dx, dy in passes:
            for y in range(y0, h, dy):
                row = b"".join(px[(y * w + x) * 3 : (y * w + x) * 3 + 3] for x in range(x0, w, dx))
                if row:
                    raw += b"\x00" + row
        parts = chunks(base)
        ihdr = bytearray(parts[0][1])
        ihdr[12] = 1  # interlace method: Adam7
        middle = [p for p in parts[1:] if p[0] not in (b"IDAT", b"IEND")]
        laced = rebuild([(b"IHDR", bytes(ihdr)), *middle, (b"IDAT", zlib.compress(raw)),
                         (b"IEND", b"")])
        ok = check(laced, "png")
        assert isinstance(ok, ImageInfo), ((w, h), ok)
        with Image.open(io.BytesIO(laced)) as back:
            assert back.tobytes() == px  # the test's Adam7 layout is the real one
        cut = with_idat(laced, zlib.compress(raw[:-1]))
        assert isinstance(check(cut, "png"), ApiError), (w, h)
        if w * h > 1:  # the non-interlaced length for the same image is wrong too
            flat = with_idat(laced, zlib.compress(raw_scanlines(w, h, px, 3)))
            assert isinstance(check(flat, "png"), ApiError), (w, h)


# --- fuzz ----------------------------------------------------------------------------------

def _sample_png(kind: int, w: int, h: int, seed: int) -> bytes:
    im = rgb_noise(w, h, seed)
    if kind == 1:
        return png_of(im.convert("L"))
    if kind == 2:
        return png_of(im.convert("P"))
    if kind == 3:
        return png_of(im.convert("RGBA"), optimize=True)
    if kind == 4:
        return png_of(im.convert("1"))
    return png_of(im)


def _sample_jpeg(kind: int, w: int, h: int, seed: int) -> bytes:
    im = rgb_noise(w, h, seed)
    if kind == 1:
        return jpeg_of(im, progressive=True)
    if kind == 2:
        return jpeg_of(im.convert("L"))
    if kind == 3:
        return jpeg_of(im, restart_marker_blocks=1)
    if kind == 4:
        return jpeg_of(im.convert("CMYK"))
    return jpeg_of(im, quality=75)


sizes = st.tuples(st.integers(0, 4), st.integers(1, 40), st.integers(1, 40), st.integers(0, 9))
FUZZ = settings(max_examples=examples(150), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def _decodes_fully_with_pillow(data: bytes) -> None:
    with Image.open(io.BytesIO(data)) as im:
        im.load()


@FUZZ
@given(sizes, st.floats(0, 1, exclude_max=True))
def test_fuzz_png_with_cut_image_data_is_always_refused(spec: tuple[int, int, int, int],
                                                        where: float) -> None:
    png = _sample_png(*spec)
    stream = idat_of(png)
    raw = zlib.decompress(stream)
    # the zlib stream cut anywhere (CRC fixed, IEND kept) …
    cut_at = int(len(stream) * where)
    assert isinstance(check(with_idat(png, stream[:cut_at]), "png"), ApiError)
    # … or a complete zlib stream of the scanline bytes cut anywhere
    short = raw[: int(len(raw) * where)]
    assert isinstance(check(with_idat(png, zlib.compress(short)), "png"), ApiError)
    # … or the file itself cut anywhere
    assert isinstance(check(png[: int(len(png) * where)], "png"), ApiError)


@FUZZ
@given(sizes, st.floats(0, 1, exclude_max=True), st.booleans())
def test_fuzz_jpeg_with_cut_scan_data_is_always_refused(spec: tuple[int, int, int, int],
                                                        where: float, close: bool) -> None:
    jpeg = _sample_jpeg(*spec)
    s0, s1 = scan_span(jpeg)
    cut = jpeg[: s0 + int((s1 - s0) * where)]
    if cut.endswith(b"\xff"):
        cut = cut[:-1]  # a half marker would just be another corruption
    data = cut + b"\xff\xd9" if close else cut
    assert isinstance(check(data, "jpeg"), ApiError), (spec, where, close)
    # the file cut anywhere before the end of its scan data
    assert isinstance(check(jpeg[: int(s1 * where)], "jpeg"), ApiError)


@FUZZ
@given(sizes, st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
                       min_size=1, max_size=4), st.booleans())
def test_fuzz_png_byte_flips_are_refused_or_decode_fully(
        spec: tuple[int, int, int, int], flips: list[tuple[float, int]], fix_crc: bool) -> None:
    png = _sample_png(*spec)
    if fix_crc:  # flip inside the IDAT data and keep every CRC valid: past the chunk walk
        body = bytearray(idat_of(png))
        for where, xor in flips:
            body[int(len(body) * where)] ^= xor
        data = with_idat(png, bytes(body))
    else:
        buf = bytearray(png)
        for where, xor in flips:
            buf[int(len(buf) * where)] ^= xor
        data = bytes(buf)
    got = check(data, "png")
    if isinstance(got, ImageInfo):
        _decodes_fully_with_pillow(data)
        raw = zlib.decompress(idat_of(data))  # the whole stream, checksum and all
        with Image.open(io.BytesIO(data)) as im:
            assert len(raw) >= im.size[1]  # at least one filter byte per row


@FUZZ
@given(sizes, st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
                       min_size=1, max_size=4))
def test_fuzz_jpeg_byte_flips_are_refused_or_decode_fully(
        spec: tuple[int, int, int, int], flips: list[tuple[float, int]]) -> None:
    jpeg = _sample_jpeg(*spec)
    buf = bytearray(jpeg)
    for where, xor in flips:
        buf[int(len(buf) * where)] ^= xor
    data = bytes(buf)
    got = check(data, "jpeg")
    if isinstance(got, ImageInfo):
        _decodes_fully_with_pillow(data)
