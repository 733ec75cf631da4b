"""The answer a report, ``plan size`` and the dashboard open with: what to buy (units of a
device, GPUs, USD per hour with the range from the model's error band) and the runner-up, or
why no device qualifies; the SLO in words; and the sentence on where each device's op
latencies come from and what its figures are worth (``uncertainty``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator import catalog
from simulator.planner.analysis import rank_basis
from simulator.planner.report_tables import (
    demand_text,
    model_error_pct,
    plural,
    tokens,
    unit_text,
    usd,
)
from simulator.planner.space import SearchSpace
from simulator.planner.uncertainty import latency_note, marginal_ttft_text, model_error
from simulator.planner.verdicts import config_label, verdicts

if TYPE_CHECKING:
    import pandas as pd


def sources_caveat(devices: list[str]) -> str:
    """Where each device's op latencies come from and its known end-to-end error band."""
    from simulator.measured.device import basis_of, tables_for
    from simulator.measured.package import tables_available, unavailable_note

    parts = []
    for d in devices:
        profile = catalog.hardware_profile(d)
        if profile.calibrated:
            source = "calibrated on the device"
        else:
            tables = tables_for(profile) if tables_available() else None
            source = basis_of(profile, tables) if tables_available() else "roofline priors"
        err = model_error(d)
        parts.append(
            f"{d}: {source}; throughput error band {err.median_ape_pct:.0f} % ({err.basis});"
            f" {latency_note(d)}"
        )
    text = "Op latencies and known error per device: " + "; ".join(parts) + "."
    if not tables_available():
        text += " " + unavailable_note() + "."
    return text + " Intervals are 95 % over the seeds (Student t of the mean)."


# ------------------------------------------------------------------------------ the answer


def refused_note(runs: Any) -> str | None:
    """A line when some runs refused requests (prompts past max_model_len, vLLM's 400): their
    figures are of the requests they served, so the answer rests on a narrower workload."""
    if "refused_share" not in runs.columns:  # a search with no run has no columns
        return None
    share = runs["refused_share"]
    if not (share > 0).any():
        return None
    top = float(share.max())  # (0.5 % read "up to 0 %" at whole percents)
    most = f"{top:.0%}" if top >= 0.095 else f"{top:.1%}" if top >= 0.001 else "under 0.1%"
    return (
        f"note: {int((share > 0).sum()):,} of {len(runs):,} simulated points refused requests"
        f" longer than the deployment's max_model_len (up to {most} of a run's):"
        " their figures are of the requests served, not of the whole workload"
    )


def slo_text(space: SearchSpace) -> str:
    slo = space.slo
    parts = []
    if slo.interactivity_tok_per_s_p90:
        parts.append(f"P90 interactivity >= {slo.interactivity_tok_per_s_p90:g} tok/s/user")
    if slo.ttft_s_p90:
        parts.append(f"P90 TTFT <= {slo.ttft_s_p90:g} s")
    return ", ".join(parts) or "no target"


# a verdict in the headline
SHORT = {"meets": "meets the SLO", "does_not_fit": "does not fit", "misses_slo": "misses the SLO",
         "no_valid_configuration": "has no valid configuration"}  # fmt: skip


