"""Run measurement jobs into ``<device dir>/measurements/<op>.csv``, resumably, within a budget.

Layout of a device's measurements (one tidy CSV per op class, readable by ``plan fit`` and
``calibrate fit``)::

    hardware_profiles/<device>/measurements/
        meta.yaml        device, driver, torch/triton versions, git sha, one entry per run
        gemm.csv         op, kernel, impl, dtype, kv_dtype, <shape columns of the op>,
        moe.csv ...      latency_us (median), latency_us_p20, latency_us_p80, n_reps, source
        failures.csv     jobs that raised (OOM, unsupported dtype), skipped on a rerun

Resumable: a CSV is only ever replaced whole (written beside it, then ``os.replace``), so a
killed run leaves every file as it was at its last flush; a rerun reads the keys already
measured and skips them. The first row is flushed at once (the files show the run has
started), later ones at least every ``FLUSH_S`` seconds and on exit.
"""

from __future__ import annotations

import csv
import datetime as dt
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import yaml

from kernels_calibration.shapes import Job, row_key
from kernels_calibration.timing import Bench, Stats, summarize
from simulator.cost.predict import OP_COLUMNS
from simulator.specs.loading import SpecError

FLUSH_S = 2.0
LEAD_COLUMNS = ("op", "kernel", "impl", "dtype", "kv_dtype")
RESULT_COLUMNS = ("latency_us", "latency_us_p20", "latency_us_p80", "n_reps", "source")
FAILURE_COLUMNS = ("op", "kernel", "dtype", "kv_dtype", "shape", "error")


def columns(op: str) -> tuple[str, ...]:
    return LEAD_COLUMNS + OP_COLUMNS[op] + RESULT_COLUMNS


def _fmt(x: float) -> str:
    return f"{x:.4g}" if x < 1e4 else f"{x:.6g}"


def _shape_text(job: Job) -> str:
    return " ".join(f"{k}={v}" for k, v in job.shape)


def write_csv_atomic(path: Path, header: Sequence[str], rows: Sequence[dict[str, str]]) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it, fsync, rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(header), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


class Store:
    """The measurement CSVs of one device: keys done, rows added, flushed atomically."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in self.dir.glob(".*.tmp"):  # a write that a kill cut short
            stale.unlink()
        self.rows: dict[str, list[dict[str, str]]] = {}
        self.failures = read_rows(self.dir / "failures.csv")
        self.done: set[tuple[str, ...]] = set()
        for op, shape_cols in OP_COLUMNS.items():
            rows = read_rows(self.dir / f"{op}.csv")
            if not rows:
                continue
            try:
                keys = [row_key(r, shape_cols) for r in rows]
            except (KeyError, ValueError) as exc:
                raise SpecError(
                    self.dir / f"{op}.csv", "(rows)", f"not a measurement table: missing {exc}"
                ) from None
            self.rows[op] = rows
            self.done.update(keys)
        self.failed = {
            (f["op"], f["kernel"], f["dtype"], f["kv_dtype"], *f["shape"].split())
            for f in self.failures
        }
        self.dirty: set[str] = set()
        self.last_flush = -FLUSH_S  # the first row is written at once

    def add(self, job: Job, stats: Stats) -> None:
        row = {"op": job.op, "kernel": job.kernel, "impl": job.impl, "dtype": job.dtype,
               "kv_dtype": job.kv_dtype, "source": job.source, "n_reps": str(stats.n_reps),
               "latency_us": _fmt(stats.median_us), "latency_us_p20": _fmt(stats.p20_us),
               "latency_us_p80": _fmt(stats.p80_us)}  # fmt: skip
        row.update({k: str(v) for k, v in job.shape})
        self.rows.setdefault(job.op, []).append(row)
        self.done.add(job.key)
        self.dirty.add(job.op)
        self._maybe_flush()

    def fail(self, job: Job, error: str) -> None:
        self.failures.append({"op": job.op, "kernel": job.kernel, "dtype": job.dtype,
                              "kv_dtype": job.kv_dtype, "shape": _shape_text(job),
                              "error": error.replace("\n", " ")[:300]})  # fmt: skip
        self.failed.add(job.key)
        self.dirty.add("failures")
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if time.monotonic() - self.last_flush >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        for op in sorted(self.dirty):
            if op == "failures":
                write_csv_atomic(self.dir / "failures.csv", FAILURE_COLUMNS, self.failures)
            else:
                write_csv_atomic(self.dir / f"{op}.csv", columns(op), self.rows[op])
        self.dirty.clear()
        self.last_flush = time.monotonic()


def interleave(jobs: Sequence[Job], seed: int = 0) -> list[Job]:
    """Round-robin over (op, kernel) groups, so that a run cut short by its budget still
    covers every op class. Within a group, jobs of one family (the shape without its first
    column: a GEMM's (n, k), a MoE's weights) stay together, families in a seeded random
    order: a cut keeps whole m sweeps (what GEMM shape tables need) and the MoE builder
    reuses one family's expert weights."""
    rng = np.random.default_rng(seed)
    groups: dict[tuple[str, str], dict[tuple[object, ...], list[Job]]] = {}
    for j in jobs:
        family = (j.dtype, j.kv_dtype, *j.shape[1:])
        groups.setdefault((j.op, j.kernel), {}).setdefault(family, []).append(j)
    queues = []
    for families in groups.values():
        fams = list(families.values())
        queues.append([j for i in rng.permutation(len(fams)) for j in fams[i]])
    out: list[Job] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


