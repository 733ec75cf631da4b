"""Simulating the points; errors per (model, device, ISL/OSL) and overall."""

from __future__ import annotations

import csv
import os
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from simulator.specs.loading import SpecError
from simulator.validation.points import (
    DEFAULT_DATA,
    SEQUENCES,
    Point,
    load_points,
    scenario_for,
    select,
)
from simulator.validation.runner import run_cached


@dataclass(frozen=True)
class PointResult:
    point: Point
    num_requests: int
    status: str  # "ok", or why it was not simulated
    sim_tput_per_gpu: float | None = None
    sim_interactivity: float | None = None
    sim_e2e_s_p50: float | None = None
    sim_ttft_s_p50: float | None = None
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def err_tput_pct(self) -> float | None:
        return err_pct(self.sim_tput_per_gpu, self.point.tput_per_gpu)

    @property
    def err_interactivity_pct(self) -> float | None:
        return err_pct(self.sim_interactivity, self.point.interactivity)

    def row(self) -> dict[str, Any]:
        p = asdict(self.point)
        p["weight_precision"] = " ".join(f"{g}={v}" for g, v in self.point.weight_precision)
        return {
            **p,
            "num_requests": self.num_requests,
            "status": self.status,
            "sim_tput_per_gpu": self.sim_tput_per_gpu,
            "err_tput_pct": self.err_tput_pct,
            "sim_interactivity": self.sim_interactivity,
            "err_interactivity_pct": self.err_interactivity_pct,
            "sim_e2e_s_p50": self.sim_e2e_s_p50,
            "sim_ttft_s_p50": self.sim_ttft_s_p50,
            "wall_s": self.wall_s,
        }


def err_pct(sim: float | None, measured: float) -> float | None:
    """Signed error of a simulated figure, % of the measured one (None: not simulated)."""
    return None if sim is None else (sim - measured) / measured * 100.0


def median_tpot_s(e2e_s: Sequence[float], ttft_s: Sequence[float], output: Sequence[int]) -> float:
    """Median over requests of (E2E - TTFT) / (output - 1); requests of one token excluded."""
    tpots = [(e - t) / (n - 1) for e, t, n in zip(e2e_s, ttft_s, output, strict=True) if n > 1]
    if not tpots:
        raise ValueError("no request with more than one output token")
    return float(np.median(tpots))


def simulate_point(point: Point, requests_per_conc: int = 10, seed: int = 0) -> PointResult:
    """Simulate one point (picklable: runs in a worker process)."""
    from simulator.simulation import simulate

    scenario = scenario_for(point, requests_per_conc, seed)
    n = requests_per_conc * point.conc
    try:
        result = simulate(scenario, f"inferencemax row {point.row}")
    except SpecError as exc:
        return PointResult(point, n, f"not simulated: {exc.reason}")
    df = result.request_table()
    done = df[df["status"] == "finished"]
    if done.empty:
        return PointResult(point, n, "not simulated: no request finished", wall_s=result.wall_s)
    tpot = median_tpot_s(
        done["e2e_s"].tolist(), done["ttft_s"].tolist(), done["output_tokens"].tolist()
    )
    s = result.summary
    return PointResult(
        point,
        n,
        "ok",
        sim_tput_per_gpu=s.throughput_tok_per_s_per_gpu,
        sim_interactivity=1.0 / tpot if tpot > 0 else None,
        sim_e2e_s_p50=s.e2e_s_p50,
        sim_ttft_s_p50=s.ttft_s_p50,
        wall_s=result.wall_s,
    )


def run_points(
    points: Sequence[Point],
    requests_per_conc: int = 10,
    seed: int = 0,
    workers: int = 1,
    progress: Callable[[int, int, PointResult], None] | None = None,
    cache_dir: Path | None = None,
) -> list[PointResult]:
    """Simulate every point, in the input order whatever the worker count (deterministic:
    each point's scenario carries its own seed); cached per point in ``cache_dir``
    (:func:`run_cached`)."""
    if requests_per_conc < 1:
        raise SpecError(
            "(arguments)", "requests_per_conc", f"must be >= 1, got {requests_per_conc}"
        )
    return run_cached(
        partial(simulate_point, requests_per_conc=requests_per_conc, seed=seed),
        points,
        lambda p: p.conc * (p.isl + p.osl),
        partial(scenario_for, requests_per_conc=requests_per_conc, seed=seed),
        PointResult,
        cache_dir,
        workers,
        progress,
    )


