"""The Runtime side of MiniMax Code: only the simulated, text-only harness (``simulated``) — no
real MiniMax Code harness is installable here (docs/harnesses.md). Its pure knowledge is
``shared.domain.harnesses.minimax_code``."""
