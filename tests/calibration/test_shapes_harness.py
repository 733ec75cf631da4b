"""The calibration job's shape grid and its resumable, budgeted harness (no GPU, no torch).

The harness is driven with plain Python closures and a fake timer here; the real kernels and
``do_bench`` are exercised in test_calibrate_cli.py (torch on the CPU) and on a GPU.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from kernels_calibration.harness import Store, interleave, run_jobs
from kernels_calibration.shapes import FULL, SMOKE, Job, plan_jobs, row_key
from simulator import catalog
from simulator.cost.predict import OP_COLUMNS
from simulator.cost.step import StepCostModel
from simulator.specs.loading import SpecError
from simulator.specs.serving import ServingConfig

MI355X = catalog.hardware_profile("mi355x")
ENV = {"gpu": "fake gpu", "torch": "x", "triton": "y"}


def test_hybrid_card_covers_every_op_class_it_runs() -> None:
    plan = plan_jobs([catalog.model_card("kimi-k3")], [8], MI355X, SMOKE)
    ops = Counter(j.op for j in plan.jobs)
    # Kimi K3: MLA + KDA layers, latent MoE, dense MLP, norms
    assert set(ops) == {"gemm", "moe", "mla_decode", "mla_prefill", "kda_prefill",
                        "kda_decode", "elementwise"}  # fmt: skip
    assert not any(j.op == "attn_prefill" for j in plan.jobs)  # K3 has no GQA layers
    # the MXFP4 latent projections have no dense kernel here: said, not silently dropped
    assert any("mxfp4" in s and "latent" in s for s in plan.not_measured)


def test_a_tp_the_card_cannot_run_measures_nothing_and_says_why() -> None:
    """TP 100,000 wrote GEMM rows with n = 0 and k = 0, which calibrate fit then refused:
    the device's measurement folder was left unusable."""
    card = catalog.model_card("kimi-k3")
    plan = plan_jobs([card], [100_000], MI355X, SMOKE)
    assert not [j for j in plan.jobs if "tp100000" in j.source]  # the per-card norms only
    assert plan.not_measured == [
        "kimi-k3 tp100000: tp 100000 does not divide the 96 attention heads of kimi-k3"
    ]
    mixed = plan_jobs([card], [8, 100_000], MI355X, SMOKE)
    assert mixed.jobs == plan_jobs([card], [8], MI355X, SMOKE).jobs
    assert all(j.dims()["n"] > 0 and j.dims()["k"] > 0 for j in mixed.jobs if j.op == "gemm")


def test_gemm_grid_is_what_the_step_model_asks_for() -> None:
    card = catalog.model_card("llama-3.3-70b")
    plan = plan_jobs([card], [8], MI355X, FULL)
    asked = {(g.n, g.k) for g in StepCostModel(card, MI355X, ServingConfig(tp=8)).gemm_shapes()}
    measured = {(j.dims()["n"], j.dims()["k"]) for j in plan.jobs if j.op == "gemm"}
    assert measured == asked
    ms = {j.dims()["m"] for j in plan.jobs if j.kernel == "torch.matmul"}
    assert ms == set(FULL.gemm_m)
    # per-rank shapes: Llama's 64 query / 8 KV heads of 128 at TP8 -> qkv n = (8 + 2) * 128
    assert (1280, 8192) in measured


def test_per_rank_heads_follow_tp_and_dcp() -> None:
    card = catalog.model_card("deepseek-v3")  # 128 MLA heads
    plan = plan_jobs([card], [1, 8], MI355X, SMOKE)
    heads = {j.dims()["num_heads"] for j in plan.jobs if j.op == "mla_decode"}
    assert heads == {16, 128}  # H / 8, and all H (a DCP = TP rank, and TP1)
    prefill_heads = {j.dims()["num_heads"] for j in plan.jobs if j.op == "mla_prefill"}
    assert prefill_heads == {16, 128}


def test_jobs_are_unique_and_smoke_is_smaller() -> None:
    cards = [catalog.model_card(n) for n in catalog.model_names()]
    full = plan_jobs(cards, [1, 8], MI355X, FULL)
    keys = [j.key for j in full.jobs]
    assert len(keys) == len(set(keys))
    smoke = plan_jobs(cards[:1], [8], MI355X, SMOKE)
    assert 0 < len(smoke.jobs) < len(full.jobs) / 10
    for j in full.jobs:  # every job's shape is exactly its op class's columns
        assert tuple(k for k, _ in j.shape) == OP_COLUMNS[j.op]


def test_cpu_plan_has_only_torch_ops() -> None:
    plan = plan_jobs([catalog.model_card("kimi-k3")], [8], MI355X, SMOKE, frozenset({"torch"}))
    assert {j.kernel for j in plan.jobs} == {"torch.matmul", "torch.rms_norm"}


def test_interleave_reaches_every_group_first() -> None:
    plan = plan_jobs([catalog.model_card("kimi-k3")], [8], MI355X, FULL)
    order = interleave(plan.jobs)
    groups = {(j.op, j.kernel) for j in plan.jobs}
    assert {(j.op, j.kernel) for j in order[: len(groups)]} == groups
    assert sorted(j.key for j in order) == sorted(j.key for j in plan.jobs)
    assert order == interleave(plan.jobs)  # seeded


