"""A bad ``--set`` or ``--kv-gib`` of ``benchmarks/kv_pressure.py`` is one line and exit 2,
as ``plan run``'s."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kv_pressure.py"


@pytest.mark.parametrize(
    ("args", "opener", "said"),
    [
        (["--set", "serving.nope=1"], "error: --set: ", "serving.nope: unknown field"),
        (["--set", "workload.ramp_s=-3"], "error: --set: ", "workload.agentic.ramp_s"),
        (["--set", "noequals"], "error: --set: ", "has no '='"),
        (["--kv-gib", "40", "0"], "error: --kv-gib: ", "every pool size must be > 0 GiB"),
        (["--kv-gib", "abc"], "error: argument --kv-gib: ", "invalid float value: 'abc'"),
        (["--bins", "x"], "error: argument --bins: ", "invalid int value: 'x'"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(args: list[str], opener: str, said: str) -> None:
    got = subprocess.run(
        [sys.executable, str(SCRIPT), "--users", "32", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert got.returncode == 2
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1, got.stderr
    assert lines[0].startswith(opener)
    assert said in lines[0]
    assert got.stdout == ""
