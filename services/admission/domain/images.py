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
   trailing bytes), and its chunks follow the grammar libpng enforces (no unknown critical
   chunk; one ``PLTE`` at most, before ``IDAT``, required for colour type 3). A JPEG's first
   frame is walked marker by marker and its scans must code the whole image
   (``jpeg_scan_script_problem``: every component in a scan; progressive: every coefficient
   0–63 of every component, refined down to ``Al = 0``) — libjpeg decodes a progressive JPEG
   cut at a scan boundary and closed with EOI without a warning;
5. Pillow opens it as the declared format (``formats=[…]``, so no other decoder is tried) and the
   header's ``width × height`` is within ``max_image_pixels`` and Pillow's
   ``Image.MAX_IMAGE_PIXELS`` → else 413; this runs before any pixel is decoded. Pillow's own
   decompression-bomb guard stays on (``MAX_IMAGE_PIXELS`` is restored if something set it to
   ``None``) and its error counts as a rejection. What the full decode would take
   (``png_decode_cost``: the scanline bytes ``IHDR`` declares; ``jpeg_decode_cost``: the output
   plus a progressive frame's coefficients) is within the request's ``DecodeBudget`` (per image,
   per request) → else 413, also before any pixel is decoded: a 311 KB PNG declaring 6324 ×
   6324 16-bit RGBA (320 MB of scanlines) is refused from its header;
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
import re
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
    decode_bytes: int = 0  # memory its full decode took (``decode_cost``)


@dataclass(slots=True)
class DecodeBudget:
    """The memory a request's image decodes may take, checked from each image's header before
    any pixel is decoded: at most ``per_image`` for one image, ``per_request`` for all of a
    request's images together (admission derives both from the replica's memory limit, and
    decodes one image at a time per worker: docs/admission.md, "Decoding off the event
    loop")."""

    per_image: int
    per_request: int
    spent: int = 0

    def refusal(self, cost: int, what: str, param: str) -> ApiError | None:
        if cost > self.per_image:
            return too_large(f"{what} takes {cost} bytes to decode; the limit is "
                             f"{self.per_image} per image", param)
        if self.spent + cost > self.per_request:
            return too_large(f"{what} takes {cost} bytes to decode, beyond the "
                             f"{self.per_request} bytes all images of one request may take "
                             f"({self.spent} taken by the images before it)", param)
        return None


def png_decode_cost(ihdr: bytes) -> int:
    """The bytes a PNG's full decode inflates (its scanlines with their filter bytes), from
    ``IHDR`` alone; 0 for an invalid header (refused later, before any inflating)."""
    passes = png_scanline_layout(ihdr)
    return 0 if isinstance(passes, str) else sum(rows * stride for rows, stride in passes)


def jpeg_decode_cost(data: bytes, width: int, height: int) -> int:
    """The memory libjpeg's full decode takes (``_jpeg_decode_problem``): the greyscale (or
    CMYK) output, plus, for a progressive frame, the whole image's DCT coefficients (2 bytes a
    sample of every component, an upper bound with chroma subsampling). From the frame header
    (the first SOF marker; the segments before it carry lengths, no entropy data)."""
    pos, end = 2, len(data)
    components, progressive = 3, False
    while pos + 4 <= end and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _SOF_SEQUENTIAL | _SOF_PROGRESSIVE | _SOF_OTHER:
            progressive = marker in _SOF_PROGRESSIVE
            if pos + 10 <= end:
                components = data[pos + 9]
            break
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    pixels = width * height
    out = 4 if components == 4 else 1
    return pixels * out + (pixels * components * 2 if progressive else 0)


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


_PNG_CRITICAL = frozenset({b"IHDR", b"PLTE", b"IDAT", b"IEND"})


def _walk_png(data: bytes) -> _PngLayout | str:
    """The chunk stream: signature, every CRC, IHDR first, IDAT chunks consecutive, IEND last
    with nothing after it, and the chunk grammar libpng enforces: no unknown critical chunk
    (first letter upper case), at most one ``PLTE``, before the first ``IDAT``, of 3 × 1..256
    bytes, and one present for an indexed-colour image (colour type 3). The layout, or why
    ``data`` is not a complete PNG chunk stream."""
    if not data.startswith(_PNG_SIGNATURE):
        return "not a PNG signature"
    view = memoryview(data)
    pos = len(_PNG_SIGNATURE)
    end = len(data)
    ihdr: bytes | None = None
    idat: list[memoryview] = []
    idat_done = False
    plte = False
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
        if not ctype[0] & 0x20 and ctype not in _PNG_CRITICAL:
            return f"an unknown critical PNG chunk {ctype!r} (a decoder cannot skip it)"
        if ctype == b"IHDR":
            if ihdr is not None:
                return "a second PNG IHDR chunk"
            ihdr = bytes(body)
        elif ctype == b"PLTE":
            if plte:
                return "a second PNG PLTE chunk"
            if idat:
                return "PNG PLTE after IDAT"
            if not 3 <= length <= 768 or length % 3:
                return "PNG PLTE length is not 3 × 1..256 bytes"
            plte = True
        elif ctype == b"IDAT":
            if idat_done:
                return "PNG IDAT chunks are not consecutive"
            if not idat and not plte and ihdr is not None and ihdr[9:10] == b"\x03":
                return "indexed-colour PNG without a PLTE chunk before IDAT"
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


# SOF markers whose frames are DCT coefficient scans: sequential (baseline, extended, arithmetic)
# and progressive (Huffman, arithmetic). The rest (lossless, hierarchical) go to the decoder.
_SOF_SEQUENTIAL = frozenset({0xC0, 0xC1, 0xC9})
_SOF_PROGRESSIVE = frozenset({0xC2, 0xCA})
_SOF_OTHER = frozenset({0xC3, 0xC5, 0xC6, 0xC7, 0xCB, 0xCD, 0xCE, 0xCF})
# the next marker after entropy-coded data: FF not followed by a stuffed 00 or a restart marker
_JPEG_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7]")


