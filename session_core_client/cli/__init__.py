"""``session-core-cli``: the user CLI over the public HTTP API (docs/cli.md), part of the client
distribution: ``main`` is argparse over the library, ``bodies`` builds request bodies from the
command line, ``render`` prints Items as lines."""
