"""``python -m runtimes`` (``session-core runtime``): run one Runtime (``runtimes.main``)."""

from runtimes.main import main

main()
