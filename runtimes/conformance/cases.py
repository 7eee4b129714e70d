"""The conformance cases, one coroutine each (the table in ``runtimes.conformance``):
each returns a detail line, ``"SKIP:…"`` when the case does not apply, or raises ``Failed``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from runtimes.conformance.probe import (
    JPEG,
    PNG,
    PNG_RED,
    RECEIPT_LIMIT_S,
    WAIT_S,
    CaseResult,
    Failed,
    Json,
    Probe,
    RuntimeUnderTest,
    Wire,
    claude_blocks,
    img,
    msg,
    t,
    texts,
)
from shared.domain import receipts
from shared.domain.harnesses import claude_code, codex
from shared.domain.observations import TurnEnded, classify
from shared.domain.wire import (
    REFUSAL_TURN_BOUND_EXCEEDED,
    result_content,
)
from shared.ids import new_id
from shared.logging import get_logger

log = get_logger(__name__)

# --------------------------------------------------------------------------- the cases

Case = Callable[[Wire, RuntimeUnderTest], Awaitable[str]]


def _skip(reason: str) -> str:
    return "SKIP:" + reason


async def case_message_images(wire: Wire, rt: RuntimeUnderTest) -> str:
    if not rt.message_images:
        return _skip("the runtime does not report message images")
    p = Probe(wire, rt)
    messages = [msg(t("look at these"), img(PNG), t("and"), img(JPEG)), msg(img(PNG_RED))]
    turn_id = new_id("turn")
    await p.send("start", turn_id, messages)
    end = await p.turn_end(turn_id)
    if p.refusals():
        raise Failed(f"refused: {p.refusals()[0].get('reason')}")
    ended = classify(rt.harness, end.get("native")) if end is not None else None
    if not isinstance(ended, TurnEnded) or ended.state != "completed":
        raise Failed("the Turn did not end completed after taking the input "
                     f"({ended.state if isinstance(ended, TurnEnded) else 'no end'})")
    got = p.received()
    if rt.harness == codex.HARNESS:
        want = codex.flatten_messages(messages)
        # the real app-server adds ``text_elements`` to text entries and ``detail: null`` to
        # images: compare what the adapter sends (type, text, url)
        items = [[{k: v for k, v in i.items() if k in ("type", "text", "url")} for i in
                  n["params"]["item"]["content"]] for n in got]
        if items != [want]:
            raise Failed(f"native input differs: want {want!r:.160}, got {items!r:.160}")
        return "one native input list: 5 parts + separator, images as data URIs in order"
    blocks = [n["message"]["content"] for n in got]
    want_blocks = [claude_blocks(m["content"]) for m in messages]
    if blocks != want_blocks:
        raise Failed(f"native user messages differ: want {want_blocks!r:.120}, "
                     f"got {blocks!r:.120}")
    return "2 native user messages, 3 native image blocks in order, text exact"


async def case_text_only_rejects_images(wire: Wire, rt: RuntimeUnderTest) -> str:
    if rt.message_images:
        return _skip("the runtime takes message images (message_images checks them)")
    p = Probe(wire, rt)
    turn_id = new_id("turn")
    did = await p.send("start", turn_id, [msg(t("marker-text-only"), img(PNG))])
    refusal = await p.until(lambda o: o.get("native") is None and bool(o.get("refusal")))
    if refusal is None:
        raise Failed(f"no refusal within {rt.wait_s:g} s")
    r = refusal["refusal"]
    if r.get("delivery_id") != did or r.get("terminal") is not True:
        raise Failed(f"refusal not terminal for the delivery: {r!r}")
    await p.turn_end(turn_id, wait_s=3)
    taken = [n for n in p.received() if "marker-text-only" in json.dumps(n)]
    if taken:
        raise Failed("part of the image message reached the harness (dropped, not refused)")
    return f"refused terminally: {r.get('reason')}"


async def _result_case(
    wire: Wire, rt: RuntimeUnderTest, name: str, success: bool, output: Any, error: str | None,
) -> tuple[receipts.Verdict | None, float, list[receipts.NotAMatch], Probe]:
    p = Probe(wire, rt)
    call = await p.open_call(name, {"case": name})
    _, content = await p.send_result(call, success, output, error)
    verdict, elapsed, misses = await p.receipt(p.expected(call, success, content))
    return verdict, elapsed, misses, p


def _no_functions(rt: RuntimeUnderTest) -> bool:
    return rt.harness == "minimax_code"


def _explain(verdict: receipts.Verdict | None, misses: list[receipts.NotAMatch]) -> str:
    if isinstance(verdict, receipts.Released):
        return "the harness released the call instead of applying the result"
    if misses:
        return "; ".join(m.reason for m in misses)[:200]
    return f"no confirming record within {WAIT_S:g} s"


def _confirm(verdict: receipts.Verdict | None, misses: list[receipts.NotAMatch]) -> None:
    if not isinstance(verdict, receipts.Confirmed):
        raise Failed(_explain(verdict, misses))


async def _confirmed_result(wire: Wire, rt: RuntimeUnderTest, name: str, success: bool,
                            output: Any, error: str | None) -> float:
    """A result case that must be confirmed: the seconds its receipt took."""
    verdict, elapsed, misses, _ = await _result_case(wire, rt, name, success, output, error)
    _confirm(verdict, misses)
    return elapsed


async def case_function_result_images(wire: Wire, rt: RuntimeUnderTest) -> str:
    if _no_functions(rt):
        return _skip(f"{rt.harness} has no public functions")
    if not rt.function_result_images:
        return _skip("the runtime does not report function-result images")
    output = [t("chart:"), img(PNG), t("photo:"), img(JPEG), img(PNG_RED)]
    elapsed = await _confirmed_result(wire, rt, "render_chart", True, output, None)
    return f"confirmed in {elapsed:.2f} s: a native image at each of 3 image positions"


def trims_failed_result_text(rt: RuntimeUnderTest) -> bool:
    """The real Claude Code binary trims a failed result's text (the reference simulation keeps
    it, like Codex); a Runtime whose engine the kit does not know is held to exact text."""
    return (rt.harness == claude_code.HARNESS and rt.engine == "real"
            and claude_code.TRIMS_FAILED_RESULT_TEXT)


async def case_text_exactness(wire: Wire, rt: RuntimeUnderTest) -> str:
    """A failed result's text reaches the harness exactly: whitespace, empty parts, non-ASCII
    (U+0085, U+FEFF) and escapes inside it are confirmed byte for byte. Whitespace at the ends
    of the joined text is confirmed too, unless the harness trims it (Claude Code: its
    receipt then differs, and the case checks that it is *not* confirmed — the call stays
    uncertain, as the spec's exact-text rule says)."""
    if _no_functions(rt):
        return _skip(f"{rt.harness} has no public functions")
    inner = [t("padded  "), t(""), t("é 漢字 \u0085\ufeff\n\t"), t("🙂 \\n \"quoted\"")]
    elapsed = await _confirmed_result(wire, rt, "exact_text", False, inner,
                                      "boom: the tool failed")
    edges = [t("  padded  "), *inner[1:]]
    if not trims_failed_result_text(rt):
        edge_s = await _confirmed_result(wire, rt, "exact_text", False, edges,
                                         "boom: the tool failed\n")
        return (f"confirmed in {elapsed:.2f} s and {edge_s:.2f} s: 5 text blocks (4 output + "
                "error) byte-exact, whitespace at the ends too")
    verdict, _, misses, _ = await _result_case(wire, rt, "exact_text", False, edges,
                                               "boom: the tool failed\n")
    if isinstance(verdict, receipts.Confirmed):
        raise Failed("a result whose text the harness trimmed was confirmed: the receipt "
                     "matcher is not exact")
    return (f"confirmed in {elapsed:.2f} s: 5 text blocks byte-exact; whitespace at the ends "
            f"is trimmed by the harness and not confirmed ({_explain(verdict, misses)[:80]})")


async def case_release_handling(wire: Wire, rt: RuntimeUnderTest) -> str:
    if _no_functions(rt):
        return _skip(f"{rt.harness} has no public functions")
    p = Probe(wire, rt)
    call = await p.open_call("slow_tool", {"case": "release"})
    exp = p.expected(call, True, result_content("late", None))
    await p.send("start", new_id("turn"), [msg(t("a new turn supersedes the old one"))])
    released = await p.until(
        lambda o: isinstance(o.get("native"), dict)
        and isinstance(receipts.match_observation(exp, o), receipts.Released))
    if released is None:
        raise Failed("the pending call was not released natively when its Turn was superseded")
    if await p.turn_end(call.turn_id) is None:
        raise Failed("the superseded Turn did not end")
    await p.send_result(call, True, "late", None)
    # the refusal ends the wait; the kit's wait (past the 10 s window) bounds it: with 5 s, a
    # real codex on a loaded machine refused after the wait and the case failed
    verdict, _, _ = await p.receipt(exp)
    if isinstance(verdict, receipts.Confirmed):
        raise Failed("a result for a released call was applied")
    if not p.refusals() or not any(r.get("call_id") == call.call_id for r in p.refusals()):
        raise Failed("a result for a released call was neither applied nor refused")
    return "released natively on supersede; the late result refused terminally"


async def case_no_replay_synthetic_subagent(wire: Wire, rt: RuntimeUnderTest) -> str:
    if _no_functions(rt):
        return _skip(f"{rt.harness} has no public functions")
    verdict, _, misses, _ = await _result_case(wire, rt, "lookup", True, "plain answer", None)
    flagged = [m for m in misses if m.field in (
        "isReplay", "isSynthetic", "parent_tool_use_id", "threadId", "turnId")]
    if flagged:
        raise Failed("; ".join(m.reason for m in flagged)[:200])
    _confirm(verdict, misses)
    return "one live root record confirmed; no replayed/synthetic/Subagent record"


async def case_receipt_within_10s(wire: Wire, rt: RuntimeUnderTest) -> str:
    if _no_functions(rt):
        return _skip(f"{rt.harness} has no public functions")
    elapsed = await _confirmed_result(wire, rt, "timed", True, "on time", None)
    if elapsed > RECEIPT_LIMIT_S:
        raise Failed(f"confirmed after {elapsed:.2f} s, past the {RECEIPT_LIMIT_S:g} s window")
    return f"confirmed {elapsed * 1000:.0f} ms after the delivery"


async def case_claude_64_bound(wire: Wire, rt: RuntimeUnderTest) -> str:
    if rt.harness != "claude_code":
        return _skip("the 64-message bound is Claude Code's")
    # Session A: 1 + 62 = 63 taken, +1 = 64 taken, +1 = 65 refused.
    a = Probe(wire, rt)
    turn_a = new_id("turn")
    await a.send("start", turn_a, [msg(t("A-0"))])
    await a.send("steer", turn_a, [msg(t(f"A-{k}")) for k in range(1, 63)])
    await a.send("steer", turn_a, [msg(t("A-63"))])
    d65 = await a.send("steer", turn_a, [msg(t("A-64"))])
    # Session B: 63 taken, then a batch of 2 (would be 65) refused as a whole.
    b = Probe(wire, rt)
    turn_b = new_id("turn")
    await b.send("start", turn_b, [msg(t(f"B-{k}")) for k in range(63)])
    d_batch = await b.send("steer", turn_b, [msg(t("B-63")), msg(t("B-64"))])
    end_a, end_b = await asyncio.gather(a.turn_end(turn_a), b.turn_end(turn_b))
    problems = []
    for probe, end, last_ok, refused_did, refused_texts in (
        (a, end_a, 64, d65, {"A-64"}),
        (b, end_b, 63, d_batch, {"B-63", "B-64"}),
    ):
        taken = [x for n in probe.received() for x in texts(n)]
        if len(probe.taken()) != last_ok:
            problems.append(f"{len(probe.taken())} user messages taken, want {last_ok}")
        if refused_texts & set(taken):
            problems.append(f"part of the refused batch was submitted: "
                            f"{sorted(refused_texts & set(taken))}")
        rs = [r for r in probe.refusals() if r.get("delivery_id") == refused_did]
        if not rs or rs[0].get("terminal") is not True:
            problems.append("the batch over the bound was not refused terminally")
        elif rs[0].get("code") != REFUSAL_TURN_BOUND_EXCEEDED:
            problems.append(f"the refusal's code is {rs[0].get('code')!r}, want "
                            f"{REFUSAL_TURN_BOUND_EXCEEDED!r} (Core ends its Turn from the "
                            "native end that must follow)")
        if end is None or not _failed_end(end):
            problems.append("the Turn did not end failed after the refusal")
    if problems:
        raise Failed("; ".join(problems))
    return "63 and 64 taken; 65th message and a 2-message batch past 64 refused, Turn failed"


async def case_interrupt(wire: Wire, rt: RuntimeUnderTest) -> str:
    """Core failed a Turn the Runtime runs (``kind: "interrupt"``, docs/runtime-boundary.md):
    the native Turn ends, and the call it was waiting on is not applied afterwards."""
    if _no_functions(rt):
        return _skip(f"{rt.harness} has no public functions")
    p = Probe(wire, rt)
    call = await p.open_call("slow_tool", {"case": "interrupt"})
    exp = p.expected(call, True, result_content("late", None))
    await p.send_interrupt(call.turn_id, "conformance: Core failed the Turn")
    if await p.turn_end(call.turn_id) is None:
        raise Failed("the native Turn did not end after an interrupt of it")
    await p.send_result(call, True, "late", None)
    verdict, _, _ = await p.receipt(exp, wait_s=5)
    if isinstance(verdict, receipts.Confirmed):
        raise Failed("a result for the interrupted Turn's call was applied")
    return "the native Turn ended on the interrupt; a later result for its call not applied"


def _failed_end(obs: Json) -> bool:
    c = classify("claude_code", obs.get("native"))
    return isinstance(c, TurnEnded) and c.state == "failed"


CASE_FUNCS: dict[str, Case] = {
    "message_images": case_message_images,
    "text_only_rejects_images": case_text_only_rejects_images,
    "function_result_images": case_function_result_images,
    "text_exactness": case_text_exactness,
    "release_handling": case_release_handling,
    "no_replay_synthetic_subagent": case_no_replay_synthetic_subagent,
    "receipt_within_10s": case_receipt_within_10s,
    "claude_64_bound": case_claude_64_bound,
    "interrupt": case_interrupt,
}


async def run_case(name: str, wire: Wire, rt: RuntimeUnderTest) -> CaseResult:
    started = time.monotonic()
    try:
        detail = await CASE_FUNCS[name](wire, rt)
        status = "PASS"
        if detail.startswith("SKIP:"):
            status, detail = "SKIP", detail[5:]
    except Failed as exc:
        status, detail = "FAIL", str(exc)
    except Exception as exc:  # a crash in a case is that case's failure, not the kit's
        log.exception("conformance.case_error", case=name)
        status, detail = "FAIL", f"error: {exc!r}"
    return CaseResult(name, status, detail, time.monotonic() - started)
