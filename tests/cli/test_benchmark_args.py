"""A bad ``--set`` of ``benchmarks/kv_pressure.py`` is one line and exit 2, as ``plan run``'s."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kv_pressure.py"


@pytest.mark.parametrize(
    ("item", "said"),
    [
        ("serving.nope=1", "serving.nope: unknown field"),
        ("workload.ramp_s=-3", "workload.agentic.ramp_s"),
        ("noequals", "has no '='"),
    ],
)
def test_a_bad_set_is_one_line_and_exit_2(item: str, said: str) -> None:
    got = subprocess.run(
        [sys.executable, str(SCRIPT), "--users", "32", "--set", item],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert got.returncode == 2
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1, got.stderr
    assert lines[0].startswith("error: --set: ")
    assert said in lines[0]
    assert got.stdout == ""
