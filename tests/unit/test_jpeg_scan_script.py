"""A JPEG is whole only when its scans cover the whole image (issue 57 item 3).

Primary spec, "Images": the decoded image must match the declared type; docs/admission.md: a
cut anywhere in the image data, re-closed with EOI or not, is refused. A progressive JPEG is
several scans, each adding coefficients (a band ``Ss..Se``) or bits of them (successive
approximation ``Ah → Al``) of one or more components. Cut at a scan boundary and closed with
EOI, libjpeg decodes what is there without a warning (the missing coefficients are zeros), so
``strict`` decoding cannot tell; the scan script is checked instead: every component's
coefficients 0–63 covered and refined down to ``Al = 0``.
"""

from __future__ import annotations

import io
import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from services.admission.domain.images import (
    ImageInfo,
    JpegScan,
    check_image_bytes,
    jpeg_scan_script_problem,
)
from shared.domain.errors import ApiError
from tests.support.budget import examples

EOI = b"\xff\xd9"


def progressive_jpeg(w: int = 64, h: int = 48, mode: str = "RGB") -> bytes:
    im = Image.frombytes("RGB", (w, h), random.Random(7).randbytes(w * h * 3)).convert(mode)
    buf = io.BytesIO()
    im.save(buf, "JPEG", progressive=True, quality=90)
    return buf.getvalue()


def sos_offsets(jpeg: bytes) -> list[int]:
    """Where each SOS marker starts. Entropy-coded data never holds ``FF DA`` (an ``FF`` byte
    in it is stuffed as ``FF 00``), so every occurrence is a scan header."""
    out, pos = [], jpeg.find(b"\xff\xda")
    while pos != -1:
        out.append(pos)
        pos = jpeg.find(b"\xff\xda", pos + 2)
    return out


def check(data: bytes) -> ImageInfo | ApiError:
    return check_image_bytes(data, "jpeg", 40_000_000, "p")


def test_a_progressive_jpeg_cut_at_every_scan_boundary_and_reclosed_is_refused() -> None:
    jpeg = progressive_jpeg()
    scans = sos_offsets(jpeg)
    assert len(scans) == 10  # libjpeg's default progression for a 3-component image
    assert isinstance(check(jpeg), ImageInfo)
    for k, at in enumerate(scans[1:], start=1):
        cut = jpeg[:at] + EOI  # the first k scans, then EOI
        with Image.open(io.BytesIO(cut)) as im:
            im.load()  # premise: the decoder takes it without complaint
        got = check(cut)
        assert isinstance(got, ApiError), f"{k} of 10 scans admitted"
        assert "scan" in got.message, got.message


@pytest.mark.parametrize("mode", ["L", "RGB", "CMYK"])
def test_every_scan_boundary_of_other_component_counts_is_refused(mode: str) -> None:
    jpeg = progressive_jpeg(33, 17, mode)
    scans = sos_offsets(jpeg)
    assert len(scans) > 2
    assert isinstance(check(jpeg), ImageInfo)
    for at in scans[1:]:
        assert isinstance(check(jpeg[:at] + EOI), ApiError)


def S(comps: tuple[int, ...], ss: int, se: int, ah: int, al: int) -> JpegScan:
    return JpegScan(comps, ss, se, ah, al)


FULL_AC = [S((c,), 1, 63, 0, 0) for c in (1, 2, 3)]

