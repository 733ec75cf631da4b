"""Every numeric option of the commands, given a negative number, zero, NaN, 10^12 or a word:
the command either runs or stops with one ``error:`` line and exit 2, never an internal error
(exit 1) or a traceback. Swept from the app itself, so an option added later is covered:
``validate inferencemax --seed -1`` was ``internal error: ValidationError`` until 2026-12-07.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from pathlib import Path

import pytest
import typer.main

from simulator.cli import app
from tests.cli.test_bad_numbers import SCENARIO, SPACE, _yaml, plan
from tests.conftest import SHARED_DATA

BAD = ("-1", "0", "nan", "1e12", "abc")

# the arguments each command runs with, before the option under test is added
Base = Callable[[Path], list[str]]
BASES: dict[tuple[str, ...], Base] = {
    ("run",): lambda t: ["run", _yaml(t, "s.yaml", SCENARIO)],
    ("search",): lambda t: ["search", _yaml(t, "space.yaml", SPACE), "--out", str(t / "o")],
    ("memory",): lambda t: ["memory", "--model", "llama-3.1-8b", "--device", "h100"],
    ("step",): lambda t: ["step", "--model", "llama-3.1-8b", "--device", "h100", "--decode", "4"],
    ("size",): lambda t: ["size", "--model", "llama-3.1-8b", "--users", "4",
                          "--slo-interactivity", "10", "--devices", "h100", "--quick",
                          "--max-runs", "2"],
    ("demo",): lambda t: ["demo", "--simulate-minutes", "0"],
    ("workload", "stats"): lambda t: ["workload", "stats", "agentic", "--sessions", "5"],
    ("validate", "inferencemax"): lambda t: ["validate", "inferencemax", "--models",
                                             "llama-3.3-70b", "--devices", "h100",
                                             "--limit-per-curve", "1", "--no-cache"],
    ("validate", "silicon"): lambda t: ["validate", "silicon", "--limit", "1", "--no-cache"],
}  # fmt: skip
NEEDS_SHARED = {("validate", "inferencemax"), ("validate", "silicon")}


def _numeric_options() -> list[tuple[tuple[str, ...], str]]:
    group = typer.main.get_group(app)
    found = []
    for path in BASES:
        command = group
        for name in path:
            command = command.commands[name]  # type: ignore[attr-defined]
        for param in command.params:
            if param.param_type_name != "option" or getattr(param, "is_flag", False):
                continue
            annotation = param.type_descriptor.annotation  # type: ignore[attr-defined]
            kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
            if set(kinds or [annotation]) & {int, float}:
                found.append((path, param.opts[0]))
    return found


CASES = [(path, flag, value) for path, flag in _numeric_options() for value in BAD]


def test_the_sweep_covers_the_numeric_options() -> None:
    flags = {flag for _, flag, _ in CASES}
    assert {"--seed", "--workers", "--decode", "--users", "--simulate-minutes"} <= flags
    assert len({(p, f) for p, f, _ in CASES}) >= 25


@pytest.mark.parametrize(("path", "flag", "value"), CASES,
                         ids=[f"{' '.join(p)} {f} {v}" for p, f, v in CASES])  # fmt: skip
def test_a_bad_number_runs_or_is_one_line(
    path: tuple[str, ...], flag: str, value: str, tmp_path: Path, no_hang: None
) -> None:
    if path in NEEDS_SHARED and not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    argv = BASES[path](tmp_path)
    if flag in argv:  # the option under test replaces the base's value
        i = argv.index(flag)
        del argv[i : i + 2]
    code, stdout, stderr = plan(*argv, flag, value)
    assert code in (0, 2), (code, stderr[-2000:])
    assert "Traceback" not in stdout + stderr
    if code == 2:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1, stderr
        assert lines[0].startswith("error: "), lines[0]
