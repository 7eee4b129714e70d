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
6. the image data is decoded completely, and short data is an error, not zeros (Pillow's
   ``load()`` zero-fills a PNG whose zlib stream ends early and a JPEG whose scan data is cut and
   closed with EOI, so it is not the judge):

   * PNG: the concatenated ``IDAT`` data must be one complete zlib stream (Adler-32 checked) that
     inflates to exactly the scanline bytes ``IHDR`` declares — ``height`` rows (or the seven
     Adam7 passes) of one filter byte plus ``ceil(width × bits per pixel / 8)`` bytes — with
     every filter byte in 0..4 and nothing after the stream. Unfiltering such data cannot fail,
     so this *is* the full decode; Pillow's ``load()`` (which would inflate everything again)
     is not repeated;
   * JPEG: libjpeg-turbo (``simplejpeg``, ``strict=True``) decodes every scan of the first frame
     and any libjpeg warning is an error: "premature end of data segment" (scan data cut, then a
     marker), "premature end of JPEG file", corrupt Huffman data. Bytes after EOI are allowed
     (MPO, camera trailers); they are not part of the image.

   A truncated or corrupt image → 400 (docs/admission.md, "Images").

Errors are values (``shared.domain.errors``); nothing here raises for bad input.
"""

from __future__ import annotations

import binascii
import io
import zlib
from dataclasses import dataclass
from struct import error as struct_error
from typing import Literal

import simplejpeg
from PIL import Image, UnidentifiedImageError

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


@dataclass(frozen=True, slots=True)
class _PngLayout:
    ihdr: bytes  # the 13 bytes of IHDR
    idat: list[memoryview]  # the IDAT chunks' data, in order


def _walk_png(data: bytes) -> _PngLayout | str:
    """The chunk stream: signature, every CRC, IHDR first, IDAT chunks consecutive, IEND last
    with nothing after it. The layout, or why ``data`` is not a complete PNG chunk stream."""
    if not data.startswith(_PNG_SIGNATURE):
        return "not a PNG signature"
    view = memoryview(data)
    pos = len(_PNG_SIGNATURE)
    end = len(data)
    ihdr: bytes | None = None
    idat: list[memoryview] = []
    idat_done = False
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
        body = view[pos + 8 : data_end]
        if ihdr is None and ctype != b"IHDR":
            return "the first PNG chunk is not IHDR"
        if ctype == b"IHDR":
            if ihdr is not None:
                return "a second PNG IHDR chunk"
            ihdr = bytes(body)
        elif ctype == b"IDAT":
            if idat_done:
                return "PNG IDAT chunks are not consecutive"
            idat.append(body)
        elif idat:
            idat_done = True
        pos = data_end + 4
        if ctype == b"IEND":
            if pos != end:
                return "bytes after the PNG IEND chunk"
            if ihdr is None:  # unreachable: the first chunk was checked to be IHDR
                return "the first PNG chunk is not IHDR"
            return _PngLayout(ihdr, idat)


def check_png_structure(data: bytes) -> str | None:
    """Why ``data`` is not a complete PNG chunk stream (signature, chunk CRCs, IHDR first, IDAT
    consecutive, IEND last), or None when it is."""
    layout = _walk_png(data)
    return layout if isinstance(layout, str) else None


# colour type → channels, and the bit depths the PNG specification allows for it
_PNG_COLOR_TYPES: dict[int, tuple[int, tuple[int, ...]]] = {
    0: (1, (1, 2, 4, 8, 16)),  # greyscale
    2: (3, (8, 16)),  # truecolour
    3: (1, (1, 2, 4, 8)),  # indexed
    4: (2, (8, 16)),  # greyscale + alpha
    6: (4, (8, 16)),  # truecolour + alpha
}
# Adam7 passes: (x0, y0, dx, dy)
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
          (0, 1, 1, 2))
_PNG_FILTERS = bytes(range(5))  # None, Sub, Up, Average, Paeth


def png_scanline_layout(ihdr: bytes) -> list[tuple[int, int]] | str:
    """``(rows, bytes per row incl. its filter byte)`` of every pass of the image data ``IHDR``
    declares (one pass, or the seven Adam7 passes with their empty ones left out), or why the
    header is invalid."""
    if len(ihdr) != 13:
        return "PNG IHDR has the wrong length"
    width = int.from_bytes(ihdr[0:4], "big")
    height = int.from_bytes(ihdr[4:8], "big")
    depth, color, compression, filtering, interlace = ihdr[8], ihdr[9], ihdr[10], ihdr[11], ihdr[12]
    if not (0 < width <= 0x7FFFFFFF and 0 < height <= 0x7FFFFFFF):
        return "PNG width and height must be 1 … 2^31-1"
    if color not in _PNG_COLOR_TYPES or depth not in _PNG_COLOR_TYPES[color][1]:
        return f"PNG colour type {color} with bit depth {depth} is not valid"
    if compression != 0 or filtering != 0 or interlace not in (0, 1):
        return "PNG IHDR names an unknown compression, filter or interlace method"
    bits = _PNG_COLOR_TYPES[color][0] * depth
    if interlace == 0:
        return [(height, 1 + (width * bits + 7) // 8)]
    passes = []
    for x0, y0, dx, dy in _ADAM7:
        cols = (width - x0 + dx - 1) // dx if width > x0 else 0
        rows = (height - y0 + dy - 1) // dy if height > y0 else 0
        if cols and rows:
            passes.append((rows, 1 + (cols * bits + 7) // 8))
    return passes


def check_png_image_data(layout: _PngLayout) -> str | None:
    """Why the IDAT data is not exactly the image ``IHDR`` declares, or None when it is."""
    passes = png_scanline_layout(layout.ihdr)
    if isinstance(passes, str):
        return passes
    if not layout.idat:
        return "PNG has no IDAT chunk"
    expected = sum(rows * stride for rows, stride in passes)
    inflater = zlib.decompressobj()
    try:
        # at most one byte more than declared: enough to tell "too much", never a bomb
        raw = inflater.decompress(b"".join(layout.idat), expected + 1)
    except zlib.error:
        return "PNG image data is not a valid zlib stream"
    if len(raw) > expected:
        return "PNG image data is longer than IHDR declares"
    if not inflater.eof:
        return "PNG image data ends early (the zlib stream is cut)"
    if len(raw) < expected:
        return f"PNG image data is short: {len(raw)} of {expected} scanline bytes"
    if inflater.unused_data:
        return "bytes after the PNG zlib stream"
    offset = 0
    for rows, stride in passes:
        filters = raw[offset : offset + rows * stride : stride]
        if filters.translate(None, _PNG_FILTERS):
            return "PNG scanline with an unknown filter type"
        offset += rows * stride
    return None


def _jpeg_decode_problem(data: bytes) -> str | None:
    """Decode every scan with libjpeg-turbo, treating any libjpeg warning as an error (short
    scan data closed by a marker is a warning to libjpeg and zeros to Pillow)."""
    try:
        _h, _w, space, _sub = simplejpeg.decode_jpeg_header(data)
        # Greyscale output still entropy-decodes every component of every scan (where short or
        # corrupt data is found) and skips the colour work; CMYK/YCCK cannot become greyscale.
        out = "CMYK" if space in ("CMYK", "YCCK") else "GRAY"
        simplejpeg.decode_jpeg(data, colorspace=out, strict=True)
    except (ValueError, RuntimeError, OSError, MemoryError) as exc:
        return str(exc) or type(exc).__name__
    return None


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
    layout: _PngLayout | None = None
    if fmt == "png":
        walked = _walk_png(data)
        if isinstance(walked, str):
            return invalid(f"image is not a complete PNG: {walked}", param)
        layout = walked
    decoder, reported = _PILLOW_FORMATS[fmt]
    guard = _pixel_guard(max_pixels)
    try:
        # Pillow warns (DecompressionBombWarning) above MAX_IMAGE_PIXELS and raises above twice
        # that; ``guard`` ≤ MAX_IMAGE_PIXELS, so every image Pillow would warn about is rejected
        # here, before any pixel is decoded. (No warnings.catch_warnings: not thread-safe.)
        with Image.open(io.BytesIO(data), formats=[decoder]) as im:
            width, height = im.size
            if width * height > guard:
                return too_large(
                    f"image is {width}×{height} = {width * height} pixels; the limit is {guard}",
                    param,
                )
            if im.format not in reported:
                return invalid(f"image is not a {declared} file", param)
        # the full decode, after the pixel guard (docstring, step 6)
        problem = (check_png_image_data(layout) if layout is not None
                   else _jpeg_decode_problem(data))
        if problem is not None:
            return invalid(f"image is truncated or corrupt: {problem}", param)
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
