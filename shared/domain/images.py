"""Inline image checks: ``data:image/png;base64,…`` and ``data:image/jpeg;base64,…`` only.

An image is admitted when, in this order (cheap checks first, the full decode last):

1. ``image_url`` has the exact lowercase prefix ``data:image/png;base64,`` or
   ``data:image/jpeg;base64,`` — no other media type, no parameter other than ``;base64``, no
   remote URL (``file_id`` and ``detail`` are unknown fields, rejected by the content walk);
2. the base64 is canonical: re-encoding the decoded bytes gives the same text (no whitespace or
   line breaks, padding exactly as needed, zero trailing bits). Checked without re-encoding —
   ``binascii.a2b_base64(strict_mode=True)`` plus the length, padding-position and trailing-bit
   rules — which ``tests/unit/test_images.py`` proves equal to the re-encoding definition;
3. the decoded size (computed from the text length *before* decoding) is within
   ``max_image_bytes`` → else 413 ``request_too_large``;
4. the bytes start with the declared format's signature (a PNG declared as JPEG is named as such);
   a PNG's chunk structure is complete: every chunk's CRC matches and ``IEND`` is the last thing
   in the file (Pillow's ``load()`` does not notice a missing ``IEND``, a bad ``IDAT`` CRC or
   trailing bytes);
5. Pillow opens it as the declared format (``formats=[…]``, so no other decoder is tried) and the
   header's ``width × height`` is within ``max_image_pixels`` and Pillow's
   ``Image.MAX_IMAGE_PIXELS`` → else 413; this runs before any pixel is decoded. Pillow's own
   decompression-bomb guard stays on (``MAX_IMAGE_PIXELS`` is restored if something set it to
   ``None``) and its error counts as a rejection;
6. ``load()`` decodes every pixel; a truncated or corrupt stream → 400.

Errors are values (``shared.domain.errors``); nothing here raises for bad input.
"""

from __future__ import annotations

import binascii
import io
import zlib
from dataclasses import dataclass
from struct import error as struct_error
from typing import Literal

from PIL import Image, ImageFile, UnidentifiedImageError

from shared.domain.errors import ApiError, invalid, too_large

ImageFormat = Literal["png", "jpeg"]

PNG_PREFIX = "data:image/png;base64,"
JPEG_PREFIX = "data:image/jpeg;base64,"
_PREFIXES: tuple[tuple[ImageFormat, str], ...] = (("png", PNG_PREFIX), ("jpeg", JPEG_PREFIX))

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"
_JPEG_SOI = b"\xff\xd8\xff"
_PILLOW_FORMATS: dict[ImageFormat, tuple[str, frozenset[str]]] = {
    # (decoder to try, formats Pillow may report for it: a multi-picture JPEG opens as MPO)
    "png": ("PNG", frozenset({"PNG"})),
    "jpeg": ("JPEG", frozenset({"JPEG", "MPO"})),
}

# Pillow's default decompression-bomb threshold (Image.MAX_IMAGE_PIXELS in Pillow ≥ 5).
PILLOW_DEFAULT_MAX_IMAGE_PIXELS = 1024 * 1024 * 1024 // 4 // 3
if Image.MAX_IMAGE_PIXELS is None:  # the guard must be on
    Image.MAX_IMAGE_PIXELS = PILLOW_DEFAULT_MAX_IMAGE_PIXELS

_B64_INDEX = {
    c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
}


@dataclass(frozen=True, slots=True)
class ImageInfo:
    format: ImageFormat
    width: int
    height: int
    nbytes: int  # decoded bytes


def split_data_uri(url: str, param: str) -> tuple[ImageFormat, str] | ApiError:
    """``data:image/png;base64,AAAA`` → (``"png"``, ``"AAAA"``) or the reason it is not one."""
    for fmt, prefix in _PREFIXES:
        if url.startswith(prefix):
            return fmt, url[len(prefix) :]
    lowered = url[:16].lower()
    if lowered.startswith(("http://", "https://")):
        return invalid(
            "remote image URLs are not accepted; send the image inline as "
            "data:image/png;base64,… or data:image/jpeg;base64,…",
            param,
        )
    if lowered.startswith("data:"):
        return invalid(
            "image_url must start exactly with data:image/png;base64, or "
            "data:image/jpeg;base64, (lowercase, no other media type or parameter)",
            param,
        )
    return invalid(
        "image_url must be an inline data URI: data:image/png;base64,… or data:image/jpeg;base64,…",
        param,
    )


def decoded_length(b64: str) -> int:
    """Decoded size of well-formed padded base64, from its length alone."""
    pad = 2 if b64.endswith("==") else 1 if b64.endswith("=") else 0
    return len(b64) // 4 * 3 - pad


def decode_canonical_base64(b64: str) -> bytes | None:
    """The decoded bytes when ``b64`` is canonical (``b64encode(decoded) == b64``), else None."""
    n = len(b64)
    if n % 4 or not b64.isascii():
        return None
    if n == 0:
        return b""
    # Strict mode rejects non-alphabet bytes, padding in the middle ("ab=c", "ab==cd==") and
    # leading padding, but accepts excess padding after a full quantum ("abcd===="): with
    # n % 4 == 0 that is exactly the case of a third "=" from the end.
    if b64[n - 3] == "=":
        return None
    try:
        data = binascii.a2b_base64(b64, strict_mode=True)
    except (binascii.Error, ValueError):
        return None
    # zero trailing bits: the last data character must not carry bits beyond the final byte
    if b64[n - 2] == "=":
        if _B64_INDEX[b64[n - 3]] & 0x0F:
            return None
    elif b64[n - 1] == "=" and _B64_INDEX[b64[n - 2]] & 0x03:
        return None
    return data


