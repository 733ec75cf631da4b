"""``kill -9`` of a running command: no worker of it stays alive, and a rerun resumes from the
per-point cache to the same result as an uninterrupted run (nothing lost, nothing twice).

Each command runs as a real subprocess in its own session (``start_new_session``), so its
workers are found in /proc by parent pid, process group or session; the test waits for the
first cached result, checks that workers are running, SIGKILLs the parent alone and then
asserts that within a few seconds nothing of that session is left alive. Linux only (/proc,
PR_SET_PDEATHSIG). The ``cache``/``--no-cache`` behaviour of ``plan validate`` is checked on
a two-point CSV at the end.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from typer.testing import CliRunner

from simulator.cli import app

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc"),
]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
Popen = subprocess.Popen[bytes]
FIXTURE = REPO / "tests" / "fixtures" / "calibration" / "cpu-2core"


class Proc(NamedTuple):
    pid: int
    ppid: int
    pgrp: int
    session: int
    state: str
    cmd: str


def _procs() -> list[Proc]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        head, _, rest = stat.rpartition(")")
        fields = rest.split()
        cmd = head.partition("(")[2]
        out.append(
            Proc(int(d.name), int(fields[1]), int(fields[2]), int(fields[3]), fields[0], cmd)
        )
    return out


def _left(pid: int) -> list[Proc]:
    """Live processes that ``pid`` started: its children, or members of its group/session
    (the session id is ``pid``: started with ``start_new_session``). Zombies are dead."""
    return [
        p
        for p in _procs()
        if p.pid != pid and p.state != "Z" and pid in (p.ppid, p.pgrp, p.session)
    ]


def _start(args: list[str], log: Path, env: dict[str, str] | None = None) -> Popen:
    with log.open("wb") as fh:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            args, cwd=REPO, start_new_session=True, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=fh, env=env,
        )  # fmt: skip


def _run(args: list[str], env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        args, cwd=REPO, capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]


def _kill_when(proc: Popen, started: Callable[[], bool], log: Path, workers: bool) -> None:
    """Wait until ``started()`` (work on disk), SIGKILL ``proc`` alone, assert nothing of it
    stays alive. ``workers``: it must have had worker processes running at the kill."""
    deadline = time.monotonic() + 45
    while not started():
        assert proc.poll() is None, f"ended before the kill: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, "no result within 45 s"
        time.sleep(0.05)
    before = _left(proc.pid)
    assert proc.poll() is None, "finished before the kill: the test needs a longer job"
    if workers:
        assert before, "no worker process running at the kill"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 5
    while (alive := _left(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive, f"left alive after kill -9 of {proc.pid}: {alive}"


def _csv(path: Path, drop: tuple[str, ...] = ()) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(fh)]


# ------------------------------------------------------------------------------- search

SPACE = {
    "name": "kill",
    "model": "llama-3.3-70b",
    "devices": ["h100", "h200"],
    "sweep": {"tp": [4, 8]},
    "concurrency": [1, 2, 4, 8],
    "workload": {"kind": "random", "input_tokens": 512, "output_tokens": 32,
                 "num_requests": 24, "concurrency": 1},
    "slo": {"interactivity_tok_per_s_p90": 20.0},
    "cost_model": "semianalysis_tco_neocloud",
    "demand_users": 100,
    "duration_s": 600.0,
    "warmup_s": 0.0,
}  # fmt: skip


def test_kill_9_of_plan_search_leaves_no_worker_and_resumes(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))

    def search(out: Path) -> list[str]:
        return [str(BIN / "plan"), "search", str(space), "--out", str(out), "--grid",
                "--seeds", "1", "--workers", "2", "--json"]  # fmt: skip

    out, ref = tmp_path / "killed", tmp_path / "ref"
    proc = _start(search(out), tmp_path / "search.log")
    _kill_when(proc, lambda: any((out / "cache").glob("*.json")), tmp_path / "search.log", True)
    first = len(list((out / "cache").glob("*.json")))
    assert 0 < first < 16
    _run(search(out))
    _run(search(ref))
    assert len(list((out / "cache").glob("*.json"))) == 16
    for name in ("runs.csv", "best.csv"):
        got, want = _csv(out / name, ("wall_s",)), _csv(ref / name, ("wall_s",))
        assert got == want, name
    runs = _csv(out / "runs.csv")
    keys = [(r["config_id"], r["concurrency"]) for r in runs]
    assert len(keys) == len(set(keys)) == 16


# ------------------------------------------------------------------ validate inferencemax


def test_kill_9_of_validate_inferencemax_leaves_no_worker_and_resumes(
    tmp_path: Path, shared_data: Path
) -> None:
    data = shared_data / "inferencemax" / "inferencemax_v1_dashboard_20251025.csv"
    if not data.is_file():
        pytest.skip(f"{data} not found")

    def validate(out: Path) -> list[str]:
        return [str(BIN / "plan"), "validate", "inferencemax", "--data", str(data),
                "--limit-per-curve", "1", "--models", "llama-3.3-70b", "--devices", "h200",
                "--workers", "2", "--out", str(out), "--json"]  # fmt: skip

    out, ref = tmp_path / "killed", tmp_path / "ref"
    log = tmp_path / "validate.log"
    proc = _start(validate(out), log)
    _kill_when(proc, lambda: any((out / "cache").glob("*.json")), log, True)
    assert not (out / "points.csv").exists()
    first = {p.name for p in (out / "cache").glob("*.json")}
    stamps = {n: (out / "cache" / n).stat().st_mtime_ns for n in first}
    _run(validate(out))
    _run(validate(ref))
    got, want = _csv(out / "points.csv", ("wall_s",)), _csv(ref / "points.csv", ("wall_s",))
    assert got == want
    rows = [r["row"] for r in got]
    assert len(rows) == len(set(rows)) == len(list((out / "cache").glob("*.json")))
    assert len(first) < len(rows)
    # the points finished before the kill were read back, not simulated again
    assert {n: (out / "cache" / n).stat().st_mtime_ns for n in first} == stamps


# ----------------------------------------------------------------- calibrate measure (CPU)

TIMINGS = ("latency_us", "latency_us_p20", "latency_us_p80", "n_reps")
CALIBRATE = ("--device-name", "cpu-2core", "--allow-cpu", "--smoke",
             "--model", "kimi-linear-48b-a3b", "--tp", "64", "--budget-s", "300")  # fmt: skip


def _measured(folder: Path) -> list[tuple[tuple[str, str], ...]]:
    """Every measured row but its timings (which differ from run to run), sorted."""
    return sorted(
        tuple(sorted((k, v) for k, v in r.items() if v))
        for f in sorted(folder.glob("*.csv"))
        for r in _csv(f, TIMINGS)
    )


def _planned() -> list[tuple[tuple[str, str], ...]]:
    """The rows an uninterrupted run writes: one per planned job (timings aside). Computed
    from the plan rather than by a second run: on a loaded 2-core machine a CPU run takes
    most of the test's time budget."""
    from kernels_calibration import shapes
    from simulator import catalog
    from simulator.specs.hardware import HardwareProfile
    from simulator.specs.loading import load

    profile = load(HardwareProfile, FIXTURE / "profile.yaml")
    card = catalog.model_card("kimi-linear-48b-a3b")
    plan = shapes.plan_jobs([card], [64], profile, shapes.SMOKE, frozenset({"torch"}))
    rows = []
    for j in plan.jobs:
        row = {"op": j.op, "kernel": j.kernel, "impl": j.impl, "dtype": j.dtype,
               "kv_dtype": j.kv_dtype, "source": j.source}  # fmt: skip
        row.update({k: str(v) for k, v in j.shape})
        rows.append(tuple(sorted((k, v) for k, v in row.items() if v)))
    return sorted(rows)


