"""From runs to answers: operating points, the best configuration per device, tokens per
dollar, fleet size for a demand, memory headroom (``compare.py``: knob sensitivity, the
frontier, aggregated vs disaggregated).

Operating point of a configuration (DESIGN section 2): the highest throughput per GPU among
its concurrency levels whose P90 interactivity (and P90 TTFT, when the SLO has one) meets the
SLO. Tokens per dollar = throughput per GPU x 3600 / USD per GPU-hour of the cost model.

Aggregated and disaggregated (xPyD) configurations of a device compete on the same terms
(throughput per GPU over all GPUs of the deployment); ``compare.mode_comparison`` puts the
best of each side by side and names the best split, ``compare.frontier`` draws each side's
envelope.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from simulator import catalog
from simulator.metrics import requests_seen
from simulator.planner.expand import Candidate, Pruned, disaggregation_text
from simulator.planner.replicates import FIGURES, aggregate, passes, seeds_of, variant
from simulator.planner.space import KNOBS, SearchSpace
from simulator.planner.uncertainty import model_error
from simulator.specs.scenario import Scenario

if TYPE_CHECKING:
    import pandas as pd

NODE_GPUS = 8  # GPUs per node when sizing a fleet (an HGX / OAM box, or 8 GPUs of an NVL72)


def seed_names(space: SearchSpace, scenario: Scenario) -> list[str]:
    """Names of a point's replicate runs (``<scenario>-s<seed>`` for each seed)."""
    return [f"{scenario.name}-s{s}" for s in seeds_of(space.seed, space.seeds)]


def replicate_scenarios(space: SearchSpace, candidates: list[Candidate]) -> list[Scenario]:
    """Every point of the grid under every seed."""
    return [
        variant(sc, name, seed)
        for c in candidates
        for sc in c.scenarios
        for name, seed in zip(seed_names(space, sc), seeds_of(space.seed, space.seeds), strict=True)
    ]


