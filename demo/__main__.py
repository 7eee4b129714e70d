"""``python -m demo`` (``session-core demo``): play the demo against a running stack."""

from demo.tour import main

main()
