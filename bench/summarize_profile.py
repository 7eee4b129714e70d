"""``python -m bench.summarize_profile SESSION [--items N]`` — where the product's process spent
its samples in a pyinstrument session (``bench.serve_product --profile OUT`` writes
``OUT.pyisession``; ``python -m bench --case pipeline --profile`` runs it): each frame's own
time, grouped by the package its file is in, the event loop's own frames (its I/O wait and
uvloop's native work) apart; with ``--items`` each part's ms per Item as well. The sampler
takes wall-clock stacks of the main thread: on a machine whose cores are all busy, time the
process waited for a core lands in whatever frame it was in (spread like its CPU), so the
shares are CPU's shares but the seconds are not CPU seconds (the header gives both)."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from pyinstrument.frame import Frame
from pyinstrument.session import Session

# (substring of the frame's file path, part); the first that matches names the part
PARTS = (
    ("/services/admission/", "admission (services/admission)"),
    ("/services/storage/", "storage (services/storage)"),
    ("/shared/domain/", "domain (shared/domain)"),
    ("/shared/", "shared (other)"),
    ("/bench/", "bench instrumentation"),
    ("/aiokafka/", "aiokafka"),
    ("/kafka/", "kafka-python codec"),
    ("/faststream/", "faststream"),
    ("/pymongo/", "pymongo"),
    ("/bson/", "bson"),
    ("/uvicorn/", "uvicorn"),
    ("/h11/", "h11"),
    ("/starlette/", "starlette"),
    ("/fastapi/", "fastapi"),
    ("/pydantic", "pydantic"),
    ("/structlog/", "structlog"),
    ("/logging/", "logging"),
    ("/json/", "json"),
    ("/asyncio/", "asyncio"),
    ("/uvloop/", "uvloop"),
    ("/opentelemetry/", "opentelemetry"),
)
# the event loop's own frames: their own time is the wait for I/O (epoll) and the loop's native
# work (uvloop), not the product's code
LOOP_FILES = ("asyncio/runners.py", "uvloop/__init__.py", "asyncio/base_events.py",
              "selectors.py")


def part_of(frame: Frame) -> str:
    path = frame.file_path or ""
    for key, name in PARTS:
        if key in path:
            return name
    if frame.is_synthetic or not path:
        return "[native / self]"
    if "/site-packages/" in path:
        return path.rsplit("/site-packages/", 1)[-1].split("/", 1)[0]
    parts = path.rsplit("/", 2)
    return parts[-2] if len(parts) > 1 else path


def walk(frame: Frame, out: dict[str, float], loop: list[float]) -> None:
    """Each real frame's own time (its time less its real children's), by part."""
    if not frame.is_synthetic:
        own = frame.total_self_time
        if own > 0:
            path = frame.file_path or ""
            if any(path.endswith(f) for f in LOOP_FILES):
                loop.append(own)
            else:
                out[part_of(frame)] += own
    for child in frame.children:
        if not child.is_synthetic:
            walk(child, out, loop)


def summarize(session: Session, items: int | None) -> str:
    root = session.root_frame()
    if root is None:
        return "empty session"
    out: dict[str, float] = defaultdict(float)
    loop: list[float] = []
    walk(root, out, loop)
    busy = sum(out.values())
    lines = [f"{session.duration:.1f} s sampled ({session.cpu_time:.1f} s CPU): the event loop's "
             f"own frames (I/O wait, uvloop) {sum(loop):.1f} s, the code above them {busy:.1f} s"
             + (f" ({1000 * busy / items:.3f} ms per Item over {items} Items)" if items else "")]
    for name, t in sorted(out.items(), key=lambda kv: -kv[1]):
        per = f"  {1000 * t / items:7.3f} ms/Item" if items else ""
        lines.append(f"  {name:40s} {t:8.2f} s  {100 * t / busy:5.1f} %{per}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.summarize_profile", description=__doc__)
    ap.add_argument("session")
    ap.add_argument("--items", type=int, default=None, help="Items the process produced")
    args = ap.parse_args(argv)
    print(summarize(Session.load(args.session), args.items))
    return 0


if __name__ == "__main__":
    sys.exit(main())
