"""The CLI's surface: `plan --version`, shell completion, every command's help (readable
placeholders, command lists not cut) and several errors of one file, one line each."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import simulator
from simulator.cli import app

runner = CliRunner()
BIN = Path(sys.executable).parent


def plan(*args: str, **kwargs: Any) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), **kwargs)
    return result.exit_code, result.stdout, result.stderr


def command_paths() -> Iterator[tuple[list[str], Any]]:
    """Every group and command of `plan` (the root first), with its click object."""

    def walk(path: list[str], cmd: Any) -> Iterator[tuple[list[str], Any]]:
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk([*path, name], sub)

    yield from walk([], typer.main.get_command(app))


PATHS = [p for p, _ in command_paths()]
# how typer names a Python type in help when no placeholder is set: <list[str]>, <int>, ...
TYPE_REPR = re.compile(r"<(list\[|int>|str>|float>|bool>|path>)|\{[a-z_]+\}")


def test_version_prints_the_package_version() -> None:
    code, stdout, _ = plan("--version")
    assert code == 0
    assert stdout == f"plan {simulator.__version__}\n"


def test_completion_is_offered_by_the_root_alone() -> None:
    _, root, _ = plan("--help")
    assert "--install-completion" in root
    assert "--show-completion" in root
    assert "--version" in root
    for group in ("profiles", "models", "ops", "validate", "workload", "examples"):
        code, text, _ = plan(group, "--help")
        assert code == 0
        assert "--install-completion" not in text, group
        assert "--version" not in text, group


def test_show_completion_prints_a_bash_script() -> None:
    env = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    result = subprocess.run(
        [str(BIN / "plan"), "--show-completion", "bash"], capture_output=True, text=True,
        env={**os.environ, **env}, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "_PLAN_COMPLETE" in result.stdout
    assert "complete " in result.stdout


@pytest.mark.parametrize(
    ("words", "expected"),
    [("plan prof", "profiles"), ("plan profiles l", "list"), ("plan run --for", "--format"),
     ("plan examples c", "copy")],
)  # fmt: skip
def test_completion_completes_commands_of_groups_and_options(words: str, expected: str) -> None:
    env = {"_PLAN_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - 1)}  # fmt: skip
    result = subprocess.run(
        [str(BIN / "plan")], capture_output=True, text=True, env={**os.environ, **env},
        timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout.split(), result.stdout


@pytest.mark.parametrize("path", PATHS, ids=[" ".join(p) or "plan" for p in PATHS])
def test_help_names_values_by_placeholders_not_python_types(path: list[str]) -> None:
    code, text, stderr = plan(*path, "--help", env={"COLUMNS": "80"})
    assert code == 0, stderr
    assert not TYPE_REPR.search(text), TYPE_REPR.findall(text)
    assert " VALUE " not in text  # a type the placeholders do not know


@pytest.mark.parametrize("columns", ["80", "60"])
def test_command_lists_are_wrapped_not_cut(columns: str) -> None:
    groups = [p for p, cmd in command_paths() if getattr(cmd, "commands", None)]
    assert [] in groups
    assert ["validate"] in groups
    for path in groups:
        _, text, _ = plan(*path, "--help", env={"COLUMNS": columns})
        listing = text.split("Commands:\n", 1)[1]
        assert listing.strip(), path
        for line in listing.splitlines():
            assert not line.rstrip().endswith("..."), (path, line)


def test_the_command_list_shows_short_summaries() -> None:
    _, text, _ = plan("--help", env={"COLUMNS": "80"})
    listing = dict(
        re.findall(r"^  (\w+)\s+(.*)$", text.split("Commands:\n", 1)[1], flags=re.MULTILINE)
    )
    assert {"run", "search", "examples", "memory", "profiles"} <= set(listing)
    assert listing["run"] == "Simulate one scenario (one device)."


def test_every_error_of_a_file_is_its_own_line(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(
        "name: errors\nmodel: llama-3.1-8b\ndevice: h100\nserving: {tp: eight, dcp: 1}\n"
        "workload: {kind: random, input_tokens: 0, output_tokens: 8, num_requests: 4}\n"
        "colour: blue\n"
    )
    code, stdout, stderr = plan("run", str(f))
    assert code == 2, stdout
    lines = stderr.strip().splitlines()
    fields = [line.split(": ")[2] for line in lines]
    assert fields == ["serving.tp", "workload.random.input_tokens", "colour"], stderr
    for line in lines:
        assert line.startswith(f"error: {f}: "), line
    assert "more error" not in stderr
    assert "Traceback" not in stderr


def test_every_command_has_its_module() -> None:
    """``plan CMD`` imports only ``COMMAND_MODULES[CMD]``: each top-level command must be
    there, and importing that module alone must register it (a fresh interpreter per module;
    a module may register more through its own imports)."""
    import simulator.cli as cli

    top = {name for name, _ in typer.main.get_command(app).commands.items()}
    assert top == set(cli.COMMAND_MODULES)
    for module in sorted(set(cli.COMMAND_MODULES.values())):
        code = (
            "import typer\nfrom simulator.cli import _app\n"
            f"print(' '.join(sorted(typer.main.get_command(_app(({module!r},))).commands)))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
        want = sorted(c for c, m in cli.COMMAND_MODULES.items() if m == module)
        assert set(want) <= set(out), module


def test_plan_run_json_imports_no_rich(tmp_path: Path) -> None:
    """`plan run --json` prints no table and draws no spinner, so it does not pay for rich's
    import (~20 ms a process); a terminal gets the spinner, updated by the run's progress."""
    f = tmp_path / "s.yaml"
    f.write_text(
        "name: t\nmodel: llama-3.3-70b\ndevice: h100\nserving: {tp: 8}\n"
        "workload: {kind: random, num_requests: 4, concurrency: 2, input_tokens: 64,"
        " output_tokens: 4}\n"
    )
    code = (
        f"import sys\nsys.argv = ['plan', 'run', {str(f)!r}, '--json']\n"
        "from simulator.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
    from simulator.cli.run import _spinner

    with _spinner() as progress:
        for done in range(201):
            progress(float(done), done)


def test_plan_run_imports_no_planner(tmp_path: Path) -> None:
    """The lazy entry point: `plan run --help` loads the run command, not the planner or
    the other commands' modules; `plan --help` still lists every command."""
    code = (
        "import sys\nsys.argv = ['plan', 'run', '--help']\nfrom simulator.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('simulator.planner',"
        " 'simulator.cli.search', 'simulator.cli.ops', 'simulator.cli.step',"
        " 'simulator.cli.validate'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
    code, stdout, _ = plan("--help")
    assert code == 0
    for name in ("run", "search", "size", "validate", "workload"):
        assert name in stdout
