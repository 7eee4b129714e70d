"""The local real stack (Kafka KRaft + FerretDB, optionally the services and Runtimes), as a
command line (``python -m deploy.local.stack``, cli.py) and a Python API (``Stack``) the tests and
the benchmarks use. Modules: ``base`` (paths, versions, log line, ports), ``install`` (cache),
``probes`` (readiness), ``processes`` (state dir, start/stop), ``components`` (what runs),
``lifecycle`` (up/down/status, ``Stack``), ``cli``. docs/local-stack.md describes it."""

from .base import StackError, cache_dir, free_port, free_ports, harness_bin, kafka_home
from .install import install_ferretdb, install_kafka, java_bin
from .lifecycle import Stack

__all__ = ["Stack", "StackError", "cache_dir", "free_port", "free_ports", "harness_bin",
           "install_ferretdb", "install_kafka", "java_bin", "kafka_home"]