@dataclass(frozen=True)
class GroupError:
    """Errors of one (model, device, sequence) group, or of a whole selection (overall)."""

    model: str
    device: str
    sequence: str
    engine: str
    points: int  # simulated
    not_simulated: int
    median_ape_tput_pct: float | None
    median_ape_interactivity_pct: float | None
    bias_tput_pct: float | None  # median signed error
    bias_interactivity_pct: float | None


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def group_error(
    results: Sequence[PointResult], model: str, device: str, sequence: str
) -> GroupError:
    ok = [r for r in results if r.ok]
    et = [e for r in ok if (e := r.err_tput_pct) is not None]
    ei = [e for r in ok if (e := r.err_interactivity_pct) is not None]
    engines = sorted({r.point.engine for r in results})
    return GroupError(
        model=model,
        device=device,
        sequence=sequence,
        engine="+".join(engines),
        points=len(ok),
        not_simulated=len(results) - len(ok),
        median_ape_tput_pct=median_or_none([abs(e) for e in et]),
        median_ape_interactivity_pct=median_or_none([abs(e) for e in ei]),
        bias_tput_pct=median_or_none(et),
        bias_interactivity_pct=median_or_none(ei),
    )


SEQ_ORDER = {s: k for k, s in enumerate(SEQUENCES)}


def aggregate(results: Sequence[PointResult]) -> list[GroupError]:
    groups: dict[tuple[str, str, str], list[PointResult]] = {}
    for r in results:
        groups.setdefault((r.point.card, r.point.device, r.point.sequence), []).append(r)
    keys = sorted(groups, key=lambda k: (k[0], k[1], SEQ_ORDER.get(k[2], 99)))
    return [group_error(groups[k], *k) for k in keys]


def overall(results: Sequence[PointResult]) -> dict[str, GroupError]:
    """Medians over all simulated points, over the vLLM-served ones, and per model."""
    out = {"all": group_error(results, "all", "all", "all")}
    vllm = [r for r in results if r.point.engine == "vllm"]
    out["vllm"] = group_error(vllm, "vLLM points", "all", "all")
    for card in sorted({r.point.card for r in results}):
        out[card] = group_error([r for r in results if r.point.card == card], card, "all", "all")
    return out


@dataclass
class ValidationReport:
    data: Path
    rows: int
    skipped: Counter[str]
    not_selected: int
    requests_per_conc: int
    seed: int
    limit_per_curve: int | None
    results: list[PointResult]
    groups: list[GroupError]
    totals: dict[str, GroupError]

    def to_json(self) -> dict[str, Any]:
        return {
            **report_json(self),
            "limit_per_curve": self.limit_per_curve,
            "overall": {k: asdict(v) for k, v in self.totals.items()},
            "groups": [asdict(g) for g in self.groups],
        }


def report_json(report: Any) -> dict[str, Any]:
    """What every validation report's JSON starts with: the data, what was skipped, the run's
    settings, and which points were simulated (row -> reason for the others)."""
    return {
        "data": str(report.data),
        "rows": report.rows,
        "skipped": dict(report.skipped),
        "not_selected": report.not_selected,
        "requests_per_conc": report.requests_per_conc,
        "seed": report.seed,
        "simulated": sum(r.ok for r in report.results),
        "not_simulated": {r.point.row: r.status for r in report.results if not r.ok},
    }


def validate(
    data: str | Path = DEFAULT_DATA,
    models: Iterable[str] = (),
    devices: Iterable[str] = (),
    limit_per_curve: int | None = None,
    requests_per_conc: int = 10,
    seed: int = 0,
    workers: int = 1,
    progress: Callable[[int, int, PointResult], None] | None = None,
    cache_dir: Path | None = None,
) -> ValidationReport:
    loaded = load_points(data)
    chosen = select(loaded.points, models, devices, limit_per_curve)
    if not chosen:
        why = (
            f"the --models / --devices filters leave none of its {len(loaded.points):,} points"
            if loaded.points
            else f"no point to simulate ({loaded.rows:,} rows, {sum(loaded.skipped.values()):,}"
            " skipped)"
        )
        raise SpecError(data, "(points)", why)
    results = run_points(chosen, requests_per_conc, seed, workers, progress, cache_dir)
    if not any(r.ok for r in results):  # nothing to compare: no honest table
        common = not_simulated(results).most_common(2)
        raise SpecError(
            data, "(points)",
            f"none of its {len(results):,} points could be simulated: "
            + "; ".join(f"{status} ({n:,})" for status, n in common),
        )  # fmt: skip
    return ValidationReport(
        data=Path(data),
        rows=loaded.rows,
        skipped=loaded.skipped,
        not_selected=len(loaded.points) - len(chosen),
        requests_per_conc=requests_per_conc,
        seed=seed,
        limit_per_curve=limit_per_curve,
        results=results,
        groups=aggregate(results),
        totals=overall(results),
    )


def not_simulated(results: Iterable[PointResult]) -> Counter[str]:
    """Why points were not simulated, with how many each (the reasons without the prefix)."""
    return Counter(r.status.removeprefix("not simulated: ") for r in results if not r.ok)


class HasRow(Protocol):
    """A per-point result that knows its CSV row (PointResult, silicon's SiliconResult)."""

    def row(self) -> dict[str, Any]: ...


def write_points_csv(results: Sequence[HasRow], path: str | Path) -> None:
    """The per-point CSV, written whole (a temporary file, then a rename)."""
    rows = [r.row() for r in results]
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    with tmp.open("w", newline="") as fh:
        if rows:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            for row in rows:
                writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    os.replace(tmp, p)
