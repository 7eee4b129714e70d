"""Image rules: inline PNG/JPEG data URIs only, canonical base64, complete decodable image of the
declared type, byte and pixel limits (Pillow's decompression-bomb guard on)."""

from __future__ import annotations

import base64
import binascii
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image, ImageFile

from services.admission.domain import images
from services.admission.domain.images import ImageInfo, check_image_url, decode_canonical_base64
from services.admission.domain.validation import Limits, validate_create
from shared.domain.errors import ApiError
from tests.support.builders import (
    JPEG_URI,
    PNG_URI,
    assert_error,
    create_body,
    data_uri,
    image,
    jpeg_bytes,
    msg,
    png_bytes,
    png_with_header,
)

P = "input[0].content[0].image_url"
B64 = "data:image/png;base64,"


def admit_image(url: str, limits: Limits | None = None) -> object:
    return validate_create(create_body([msg(image(url))]), limits or Limits())


def check(url: str, max_bytes: int = 5 << 20, max_pixels: int = 40_000_000) -> object:
    return check_image_url(url, max_bytes=max_bytes, max_pixels=max_pixels, param="p")


# --- accepted ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "fmt"),
    [
        (PNG_URI, "png"),
        (JPEG_URI, "jpeg"),
        (data_uri(png_bytes(3, 5, mode="L")), "png"),
        (data_uri(png_bytes(17, 9, noise=True)), "png"),
    ],
)
def test_valid_inline_images_are_admitted(url: str, fmt: str) -> None:
    info = check(url)
    assert isinstance(info, ImageInfo) and info.format == fmt
    assert not isinstance(admit_image(url), ApiError)


# --- the data URI ------------------------------------------------------------------------

BAD_URIS = {
    "remote https": "https://example.com/cat.png",
    "remote http": "http://example.com/cat.png",
    "remote upper-case scheme": "HTTPS://example.com/cat.png",
    "file id string": "file-abc123",
    "file url": "file:///tmp/cat.png",
    "upper-case media type": PNG_URI.replace("image/png", "IMAGE/PNG"),
    "upper-case DATA": PNG_URI.replace("data:", "DATA:"),
    "gif": PNG_URI.replace("image/png", "image/gif"),
    "webp": PNG_URI.replace("image/png", "image/webp"),
    "image/jpg": JPEG_URI.replace("image/jpeg", "image/jpg"),
    "no ;base64": PNG_URI.replace(";base64", ""),
    "charset parameter": PNG_URI.replace("image/png;", "image/png;charset=utf-8;"),
    "name parameter": PNG_URI.replace("image/png;", "image/png;name=a.png;"),
    "space after comma": PNG_URI.replace("base64,", "base64, "),
    "empty string": "",
    "bare base64": PNG_URI.removeprefix("data:image/png;base64,"),
}


@pytest.mark.parametrize("url", BAD_URIS.values(), ids=BAD_URIS.keys())
def test_only_exact_png_and_jpeg_data_uris(url: str) -> None:
    assert_error(admit_image(url), 400, "invalid_request", P)


def test_remote_url_message_says_so() -> None:
    err = check("https://example.com/a.png")
    assert isinstance(err, ApiError) and "remote" in err.message


@pytest.mark.parametrize(
    ("extra", "value"), [("file_id", "file-abc"), ("detail", "low"), ("detail", "auto")]
)
def test_file_id_and_detail_are_rejected(extra: str, value: str) -> None:
    part = {**image(), extra: value}
    err = assert_error(
        validate_create(create_body([msg(part)]), Limits()),
        400,
        "invalid_request",
        f"input[0].content[0].{extra}",
    )
    assert extra in err.message


def test_file_id_instead_of_image_url_is_rejected() -> None:
    part = {"type": "input_image", "file_id": "file-abc"}
    assert_error(
        validate_create(create_body([msg(part)]), Limits()),
        400,
        "invalid_request",
        "input[0].content[0].file_id",
    )


@pytest.mark.parametrize("value", [None, 1, ["x"], {"url": PNG_URI}, True])
def test_image_url_must_be_a_string(value: object) -> None:
    part = {"type": "input_image", "image_url": value}
    assert_error(validate_create(create_body([msg(part)]), Limits()), 400, "invalid_request", P)


def test_image_url_is_required() -> None:
    assert_error(
        validate_create(create_body([msg({"type": "input_image"})]), Limits()),
        400,
        "invalid_request",
        P,
    )


# --- canonical base64 ----------------------------------------------------------------------

_B64 = base64.b64encode(png_bytes(3, 3)).decode()  # len % 3 decides the padding; checked below


def _tweak_trailing_bits(b64: str) -> str:
    """Flip the lowest bit of the last data character before the padding (a stray trailing
    bit: decodes to the same bytes, re-encodes differently)."""
    pad = len(b64) - len(b64.rstrip("="))
    assert pad in (1, 2), "fixture must need padding"
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    i = len(b64) - pad - 1
    return b64[:i] + alphabet[alphabet.index(b64[i]) ^ 1] + b64[i + 1 :]


