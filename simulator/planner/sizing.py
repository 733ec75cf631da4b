"""``plan size``: a sizing answer from a model, a demand and an SLO, on documented defaults.

A :class:`SizeRequest` (model, concurrent users, P90 interactivity target, optional TTFT
target, devices, workload, cost model) becomes a max-load search over a small, stated set of
configurations per device (:func:`device_sweeps`). The searches of every device run together,
through the same worker pool and result cache as ``plan search``; the answer is each device's
cheapest SLO-meeting configuration with the fleet it takes for the demand, ranked by the
fleet's USD per hour, and the ``vllm serve`` line that deploys it (:mod:`deploy`).

The defaults (docs/sizing.md gives the reasons):

- devices: every device the cost model prices (one without a price cannot be ranked);
- tensor parallel: the smallest TP of 1, 2, 4, 8 (16, 32, 64 within a rack-scale domain such
  as NVL72) whose weights fit with KV room, and 8; twice the smallest where it is 8 or more
  and the domain holds it (:func:`tp_tried`);
- decode context parallel: 1 and TP for models with MLA layers on the agentic workload;
- CPU KV offload, agentic workload only: off, and half the host DRAM per GPU x TP (the
  profile's ``host_dram_bytes_per_gpu``, itself an assumption each profile names);
- users per deployment: from 8 up to the demand (at most 256), bisected to 5 % of the load
  (``quick``: 10 %, 20-minute windows after a 5-minute warm-up, 2 seeds; else 60 and 10
  minutes, 3 seeds);
- everything else (max_num_seqs, max_num_batched_tokens, block size): vLLM's defaults.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, PositiveFloat, PositiveInt

from simulator import catalog
from simulator.planner.analysis import NODE_GPUS
from simulator.planner.expand import Candidate, Pruned, all_pruned_reason, expand
from simulator.planner.search import SEARCH_FILES
from simulator.planner.space import SearchSpace
from simulator.planner.verdicts import for_memory
from simulator.specs.frozen import Spec
from simulator.specs.limits import MAX_GENERATED_SESSIONS, MAX_SEARCH_RUNS, at_most
from simulator.specs.loading import SpecError, parse
from simulator.specs.scenario import INTERACTIVITY_TARGET, TTFT_TARGET

if TYPE_CHECKING:
    import pandas as pd

    from simulator.planner.search import Batch

# tensor-parallel sizes tried, within the device's scale-up domain: past 8 only on rack-scale
# domains (NVL72), where a model too large for 8 GPUs still runs on one NVLink fabric
TP_CHOICES = (1, 2, 4, 8, 16, 32, 64)
MIN_USERS = 8
WORKLOADS = ("agentic", "chat", "random")
SESSIONS = 1000  # generated sessions per run (closed loop: enough for every window)


class SizeRequest(Spec):
    """What ``plan size`` answers: ``users`` concurrent users of ``model`` at
    ``slo_interactivity_tok_per_s`` (P90 tokens/s per user) for the fewest dollars."""

    model: str
    users: Annotated[PositiveInt, at_most(MAX_GENERATED_SESSIONS, "concurrent users")]
    slo_interactivity_tok_per_s: Annotated[PositiveFloat, *INTERACTIVITY_TARGET]
    slo_ttft_p90_s: Annotated[PositiveFloat | None, *TTFT_TARGET] = None
    devices: list[str] | None = Field(default=None, min_length=1)  # None: every priced one
    # agentic | chat | random, or the path of a trace file (replayed as a closed loop)
    workload: str = "agentic"
    isl: PositiveInt = 8192  # random workload: input tokens per request
    osl: PositiveInt = 1024  # random workload: output tokens per request
    cost_model: str = "semianalysis_tco_neocloud"
    seeds: PositiveInt | None = None  # None: 3 (quick: 2)
    quick: bool = False
    max_users_per_deployment: PositiveInt = 256


@dataclass
class SizeResult:
    """``table``: one row per device that serves the demand, ranked by the fleet's USD per
    hour; ``answer``: the one line; ``commands``: config id -> ``vllm serve ...``;
    ``not_served``: ``device: why`` for the others; ``report_dir``: where the report went."""

    table: pd.DataFrame
    answer: str
    commands: dict[str, str]
    not_served: list[str]
    space: SearchSpace
    runs: pd.DataFrame
    best: pd.DataFrame
    simulations: int
    pruned: list[Pruned] = field(default_factory=list)
    report_dir: Path | None = None


def _workload(request: SizeRequest, base: Path) -> dict[str, Any]:
    kind = request.workload
    if kind == "random":
        return {"kind": "random", "input_tokens": request.isl, "output_tokens": request.osl,
                "num_requests": 20 * SESSIONS, "concurrency": 1}  # fmt: skip
    if kind in ("agentic", "chat"):
        return {"kind": kind, "sessions": SESSIONS, "concurrency": 1}
    path = Path(kind)
    if not path.is_absolute():
        path = base / path
    if not kind.strip() or not path.exists():  # '' would name the current folder
        raise SpecError(
            "(arguments)",
            "workload",
            f"{kind!r} is neither a built-in workload ({', '.join(WORKLOADS)}) nor a file",
        )
    return {"kind": "trace", "path": str(path), "concurrency": 1}


def devices_for(request: SizeRequest) -> list[str]:
    """The devices to size: the request's, else every device the cost model prices."""
    prices = catalog.cost_model(request.cost_model).usd_per_gpu_hour
    if request.devices is not None:
        for d in request.devices:
            catalog.hardware_profile(d)  # an unknown name is one line naming the catalog
        return list(request.devices)
    return [d for d in catalog.device_names() if d in prices]