def test_kill_9_of_calibrate_measure_leaves_nothing_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the calibration extra (torch) is not installed")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    dest = tmp_path / "cpu-2core"
    dest.mkdir()
    shutil.copy(FIXTURE / "profile.yaml", dest / "profile.yaml")
    measure = [str(BIN / "calibrate"), "measure", *CALIBRATE, "--profiles-dir", str(tmp_path)]
    meas, log = dest / "measurements", tmp_path / "measure.log"
    proc = _start(measure, log, env)
    # killed once the first row is on disk (it is flushed at once, the rest every 2 s)
    _kill_when(proc, lambda: any(meas.glob("*.csv")), log, workers=False)
    first = _measured(meas)
    _run(measure, env)
    got, want = _measured(meas), _planned()
    assert 0 < len(first) < len(got)
    assert got == want  # every planned row once: none lost, none twice


# ------------------------------------------------------------------- validate --no-cache

HEADER = ["model", "sequence", "hwKey", "precision", "tp", "conc", "interactivity_tok_s_user",
          "e2e_latency_s", "tput_per_gpu"]  # fmt: skip
ROWS = [
    ["Llama 3.3 70B Instruct", "1K/1K", "h100", "fp8", 8, 4, 113.366, 8.216, 109.521],
    ["Llama 3.3 70B Instruct", "1K/1K", "h100", "fp8", 8, 8, 106.631, 8.822, 206.569],
]


def _validate(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = CliRunner().invoke(
        app, ["validate", "inferencemax", "--requests-per-conc", "1", "--workers", "1",
              "--json", *args], env=env,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_validate_cache_folders_and_no_cache(tmp_path: Path) -> None:
    data = tmp_path / "im.csv"
    with data.open("w", newline="") as fh:
        csv.writer(fh).writerows([HEADER, *ROWS])
    out = tmp_path / "out"
    first = _validate("--data", str(data), "--out", str(out))
    cached = sorted((out / "cache").glob("*.json"))
    assert len(cached) == 2
    entry = json.loads(cached[0].read_text())
    assert entry["scenario"].startswith("inferencemax row ")
    assert entry["result"]["status"] == "ok"
    before = _csv(out / "points.csv", ("wall_s",))
    # a broken entry (a kill mid-write cannot leave one, a disk error might) is simulated again
    cached[0].write_text('{"scenario": "inferencemax row 1", "res')
    again = _validate("--data", str(data), "--out", str(out))
    assert again["overall"] == first["overall"]
    assert _csv(out / "points.csv", ("wall_s",)) == before
    assert json.loads(cached[0].read_text())["result"]["status"] == "ok"
    # --no-cache: nothing read, nothing written
    fresh = tmp_path / "fresh"
    _validate("--data", str(data), "--out", str(fresh), "--no-cache")
    assert (fresh / "points.csv").exists()
    assert not (fresh / "cache").exists()
    # without --out: $PLAN_CACHE_DIR/validate
    home = tmp_path / "user-cache"
    _validate("--data", str(data), env={"PLAN_CACHE_DIR": str(home)})
    assert len(list((home / "validate").glob("*.json"))) == 2
