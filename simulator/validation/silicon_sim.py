"""Simulating the silicon points (``silicon.py`` reads and maps them): one ``random``
closed-loop scenario a point, its mean and median TTFT and TPOT, cached per point."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from simulator.specs.loading import SpecError
from simulator.specs.scenario import Scenario
from simulator.specs.serving import ServingConfig
from simulator.validation.points import benchmark_scenario
from simulator.validation.run import err_pct, median_tpot_s
from simulator.validation.runner import run_cached
from simulator.validation.silicon import SiliconPoint
from simulator.validation.silicon_waves import first_wave_ttft_s


def scenario_of(point: SiliconPoint, requests_per_conc: int = 10, seed: int = 0) -> Scenario:
    knobs = {
        name: value
        for name in ("block_size_tokens", "gpu_memory_utilization")
        if (value := getattr(point, name)) is not None
    }
    serving = ServingConfig(
        tp=point.tp,
        dp=point.dp,
        ep=point.served_ep,
        weight_precision=dict(point.weight_precision),
        enable_prefix_caching=False,
        moe_kernel=point.moe_kernel,
        max_num_batched_tokens=point.max_num_batched_tokens,
        max_num_seqs=point.max_num_seqs,
        kv_cache_dtype=point.kv_cache_dtype,
        **knobs,
    )
    return benchmark_scenario(
        f"silicon row {point.row} ({point.id})",
        point.card,
        point.device,
        serving,
        point.isl,
        point.osl,
        point.conc,
        requests_per_conc,
        seed,
        point.router,
    )


@dataclass(frozen=True)
class SiliconResult:
    point: SiliconPoint
    num_requests: int
    status: str  # "ok", or why it was not simulated
    finished: int = 0
    sim_ttft_ms: float | None = None  # mean over requests (the rows' statistic)
    sim_tpot_ms: float | None = None  # mean over requests
    sim_ttft_ms_median: float | None = None
    sim_tpot_ms_median: float | None = None
    # the closed loop's first wave: the ``conc`` requests it sends at once (silicon_waves.py)
    sim_ttft_ms_first_wave: float | None = None
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def err_ttft_pct(self) -> float | None:
        return err_pct(self.sim_ttft_ms, self.point.ttft_ms)

    @property
    def err_tpot_pct(self) -> float | None:
        return err_pct(self.sim_tpot_ms, self.point.tpot_ms)

    def row(self) -> dict[str, Any]:
        p = asdict(self.point)
        p["weight_precision"] = " ".join(f"{g}={v}" for g, v in self.point.weight_precision)
        p["router"] = self.point.router
        return {
            **p,
            "num_requests": self.num_requests,
            "status": self.status,
            "finished": self.finished,
            "sim_ttft_ms": self.sim_ttft_ms,
            "err_ttft_pct": self.err_ttft_pct,
            "sim_tpot_ms": self.sim_tpot_ms,
            "err_tpot_pct": self.err_tpot_pct,
            "sim_ttft_ms_median": self.sim_ttft_ms_median,
            "sim_tpot_ms_median": self.sim_tpot_ms_median,
            "sim_ttft_ms_first_wave": self.sim_ttft_ms_first_wave,
            "wall_s": self.wall_s,
        }


def simulate_point(
    point: SiliconPoint, requests_per_conc: int = 10, seed: int = 0
) -> SiliconResult:
    """Simulate one point (picklable: runs in a worker process)."""
    from simulator.simulation import simulate

    scenario = scenario_of(point, requests_per_conc, seed)
    n = requests_per_conc * point.conc
    try:
        result = simulate(scenario, scenario.name)
    except SpecError as exc:
        return SiliconResult(point, n, f"not simulated: {exc.field}: {exc.reason}")
    df = result.request_table()
    done = df[df["status"] == "finished"]
    if done.empty:
        return SiliconResult(point, n, "not simulated: no request finished", wall_s=result.wall_s)
    e2e, ttft = done["e2e_s"].tolist(), done["ttft_s"].tolist()
    out = done["output_tokens"].tolist()
    tpots = [(e - t) / (k - 1) for e, t, k in zip(e2e, ttft, out, strict=True) if k > 1]
    return SiliconResult(
        point,
        n,
        "ok",
        finished=len(done),
        sim_ttft_ms=statistics.fmean(ttft) * 1e3,
        sim_tpot_ms=statistics.fmean(tpots) * 1e3,
        sim_ttft_ms_median=statistics.median(ttft) * 1e3,
        sim_tpot_ms_median=median_tpot_s(e2e, ttft, out) * 1e3,
        sim_ttft_ms_first_wave=first_wave_ttft_s(done, point.conc) * 1e3,
        wall_s=result.wall_s,
    )


def _cost(point: SiliconPoint) -> float:
    return point.cost


def run_points(
    points: Sequence[SiliconPoint],
    requests_per_conc: int = 10,
    seed: int = 0,
    workers: int = 1,
    progress: Callable[[int, int, SiliconResult], None] | None = None,
    cache_dir: Path | None = None,
) -> list[SiliconResult]:
    """Simulate every point, in the input order whatever the worker count; cached per point
    in ``cache_dir`` (:func:`simulator.validation.runner.run_cached`)."""
    if requests_per_conc < 1:
        raise SpecError(
            "(arguments)", "requests_per_conc", f"must be >= 1, got {requests_per_conc}"
        )
    fn = partial(simulate_point, requests_per_conc=requests_per_conc, seed=seed)
    scenario = partial(scenario_of, requests_per_conc=requests_per_conc, seed=seed)
    return run_cached(fn, points, _cost, scenario, SiliconResult, cache_dir, workers, progress)
