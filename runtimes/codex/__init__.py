"""The Runtime side of Codex: the live driver over ``codex app-server`` (``live``) and the bare
JSON-RPC client the golden recorder and the bench use (``rpc``). Codex's pure knowledge (native
encoding, classification) is ``shared.domain.harnesses.codex``."""
