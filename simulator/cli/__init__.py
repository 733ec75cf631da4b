"""`plan`: the one command-line entry point. Thin adapters over the core; no modelling here.

Exit codes: 0 success, 2 bad input (one ``error:`` line naming file, field and reason; a file
with several errors: one line each), 1 internal error.
Commands live in the modules below; importing them registers them on ``app``.
"""

from simulator.cli import examples, memory, ops, profiles, run, search, size, workload
from simulator.cli.base import app, main

__all__ = [
    "app", "examples", "main", "memory", "ops", "profiles", "run", "search", "size", "workload",
]  # fmt: skip
