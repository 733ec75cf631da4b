"""Shared pieces of the `plan` CLI: the app, error handling, output helpers."""

import errno
import functools
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar, get_args, get_origin

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

import simulator
from simulator.outputs import abort_open
from simulator.specs import SpecError

# package data (pyproject: simulator examples/*.yaml), so that `pip install` users have them
EXAMPLES_DIR = Path(simulator.__file__).resolve().parent / "examples"

if TYPE_CHECKING:  # rich is imported when a table is printed: plan run --json needs none
    from rich.console import Console

GIB = float(1 << 30)


def console() -> "Console":
    """Rich console on the current stdout: the terminal's width; when piped or captured,
    ``$COLUMNS`` if set, else 160."""
    from simulator.cli.tables import PlanConsole

    width: int | None = None
    if not sys.stdout.isatty():
        columns = os.environ.get("COLUMNS", "")
        width = int(columns) if columns.isdigit() and int(columns) > 0 else 160
    return PlanConsole(highlight=False, width=width)


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


_TYPE_NAMES = {int: "INTEGER", float: "FLOAT", str: "TEXT", bool: "BOOLEAN"}


def _metavar(param: Any) -> str:
    """A readable placeholder for an option's value: its choices, else INTEGER, FLOAT, TEXT,
    PATH (never a Python type such as ``<list[str]>``)."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None:
        return "VALUE"
    if desc.is_choice and desc.choices:
        return "|".join(str(getattr(c, "value", c)) for c in desc.choices)
    if desc.is_path:
        return "PATH"
    annotation = desc.annotation
    if get_origin(annotation) is list:
        annotation = get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, PurePath):
        return "PATH"
    return _TYPE_NAMES.get(annotation, "VALUE")


def file_path(value: str) -> Path:
    """An output file option's value (``parser=`` of the option). A value ending in ``/``
    names a folder; ``Path`` drops the slash, and a file of the folder's name was written."""
    if value.endswith(("/", os.sep)):
        raise typer.BadParameter(f"{value!r} ends in '/', a folder: give a file path")
    return Path(value)


@contextmanager
def one_line_usage(ctx: Any, what: str = "usage") -> Iterator[None]:
    """A usage error (unknown option or command, a value of the wrong type, a missing
    argument) as one ``error: (arguments): <name>: <reason>`` line and exit code 2, like
    every other bad input, instead of click's usage block. A group given no command still
    prints its help."""
    try:
        yield
    except Exception as exc:
        # typer 0.29 vendors click (typer._click): its UsageError is known by name
        kinds = {c.__name__ for c in type(exc).__mro__}
        if "UsageError" not in kinds or "NoArgsIsHelpError" in kinds or ctx.resilient_parsing:
            raise
        param = getattr(exc, "param", None)
        name = getattr(exc, "option_name", None) or what
        if param is not None:
            argument = getattr(param, "param_type_name", "") == "argument"
            name = (param.metavar or param.name).lower() if argument else param.opts[0]
        message = exc.format_message()  # type: ignore[attr-defined]
        typer.echo(
            f"error: (arguments): {name.lstrip('-')}: {message} (see {ctx.command_path} --help)",
            err=True,
        )
        raise typer.Exit(2) from None


class OnceGroup(TyperGroup):
    """A command group whose unknown command is one ``error:`` line (:func:`one_line_usage`)."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        with one_line_usage(ctx, "command"):
            return super().resolve_command(ctx, args)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        with one_line_usage(ctx):
            return super().parse_args(ctx, args)


class OnceCommand(TyperCommand):
    """A command whose single-value options may be given once: a repeated one is one
    ``error:`` line and exit code 2, instead of the last value winning silently.

    Its help names values by placeholders (``--device TEXT``, ``--out DIR``, an argument by
    its metavar alone), not by Python types."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperOption) and param.metavar is None:
                if not (param.is_flag or param.count):
                    param.metavar = _metavar(param)
            elif isinstance(param, TyperArgument) and param.metavar is None:
                param.metavar = (param.name or "value").upper()

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            message = repeated_options(self, ctx, args)
            if message is not None:
                typer.echo(message, err=True)
                raise typer.Exit(2)
        with one_line_usage(ctx):
            return super().parse_args(ctx, args)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if isinstance(param, TyperArgument):  # its metavar, without typer's <path>
                arguments.append((param.metavar or record[0], record[1]))
            elif param.param_type_name == "option":
                options.append(record)
        for title, records in (("Arguments", arguments), ("Options", options)):
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


def first_sentence(text: str | None) -> str | None:
    """The first sentence of a docstring, whole (the command list shows it wrapped)."""
    if not text:
        return None
    paragraph = " ".join(inspect.cleandoc(text).split("\n\n")[0].split())
    head, dot, _ = paragraph.partition(". ")
    return head + dot.strip() if dot else paragraph


# a full disk or quota, a read-only or too-small file system: the machine's state, not a
# planner bug (exit 2, one line, like an unwritable --out found before any work)
WRITE_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