NON_CANONICAL = {
    "newline every 76": "\n".join(_B64[i : i + 76] for i in range(0, len(_B64), 76)),
    "trailing newline": _B64 + "\n",
    "CRLF inside": _B64[:8] + "\r\n" + _B64[8:],
    "space inside": _B64[:8] + " " + _B64[8:],
    "missing padding": _B64.rstrip("="),
    "extra padding": _B64 + "=",
    "extra padding quad": _B64.rstrip("=") + ("=" * (4 - len(_B64.rstrip("=")) % 4)) + "====",
    "stray trailing bits": _tweak_trailing_bits(_B64),
    "url-safe alphabet": _B64.replace("+", "-").replace("/", "_")
    if "+" in _B64 or "/" in _B64
    else _B64[:-4] + "-_" + _B64[-2:],
    "non-ascii": _B64[:4] + "é" + _B64[5:],
    "leading padding": "=" + _B64[1:],
}


def test_fixture_needs_padding() -> None:
    assert _B64.endswith("=") and base64.b64decode(_tweak_trailing_bits(_B64)) == base64.b64decode(
        _B64
    )


@pytest.mark.parametrize("b64", NON_CANONICAL.values(), ids=NON_CANONICAL.keys())
def test_non_canonical_base64_is_rejected(b64: str) -> None:
    assert b64 != _B64
    err = assert_error(admit_image(B64 + b64), 400, "invalid_request", P)
    assert "base64" in err.message


def reference_canonical(s: str) -> bytes | None:
    """The definition: re-encoding the decoded bytes gives the same text."""
    try:
        decoded = base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return None
    return decoded if base64.b64encode(decoded).decode("ascii") == s else None


B64_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\n -_"


@given(st.text(alphabet=B64_CHARS, max_size=24))
def test_fast_canonical_check_equals_reencoding_definition_on_noise(s: str) -> None:
    assert decode_canonical_base64(s) == reference_canonical(s)


@given(
    st.binary(max_size=40),
    st.integers(0, 63),
    st.integers(0, 60),
    st.sampled_from(["", "=", "==", "\n", "A"]),
)
def test_fast_canonical_check_equals_definition_near_valid(
    data: bytes, flip: int, pos: int, suffix: str
) -> None:
    s = base64.b64encode(data).decode()
    assert decode_canonical_base64(s) == data
    alphabet = B64_CHARS[:64]
    if s:
        i = pos % len(s)
        if s[i] != "=":
            mutated = s[:i] + alphabet[alphabet.index(s[i]) ^ (flip & 3)] + s[i + 1 :]
            assert decode_canonical_base64(mutated) == reference_canonical(mutated)
    assert decode_canonical_base64(s + suffix) == reference_canonical(s + suffix)
    stripped = s.rstrip("=")
    assert decode_canonical_base64(stripped) == reference_canonical(stripped)


def test_empty_base64_is_rejected() -> None:
    assert_error(admit_image(B64), 400, "invalid_request", P)


# --- the bytes must be a complete image of the declared type -------------------------------

PNG = png_bytes(16, 16, noise=True)
JPEG = jpeg_bytes(16, 16)
IDAT = PNG.find(b"IDAT")