def _point_results(
    space: SearchSpace, scenario: Scenario, results: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    found = [results[n] for n in seed_names(space, scenario) if n in results]
    return found or ([results[scenario.name]] if scenario.name in results else [])


def runs_table(
    space: SearchSpace, candidates: list[Candidate], results: dict[str, dict[str, Any]]
) -> pd.DataFrame:
    """One row per point (configuration x concurrency): knobs, the mean over the seeds of
    every summary figure with its 95 % interval (``_ci_low`` / ``_ci_high``), the worst seed
    of the SLO figures, cost and the SLO verdict (met on every seed, no seed saturated)."""
    import pandas as pd

    prices = catalog.cost_model(space.cost_model).usd_per_gpu_hour
    slo = space.slo
    rows = []
    for cand in candidates:
        device = catalog.hardware_profile(cand.device)
        for sc in cand.scenarios:
            reps = _point_results(space, sc, results)
            if not reps:
                continue
            r = {**reps[0], **aggregate(reps)}
            price = prices.get(cand.device)
            tput = r["throughput_tok_per_s_per_gpu"]
            out_tput = r["output_tok_per_s_per_gpu"]
            ok = passes(slo, reps)
            disagg = cand.knobs.get("disaggregation")
            dollars = _dollars(price, tput, out_tput, sc.num_gpus, sc.workload.concurrency)
            rows.append(
                {
                    "config_id": cand.config_id,
                    "device": cand.device,
                    "calibrated": device.calibrated,
                    **knob_cells(cand.knobs),
                    "mode": "disaggregated" if disagg else "aggregated",
                    "gpus_per_deployment": sc.num_gpus,
                    "concurrency": sc.workload.concurrency,
                    "seeds": r["seeds"],
                    **{k: r[k] for k in r if k.startswith(FIGURE_PREFIXES)},
                    "interactivity_p90_worst": r["interactivity_p90_worst"],
                    "ttft_p90_s_worst": r["ttft_p90_s_worst"],
                    "saturated": r["saturated_seeds"] > 0,
                    "unsteady_seeds": r.get("unsteady_seeds", 0),
                    "gpu_hit_rate": _mean(reps, "gpu_hit_rate"),
                    "cpu_hit_rate": _mean(reps, "cpu_hit_rate"),
                    "kv_cache_gib_per_gpu": r["kv_cache_gib_per_gpu"],
                    "kv_headroom": 1.0
                    - max(x["peak_blocks_used"] for x in reps) / max(r["num_blocks"], 1),
                    "preemptions": _mean(reps, "preemptions"),
                    **{k: r.get(k) for k in POOL_COLUMNS},
                    "requests_finished": _mean(reps, "requests_finished"),
                    # the worst seed's share of requests refused (past max_model_len)
                    "refused_share": max(_refused_share(x) for x in reps),
                    "requests_per_s": _mean(
                        [{"v": x["requests_finished"] / x["window_s"]} for x in reps], "v"
                    ),
                    "usd_per_gpu_hour": price,
                    "tokens_per_usd": tput * 3600 / price if price else None,
                    "tokens_per_usd_ci_low": _per_usd(
                        r["throughput_tok_per_s_per_gpu_ci_low"], price
                    ),
                    "tokens_per_usd_ci_high": _per_usd(
                        r["throughput_tok_per_s_per_gpu_ci_high"], price
                    ),
                    **dollars,
                    "slo_met": ok,
                    "wall_s": sum(x["wall_s"] for x in reps),
                }
            )
    return pd.DataFrame(rows)


def _refused_share(summary: dict[str, Any]) -> float:
    total = requests_seen(summary)
    return summary.get("requests_rejected", 0) / total if total else 0.0


# figure columns the runs table takes from ``replicates.aggregate`` (mean and interval)
FIGURE_PREFIXES = tuple(FIGURES.values())
HOURS_PER_MONTH = 730.0  # 8,760 h / 12


def _mean(reps: list[dict[str, Any]], key: str) -> float | None:
    xs = [x[key] for x in reps if x.get(key) is not None]
    return sum(xs) / len(xs) if xs else None


def _per_usd(tput: float | None, price: float | None) -> float | None:
    return tput * 3600 / price if tput is not None and price else None


def _dollars(
    price: float | None, tput: float, out_tput: float, gpus: int, users: int | None
) -> dict[str, float | None]:
    """What a buyer reads: output tokens per USD, USD per million output tokens (and per
    million total tokens), USD per deployment-hour and per user-hour at this load."""
    if not price:
        return dict.fromkeys(
            ("output_tokens_per_usd", "usd_per_mtok", "usd_per_m_output_tok",
             "usd_per_deployment_hour", "usd_per_user_hour"),
            None,
        )  # fmt: skip
    return {
        "output_tokens_per_usd": out_tput * 3600 / price,
        "usd_per_mtok": price / (tput * 3600) * 1e6 if tput else None,
        "usd_per_m_output_tok": price / (out_tput * 3600) * 1e6 if out_tput else None,
        "usd_per_deployment_hour": price * gpus,
        "usd_per_user_hour": price * gpus / users if users else None,
    }


# per-pool figures of disaggregated runs (empty for aggregated ones)
POOL_COLUMNS = (
    "prefill_input_tok_per_s_per_gpu",
    "decode_output_tok_per_s_per_gpu",
    "remote_hit_rate",
    "decode_kv_usage_mean",
    "decode_kv_pinned_share_mean",
    "kv_transfer_s_p90",
    "send_back_pulls",
    "send_back_recomputes",
)


def operating_points(runs: pd.DataFrame) -> pd.DataFrame:
    """Per configuration, its operating point: the max-load search's point where it ran one
    (``operating_point``), else its best SLO-meeting run of the grid (configurations that
    never meet the SLO drop). No runs (every configuration pruned): no points."""
    if runs.empty or "slo_met" not in runs.columns:
        return runs.iloc[0:0]
    ok = runs[runs.slo_met]
    if "operating_point" in runs.columns:
        ok = ok[ok.operating_point.astype(bool)]
    if ok.empty:
        return ok
    idx = ok.groupby("config_id").throughput_tok_per_s_per_gpu.idxmax()
    return ok.loc[idx].sort_values("throughput_tok_per_s_per_gpu", ascending=False)


def fleet_unit(device: str) -> tuple[str, int]:
    """What a fleet of ``device`` is bought by: a rack of its scale-up domain where that domain
    spans more than a node (GB200 / GB300 NVL72: 72 GPUs), one machine where the device is a
    whole computer with unified memory (a Mac), else a node of ``NODE_GPUS``."""
    profile = catalog.hardware_profile(device)
    if profile.host_link.kind == "unified":
        return ("machine", 1)
    domain = profile.scale_up.domain_size if profile.scale_up is not None else 1
    return ("rack", domain) if domain > NODE_GPUS else ("node", NODE_GPUS)


def rank_basis(space: SearchSpace, best: pd.DataFrame) -> str:
    """The column devices are ranked by: the fleet's USD per hour for the demand (lowest
    first) when the space has a demand and a price, else tokens per USD, else throughput per
    GPU (highest first)."""
    demand = space.demand_users or space.demand_requests_per_s
    if demand and "fleet_usd_per_hour" in best.columns and best.fleet_usd_per_hour.notna().any():
        return "fleet_usd_per_hour"
    if "tokens_per_usd" in best.columns and best.tokens_per_usd.notna().any():
        return "tokens_per_usd"
    return "throughput_tok_per_s_per_gpu"


def best_per_device(space: SearchSpace, runs: pd.DataFrame) -> pd.DataFrame:
    """The best operating point of each device (by tokens per dollar, else throughput per GPU),
    with the fleet it takes for ``demand_users`` (users per replica = its concurrency) or
    ``demand_requests_per_s`` (requests per second a replica completed at that point), ranked
    (``rank``: 1 is the answer) by ``rank_basis``.

    The fleet is bought by ``unit`` (``node`` of 8 GPUs, or ``rack`` of the scale-up domain
    for NVL72 systems): ``units`` of ``unit_gpus``, ``gpus_bought`` GPUs for the ``gpus`` in
    use, ``fleet_usd_per_hour`` / ``fleet_usd_per_month`` for what is bought, with the range
    if the simulator is off by the device's error band (``_band_low`` / ``_band_high``) and
    at the ends of the seeds' throughput interval (``_ci_low`` / ``_ci_high``). ``nodes``
    (GPUs / 8) and ``usd_per_hour`` (GPUs in use x price) are kept as before."""
    points = operating_points(runs)
    if points.empty:
        return points
    key = (
        "tokens_per_usd" if points.tokens_per_usd.notna().any() else "throughput_tok_per_s_per_gpu"
    )
    # ties (an offload twin that never used its host memory) go to the smaller deployment,
    # then the one without offload, then the id: not to the row order
    ties = [c for c in ("gpus_per_deployment", "cpu_offload_bytes", "config_id") if c in points]
    ordered = points.sort_values([key, *ties], ascending=[False] + [True] * len(ties))
    best = ordered.groupby("device", sort=False).head(1).copy()
    need: list[float] = []  # deployments the demand needs, before rounding up
    if space.demand_users:
        need = [space.demand_users / c for c in best.concurrency]
    elif space.demand_requests_per_s:
        need = [space.demand_requests_per_s / r for r in best.requests_per_s]
    if need:
        _add_fleet(space, best, need)
    basis = rank_basis(space, best)
    ascending = basis == "fleet_usd_per_hour"
    best = best.sort_values(basis, ascending=ascending, na_position="last", kind="stable")
    best["rank"] = range(1, len(best) + 1)
    return best


def _add_fleet(space: SearchSpace, best: pd.DataFrame, need: list[float]) -> None:
    # a deployment (dp replicas of tp GPUs, or its prefill and decode replicas) serves
    # `concurrency` users together; the fleet is whole deployments
    replicas = [math.ceil(n) for n in need]
    per_deployment = [int(g) for g in best.gpus_per_deployment]
    gpus = [n * g for n, g in zip(replicas, per_deployment, strict=True)]
    prices = list(best.usd_per_gpu_hour)
    best["replicas"] = replicas
    best["gpus"] = gpus
    best["nodes"] = [math.ceil(g / NODE_GPUS) for g in gpus]
    best["usd_per_hour"] = [g * p if p else None for g, p in zip(gpus, prices, strict=True)]
    best["usd_per_month"] = [
        h * HOURS_PER_MONTH if h is not None else None for h in best.usd_per_hour
    ]
    band = [model_error(d) for d in best.device]
    best["model_error_pct"] = [b.median_ape_pct for b in band]
    best["model_error_basis"] = [b.basis for b in band]
    units = [fleet_unit(d) for d in best.device]
    best["unit"] = [u for u, _ in units]
    best["unit_gpus"] = [n for _, n in units]

    def count(n_gpus: float, per_unit: int) -> int:
        return math.ceil(n_gpus / per_unit - 1e-9)

    # the fleet if the simulator is off by its error band: capacity per deployment scales with
    # the throughput (an optimistic model buys too few nodes); whole deployments again, from
    # the demand (not the rounded fleet: 700 users at 30 a deployment and +19.5 % need 20
    # deployments, where 24 / 1.195 rounded up read 21)
    factors = {
        "band_low": [1.0 + b.median_ape_pct / 100.0 for b in band],
        "band_high": [max(1.0 - b.median_ape_pct / 100.0, 0.05) for b in band],
        # ... and at the ends of the seeds' throughput interval
        "ci_low": list(_ratio(best, "throughput_tok_per_s_per_gpu_ci_high")),
        "ci_high": list(_ratio(best, "throughput_tok_per_s_per_gpu_ci_low")),
    }

    def gpus_at(fs: list[float]) -> list[int]:
        return [count(n / f, 1) * g for n, f, g in zip(need, fs, per_deployment, strict=True)]

    at = {end: gpus_at(fs) for end, fs in factors.items()}
    best["nodes_band_low"] = [count(g, NODE_GPUS) for g in at["band_low"]]
    best["nodes_band_high"] = [count(g, NODE_GPUS) for g in at["band_high"]]
    per_unit = [n for _, n in units]
    best["units"] = [count(g, n) for g, n in zip(gpus, per_unit, strict=True)]
    ends = {end: [count(g, n) for g, n in zip(at[end], per_unit, strict=True)] for end in at}
    best["units_band_low"], best["units_band_high"] = ends["band_low"], ends["band_high"]
    best["gpus_bought"] = [u * n for u, n in zip(best.units, per_unit, strict=True)]

    def cost(counts: list[int]) -> list[float | None]:
        return [u * n * p if p else None for u, n, p in zip(counts, per_unit, prices, strict=True)]

    best["fleet_usd_per_hour"] = cost(list(best.units))
    for end, counts in ends.items():
        best[f"fleet_usd_per_hour_{end}"] = cost(counts)
    if space.demand_users:  # what is bought, per user (not the GPUs in use alone)
        best["usd_per_user_hour"] = [
            h / space.demand_users if h is not None else None for h in best.fleet_usd_per_hour
        ]
    best["fleet_usd_per_month"] = [
        h * HOURS_PER_MONTH if h is not None else None for h in best.fleet_usd_per_hour
    ]


def _ratio(best: pd.DataFrame, column: str) -> list[float]:
    """Throughput at one end of its interval over the mean (1 where there is no interval)."""
    if column not in best.columns:
        return [1.0] * len(best)
    out = []
    for end, mean in zip(best[column], best.throughput_tok_per_s_per_gpu, strict=True):
        ok = end is not None and end == end and mean
        out.append(max(float(end) / float(mean), 0.05) if ok else 1.0)
    return out


def knob_cells(knobs: dict[str, Any]) -> dict[str, Any]:
    """A configuration's knobs as runs.csv and pruned.csv hold them: speculative decoding and
    the xPyD split as text, the others as they are."""
    spec = knobs["speculative"]
    return {
        **{k: knobs[k] for k in KNOBS if k not in ("speculative", "disaggregation")},
        "speculative": f"{spec['method']} K={spec['num_speculative_tokens']}" if spec else "",
        "disaggregation": disaggregation_text(knobs.get("disaggregation")),
    }


def pruned_table(pruned: list[Pruned]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        [{"device": p.device, **knob_cells(p.knobs), "reason": p.reason} for p in pruned]
    )