def owned_fields(request: SizeRequest) -> dict[str, str]:
    """The space's fields ``plan size``'s options set (``--set`` may not set them too)."""
    owned = {"model": "--model", "demand_users": "--users", "cost_model": "--cost-model",
             "slo.interactivity_tok_per_s_p90": "--slo-interactivity"}  # fmt: skip
    if request.slo_ttft_p90_s is not None:
        owned["slo.ttft_s_p90"] = "--slo-ttft-p90"
    if request.devices is not None:
        owned["devices"] = "--devices"
    if request.seeds is not None:
        owned["seeds"] = "--seeds"
    return owned


def base_space(request: SizeRequest, base: Path = Path()) -> dict[str, Any]:
    """The search space every device's search starts from, as a YAML-like dict (``--set``
    overrides apply to it)."""
    hi = max(1, min(request.users, request.max_users_per_deployment))
    slo: dict[str, float] = {"interactivity_tok_per_s_p90": request.slo_interactivity_tok_per_s}
    if request.slo_ttft_p90_s is not None:
        slo["ttft_s_p90"] = request.slo_ttft_p90_s
    quick = request.quick
    return {
        "name": f"size-{request.model}-{request.users}users",
        "model": request.model,
        "devices": devices_for(request),
        "serving": {},
        "sweep": {},
        "concurrency": sorted({min(MIN_USERS, hi), hi}),
        "workload": _workload(request, base),
        "slo": slo,
        "cost_model": request.cost_model,
        "demand_users": request.users,
        "duration_s": 1200.0 if quick else 3600.0,
        "warmup_s": 300.0 if quick else 600.0,
        "seeds": request.seeds or (2 if quick else 3),
        "load_tolerance": 0.1 if quick else 0.05,
    }


def check_lengths(workload: object, isl: object, osl: object) -> None:
    """``isl`` / ``osl`` set the random workload's lengths: given with another workload they
    would be dropped without a word."""
    for name, value in (("isl", isl), ("osl", osl)):
        if value is not None and workload != "random":
            raise SpecError(
                "(arguments)",
                name,
                f"sets the random workload's lengths; --workload is {workload}",
            )


def device_sweeps(space: SearchSpace, device: str, source: str) -> list[dict[str, list[Any]]]:
    """The configurations tried on ``device``, one sweep per tensor-parallel size (the
    offload size is per replica, so it follows the TP; see the module's docstring)."""
    card = catalog.model_card(space.model)
    profile = catalog.hardware_profile(device)
    domain = profile.scale_up.domain_size if profile.scale_up is not None else 1
    tps = [t for t in TP_CHOICES if t <= max(domain, 1)]
    probe = space.model_copy(update={"devices": [device]})
    fits = []
    for tp in tps:
        trial = probe.model_copy(update={"sweep": probe.sweep.model_copy(update={"tp": [tp]})})
        found, _ = expand(trial, source)
        if found:
            fits.append(tp)
    if not fits:
        return [{"tp": [max(tps)]}]  # pruned in plan_candidates, with the memory planner's reason
    mla = bool(card.layers.mixers.get("mla"))
    agentic = space.workload.kind in ("agentic", "trace")
    per_gpu = math.floor(profile.host_dram_bytes_per_gpu / 2 / 2**30) * 2**30
    sweeps = []
    for tp in tp_tried(fits):
        sweep: dict[str, list[Any]] = {"tp": [tp]}
        if mla and agentic and tp > 1:
            sweep["dcp"] = [1, tp]
        if agentic and per_gpu:
            sweep["cpu_offload_bytes"] = [0.0, float(per_gpu * tp)]
        sweeps.append(sweep)
    return sweeps


