"""Why a device has no answer, and configurations as a reader reads them.

``verdicts`` tells, per device of a search, whether it meets the SLO and if not why: every
configuration pruned for memory (``does not fit: needs at least N GPUs for the weights``),
configurations that ran but never met the SLO (its best P90 at the lowest load tried), or no
valid configuration for another reason. ``config_label`` / ``knob_text`` are the readable
labels the report, ``plan search`` and ``plan size`` print.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from simulator import catalog
from simulator.planner.analysis import fleet_unit
from simulator.planner.expand import disaggregation_text, knob_values
from simulator.planner.space import SearchSpace
from simulator.specs.loading import SpecError

if TYPE_CHECKING:
    import pandas as pd


# the reasons ``expand`` prunes a configuration for memory (``MemoryReport.fits_reason``)
MEMORY_REASONS = ("weights exceed", "no memory left for the KV cache", "KV cache holds",
                  "exceed the usable memory")  # fmt: skip


def for_memory(reasons: Iterable[str]) -> bool:
    """Whether any of ``reasons`` prunes for memory (one of ``MEMORY_REASONS``)."""
    return any(m in r for r in reasons for m in MEMORY_REASONS)


MAX_TP_TRIED = 1024  # the widest tensor-parallel group ``min_gpus_for_weights`` looks at


@dataclass(frozen=True)
class Verdict:
    """Why a device has no SLO-meeting configuration (``meets`` where it has one)."""

    device: str
    kind: Literal["meets", "does_not_fit", "misses_slo", "no_valid_configuration"]
    text: str


def min_gpus_for_weights(space: SearchSpace, device: str) -> int | None:
    """The fewest GPUs of ``device`` (one tensor-parallel group, experts spread with it when
    the sweep tries expert parallelism) whose memory holds the model's weights beside the
    activation and runtime reserves, at the space's base serving knobs; None beyond
    ``MAX_TP_TRIED``. The scale-up domain is not applied: this is what the weights need."""
    from simulator.deployment import check_deployment
    from simulator.memory import activation_reserve_bytes
    from simulator.weights import weights_per_gpu

    card = catalog.model_card(space.model)
    profile = catalog.hardware_profile(device)
    expert = card.moe is not None and (max(space.sweep.ep) > 1 or space.serving.ep > 1)
    budget = space.serving.gpu_memory_utilization * profile.usable_memory_bytes
    for tp in range(1, MAX_TP_TRIED + 1):
        trial = space.serving.model_copy(
            update={"tp": tp, "dp": 1, "ep": tp if expert else 1, "dcp": 1}
        )
        try:
            check_deployment(card, trial)
        except SpecError:  # tp does not divide the heads (or ep the experts): not a deployment
            continue
        weights = sum(g.bytes_per_gpu for g in weights_per_gpu(card, trial))
        reserve = activation_reserve_bytes(card, trial, profile) + trial.runtime_reserve_bytes
        if weights + reserve < budget:
            return tp
    return None


def verdicts(
    space: SearchSpace, runs: pd.DataFrame, best: pd.DataFrame, pruned: pd.DataFrame | None = None
) -> list[Verdict]:
    """Per device of the space, whether it has an answer and, if not, why: every
    configuration pruned for memory (``does not fit: needs at least N GPUs for the weights``),
    configurations that ran but never met the SLO (``misses the SLO``: its best P90
    interactivity at the lowest load tried), or every configuration invalid for another
    reason. ``pruned`` is ``pruned_table``'s (without it, the memory check alone tells)."""
    met = set(best.device) if not best.empty else set()
    ran = set(runs.device) if "device" in runs.columns else set()
    out = []
    for device in space.devices:
        if device in met:
            out.append(Verdict(device, "meets", "meets the SLO"))
        elif device in ran:
            out.append(Verdict(device, "misses_slo", _misses_text(space, runs, device)))
        else:
            out.append(_pruned_verdict(space, device, pruned))
    return out


def _pruned_verdict(space: SearchSpace, device: str, pruned: pd.DataFrame | None) -> Verdict:
    mine = pruned[pruned.device == device] if pruned is not None and not pruned.empty else None
    reasons = [] if mine is None else [str(r) for r in mine.reason if " repeats " not in str(r)]
    tps = [int(t) for t in mine.tp] if mine is not None and not mine.empty else []
    tried = max(tps or knob_values(space)["tp"])
    need = min_gpus_for_weights(space, device)
    profile = catalog.hardware_profile(device)
    domain = profile.scale_up.domain_size if profile.scale_up is not None else 1
    unit, _ = fleet_unit(device)
    has = (
        f"has {domain} per {unit}, TP tried up to {tried}"
        if profile.scale_up is not None
        else "has 1 per deployment: no scale-up fabric"
    )
    if reasons and not for_memory(reasons):
        # pruned for something else (an EP that does not span TP x DP, heads TP does not
        # divide): the weights are not what stops it, whatever they need
        return _invalid(device, reasons)
    if need is None:
        return Verdict(
            device,
            "does_not_fit",
            f"does not fit: the weights do not fit on {MAX_TP_TRIED:,} GPUs ({has})",
        )
    if need > min(tried, domain):  # TP beyond the scale-up domain is pruned as well
        return Verdict(
            device,
            "does_not_fit",
            f"does not fit: needs at least {need} GPUs for the weights ({has})",
        )
    if for_memory(reasons):
        return Verdict(
            device,
            "does_not_fit",
            f"does not fit: the weights fit on {need} GPUs but leave no room for the KV cache"
            f" of one sequence ({has})",
        )
    return _invalid(device, reasons)


