"""The decode budget (issue 62, part 2): what an image's full decode would take is read from its
header and checked — per image, per request — before any pixel is decoded
(``services.admission.domain.images.DecodeBudget``, ``png_decode_cost``, ``jpeg_decode_cost``);
the budgets derive from the replica's memory limit
(``services.admission.domain.validation.limits.decode_budgets``)."""

from __future__ import annotations

import base64
import io
import struct
import time
import tracemalloc
import zlib

import pytest
from hypothesis import given, seed
from hypothesis import strategies as st
from PIL import Image

from services.admission.core import carries_images
from services.admission.domain import validation as rules
from services.admission.domain.images import (
    DecodeBudget,
    ImageInfo,
    check_image_url,
    jpeg_decode_cost,
    png_decode_cost,
)
from services.admission.domain.validation.limits import decode_budgets
from shared.domain.errors import ApiError
from shared.settings import Settings

MiB = 1024 * 1024


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _ihdr(width: int, height: int, depth: int, color: int, interlace: int = 0) -> bytes:
    return struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, interlace)


def zero_png(width: int, height: int, depth: int = 16, color: int = 6) -> bytes:
    """A PNG of zeros, compressed row by row (never the whole image in memory)."""
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[color]
    row = bytes(1 + (width * channels * depth + 7) // 8)
    z = zlib.compressobj(9)
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", _ihdr(width, height, depth, color))
            + _chunk(b"IDAT", idat) + _chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return zero_png(6324, 6324)  # the issue's: 16-bit RGBA, 320 MB of scanlines


def _url(data: bytes, fmt: str = "png") -> str:
    return f"data:image/{fmt};base64," + base64.b64encode(data).decode()


def test_the_issues_bomb_is_refused_from_its_header(bomb: bytes) -> None:
    assert len(bomb) < 400_000  # ~311 KB, inside every other limit (5 MiB, 40 Mpx)
    per_image, per_request = decode_budgets(512 * MiB)  # the chart's admission limit
    tracemalloc.start()
    started = time.perf_counter()
    got = check_image_url(_url(bomb), max_bytes=5 * MiB, max_pixels=40_000_000,
                          param="input[0].content[0].image_url",
                          budget=DecodeBudget(per_image, per_request))
    took = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert isinstance(got, ApiError) and got.status == 413, got
    assert got.type == "request_too_large" and got.param == "input[0].content[0].image_url"
    assert f"takes {6324 * (1 + 6324 * 8)} bytes to decode" in got.message
    assert f"the limit is {per_image} per image" in got.message
    assert peak < 8 * MiB, peak  # the file and its base64, never the 320 MB
    print(f"\n[budget] bomb refused in {took * 1000:.1f} ms, peak {peak / MiB:.1f} MiB traced")


def test_the_budgets_derive_from_the_memory_limit() -> None:
    assert decode_budgets(512 * MiB) == (128 * MiB, 512 * MiB)
    limits = rules.Limits.from_settings(Settings(memory_limit_bytes=256 * MiB))
    assert (limits.max_decode_bytes_per_image, limits.max_decode_bytes_per_request) == (
        64 * MiB, 256 * MiB)


def test_a_request_is_refused_at_the_image_that_would_exceed_its_budget() -> None:
    png = zero_png(100, 100, depth=8, color=6)
    cost = 100 * (1 + 400)
    budget = DecodeBudget(per_image=cost, per_request=2 * cost + cost // 2)
    param = "input[0].content[{}].image_url"
    for i in range(2):
        got = check_image_url(_url(png), max_bytes=MiB, max_pixels=10**6,
                              param=param.format(i), budget=budget)
        assert isinstance(got, ImageInfo) and got.decode_bytes == cost
    assert budget.spent == 2 * cost
    third = check_image_url(_url(png), max_bytes=MiB, max_pixels=10**6, param=param.format(2),
                            budget=budget)
    assert isinstance(third, ApiError) and third.status == 413
    assert third.param == param.format(2) and "all images of one request" in third.message
    assert budget.spent == 2 * cost  # a refused image spends nothing


def test_the_whole_request_is_checked_through_the_validator() -> None:
    png = zero_png(64, 64, depth=8, color=2)
    part = {"type": "input_image", "image_url": _url(png)}
    body = {"harness": "codex", "placement": "none",
            "input": [{"role": "user", "content": [part, part, part]}]}
    cost = 64 * (1 + 64 * 3)
    ok = rules.validate_create(body, rules.Limits(max_decode_bytes_per_request=3 * cost))
    assert not isinstance(ok, ApiError), ok
    refused = rules.validate_create(body, rules.Limits(max_decode_bytes_per_request=3 * cost - 1))
    assert isinstance(refused, ApiError) and refused.status == 413
    assert refused.param == "input[0].content[2].image_url"


def _jpeg(progressive: bool, mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, (64, 48), 0 if mode == "L" else (10, 20, 30)[: len(mode)]).save(
        out, "JPEG", progressive=progressive)
    return out.getvalue()


@pytest.mark.parametrize(("mode", "progressive", "expected"), [
    ("RGB", False, 64 * 48),  # greyscale output, strip buffers
    ("RGB", True, 64 * 48 * (1 + 3 * 2)),  # + every component's coefficients
    ("L", True, 64 * 48 * (1 + 2)),
    ("CMYK", False, 64 * 48 * 4),  # CMYK output
    ("CMYK", True, 64 * 48 * (4 + 4 * 2)),
])
def test_jpeg_decode_cost(mode: str, progressive: bool, expected: int) -> None:
    data = _jpeg(progressive, mode)
    assert jpeg_decode_cost(data, 64, 48) == expected
    info = check_image_url(_url(data, "jpeg"), max_bytes=MiB, max_pixels=10**6, param="p",
                           budget=DecodeBudget(expected, expected))
    assert isinstance(info, ImageInfo) and info.decode_bytes == expected
    over = check_image_url(_url(data, "jpeg"), max_bytes=MiB, max_pixels=10**6, param="p",
                           budget=DecodeBudget(expected - 1, expected))
    assert isinstance(over, ApiError) and over.status == 413


_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}


@seed(62)
@given(st.integers(1, 100_000), st.integers(1, 100_000),
       st.sampled_from(sorted(_CHANNELS)).flatmap(
           lambda c: st.tuples(st.just(c), st.sampled_from(_DEPTHS[c]))))
def test_png_decode_cost_is_the_scanline_bytes_ihdr_declares(
        width: int, height: int, color_depth: tuple[int, int]) -> None:
    color, depth = color_depth
    row = 1 + (width * _CHANNELS[color] * depth + 7) // 8
    assert png_decode_cost(_ihdr(width, height, depth, color)) == height * row
    interlaced = png_decode_cost(_ihdr(width, height, depth, color, interlace=1))
    assert height * (row - 1) <= interlaced <= height * row + 7 * height  # Adam7 framing


def test_an_invalid_header_costs_nothing_here_and_is_refused_by_the_layout_check() -> None:
    assert png_decode_cost(b"short") == 0
    assert png_decode_cost(_ihdr(10, 10, 3, 2)) == 0  # depth 3 is not a PNG depth


def test_carries_images_finds_an_image_url_at_any_depth_without_recursion() -> None:
    assert not carries_images({"input": "hello", "metadata": {"a": [1, {"b": "image_url"}]}})
    assert carries_images({"input": [{"content": [{"type": "input_image", "image_url": "x"}]}]})
    deep: list[object] = []
    cur = deep
    for _ in range(100_000):
        nxt: list[object] = []
        cur.append(nxt)
        cur = nxt
    cur.append({"image_url": "x"})
    assert carries_images({"output": deep})