@dataclass(frozen=True, slots=True)
class JpegScan:
    """One SOS header: its component ids, spectral band ``ss..se``, successive approximation
    bit positions ``ah`` (0: first pass) and ``al``."""

    components: tuple[int, ...]
    ss: int
    se: int
    ah: int
    al: int


def _jpeg_first_frame(data: bytes) -> tuple[bool | None, tuple[int, ...], list[JpegScan]] | str:
    """Walk the markers of the first frame up to its EOI, skipping entropy-coded data: whether
    the frame is progressive (``None``: neither sequential nor progressive DCT), its component
    ids and its scans — or why the marker structure is broken. Bytes after EOI are not read."""
    end = len(data)
    pos = 2  # after SOI
    progressive: bool | None = None
    components: tuple[int, ...] | None = None
    scans: list[JpegScan] = []
    while True:
        if pos + 2 > end:
            return "the JPEG ends before its EOI marker"
        if data[pos] != 0xFF:
            return "bytes where a JPEG marker belongs"
        while pos + 1 < end and data[pos + 1] == 0xFF:  # fill bytes before a marker
            pos += 1
        if pos + 2 > end:
            return "the JPEG ends before its EOI marker"
        marker = data[pos + 1]
        if marker == 0xD9:  # EOI
            if components is None:
                return "a JPEG without a frame header"
            return progressive, components, scans
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # RSTn, TEM: no length
            pos += 2
            continue
        if pos + 4 > end:
            return "a JPEG marker segment is cut"
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        seg_end = pos + 2 + length
        if length < 2 or seg_end > end:
            return "a JPEG marker segment is cut"
        seg = data[pos + 4 : seg_end]
        if marker in _SOF_SEQUENTIAL or marker in _SOF_PROGRESSIVE or marker in _SOF_OTHER:
            if components is not None:
                return "a second JPEG frame header before EOI"
            if len(seg) < 6 or len(seg) != 6 + 3 * seg[5]:
                return "a malformed JPEG frame header"
            components = tuple(seg[6 + 3 * i] for i in range(seg[5]))
            progressive = (True if marker in _SOF_PROGRESSIVE
                           else False if marker in _SOF_SEQUENTIAL else None)
        elif marker == 0xDA:  # SOS, then entropy-coded data up to the next marker
            if len(seg) < 1 or len(seg) != 4 + 2 * seg[0]:
                return "a malformed JPEG scan header"
            n = seg[0]
            scans.append(JpegScan(tuple(seg[1 + 2 * i] for i in range(n)), seg[1 + 2 * n],
                                  seg[2 + 2 * n], seg[3 + 2 * n] >> 4, seg[3 + 2 * n] & 0x0F))
            found = _JPEG_MARKER.search(data, seg_end)
            if found is None:
                return "the JPEG ends in scan data (no EOI marker)"
            pos = found.start()
            continue
        pos = seg_end