def _invalid(device: str, reasons: list[str]) -> Verdict:
    if not reasons:
        text = "every configuration was pruned (the reasons are in pruned.csv)"
    else:
        text = f"has no valid configuration: {max(sorted(set(reasons)), key=reasons.count)}"
    return Verdict(device, "no_valid_configuration", text)


def _misses_text(space: SearchSpace, runs: pd.DataFrame, device: str) -> str:
    """The best the device did at the lowest load tried, in the terms of the SLO it missed."""
    mine = runs[runs.device == device]
    lowest = int(mine.concurrency.min())
    at = mine[mine.concurrency == lowest].sort_values("interactivity_p90", ascending=False)
    r = at.iloc[0]
    slo = space.slo
    where = f"at the lowest load tried ({lowest} users, {config_label(r)})"
    target = slo.interactivity_tok_per_s_p90
    worst = r.get("interactivity_p90_worst")
    inter = r.interactivity_p90
    if target and (inter is None or inter != inter):  # (it read "best P90 interactivity -")
        window = space.duration_s - space.warmup_s
        return (
            f"misses the SLO: no inter-token gap was measured {where}, in a {window:,.0f} s"
            " window after the warm-up (lengthen duration_s - warmup_s)"
        )
    if target and inter < target:
        best_seen = f"best P90 interactivity {inter:,.1f} tok/s/user (SLO {target:g})"
        return f"misses the SLO: {best_seen} {where}"
    if target and worst is not None and worst == worst and worst < target:
        return (
            f"misses the SLO: best P90 interactivity {inter:,.1f} tok/s/user on the mean but"
            f" {worst:,.1f} on its worst seed (SLO {target:g}) {where}"
        )
    ttft = r.get("ttft_p90_s_worst")
    if slo.ttft_s_p90 and ttft is not None and ttft == ttft and ttft > slo.ttft_s_p90:
        return f"misses the SLO: P90 TTFT {ttft:,.2f} s (SLO {slo.ttft_s_p90:g} s) {where}"
    if bool(r.get("saturated")):
        return f"misses the SLO: its queue grows (saturated) {where}"
    return f"misses the SLO {where}"


# -------------------------------------------------------------------------- readable labels

KNOB_NAMES = {
    "tp": "tensor parallel (TP)",
    "dcp": "decode context parallel (DCP)",
    "dp": "data-parallel replicas (DP)",
    "ep": "expert parallel (EP)",
    "cpu_offload_bytes": "CPU KV offload",
    "max_num_seqs": "max running sequences",
    "max_num_batched_tokens": "max batched tokens per step",
    "speculative": "speculative decoding",
    "disaggregation": "prefill/decode split",
}


def _missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or x == ""


def size_text(n_bytes: float) -> str:
    """Bytes in binary units, as an offload size reads: ``512 GiB``, ``1 TiB``."""
    if n_bytes >= 2**40:
        return f"{n_bytes / 2**40:.3g} TiB"
    return f"{n_bytes / 2**30:.3g} GiB"


def knob_text(knob: str, value: object) -> str:
    """One knob value as a reader reads it (None: vLLM's default)."""
    if _missing(value):
        return "none" if knob in ("speculative",) else "vLLM default"
    if knob == "cpu_offload_bytes":
        return size_text(float(value)) if float(value) else "none"  # type: ignore[arg-type]
    if knob == "speculative" and isinstance(value, dict):
        return f"{value['method']} K={value['num_speculative_tokens']}"
    if knob == "disaggregation" and not isinstance(value, str):
        return disaggregation_text(value)  # type: ignore[arg-type]
    if isinstance(value, float) and value.is_integer():
        return f"{int(value):,}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def config_label(row: Any) -> str:
    """A configuration as a buyer reads it: ``TP8 DCP2 DP2 EP8, offload 1 TiB, speculative
    eagle K=3, split 1P1D send-back`` (from a runs, best or pruned row)."""

    def get(k: str) -> Any:
        return row.get(k) if hasattr(row, "get") else row[k]

    parallel = [f"TP{knob_text('tp', get('tp'))}"]
    for k in ("dcp", "dp", "ep"):
        v = get(k)
        if not _missing(v) and int(v) > 1:
            parallel.append(f"{k.upper()}{int(v)}")
    parts = [" ".join(parallel)]
    offload = get("cpu_offload_bytes")
    if not _missing(offload) and float(offload):
        parts.append(f"offload {size_text(float(offload))}")
    if not _missing(get("max_num_seqs")):
        parts.append(f"max {knob_text('max_num_seqs', get('max_num_seqs'))} seqs")
    if not _missing(get("max_num_batched_tokens")):
        parts.append(f"{knob_text('max_num_batched_tokens', get('max_num_batched_tokens'))}"
                     " batched tokens")  # fmt: skip
    spec = get("speculative")
    if not _missing(spec):
        parts.append(f"speculative {knob_text('speculative', spec)}")
    split = get("disaggregation")
    if not _missing(split) and knob_text("disaggregation", split) != "aggregated":
        parts.append(f"split {knob_text('disaggregation', split)}")
    return ", ".join(parts)