def tp_tried(fits: list[int]) -> list[int]:
    """The TPs sized among ``fits`` (those whose weights fit with KV room, ascending): the
    smallest, and the widest up to a board's 8 (or the smallest, if that is wider); where the
    smallest is 8 or more (a model that fills a board, on a rack-scale domain), also twice
    it: on NVL72 the next size adds KV room and decode bandwidth on the same fabric."""
    small = fits[0]
    tried = {small, max(t for t in fits if t <= max(small, NODE_GPUS))}
    if small >= NODE_GPUS and 2 * small in fits:
        tried.add(2 * small)
    return sorted(tried)


def plan_candidates(
    space_data: dict[str, Any], source: str = "(arguments)"
) -> tuple[SearchSpace, list[Candidate], list[Pruned]]:
    """The merged space (for the report) and every device's candidates and pruned ones. A
    sweep the space data gives (``--set sweep.dcp=[1]``) replaces the defaults' knobs."""
    space = parse(SearchSpace, space_data, source)
    candidates: list[Candidate] = []
    pruned: list[Pruned] = []
    union: dict[str, list[Any]] = {}
    explicit = space_data.get("sweep") or {}
    for device in space.devices:
        for default in device_sweeps(space, device, source):
            sweep = {**default, **explicit}
            mine = space.model_copy(
                update={"devices": [device], "sweep": space.sweep.model_validate(sweep)}
            )
            found, dropped = expand(mine, source)
            candidates += found
            pruned += [p for p in dropped if p not in pruned]  # each default sweep repeats notes
            for k, values in sweep.items():
                seen = union.setdefault(k, [])
                seen += [v for v in values if v not in seen]
    numbers = {k: sorted(v) for k, v in union.items() if all(isinstance(x, int | float) for x in v)}
    merged = space.model_copy(update={"sweep": space.sweep.model_validate(union | numbers)})
    return merged, candidates, pruned


def ranked(best: pd.DataFrame, space: SearchSpace) -> pd.DataFrame:
    """One row per device, cheapest fleet first (``best_per_device``'s rank), in the columns
    ``plan size`` answers with; the fleet is what is bought (whole nodes or racks)."""
    import pandas as pd

    from simulator.planner.verdicts import config_label

    if best.empty or "fleet_usd_per_hour" not in best.columns:
        return pd.DataFrame()
    target = space.slo.interactivity_tok_per_s_p90
    users = space.demand_users or 0
    table = pd.DataFrame(
        {
            "rank": best["rank"].astype(int),
            "device": best.device,
            "config_id": best.config_id,
            "label": [config_label(r) for _, r in best.iterrows()],
            "users_per_deployment": best.concurrency.astype(int),
            "gpus_per_deployment": best.gpus_per_deployment.astype(int),
            "replicas": best.replicas.astype(int),
            "gpus": best.gpus.astype(int),
            "gpus_bought": best.gpus_bought.astype(int),
            "unit": best.unit,
            "units": best.units.astype(int),
            "units_band_low": best.units_band_low.astype(int),
            "units_band_high": best.units_band_high.astype(int),
            "usd_per_hour": best.fleet_usd_per_hour,
            "usd_per_hour_band_low": best.fleet_usd_per_hour_band_low,
            "usd_per_hour_band_high": best.fleet_usd_per_hour_band_high,
            "usd_per_month": best.fleet_usd_per_month,
            "usd_per_m_output_tok": best.usd_per_m_output_tok,
            "usd_per_user_hour": best.fleet_usd_per_hour / users if users else None,
            "interactivity_p90": best.interactivity_p90,
            "interactivity_p90_ci_low": best.get("interactivity_p90_ci_low"),
            "interactivity_p90_ci_high": best.get("interactivity_p90_ci_high"),
            # the SLO holds on every seed: the margin is the worst seed's
            "slo_margin_pct": (best.interactivity_p90_worst / target - 1) * 100 if target else None,
            "ttft_p90_s": best.ttft_p90_s,
            "throughput_tok_per_s_per_gpu": best.throughput_tok_per_s_per_gpu,
            "model_error_pct": best.model_error_pct,
            "verdict": [_verdict(h, space.cost_model) for h in best.fleet_usd_per_hour],
        }
    )
    return table.sort_values("rank").reset_index(drop=True)


