"""The Runtime, a product of its own beside Core's services: one process per Runtime that
registers, reads its deliveries from Kafka and hands them to a harness — simulated
(``harness``, the reference Runtime) or a real binary driven by a live driver (``codex/``,
``claude/``; ``minimax/`` is simulated only) — and publishes what the harness prints as
observations. ``conformance/`` is the kit that qualifies a Runtime. ``python -m runtimes``
(``session-core runtime``) runs one (``main``)."""
