"""A disk that fills (or a quota, a read-only file system) while a command writes its output:
one ``error:`` line naming where, exit 2, and an earlier output folder left as it was. Before,
``plan run --out`` on a full disk ended in ``internal error: OSError: [Errno 28]`` (exit 1,
the code kept for the planner's own bugs)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import simulator.cli.run as run_module
from simulator.cli import app

runner = CliRunner()

SCENARIO = """
name: faults
model: llama-3.1-8b
device: h100
serving: {tp: 1}
workload: {kind: random, input_tokens: 256, output_tokens: 8, num_requests: 4, concurrency: 2}
duration_s: 30.0
"""


def _failing(code: int) -> Any:
    def write_tables(*args: Any, **kwargs: Any) -> list[str]:
        raise OSError(code, os.strerror(code))

    return write_tables


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG])
def test_a_full_disk_is_one_line_and_the_old_folder_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    first = runner.invoke(app, ["run", str(scenario), "--out", str(out)])
    assert first.exit_code == 0, first.output
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    monkeypatch.setattr(run_module, "write_tables", _failing(code))
    result = runner.invoke(app, ["run", str(scenario), "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"error: {out}: (write): {os.strerror(code)}: the output was not written; an earlier"
        " folder there is left as it was"
    ]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".plan-tmp-")] == []


def test_other_os_errors_stay_internal_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the machine's state is mapped: any other OSError met while writing is a bug of the
    planner (exit 1) and says so."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    monkeypatch.setattr(run_module, "write_tables", _failing(errno.EBADF))
    result = runner.invoke(app, ["run", str(scenario), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert result.stderr.startswith("internal error: OSError: [Errno 9]")


def test_examples_copy_on_a_full_disk_leaves_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first example written, the disk full on the second: nothing of the copy stays (an
    empty first file then blocked the rerun with "exists; never overwrites")."""
    import simulator.cli.examples as examples_module

    real = examples_module.read_text
    to = tmp_path / "ex"

    def fills_up(path: Any) -> str:
        if to.is_dir() and len(list(to.iterdir())) > 1:  # the first copied, the second open
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path)

    monkeypatch.setattr(examples_module, "read_text", fills_up)
    result = runner.invoke(app, ["examples", "copy", "--all", "--to", str(to)])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: {to}: --to: {os.strerror(errno.ENOSPC)}; nothing was copied"
    ]
    assert list(to.iterdir()) == []
    monkeypatch.setattr(examples_module, "read_text", real)
    again = runner.invoke(app, ["examples", "copy", "--all", "--to", str(to)])
    assert again.exit_code == 0, again.output
