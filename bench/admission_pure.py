"""Case 1 — admission, pure (in-process, one core, no I/O).

(a) a 1-part and (b) a 100-part text message event: validations/s of the product path
``parse_json`` (strict JSON: duplicate keys, surrogates, constants) + ``validate_event`` against
the baseline ``json.loads`` + a plain (non-strict) pydantic ``model_validate`` of the same bytes.
Target: rate ratio ≥ 0.5.

(c) a message with a ~1 MB PNG and a ~200 KB JPEG (noise pixels, so the sizes are real): seconds
per validation of the same product path against the baseline base64 decode + Pillow's own
``Image.open(BytesIO(b)).load()`` of both images. Target: time ratio ≤ 1.5.

Product and baseline repeats are interleaved (A B A B …) so drift on a shared machine hits both.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import random
import time
from collections.abc import Callable
from typing import Any

from PIL import Image
from pydantic import BaseModel

from bench.common import Result, Run, Spread, progress
from services.admission.domain.jsonbody import parse_json
from services.admission.domain.validation import Limits, validate_event
from shared.domain.errors import ApiError

TEXT = "Please summarise the attached design notes and list the open questions. " * 2


# ---- the baseline: a simple, non-strict pydantic model of the message shape -------------
class BPart(BaseModel):
    type: str
    text: str | None = None
    image_url: str | None = None


class BMessage(BaseModel):
    role: str
    type: str | None = None
    content: list[BPart]


class BEvent(BaseModel):
    type: str
    input: list[BMessage]
    client_event_id: str | None = None


def text_event(parts: int) -> bytes:
    body = {
        "type": "agent.session.input.message",
        "input": [{"role": "user", "type": "message",
                   "content": [{"type": "input_text", "text": TEXT} for _ in range(parts)]}],
    }
    return json.dumps(body).encode()


def noise_png(target: int, rng: random.Random) -> bytes:
    side = int((target / 3) ** 0.5)
    im = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def noise_jpeg(target: int, rng: random.Random) -> bytes:
    """A noise JPEG close to ``target`` bytes (quality 85; the side is searched)."""
    lo, hi = 32, 2048
    best = b""
    while lo <= hi:
        side = (lo + hi) // 2
        im = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=85)
        data = buf.getvalue()
        if not best or abs(len(data) - target) < abs(len(best) - target):
            best = data
        if len(data) < target:
            lo = side + 1
        else:
            hi = side - 1
    return best


def image_event(png: bytes, jpeg: bytes) -> bytes:
    body = {
        "type": "agent.session.input.message",
        "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "what is in these two pictures?"},
            {"type": "input_image",
             "image_url": "data:image/png;base64," + base64.b64encode(png).decode()},
            {"type": "input_image",
             "image_url": "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()},
        ]}],
    }
    return json.dumps(body).encode()


LIMITS = Limits()


def product(raw: bytes) -> Any:
    body = parse_json(raw)
    if isinstance(body, ApiError):
        raise AssertionError(body.body())
    res = validate_event(body, "codex", "none", LIMITS)
    if isinstance(res, ApiError):
        raise AssertionError(res.body())
    return res


def baseline_text(raw: bytes) -> Any:
    return BEvent.model_validate(json.loads(raw))


def baseline_images(b64s: list[str]) -> Any:
    for b in b64s:
        with Image.open(io.BytesIO(base64.b64decode(b))) as im:
            im.load()


def _calibrate(fn: Callable[[], Any], seconds: float) -> int:
    n, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= seconds / 4:
            return max(1, int(n * seconds / t))
        n *= 4


def _rates(a: Callable[[], Any], b: Callable[[], Any], repeats: int, seconds: float
           ) -> tuple[list[float], list[float]]:
    """Interleaved repeats; each returns calls per second."""
    na, nb = _calibrate(a, seconds), _calibrate(b, seconds)
    ra: list[float] = []
    rb: list[float] = []
    for _ in range(repeats):
        for fn, n, out in ((a, na, ra), (b, nb, rb)):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            out.append(n / (time.perf_counter() - t0))
    return ra, rb


def run(run_: Run, quick: bool = False) -> None:
    repeats, seconds = (3, 0.15) if quick else (7, 0.4)
    for label, parts in (("1a_admission_text_1part", 1), ("1b_admission_text_100parts", 100)):
        raw = text_event(parts)
        product(raw)  # admitted, else the benchmark measures an error path
        baseline_text(raw)
        progress(f"{label}: {len(raw)} bytes, {repeats} repeats x ~{seconds}s each side")
        pr, br = _rates(functools.partial(product, raw), functools.partial(baseline_text, raw),
                        repeats, seconds)
        p, b = Spread.of(pr), Spread.of(br)
        pair = Spread.of([x / y for x, y in zip(pr, br, strict=True)])
        run_.add(Result(label, p.median, b.median, ">= 0.5", "validations/s",
                        f"product parse_json+validate_event {p.text('{:.0f}')}; baseline "
                        f"json.loads+pydantic model_validate {b.text('{:.0f}')}; per-pair ratio "
                        f"{pair.lo:.3f}..{pair.hi:.3f}"))

    rng = random.Random(9)
    png, jpeg = noise_png(1_000_000, rng), noise_jpeg(200_000, rng)
    raw = image_event(png, jpeg)
    b64s = [base64.b64encode(png).decode(), base64.b64encode(jpeg).decode()]
    product(raw)
    body = json.loads(raw)
    label = "1c_admission_png1MB_jpeg200KB"
    progress(f"{label}: PNG {len(png)} B, JPEG {len(jpeg)} B, body {len(raw)} B")
    img_repeats, img_seconds = (3, 0.3) if quick else (7, 0.8)
    pr, br = _rates(lambda: product(raw), lambda: baseline_images(b64s), img_repeats, img_seconds)
    # validate_event alone (no JSON parse), for the notes
    vr, _ = _rates(lambda: validate_event(body, "codex", "none", LIMITS), lambda: None,
                   3, img_seconds / 2)
    p_ms = Spread.of([1000 / r for r in pr])
    b_ms = Spread.of([1000 / r for r in br])
    v_ms = Spread.of([1000 / r for r in vr])
    pair = Spread.of([y / x for x, y in zip(pr, br, strict=True)])
    run_.add(Result(label, p_ms.median, b_ms.median, "<= 1.5", "ms/validation",
                    f"product parse_json+validate_event {p_ms.text('{:.2f}')}; validate_event "
                    f"alone {v_ms.median:.2f} ms; baseline b64decode+Pillow open().load() x2 "
                    f"{b_ms.text('{:.2f}')}; per-pair ratio {pair.lo:.3f}..{pair.hi:.3f}; "
                    f"PNG {len(png)} B JPEG {len(jpeg)} B"))

