"""``python -m deploy.local.stack``: the launcher's command line (cli.py)."""

import sys

from .cli import main

sys.exit(main())
