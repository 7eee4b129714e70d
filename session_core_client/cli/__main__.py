"""``python -m session_core_client.cli`` is ``session-core-cli``."""

from session_core_client.cli.main import main

main()