def answer(
    space: SearchSpace,
    best: pd.DataFrame,
    runs: pd.DataFrame,
    pruned: pd.DataFrame | None = None,
    with_reasons: bool = True,
) -> tuple[str, str]:
    """The headline and the answer sentence: what to buy and the runner-up (by the fleet's
    USD per hour for the demand, else tokens per USD), or that no device qualifies and why.
    ``with_reasons``: end it with why the other devices are not candidates (``plan size`` lists
    them on their own lines instead)."""
    why = [v for v in verdicts(space, runs, best, pruned) if v.kind != "meets"]
    if best.empty:
        short = ", ".join(f"{v.device} {SHORT[v.kind]}" for v in why)
        reasons = "; ".join(f"{v.device} {v.text}" for v in why)
        return (
            f"{space.name}: no device meets the SLO ({short})",
            f"No device meets the SLO ({slo_text(space)}): {reasons}.",
        )
    basis = rank_basis(space, best)
    ranked = best[best[basis].notna()]
    top = ranked.iloc[0]
    second = ranked.iloc[1] if len(ranked) > 1 else None
    if basis == "fleet_usd_per_hour":
        headline, text = _buy(space, top, second)
    else:
        headline, text = _best_value(space, basis, top, second)
    text += marginal_ttft_text(
        str(top.device), top.get("ttft_p90_s_worst", top.get("ttft_p90_s")), space.slo.ttft_s_p90
    )
    if why and with_reasons:
        text += ". Not a candidate: " + "; ".join(f"{v.device} {v.text}" for v in why)
    return headline, text + "."


def _band_text(row: Any) -> str:
    return f"the model's {row.get('model_error_pct', model_error_pct(row.device)):.0f} % error band"


def _buy(space: SearchSpace, top: Any, second: Any | None) -> tuple[str, str]:
    """``Buy 13 nodes of 8x H100 (104 GPUs) at $176/hour (range ...); runner-up: ...``"""
    bought, used = int(top.gpus_bought), int(top.gpus)
    in_use = f", {used:,} in use" if used != bought else ""
    cost = usd(top.fleet_usd_per_hour)
    text = (
        f"Buy {unit_text(top)} ({bought:,} GPUs{in_use}) at {cost}/hour (range"
        f" {usd(top.fleet_usd_per_hour_band_low)}-{usd(top.fleet_usd_per_hour_band_high)}"
        f" from {_band_text(top)}) for {demand_text(space)}: {config_label(top)} at"
        f" {int(top.concurrency)} users per deployment ({plural(int(top.replicas), 'deployment')}"
        f" of {plural(int(top.gpus_per_deployment), 'GPU')}), P90 interactivity"
        f" {top.interactivity_p90:,.1f} tok/s/user"
    )
    if second is not None:
        more = second.fleet_usd_per_hour / top.fleet_usd_per_hour - 1
        text += (
            f"; runner-up: {unit_text(second)} ({config_label(second)}) at"
            f" {usd(second.fleet_usd_per_hour)}/hour ({100 * more:+.1f} %)"
        )
    return f"{space.name}: buy {unit_text(top)} at {cost}/hour", text


def _best_value(space: SearchSpace, basis: str, top: Any, second: Any | None) -> tuple[str, str]:
    """Without a fleet to price: the most tokens per USD (or per GPU) and the runner-up."""
    per_usd = basis == "tokens_per_usd"

    def shown(x: float) -> str:
        return tokens(x) if per_usd else f"{x:,.0f}"

    unit = "tokens per USD" if per_usd else "tok/s per GPU"
    e = float(top.get("model_error_pct", model_error_pct(top.device))) / 100
    name = str(top.device).upper()
    text = (
        f"Best value: {name} {config_label(top)} at {int(top.concurrency)} users per deployment:"
        f" {shown(top[basis])} {unit} (range {shown(top[basis] * (1 - e))}"
        f"-{shown(top[basis] * (1 + e))} from {_band_text(top)})"
    )
    if second is not None:
        less = second[basis] / top[basis] - 1
        text += (
            f"; runner-up: {str(second.device).upper()} {config_label(second)}"
            f" ({100 * less:+.1f} %)"
        )
    if not (space.demand_users or space.demand_requests_per_s):
        text += (
            ". No demand given (demand_users or demand_requests_per_s): set one to size the"
            " fleet and rank by its USD per hour"
        )
    elif not per_usd:
        text += f". No price for these devices in {space.cost_model}: ranked by tok/s per GPU"
    return f"{space.name}: best value {name}, {shown(top[basis])} {unit}", text


# a disaggregated deployment's link, as the report states it
