"""`plan`: the one command-line entry point. Thin adapters over the core; no modelling here.

Exit codes: 0 success, 2 bad input (one line naming file, field and reason), 1 internal error.
Commands live in the modules below; importing them registers them on ``app``.
"""

from simulator.cli import memory, ops, profiles, run, workload
from simulator.cli.base import app, main

__all__ = ["app", "main", "memory", "ops", "profiles", "run", "workload"]
