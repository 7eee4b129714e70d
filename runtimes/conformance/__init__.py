"""``session-core conformance``: qualify a Runtime over the wire (docs/reference-runtime.md).

The kit plays Core's part: it publishes ``runtime.delivery/1`` records for synthetic Sessions to
one Runtime, reads that Runtime's ``runtime.observation/1`` records and checks them — receipts
with ``shared.domain.receipts`` exactly as the receipt tracker does. Either it qualifies a running
Runtime (``--runtime-id``; its harness and capabilities come from its registration) or it starts
a reference Runtime in-process (``--harness``, switches). It prints a PASS / FAIL / SKIP table
and exits 1 when any case fails.

Cases (each on its own Session, run concurrently):

=============================  ==================================================================
message_images                 images reach the harness as native image blocks, in order, with
                               the message's text around them, and the Turn then ends completed
                               (skipped without the capability)
text_only_rejects_images       a text-only harness (or a Runtime without message images) refuses
                               an image message terminally and records no part of it
function_result_images         a result of text and images confirms: a native image at every
                               image position
text_exactness                 a failed result with whitespace, empty, non-ASCII and error text
                               confirms with every text exactly as delivered
release_handling               a call pending when its Turn is superseded is released natively;
                               a result for it afterwards is refused, never applied
no_replay_synthetic_subagent   no replayed, synthetic or Subagent record answers a result; a
                               live root record confirms it
receipt_within_10s             the confirming record arrives within 10 s of the delivery
claude_64_bound                Claude Code: 63 and 64 user messages in a Turn are taken; the 65th
                               and a batch that would pass 64 are refused before any part is
                               submitted (refusal code turn_message_bound_exceeded), and the
                               native Turn ends failed
interrupt                      Core failed a running Turn (``kind: "interrupt"``): the native
                               Turn ends, and a result for its pending call is not applied
=============================  ==================================================================
"""

from runtimes.conformance.kit import (
    CASES,
    CaseResult,
    KitOptions,
    main,
    render,
    run_kit,
)
from runtimes.conformance.probe import Wire

__all__ = ["CASES", "CaseResult", "KitOptions", "Wire", "main", "render", "run_kit"]