BAD_BYTES = {
    "PNG declared as JPEG": data_uri(PNG, "jpeg"),
    "JPEG declared as PNG": data_uri(JPEG, "png"),
    "truncated PNG (half)": data_uri(PNG[: len(PNG) // 2]),
    "truncated PNG (last byte)": data_uri(PNG[:-1]),
    "PNG without IEND": data_uri(PNG[: PNG.rfind(b"IEND") - 4]),
    "PNG with bytes after IEND": data_uri(PNG + b"junk"),
    "PNG with a corrupt IDAT byte": data_uri(
        PNG[: IDAT + 12] + bytes([PNG[IDAT + 12] ^ 0xFF]) + PNG[IDAT + 13 :]
    ),
    "PNG signature only": data_uri(PNG[:8]),
    "truncated JPEG": data_uri(JPEG[: len(JPEG) // 2], "jpeg"),
    "JPEG without EOI": data_uri(JPEG[:-2], "jpeg"),
    "JPEG SOI then garbage": data_uri(b"\xff\xd8\xff" + b"\x00" * 64, "jpeg"),
    "random bytes as PNG": data_uri(b"not an image at all"),
    "GIF declared as PNG": data_uri(b"GIF89a" + b"\x00" * 32),
}


@pytest.mark.parametrize("url", BAD_BYTES.values(), ids=BAD_BYTES.keys())
def test_bytes_must_be_a_complete_image_of_the_declared_type(url: str) -> None:
    assert_error(admit_image(url), 400, "invalid_request", P)


def test_corrupt_png_with_recomputed_crc_is_still_rejected() -> None:
    """A damaged IDAT with a *valid* CRC passes the chunk walk; Pillow's full decode catches it."""
    import struct
    import zlib

    length = struct.unpack(">I", PNG[IDAT - 4 : IDAT])[0]
    body = bytearray(PNG[IDAT + 4 : IDAT + 4 + length])
    body[2:40] = b"\xff" * 38
    crc = struct.pack(">I", zlib.crc32(b"IDAT" + bytes(body)))
    damaged = PNG[: IDAT + 4] + bytes(body) + crc + PNG[IDAT + 8 + length :]
    assert images.check_png_structure(damaged) is None
    assert_error(admit_image(data_uri(damaged)), 400, "invalid_request", P)


def test_png_declared_as_jpeg_names_the_mismatch() -> None:
    err = check(data_uri(PNG, "jpeg"))
    assert isinstance(err, ApiError) and "PNG" in err.message


# --- limits --------------------------------------------------------------------------------


def test_decoded_bytes_limit_is_413() -> None:
    data = png_bytes(40, 40, noise=True)
    limits = Limits(max_image_bytes=len(data) - 1)
    assert_error(admit_image(data_uri(data), limits), 413, "request_too_large", P)
    assert not isinstance(admit_image(data_uri(data), Limits(max_image_bytes=len(data))), ApiError)


def test_oversize_is_found_before_decoding() -> None:
    # 12 MB of base64 'A's: not even an image, but over the byte limit → 413, not a decode error
    assert_error(admit_image(B64 + "A" * (12 << 20)), 413, "request_too_large", P)


def test_pixel_limit_is_413() -> None:
    data = png_bytes(20, 10)
    assert_error(
        admit_image(data_uri(data), Limits(max_image_pixels=199)), 413, "request_too_large", P
    )
    assert not isinstance(admit_image(data_uri(data), Limits(max_image_pixels=200)), ApiError)


def test_header_dimensions_are_checked_before_decode() -> None:
    # 100 000 × 100 000 claimed by a 70-byte file: rejected from the header alone
    bomb = png_with_header(100_000, 100_000)
    assert len(bomb) < 100
    assert_error(admit_image(data_uri(bomb)), 413, "request_too_large", P)


def test_pillow_decompression_bomb_guard_is_on_even_with_a_lax_limit() -> None:
    assert Image.MAX_IMAGE_PIXELS is not None
    lax = Limits(max_image_pixels=10**12)
    # over 2 × MAX_IMAGE_PIXELS: Pillow raises DecompressionBombError in open()
    huge = png_with_header(30_000, 10_000)
    assert_error(admit_image(data_uri(huge), lax), 413, "request_too_large", P)
    # between 1× and 2×: Pillow only warns; admission still rejects
    big = png_with_header(10_000, 10_000)
    assert 10_000 * 10_000 > Image.MAX_IMAGE_PIXELS
    with pytest.warns(Image.DecompressionBombWarning):
        assert_error(admit_image(data_uri(big), lax), 413, "request_too_large", P)


def test_a_real_compressed_bomb_is_rejected_cheaply() -> None:
    # 8000 × 8000 of zeros compresses to a few kB; 64 MP > the 40 MP default
    im = Image.new("L", (8000, 8000))
    buf = io.BytesIO()
    im.save(buf, "PNG", optimize=False)
    data = buf.getvalue()
    assert len(data) < 200_000
    assert_error(admit_image(data_uri(data)), 413, "request_too_large", P)


def test_load_truncated_images_is_not_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    assert_error(admit_image(data_uri(JPEG[: len(JPEG) // 2], "jpeg")), 400, "invalid_request", P)


def test_guard_holds_when_pillow_guard_is_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    lax = Limits(max_image_pixels=10**12)
    big = png_with_header(10_000, 10_000)  # 100 MP > Pillow's default threshold (89.5 MP)
    assert_error(admit_image(data_uri(big), lax), 413, "request_too_large", P)
    assert images.PILLOW_DEFAULT_MAX_IMAGE_PIXELS == 89_478_485


@given(st.text(alphabet="AQgw+/=", max_size=12))
def test_fast_canonical_check_equals_definition_on_dense_alphabet(s: str) -> None:
    # A/Q/g/w differ only in their low bits; '=' everywhere: padding positions and stray bits
    assert decode_canonical_base64(s) == reference_canonical(s)


@pytest.mark.parametrize(
    "s",
    ["AAAA====", "AAAA", "AAA=", "AA==", "AAAA=", "A===", "====", "AB==", "AAB=", "AAAAAAA====="],
)
def test_canonical_check_edge_cases(s: str) -> None:
    # "AAAA====" is accepted by binascii strict mode: excess padding after a full quantum
    assert decode_canonical_base64(s) == reference_canonical(s)


def test_excess_padding_after_a_full_quantum_is_rejected() -> None:
    data = next(png_bytes(w, 1) for w in range(1, 40) if len(png_bytes(w, 1)) % 3 == 0)
    b64 = base64.b64encode(data).decode()
    assert not b64.endswith("=")
    assert not isinstance(admit_image(B64 + b64), ApiError)
    assert_error(admit_image(B64 + b64 + "===="), 400, "invalid_request", P)