def _jobs(n: int) -> list[Job]:
    return [
        Job("gemm", "torch.matmul", "bf16", (("m", i + 1), ("n", 64), ("k", 32))) for i in range(n)
    ]


def _bench(fn: object) -> list[float]:
    return [1.0, 2.0, 3.0, 4.0, 5.0]


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_budget_stops_and_rerun_continues_without_duplicates(tmp_path: Path) -> None:
    jobs = _jobs(10)
    ticks = iter(range(1000))
    r1 = run_jobs(jobs, tmp_path, lambda j: (lambda: None), _bench, device_name="d", env=ENV,
                  mode="full", budget_s=4, clock=lambda: float(next(ticks)))  # fmt: skip
    assert r1.stopped == "budget"
    assert 0 < r1.measured < 10
    r2 = run_jobs(jobs, tmp_path, lambda j: (lambda: None), _bench, device_name="d", env=ENV,
                  mode="full", budget_s=1e9)  # fmt: skip
    assert r2.stopped == "complete"
    assert r2.skipped_done == r1.measured
    assert r1.measured + r2.measured == 10
    rows = _read(tmp_path / "gemm.csv")
    assert sorted(int(r["m"]) for r in rows) == list(range(1, 11))
    assert {r["latency_us"] for r in rows} == {"3000"}  # median of 1..5 ms, in us
    assert rows[0]["latency_us_p20"] == "1800"
    assert [row_key(r, OP_COLUMNS["gemm"]) for r in rows] == [j.key for j in jobs]
    meta = (tmp_path / "meta.yaml").read_text()
    assert meta.count("mode: full") == 2
    assert "stopped: budget" in meta
    assert "stopped: complete" in meta


def test_failing_job_is_recorded_and_skipped_until_retried(tmp_path: Path) -> None:
    jobs = _jobs(3)

    def build(job: Job) -> object:
        if job.dims()["m"] == 2:
            raise RuntimeError("out of memory")
        return lambda: None

    r = run_jobs(jobs, tmp_path, build, _bench, device_name="d", env=ENV, mode="full", budget_s=60)
    assert (r.measured, r.failed) == (2, 1)
    failures = _read(tmp_path / "failures.csv")
    assert failures[0]["error"] == "RuntimeError: out of memory"
    r = run_jobs(jobs, tmp_path, build, _bench, device_name="d", env=ENV, mode="full", budget_s=60)
    assert (r.measured, r.failed, r.skipped_done) == (0, 0, 3)
    r = run_jobs(jobs, tmp_path, lambda j: (lambda: None), _bench, device_name="d", env=ENV,
                 mode="full", budget_s=60, retry_failed=True)  # fmt: skip
    assert r.measured == 1
    assert len(_read(tmp_path / "gemm.csv")) == 3


def test_other_gpu_refused(tmp_path: Path) -> None:
    run_jobs(_jobs(1), tmp_path, lambda j: (lambda: None), _bench, device_name="d", env=ENV,
             mode="full", budget_s=60)  # fmt: skip
    with pytest.raises(SpecError, match="taken on 'fake gpu'"):
        run_jobs(_jobs(2), tmp_path, lambda j: (lambda: None), _bench, device_name="d",
                 env={**ENV, "gpu": "another"}, mode="full", budget_s=60)  # fmt: skip


def test_store_rejects_a_foreign_csv(tmp_path: Path) -> None:
    (tmp_path / "gemm.csv").write_text("a,b\n1,2\n")
    with pytest.raises(SpecError, match=r"gemm\.csv: \(rows\): not a measurement table"):
        Store(tmp_path)


SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from kernels_calibration.harness import run_jobs
    from kernels_calibration.shapes import Job

    jobs = [Job("gemm", "torch.matmul", "bf16", (("m", i + 1), ("n", 8), ("k", 8)))
            for i in range(int(sys.argv[2]))]

    def bench(fn):
        time.sleep(float(sys.argv[3]))
        return [1.0]

    r = run_jobs(jobs, Path(sys.argv[1]), lambda j: (lambda: None), bench, device_name="d",
                 env={"gpu": "g"}, mode="full", budget_s=1e9)
    print(r.stopped, r.measured)
    """
)


def _run(out: Path, n: int, sleep_s: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(out), str(n), str(sleep_s)],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "term"])
def test_killed_run_resumes_without_losing_or_duplicating_rows(
    tmp_path: Path, sig: signal.Signals
) -> None:
    n = 400
    proc = _run(tmp_path, n, 0.01)
    deadline = time.monotonic() + 60
    while not (tmp_path / "gemm.csv").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # wait for the first flush (every 2 s)
    time.sleep(0.3)
    os.kill(proc.pid, sig)
    out, _ = proc.communicate(timeout=60)
    first = _read(tmp_path / "gemm.csv")
    assert 0 < len(first) < n
    if sig == signal.SIGTERM:  # ended like Ctrl-C: everything measured is on disk
        stopped, measured = out.split()
        assert stopped == "interrupted"
        assert int(measured) == len(first)
        assert not list(tmp_path.glob(".*.tmp"))
    proc = _run(tmp_path, n, 0.0)
    out, _ = proc.communicate(timeout=120)
    assert out.split()[0] == "complete"
    rows = _read(tmp_path / "gemm.csv")
    assert sorted(int(r["m"]) for r in rows) == list(range(1, n + 1))
