"""The growth case's validity guard (bench/growth.py ``stalled``): a ratio over a small phase
that stalled is INVALID, never met — its p99 measures the stall and flatters every larger
phase (docs/benchmarks.md, growth)."""

from __future__ import annotations

from bench.common import Result
from bench.growth import STALL_MS, stalled
from bench.load import Latency


def phase(latencies: list[float]) -> Latency:
    return Latency(samples_ms=latencies, lost=0, offered_rate=10.0, errors=0,
                   series=[(2.0 + i / 10, ms) for i, ms in enumerate(latencies)])


def test_a_clean_small_phase_gives_a_valid_ratio() -> None:
    small = phase([50.0] * 100)
    assert stalled(small, 1_000) == ""
    r = Result("3_growth_p99_one", 55.0, small.p99, "<= 1.2", "ms",
               invalid=stalled(small, 1_000), failed=0)
    assert r.verdict == "met"


def test_a_stalled_small_phase_makes_the_ratio_invalid_not_met() -> None:
    small = phase([50.0] * 99 + [STALL_MS + 400])  # one request caught in a 650 ms stall
    why = stalled(small, 1_000)
    assert "1,000-Item phase" in why and "11s: 1 (max 650 ms)" in why
    # the large phase looks fine against the inflated p99: without the guard, "met"
    r = Result("3_growth_p99_one", 60.0, small.p99, "<= 1.2", "ms", invalid=why, failed=0)
    assert r.ratio is not None and r.ratio <= 1.2
    assert r.verdict == "INVALID" and r.notes.startswith("INVALID: ")


def test_failed_requests_still_miss_before_validity_is_asked() -> None:
    small = phase([50.0] * 99 + [900.0])
    r = Result("3_growth_p99_one", 60.0, small.p99, "<= 1.2", "ms",
               invalid=stalled(small, 1_000), failed=3)
    assert r.verdict == "MISSED"