def check_png_structure(data: bytes) -> str | None:
    """Why ``data`` is not a complete PNG chunk stream (signature, chunk CRCs, IEND last), or
    None when it is."""
    if not data.startswith(_PNG_SIGNATURE):
        return "not a PNG signature"
    view = memoryview(data)
    pos = len(_PNG_SIGNATURE)
    end = len(data)
    while True:
        if pos + 12 > end:
            return "truncated PNG (no IEND chunk)"
        length = int.from_bytes(view[pos : pos + 4], "big")
        if length > 0x7FFFFFFF:
            return "corrupt PNG chunk length"
        data_end = pos + 8 + length
        if data_end + 4 > end:
            return "truncated PNG chunk"
        crc = int.from_bytes(view[data_end : data_end + 4], "big")
        if zlib.crc32(view[pos + 4 : data_end]) != crc:
            return "corrupt PNG (chunk CRC mismatch)"
        ctype = bytes(view[pos + 4 : pos + 8])
        pos = data_end + 4
        if ctype == b"IEND":
            return None if pos == end else "bytes after the PNG IEND chunk"


def _pixel_guard(limit: int) -> int:
    """The effective pixel bound: the configured limit, never above Pillow's bomb threshold
    (its default if something set ``MAX_IMAGE_PIXELS = None`` after import)."""
    pillow = Image.MAX_IMAGE_PIXELS
    return min(limit, PILLOW_DEFAULT_MAX_IMAGE_PIXELS if pillow is None else int(pillow))


def check_image_bytes(
    data: bytes, fmt: ImageFormat, max_pixels: int, param: str
) -> ImageInfo | ApiError:
    """Decode ``data`` fully as ``fmt`` within the pixel limit."""
    declared = "image/png" if fmt == "png" else "image/jpeg"
    is_png = data.startswith(_PNG_SIGNATURE)
    is_jpeg = data.startswith(_JPEG_SOI)
    if fmt == "png" and not is_png:
        what = "JPEG" if is_jpeg else "not a PNG"
        return invalid(f"image declared {declared} but the bytes are {what}", param)
    if fmt == "jpeg" and not is_jpeg:
        what = "PNG" if is_png else "not a JPEG"
        return invalid(f"image declared {declared} but the bytes are {what}", param)
    if fmt == "png":
        problem = check_png_structure(data)
        if problem is not None:
            return invalid(f"image is not a complete PNG: {problem}", param)
    if ImageFile.LOAD_TRUNCATED_IMAGES:  # someone relaxed Pillow globally; do not follow
        return invalid("image decoding is misconfigured (LOAD_TRUNCATED_IMAGES)", param)
    decoder, reported = _PILLOW_FORMATS[fmt]
    guard = _pixel_guard(max_pixels)
    try:
        # Pillow warns (DecompressionBombWarning) above MAX_IMAGE_PIXELS and raises above twice
        # that; ``guard`` ≤ MAX_IMAGE_PIXELS, so every image Pillow would warn about is rejected
        # here, before load(). (No warnings.catch_warnings: it is not thread-safe.)
        with Image.open(io.BytesIO(data), formats=[decoder]) as im:
            width, height = im.size
            if width * height > guard:
                return too_large(
                    f"image is {width}×{height} = {width * height} pixels; the limit is {guard}",
                    param,
                )
            if im.format not in reported:
                return invalid(f"image is not a {declared} file", param)
            im.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        return too_large(f"image exceeds the decompression-bomb limit: {exc}", param)
    except UnidentifiedImageError:
        return invalid(f"image bytes are not a decodable {declared} file", param)
    except (
        OSError,
        SyntaxError,
        ValueError,
        EOFError,
        MemoryError,
        IndexError,
        TypeError,
        struct_error,
        zlib.error,
    ) as exc:
        return invalid(f"image is truncated or corrupt ({type(exc).__name__})", param)
    return ImageInfo(fmt, width, height, len(data))


def check_image_url(
    url: str, *, max_bytes: int, max_pixels: int, param: str
) -> ImageInfo | ApiError:
    """The whole check of one ``image_url`` string (param is its JSON path)."""
    split = split_data_uri(url, param)
    if isinstance(split, ApiError):
        return split
    fmt, b64 = split
    # size first, from the length alone, so an oversize image is never decoded
    if len(b64) % 4 == 0 and decoded_length(b64) > max_bytes:
        return too_large(
            f"image is {decoded_length(b64)} bytes decoded; the limit is {max_bytes}", param
        )
    data = decode_canonical_base64(b64)
    if data is None:
        return invalid(
            "image base64 is not canonical (it must re-encode to the same text: no line "
            "breaks or spaces, padding exactly as needed, zero trailing bits)",
            param,
        )
    if not data:
        return invalid("image data is empty", param)
    return check_image_bytes(data, fmt, max_pixels, param)