# ------------------------------------------------------------------------------ provenance


def git_sha() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return sha + ("+dirty" if dirty else "")


def _driver_version() -> str:
    for cmd in (
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        ["rocm-smi", "--showdriverversion"],
    ):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True)
        except (OSError, subprocess.SubprocessError):
            continue
        lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
        if lines:
            return lines[0] if cmd[0] == "nvidia-smi" else lines[-1]
    return "unknown"


def environment(device: Any) -> dict[str, Any]:
    """What the measurements were taken on (``device``: a torch.device)."""
    import torch
    import triton

    if device.type == "cuda":
        gpu = torch.cuda.get_device_name(device)
        runtime = f"hip {torch.version.hip}" if torch.version.hip else f"cuda {torch.version.cuda}"
        count = torch.cuda.device_count()
    else:
        gpu, runtime, count = f"cpu: {platform.processor() or platform.machine()}", "none", 0
    return {
        "gpu": gpu,
        "gpu_count": count,
        "runtime": runtime,
        "driver": _driver_version() if device.type == "cuda" else "none",
        "torch": str(torch.__version__),
        "triton": str(triton.__version__),
        "python": platform.python_version(),
        "host": platform.node(),
    }


def _read_meta(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise SpecError(path, "(file)", f"not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise SpecError(path, "(file)", "expected a mapping")
    return data


def _write_meta(path: Path, meta: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(yaml.safe_dump(meta, sort_keys=False))
    os.replace(tmp, path)


# ------------------------------------------------------------------------------ the run


@dataclass
class RunResult:
    planned: int
    measured: int = 0
    skipped_done: int = 0
    failed: int = 0
    stopped: str = "complete"  # complete | budget | interrupted
    elapsed_s: float = 0.0
    by_op: dict[str, int] = field(default_factory=dict)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler's kill, ``timeout``) ends the run like Ctrl-C: rows flushed."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_jobs(
    jobs: Sequence[Job],
    out_dir: Path,
    build: Callable[[Job], Callable[[], object]],
    bench: Bench,
    *,
    device_name: str,
    env: dict[str, Any],
    mode: str,
    budget_s: float,
    retry_failed: bool = False,
    progress: Callable[[RunResult, Job | None], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> RunResult:
    """Measure every job not yet in ``out_dir``; stop before a job once ``budget_s`` is spent.

    ``build(job)`` allocates the inputs and returns a closure running the kernel once;
    ``bench(closure)`` times it. A job that raises is recorded in failures.csv (and skipped
    by later runs unless ``retry_failed``).
    """
    start = clock()
    store = Store(out_dir)
    meta_path = out_dir / "meta.yaml"
    meta = _read_meta(meta_path)
    if meta.get("gpu") not in (None, env["gpu"]):
        raise SpecError(
            meta_path, "gpu",
            f"these measurements were taken on {meta['gpu']!r}, this is {env['gpu']!r}: use"
            " another --device-name, or --fresh to start over",
        )  # fmt: skip
    if retry_failed:
        store.failures = [f for f in store.failures if f["op"] not in {j.op for j in jobs}]
        store.failed = set()
        store.dirty.add("failures")
    run: dict[str, Any] = {"mode": mode, "started": _now(), "budget_s": budget_s,
                           "git_sha": git_sha(), "planned": len(jobs)}  # fmt: skip
    meta = {"device_name": device_name, **env, "runs": [*meta.get("runs", []), run]}
    _write_meta(meta_path, meta)
    result = RunResult(planned=len(jobs))
    todo = []
    for j in jobs:
        if j.key in store.done or j.key in store.failed:
            result.skipped_done += 1
        else:
            todo.append(j)
    try:
        with _sigterm_as_interrupt():
            for job in todo:
                if clock() - start >= budget_s:
                    result.stopped = "budget"
                    break
                if progress:
                    progress(result, job)
                try:
                    fn = build(job)
                    stats = summarize(bench(fn))
                    del fn
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # an OOM or unsupported dtype must not end the sweep
                    store.fail(job, f"{type(exc).__name__}: {exc}")
                    result.failed += 1
                    _release_memory()
                    continue
                store.add(job, stats)
                result.measured += 1
                result.by_op[job.op] = result.by_op.get(job.op, 0) + 1
    except KeyboardInterrupt:
        result.stopped = "interrupted"
    finally:
        store.flush()
        result.elapsed_s = clock() - start
        run.update({"finished": _now(), "stopped": result.stopped, "measured": result.measured,
                    "failed": result.failed, "elapsed_s": round(result.elapsed_s, 1)})  # fmt: skip
        _write_meta(meta_path, meta)
        if progress:
            progress(result, None)
    return result


def _release_memory() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
