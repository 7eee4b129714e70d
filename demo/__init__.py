"""The demo ``make run`` plays once everything is ready: ``tour`` drives the running system with
the user CLI only (``session-core demo``, ``python -m demo``)."""
