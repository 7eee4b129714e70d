"""Deployment files; ``deploy.local.stack`` is the local stack launcher (a Python package)."""
