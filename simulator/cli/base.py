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
from typer.core import TyperCommand

from simulator.outputs import abort_open
from simulator.specs import SpecError

GIB = float(1 << 30)


def console() -> Console:
    """Rich console on the current stdout; wide tables when piped or captured."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


F = TypeVar("F", bound=Callable[..., None])


def fail(message: str, code: int) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(code)


def _single_option(param: Any) -> bool:
    return (
        getattr(param, "param_type_name", "") == "option"
        and not getattr(param, "multiple", False)
        and not getattr(param, "count", False)
        and not getattr(param, "is_eager", False)  # --help
    )


def repeated_options(command: Any, ctx: Any, args: list[str]) -> str | None:
    """The message for an option that takes one value but is given more than once (click keeps
    the last one silently), or None. List options (``multiple``) and counters may repeat."""
    try:
        parser = command.make_parser(ctx)
        opts, _, order = parser.parse_args(args=list(args))
    except Exception:  # a usage error: the real parse reports it
        return None
    counts: dict[str, int] = {}
    for param in order:
        if _single_option(param):
            counts[param.name or ""] = counts.get(param.name or "", 0) + 1
    for param in command.get_params(ctx):
        n = counts.get(param.name or "", 0)
        if n > 1:
            names = (*param.opts, *param.secondary_opts)
            given = [a.split("=", 1)[0] for a in args if a.split("=", 1)[0] in names]
            flags = " ".join(dict.fromkeys(given)) or param.opts[0]
            value = opts.get(param.name or "")
            last = (
                "" if isinstance(value, bool) or value is None
                else f" (the last, {value!r}, would win silently)"
            )  # fmt: skip
            name = param.opts[0].lstrip("-")
            return f"error: (arguments): {name}: {flags} given {n} times{last}; give it once"
    return None


class OnceCommand(TyperCommand):
    """A command whose single-value options may be given once: a repeated one is one
    ``error:`` line and exit code 2, instead of the last value winning silently."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            message = repeated_options(self, ctx, args)
            if message is not None:
                typer.echo(message, err=True)
                raise typer.Exit(2)
        return super().parse_args(ctx, args)


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
            finally:  # an output folder not swapped in: removed, the old one left as it was
                abort_open()

        group.command(name, cls=OnceCommand)(run)
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
