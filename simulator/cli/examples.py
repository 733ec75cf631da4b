"""`plan examples`: the example scenarios and search spaces shipped in the package."""

import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from simulator.cli.base import (
    EXAMPLES_DIR,
    JsonOpt,
    app,
    command,
    console,
    make_typer,
    print_json,
    spec_kind,
)
from simulator.output_files import check_parents, stat_output
from simulator.specs import SpecError
from simulator.specs.loading import parse_yaml, read_text

examples_app = make_typer(
    "Example scenarios and search spaces: list them, copy them out to edit and run.",
    short_help="Example scenarios and search spaces.",
)
app.add_typer(examples_app, name="examples")


@dataclass(frozen=True)
class Example:
    name: str
    kind: str  # scenario | search space
    description: str
    path: Path

    @property
    def command(self) -> str:
        return "plan run" if self.kind == "scenario" else "plan search"


def description(text: str) -> str:
    """The first sentence of a file's leading comment (its ``#`` lines, joined)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    paragraph = " ".join(" ".join(lines).split())
    return re.split(r"(?<=[.?!])\s", paragraph, maxsplit=1)[0]


def examples() -> list[Example]:
    """Every shipped example, by name."""
    found = []
    for path in sorted(EXAMPLES_DIR.glob("*.yaml")):
        text = read_text(path)
        kind = spec_kind(parse_yaml(text, path)) or "spec"
        found.append(Example(path.stem, kind, description(text), path))
    return found


def example(name: str) -> Example:
    by_name = {e.name: e for e in examples()}
    key = name.removesuffix(".yaml")
    if key not in by_name:
        raise SpecError(
            "(arguments)", "name", f"unknown example {name!r}; known: {', '.join(by_name)}"
        )
    return by_name[key]


@command(examples_app, "list")
def examples_list(as_json: JsonOpt = False) -> None:
    """List the example scenarios and search spaces: name, kind, what each one asks."""
    found = examples()
    if as_json:
        print_json(
            [
                {"name": e.name, "kind": e.kind, "description": e.description, "path": str(e.path)}
                for e in found
            ]
        )
        return
    t = Table(
        title=f"Examples ({EXAMPLES_DIR})",
        caption="plan examples copy NAME: a copy to edit; plan run a scenario, plan search a"
        " search space",
    )
    t.add_column("name", no_wrap=True)
    t.add_column("kind", no_wrap=True)
    t.add_column("description")
    for e in found:
        t.add_row(e.name, e.kind, e.description)
    console().print(t)


@command(examples_app, "copy")
def examples_copy(
    name: Annotated[
        str | None, typer.Argument(metavar="NAME", help="The example (plan examples list).")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Copy every example.")] = False,
    to_arg: Annotated[
        str,
        typer.Option("--to", metavar="DIR", help="Copy into this folder (made if missing)."),
    ] = ".",
) -> None:
    """Copy examples into a folder (never over an existing file), to edit and run."""
    if (name is None) == (not every):
        raise SpecError("(arguments)", "name", "give one example NAME, or --all")
    if not to_arg:  # `--to "$DIR"` with DIR unset: not the current folder unasked
        raise SpecError("(arguments)", "--to", "is empty; give a folder (without --to: here)")
    to = Path(to_arg)
    chosen = examples() if every else [example(name or "")]
    found = stat_output(to, "--to")  # a dangling link, a name too long, a parent a file
    if found is None:
        check_parents(to, "--to")
    elif not stat.S_ISDIR(found.st_mode):
        raise SpecError(to, "--to", "is a file, not a folder")
    targets = [(e, to / e.path.name) for e in chosen]
    for _, target in targets:  # all of them checked before any is written
        if target.exists() or target.is_symlink():
            raise SpecError(
                target, "(file)", "exists; plan examples copy never overwrites: remove it, or"
                " give --to another folder",
            )  # fmt: skip
    made: list[Path] = []
    try:
        to.mkdir(parents=True, exist_ok=True)
        for e, target in targets:
            with target.open("x", encoding="utf-8") as fh:
                made.append(target)
                fh.write(read_text(e.path))
    except OSError as exc:  # (a full disk): none of this copy left, so a rerun can copy all
        for target in made:
            target.unlink(missing_ok=True)
        raise SpecError(to, "--to", f"{exc.strerror or exc}; nothing was copied") from None
    for e, target in targets:
        typer.echo(f"wrote {target} ({e.kind}: {e.command} {target})", err=True)
