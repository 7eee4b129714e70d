"""The local real stack: ``python3 -m deploy.local.stack`` (docs/local-stack.md)."""
