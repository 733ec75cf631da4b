"""`plan`: the one command-line entry point. Thin adapters over the core; no modelling here.

Exit codes: 0 success, 2 bad input (one ``error:`` line naming file, field and reason; a file
with several errors: one line each), 1 internal error.
Commands live in the modules below; importing one registers its commands on ``app``.
``main`` (the ``plan`` script) imports only the module of the command asked for, so that
``plan run`` does not pay for the planner, the report writers and every other command;
``app`` (``from simulator.cli import app``) has them all.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

MODULES = (
    "examples", "memory", "ops", "profiles", "run", "search", "size", "step", "validate",
    "workload",
)  # fmt: skip
# top-level command -> the module that registers it (tests/cli/test_cli_surface.py checks it)
COMMAND_MODULES = {
    "demo": "memory",
    "examples": "examples",
    "fit": "ops",
    "memory": "memory",
    "models": "profiles",
    "ops": "ops",
    "profiles": "profiles",
    "run": "run",
    "search": "search",
    "size": "size",
    "step": "step",
    "validate": "validate",
    "workload": "workload",
}


def _app(modules: tuple[str, ...]) -> typer.Typer:
    for name in modules:
        import_module(f"simulator.cli.{name}")
    from simulator.cli.base import app

    return app


def main() -> None:
    """Console entry point (``plan``): the command's module only; with no command, an option
    first (``--help``, ``--version``) or an unknown command (typer suggests the right one),
    every module."""
    args = sys.argv[1:]
    module = COMMAND_MODULES.get(args[0]) if args else None
    _app((module,) if module else MODULES)()


def __getattr__(name: str) -> Any:
    """``app`` with every command registered; the command modules by name."""
    if name == "app":
        return _app(MODULES)
    if name in MODULES:
        return import_module(f"simulator.cli.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