def _write_fault(exc: OSError) -> str:
    """``<where>: (write): <why>``: the file, else the output folder being written."""
    from simulator.outputs import open_folders

    folders = open_folders()
    where = exc.filename or (folders[-1].path if folders else "(output)")
    kept = "; an earlier folder there is left as it was" if folders else ""
    return f"{where}: (write): {exc.strerror or exc}: the output was not written{kept}"


def command(group: typer.Typer, name: str, short_help: str | None = None) -> Callable[[F], F]:
    """Register a command whose bad input ends in one line on stderr and exit code 2 (a
    validation with several errors: one ``error:`` line each). ``short_help`` is its line in
    the command list (default: its docstring's first sentence, whole)."""

    def register(func: F) -> F:
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> None:
            try:
                func(*args, **kwargs)
            except SpecError as exc:
                *first, last = exc.errors()  # every error of a validation, one line each
                for e in first:
                    typer.echo(f"error: {e}", err=True)
                fail(f"error: {last}", 2)
            except (typer.Exit, typer.Abort):
                raise
            except Exception as exc:
                if os.environ.get("PLAN_DEBUG"):
                    raise
                if isinstance(exc, OSError) and exc.errno in WRITE_FAULTS:
                    fail(f"error: {_write_fault(exc)}", 2)
                fail(
                    f"internal error: {type(exc).__name__}: {exc} (PLAN_DEBUG=1 for a traceback)", 1
                )
            finally:  # an output folder not swapped in: removed, the old one left as it was
                abort_open()

        group.command(name, cls=OnceCommand, short_help=short_help or first_sentence(func.__doc__))(
            run
        )
        return func

    return register


def make_typer(help_text: str, short_help: str | None = None) -> typer.Typer:
    """A command group (``plan profiles``...): its help, and its line in ``plan --help``
    (default: the help's first sentence, whole)."""
    return typer.Typer(
        help=help_text,
        short_help=short_help or first_sentence(help_text),
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        cls=OnceGroup,
    )


# the root app alone offers shell completion (--install-completion, --show-completion)
app = typer.Typer(
    help="Capacity planner for hybrid-attention LLM serving.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=OnceGroup,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"plan {simulator.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Capacity planner for hybrid-attention LLM serving."""


JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Change a field of the file before it is checked, e.g. serving.tp=4,"
        " workload.sessions=200; of a search space also devices=[b300,h200] (the value is"
        " YAML; repeatable).",
    ),
]


def spec_kind(data: Any) -> str | None:
    """What a spec file's data is by its shape: ``scenario`` (one ``device``), ``search
    space`` (``devices``), or None (neither, or both; a key set to null is not there)."""
    if not isinstance(data, dict):
        return None
    one, many = data.get("device") is not None, data.get("devices") is not None
    if one == many:
        return None
    return "scenario" if one else "search space"


def read_spec(path: Path) -> Any:
    """``read_yaml`` of a scenario or search-space file; a bare name that is no file but
    names a shipped example says how to run that example (``plan run`` or ``plan search``)."""
    from simulator.specs.loading import read_yaml
    from simulator.specs.spec_file import read_spec_file

    try:
        return read_spec_file(path)
    except SpecError as exc:
        name = path.name.removesuffix(".yaml")
        example = EXAMPLES_DIR / f"{name}.yaml"
        bare_name = exc.reason.startswith("no such file") and path.parent == Path() and name
        if not bare_name or not example.is_file():
            raise
        kind = spec_kind(read_yaml(example))
        raise SpecError(
            path, "(file)",
            f"no such file; {name} is a built-in example ({kind}):"
            f" {'plan search' if kind == 'search space' else 'plan run'} {example}"
            f" (plan examples copy {name} writes a copy to edit)",
        ) from None  # fmt: skip


def check_kind(data: Any, file: Path, want: str) -> None:
    """A scenario given to `plan search` (or a search space to `plan run`) said so, instead
    of the first field the other kind lacks."""
    kind = spec_kind(data)
    if kind is None or kind == want:
        return
    if kind == "scenario":
        hint = (
            f"this is a scenario (one device); use plan run {file}, or plan search with a"
            " search space (devices, sweep)"
        )
    else:
        hint = (
            f"this is a search space (devices, sweep); use plan search {file}, or plan run"
            " with a scenario (one device)"
        )
    raise SpecError(file, "(file)", hint)


def print_json(data: Any) -> None:
    """``data`` as strict JSON: NaN / inf are null (``finite``); one left over is a bug."""
    from simulator.output_files import finite

    sys.stdout.write(json.dumps(finite(data), indent=2, default=float, allow_nan=False) + "\n")


def print_pairs(title: str, rows: list[tuple[str, str]]) -> None:
    """A two-column table: label, right-aligned value."""
    from rich.table import Table

    t = Table(show_header=False, title=title)
    t.add_column()
    t.add_column(justify="right")
    for k, v in rows:
        t.add_row(k, v)
    console().print(t)


def gib(x: float) -> str:
    return f"{x / GIB:,.1f}"


def pool_gib(kv_bytes: float) -> str:
    """The KV + state pool in GiB; a negative one (weights and reserves past the budget) as
    the shortfall it is, not as a pool of minus that size."""
    return f"{gib(kv_bytes)} GiB" if kv_bytes >= 0 else f"none: {gib(-kv_bytes)} GiB short"
