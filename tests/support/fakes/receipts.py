"""In-memory stand-ins for the receipt tracker's store, its fact producer and its clock, so the
tracker's rules (``services.receipts.tracker.Tracker``) run in milliseconds.

``MemoryReceiptStore`` has the methods of ``services.receipts.repository.ReceiptRepository``
with the same meaning: unique ``_id`` per collection (a second claim of a verdict is lost), and
it survives a tracker "restart" (a new ``Tracker`` over the same store). ``fail`` makes the
next store calls raise, as an unreachable store does."""

from __future__ import annotations

import copy
from typing import Any

from services.receipts.tracker import Tracker

Doc = dict[str, Any]


class StoreDown(ConnectionError):
    pass


class MemoryReceiptStore:
    def __init__(self) -> None:
        self.pending_receipts: dict[str, Doc] = {}
        self.receipt_verdicts: dict[str, Doc] = {}
        self.early_observations: dict[str, Doc] = {}
        self.receipt_calls: dict[str, Doc] = {}
        self.fail = 0  # the next ``fail`` calls raise StoreDown

    def _call(self) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise StoreDown("store away")

    async def pending(self) -> list[Doc]:
        self._call()
        return [copy.deepcopy(d) for d in self.pending_receipts.values()]

    async def open_pending(self, docs: list[Doc]) -> dict[str, float]:
        self._call()
        kept: dict[str, float] = {}
        for d in docs:
            if d["_id"] in self.pending_receipts:
                kept[d["_id"]] = float(self.pending_receipts[d["_id"]]["deadline"])
            else:
                self.pending_receipts[d["_id"]] = copy.deepcopy(d)
        return kept

    async def settle(self, ids: list[str]) -> None:
        self._call()
        for i in ids:
            self.pending_receipts.pop(i, None)
            self.receipt_calls.pop(i, None)

    async def claim(self, docs: list[Doc]) -> set[int]:
        self._call()
        lost: set[int] = set()
        for n, d in enumerate(docs):
            if d["_id"] in self.receipt_verdicts:
                lost.add(n)
            else:
                self.receipt_verdicts[d["_id"]] = copy.deepcopy(d)
        return lost

    async def claims(self, ids: list[str]) -> dict[str, Doc]:
        self._call()
        return {i: copy.deepcopy(self.receipt_verdicts[i]) for i in ids
                if i in self.receipt_verdicts}

    async def early(self) -> list[Doc]:
        self._call()
        return [copy.deepcopy(d) for d in self.early_observations.values()]

    async def keep_early(self, docs: list[Doc]) -> None:
        self._call()
        for d in docs:
            self.early_observations.setdefault(d["_id"], copy.deepcopy(d))

    async def sweep_early(self, before: float) -> None:
        self._call()
        for k in [k for k, d in self.early_observations.items() if d["at"] < before]:
            del self.early_observations[k]

    async def learn_calls(self, docs: list[Doc]) -> None:
        self._call()
        for d in docs:
            self.receipt_calls.setdefault(d["_id"], copy.deepcopy(d))

    async def calls(self, ids: list[str]) -> dict[str, Doc]:
        self._call()
        return {i: copy.deepcopy(self.receipt_calls[i]) for i in ids if i in self.receipt_calls}


class Facts:
    """The ``core.facts`` producer: every fact the tracker sends, in order."""

    def __init__(self) -> None:
        self.sent: list[Doc] = []
        self.fail = 0  # the next ``fail`` sends raise, as an unreachable broker does

    async def __call__(self, facts: list[Doc]) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise ConnectionError("broker away")
        self.sent.extend(copy.deepcopy(facts))

    def verdicts(self) -> dict[str, list[Doc]]:
        out: dict[str, list[Doc]] = {}
        for f in self.sent:
            out.setdefault(f"{f['session_id']}/{f['call_id']}", []).append(f)
        return out


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def tracker(store: MemoryReceiptStore, facts: Facts, clock: Clock,
            window: float = 10.0) -> Tracker:
    return Tracker(store, facts, window, clock=clock)


# ---- records as the Runtime and the dispatcher publish them ----------------------------------
# (each complete as its one model, shared.messages.runtime, requires:
# tests/unit/test_builders_match_models.py)
RT = "rt_" + "f" * 32  # the Runtime the results are delivered to, whose observations count
AT = "2026-11-30T10:00:00.000Z"


def delivery(sid: str, cid: str, text: str = "ok", success: bool = True) -> Doc:
    return {"schema": "runtime.delivery/1", "delivery_id": f"dlv-{cid}", "runtime_id": RT,
            "session_id": sid, "turn_id": "turn_1", "call_id": cid, "kind": "function_result",
            "name": "f", "success": success,
            "content": [{"type": "input_text", "text": text}]}


def announced(sid: str, cid: str, native_session: str = "native-1") -> Doc:
    return {"schema": "runtime.observation/1", "runtime_id": RT, "session_id": sid,
            "harness": "claude_code", "observed_at": AT,
            "native": {"type": "assistant", "uuid": f"a-{cid}", "session_id": native_session,
                       "parent_tool_use_id": None, "message": {"role": "assistant", "content": [
                           {"type": "tool_use", "id": cid, "name": "f", "input": {}}]}}}


def receipt(sid: str, cid: str, text: str = "ok", *, success: bool = True,
            native_session: str = "native-1", **native: Any) -> Doc:
    rec: Doc = {"type": "user", "uuid": f"u-{cid}", "session_id": native_session,
                "parent_tool_use_id": None,
                "message": {"role": "user", "content": [{
                    "type": "tool_result", "tool_use_id": cid, "is_error": not success,
                    "content": [{"type": "text", "text": text}]}]}}
    rec.update(native)
    return {"schema": "runtime.observation/1", "runtime_id": RT, "session_id": sid,
            "harness": "claude_code", "observed_at": AT,
            "native": rec}


def refusal(sid: str, cid: str) -> Doc:
    return {"schema": "runtime.observation/1", "runtime_id": RT, "session_id": sid,
            "harness": "claude_code", "observed_at": AT,
            "native": None, "refusal": {"delivery_id": f"dlv-{cid}", "kind": "function_result",
                                        "reason": "no pending call", "terminal": True,
                                        "call_id": cid}}


def codex_announced(sid: str, cid: str, thread: str = "th-1", turn: str = "tu-1") -> Doc:
    """Codex's ``item/started`` of a dynamic-tool call (what announces the call)."""
    return {"schema": "runtime.observation/1", "runtime_id": RT, "session_id": sid,
            "harness": "codex", "observed_at": AT,
            "native": {"method": "item/started", "params": {
                "threadId": thread, "turnId": turn, "item": {
                    "type": "dynamicToolCall", "id": cid, "tool": "f", "arguments": {},
                    "status": "inProgress", "contentItems": None, "success": None}}}}


def codex_completed(sid: str, cid: str, items: list[Doc], *, success: bool = True,
                    thread: str = "th-1", turn: str = "tu-1") -> Doc:
    """Codex's ``item/completed`` of a dynamic-tool call. With ``success=False`` and no items it
    is also what Codex prints when it releases the call unanswered (golden unanswered.jsonl)."""
    return {"schema": "runtime.observation/1", "runtime_id": RT, "session_id": sid,
            "harness": "codex", "observed_at": AT,
            "native": {"method": "item/completed", "params": {
                "threadId": thread, "turnId": turn, "item": {
                    "type": "dynamicToolCall", "id": cid, "tool": "f", "arguments": {},
                    "status": "completed" if success else "failed", "contentItems": items,
                    "success": success}}}}