def _verdict(usd_per_hour: float | None, cost_model: str) -> str:
    if usd_per_hour is None or usd_per_hour != usd_per_hour:
        return f"meets the SLO; no price in {cost_model}: not ranked by cost"
    return "meets the SLO"


def run_size(
    request: SizeRequest,
    out: Path | None = None,
    workers: int = 2,
    progress: Callable[[int, int], None] | None = None,
    cache_dir: Path | None = None,
    overrides: list[str] | None = None,
    base: Path = Path(),
    max_runs: int = MAX_SEARCH_RUNS,
) -> SizeResult:
    """Size the deployment: plan the candidates, run the searches, rank the devices and, with
    ``out``, write the report there (the folder swapped in whole, as ``plan search`` does).
    Results are cached per scenario in ``cache_dir`` (default ``out/cache``, else the user
    data folder's ``cache``). ``progress(done, at_most)`` counts simulations."""
    from simulator.outputs import OutputFolder
    from simulator.planner.search import cached_batches
    from simulator.planner.sizing_report import write_size_report
    from simulator.userdata import plan_home

    data = base_space(request, base)
    if overrides:
        from simulator.specs.overrides import apply_overrides, check_not_owned

        check_not_owned(overrides, owned_fields(request))
        data = apply_overrides(data, overrides, "(arguments)")
    space, candidates, pruned = plan_candidates(data)
    if not candidates and not for_memory(p.reason for p in pruned):
        # nothing is too big: the --set values make no configuration valid (as plan search)
        raise SpecError("(arguments)", "(configurations)", all_pruned_reason(pruned))
    at_most = planned_runs(space, candidates)
    if at_most > max_runs:
        raise SpecError(
            "(arguments)",
            "(search size)",
            f"at most {at_most:,} simulations exceed the cap of {max_runs:,} (name fewer"
            f" --devices, or raise it with --max-runs {at_most})",
        )
    counted = None if progress is None else (lambda done, _submitted: progress(done, at_most))
    folder = OutputFolder(out, "plan size", SIZE_FILES) if out is not None else None
    with folder if folder is not None else contextlib.nullcontext() as stage:
        default = folder.target / "cache" if folder is not None else plan_home() / "cache"
        cache = cache_dir or default
        with cached_batches(cache, workers, counted, source="(arguments)") as batch:
            result = answer(request, space, candidates, pruned, batch)
        if stage is not None:
            write_size_report(stage, result)
            result.report_dir = out
    return result


# what `plan size --out` writes beside its cache/
SIZE_FILES = ("size.md", "size.json", "deploy.sh", *SEARCH_FILES)


def planned_runs(space: SearchSpace, candidates: list[Candidate]) -> int:
    """At most this many simulations (the max-load search's probe bound)."""
    from simulator.planner.run_count import count_runs

    return count_runs(space, configurations=len(candidates)).simulations


def answer(
    request: SizeRequest,
    space: SearchSpace,
    candidates: list[Candidate],
    pruned: list[Pruned],
    batch: Batch,
) -> SizeResult:
    """Run the searches through ``batch`` and turn them into the answer (and the report)."""
    import pandas as pd

    from simulator.planner.analysis import best_per_device, pruned_table
    from simulator.planner.answer import answer as report_answer
    from simulator.planner.deploy import vllm_serve_command
    from simulator.planner.search import run_search
    from simulator.planner.verdicts import verdicts

    found = run_search(space, candidates, batch) if candidates else None
    runs = found.runs if found is not None else pd.DataFrame()
    best = best_per_device(space, runs)
    table = ranked(best, space)
    pruned_df = pruned_table(pruned)
    missing = [f"{v.device}: {v.text}" for v in verdicts(space, runs, best, pruned_df)
               if v.kind != "meets"]  # fmt: skip
    by_id = {c.config_id: c for c in candidates}
    commands = {
        cid: vllm_serve_command(by_id[cid].scenarios[0]) for cid in table.get("config_id", [])
    }
    return SizeResult(
        table=table,
        answer=report_answer(space, best, runs, pruned_df, with_reasons=False)[1],
        commands=commands,
        not_served=missing,
        space=space,
        runs=runs,
        best=best,
        simulations=found.simulations if found is not None else 0,
        pruned=pruned,
    )


__all__ = ["SizeRequest", "SizeResult", "run_size"]