# (name, progressive, scans of a 3-component frame (ids 1, 2, 3), the reason's key word or None)
SCRIPTS: list[tuple[str, bool, list[JpegScan], str | None]] = [
    ("sequential, interleaved", False, [S((1, 2, 3), 0, 63, 0, 0)], None),
    ("sequential, one scan per component", False,
     [S((1,), 0, 63, 0, 0), S((2,), 0, 63, 0, 0), S((3,), 0, 63, 0, 0)], None),
    ("sequential, a component never scanned", False,
     [S((1,), 0, 63, 0, 0), S((2,), 0, 63, 0, 0)], "component 3"),
    ("progressive, DC and AC once each", True, [S((1, 2, 3), 0, 0, 0, 0), *FULL_AC], None),
    ("progressive, DC only", True, [S((1, 2, 3), 0, 0, 0, 0)], "coefficient"),
    ("progressive, AC band 1-5 missing for one component", True,
     [S((1, 2, 3), 0, 0, 0, 0), S((1,), 1, 63, 0, 0), S((2,), 1, 63, 0, 0),
      S((3,), 6, 63, 0, 0)], "coefficient"),
    ("progressive, DC first pass at Al=1, no refinement", True,
     [S((1, 2, 3), 0, 0, 0, 1), *FULL_AC], "Al"),
    ("progressive, DC refined down to Al=0", True,
     [S((1, 2, 3), 0, 0, 0, 1), *FULL_AC, S((1, 2, 3), 0, 0, 1, 0)], None),
    ("progressive, AC refined only to Al=1", True,
     [S((1, 2, 3), 0, 0, 0, 0), S((1,), 1, 63, 0, 2), S((2,), 1, 63, 0, 0),
      S((3,), 1, 63, 0, 0), S((1,), 1, 63, 2, 1)], "Al"),
    ("progressive, a refinement before the first pass", True,
     [S((1, 2, 3), 0, 0, 0, 0), S((1,), 1, 63, 1, 0), *FULL_AC], "refine"),
    ("progressive, a refinement that skips a bit", True,
     [S((1, 2, 3), 0, 0, 0, 0), S((1,), 1, 63, 0, 2), S((1,), 1, 63, 1, 0), *FULL_AC[1:]],
     "refine"),
    ("progressive, a band coded twice", True,
     [S((1, 2, 3), 0, 0, 0, 0), *FULL_AC, S((1,), 1, 63, 0, 0)], "twice"),
    ("progressive, an AC scan of two components", True,
     [S((1, 2, 3), 0, 0, 0, 0), S((1, 2), 1, 63, 0, 0), S((3,), 1, 63, 0, 0)], "one component"),
    ("progressive, a band mixing DC and AC", True,
     [S((1,), 0, 63, 0, 0), S((2,), 0, 63, 0, 0), S((3,), 0, 63, 0, 0)], "DC"),
    ("progressive, Se beyond 63", True,
     [S((1, 2, 3), 0, 0, 0, 0), S((1,), 1, 64, 0, 0), *FULL_AC[1:]], "band"),
    ("a scan of a component the frame lacks", True,
     [S((1, 2, 3, 4), 0, 0, 0, 0), *FULL_AC], "component 4"),
    ("no scan at all", True, [], "no scan"),
]


@pytest.mark.parametrize(("progressive", "scans", "word"), [c[1:] for c in SCRIPTS],
                         ids=[c[0] for c in SCRIPTS])
def test_the_scan_script_rules(progressive: bool, scans: list[JpegScan],
                               word: str | None) -> None:
    got = jpeg_scan_script_problem(progressive, (1, 2, 3), scans)
    if word is None:
        assert got is None
    else:
        assert got is not None and word in got, got


@st.composite
def progressions(draw: st.DrawFn) -> list[JpegScan]:
    """A legal progression of a 3-component frame without a redundant scan: per component, AC
    bands split at random, each coded with a random first Al and refined bit by bit; the DC
    likewise (interleaved); the per-component sequences merged in a random order."""
    comps = (1, 2, 3)
    dc_al = draw(st.integers(0, 3))
    dc = [S(comps, 0, 0, 0, dc_al)] + [S(comps, 0, 0, a + 1, a) for a in range(dc_al - 1, -1, -1)]
    lanes: list[list[JpegScan]] = []
    for c in comps:
        cuts = sorted(draw(st.sets(st.integers(2, 63), max_size=3)))
        edges = [1, *cuts, 64]
        for lo, hi in itertools.pairwise(edges):
            al = draw(st.integers(0, 3))
            lanes.append([S((c,), lo, hi - 1, 0, al)]
                         + [S((c,), lo, hi - 1, a + 1, a) for a in range(al - 1, -1, -1)])
    out = list(dc[:1])
    rest = [dc[1:], *lanes]
    while any(rest):
        lane = draw(st.sampled_from([r for r in rest if r]))
        out.append(lane.pop(0))
    return out


@settings(max_examples=examples(300), deadline=None)
@given(progressions(), st.data())
def test_a_whole_progression_is_complete_and_every_proper_prefix_is_not(
        scans: list[JpegScan], data: st.DataObject) -> None:
    assert jpeg_scan_script_problem(True, (1, 2, 3), scans) is None
    k = data.draw(st.integers(0, len(scans) - 1))
    assert jpeg_scan_script_problem(True, (1, 2, 3), scans[:k]) is not None
