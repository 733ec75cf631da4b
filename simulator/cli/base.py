"""Shared pieces of the `plan` CLI: the app, error handling, output helpers."""

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from simulator.specs import SpecError

GIB = float(1 << 30)


def console() -> Console:
    """Rich console on the current stdout; wide tables when piped or captured."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


F = TypeVar("F", bound=Callable[..., None])


def fail(message: str, code: int) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(code)


def command(group: typer.Typer, name: str) -> Callable[[F], F]:
    """Register a command whose bad input ends in one line on stderr and exit code 2."""

    def register(func: F) -> F:
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> None:
            try:
                func(*args, **kwargs)
            except SpecError as exc:
                fail(f"error: {exc}", 2)
            except (typer.Exit, typer.Abort):
                raise
            except Exception as exc:
                if os.environ.get("PLAN_DEBUG"):
                    raise
                fail(
                    f"internal error: {type(exc).__name__}: {exc} (PLAN_DEBUG=1 for a traceback)", 1
                )

        group.command(name)(run)
        return func

    return register


def make_typer(help_text: str) -> typer.Typer:
    return typer.Typer(
        help=help_text,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # usage errors as plain text ending in one "Error: ..." line
    )


app = make_typer("Capacity planner for hybrid-attention LLM serving.")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def finite(data: Any) -> Any:
    """NaN -> None, recursively (JSON has no NaN)."""
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, list):
        return [finite(v) for v in data]
    if isinstance(data, float) and data != data:
        return None
    return data


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=float) + "\n")


def print_pairs(title: str, rows: list[tuple[str, str]]) -> None:
    """A two-column table: label, right-aligned value."""
    t = Table(show_header=False, title=title)
    t.add_column()
    t.add_column(justify="right")
    for k, v in rows:
        t.add_row(k, v)
    console().print(t)


def gib(x: float) -> str:
    return f"{x / GIB:,.1f}"


def main() -> None:
    """Console entry point (``plan``)."""
    app()


if __name__ == "__main__":
    main()