def jpeg_scan_script_problem(progressive: bool, components: tuple[int, ...],
                             scans: list[JpegScan]) -> str | None:
    """Why the scans of a frame do not code the whole image, or ``None`` when they do.

    Sequential: every component is in some scan. Progressive (ITU T.81 G.1.1.1): a DC scan
    (``ss = se = 0``) may interleave components, an AC scan (``1 ≤ ss ≤ se ≤ 63``) holds one;
    a coefficient's first pass (``ah = 0``) comes once, each refinement lowers its precision by
    one bit (``ah`` = the current ``al``, ``al = ah - 1``); at the end every coefficient 0–63 of
    every component has been coded down to ``al = 0``."""
    if not scans:
        return "no scan"
    known = set(components)
    for scan in scans:
        for c in scan.components:
            if c not in known:
                return f"a scan of component {c}, which the frame does not have"
    if not progressive:
        seen = {c for scan in scans for c in scan.components}
        for c in components:
            if c not in seen:
                return f"component {c} is in no scan"
        return None
    # per component, per coefficient: the precision coded so far (-1: not yet)
    al_of = {c: [-1] * 64 for c in components}
    for scan in scans:
        if scan.ss == 0 and scan.se != 0:
            return "a progressive scan mixes the DC and AC coefficients"
        if scan.ss > 0 and len(scan.components) != 1:
            return "a progressive AC scan must hold one component"
        if scan.se < scan.ss or scan.se > 63:
            return f"a progressive scan band {scan.ss}..{scan.se} is not within 0..63"
        for c in scan.components:
            coeffs = al_of[c]
            for k in range(scan.ss, scan.se + 1):
                if scan.ah == 0:
                    if coeffs[k] != -1:
                        return f"coefficient {k} of component {c} is coded twice"
                elif coeffs[k] != scan.ah or scan.al != scan.ah - 1:
                    return (f"a scan does not refine coefficient {k} of component {c} by one "
                            "bit from where it stands")
                coeffs[k] = scan.al
    for c, coeffs in al_of.items():
        for k, al in enumerate(coeffs):
            if al == -1:
                return f"coefficient {k} of component {c} is in no scan"
            if al:
                return f"coefficient {k} of component {c} stops at Al={al}, not 0"
    return None


def check_jpeg_scans(data: bytes) -> str | None:
    """Why the first frame's scans do not code the whole image (a file cut at a scan boundary
    and closed with EOI: libjpeg decodes it without a warning, the rest zeros), or ``None``."""
    walked = _jpeg_first_frame(data)
    if isinstance(walked, str):
        return walked
    progressive, components, scans = walked
    if progressive is None:
        return None  # lossless or hierarchical: the decoder judges
    problem = jpeg_scan_script_problem(progressive, components, scans)
    return None if problem is None else f"its scans do not code the whole image: {problem}"


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
    data: bytes, fmt: ImageFormat, max_pixels: int, param: str,
    budget: DecodeBudget | None = None,
) -> ImageInfo | ApiError:
    """Decode ``data`` fully as ``fmt`` within the pixel limit and the decode ``budget`` (its
    cost checked from the header; spent once the image is admitted)."""
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
    else:
        scans = check_jpeg_scans(data)
        if scans is not None:
            return invalid(f"image is not a complete JPEG: {scans}", param)
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
        # what the full decode would take, from the header: refused before any pixel is decoded
        cost = (png_decode_cost(layout.ihdr) if layout is not None
                else jpeg_decode_cost(data, width, height))
        if budget is not None:
            refused = budget.refusal(cost, f"image ({width}×{height})", param)
            if refused is not None:
                return refused
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
    if budget is not None:
        budget.spent += cost
    return ImageInfo(fmt, width, height, len(data), cost)


def check_image_url(
    url: str, *, max_bytes: int, max_pixels: int, param: str,
    budget: DecodeBudget | None = None,
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
    return check_image_bytes(data, fmt, max_pixels, param, budget)
