"""A search space: devices x serving knobs x concurrency, expanded into scenarios or pruned.

Invalid combinations (TP not dividing the heads, DCP not dividing TP, TP beyond the
scale-up domain, weights that do not fit, disaggregation with dp > 1) are pruned with the
reason, never run. The ``disaggregation`` knob lists prefill/decode splits (``null``:
aggregated), so one search compares aggregated and xPyD deployments of each device; the
closed-loop ``concurrency`` is then per deployment (all its prefill and decode replicas).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, PositiveFloat, PositiveInt, ValidationError

from simulator import catalog
from simulator.memory import check_deployment, check_device, plan_memory
from simulator.specs.frozen import Frozen
from simulator.specs.loading import SpecError, first_error
from simulator.specs.scenario import SLO, Disaggregation, Scenario, WorkloadSpec
from simulator.specs.serving import ServingConfig, SpeculativeConfig


class Sweep(Frozen):
    """Values to try for each knob; the cartesian product is searched (one value: fixed)."""

    tp: list[PositiveInt] = Field(default_factory=lambda: [8], min_length=1)
    dcp: list[PositiveInt] = Field(default_factory=lambda: [1], min_length=1)
    dp: list[PositiveInt] = Field(default_factory=lambda: [1], min_length=1)
    ep: list[PositiveInt] = Field(default_factory=lambda: [1], min_length=1)
    cpu_offload_bytes: list[float] = Field(default_factory=lambda: [0.0], min_length=1)
    max_num_seqs: list[PositiveInt | None] = Field(default=[None], min_length=1)
    max_num_batched_tokens: list[PositiveInt | None] = Field(default=[None], min_length=1)
    speculative: list[SpeculativeConfig | None] = Field(default=[None], min_length=1)
    # prefill/decode splits to try; null = aggregated (dp replicas)
    disaggregation: list[Disaggregation | None] = Field(default=[None], min_length=1)


KNOBS = ("tp", "dcp", "dp", "ep", "cpu_offload_bytes", "max_num_seqs",
         "max_num_batched_tokens", "speculative", "disaggregation")  # fmt: skip
SERVING_KNOBS = KNOBS[:-1]  # the ones that are ServingConfig fields


class SearchSpace(Frozen):
    name: str = Field(min_length=1)
    model: str
    devices: list[str] = Field(min_length=1)
    serving: ServingConfig = ServingConfig()  # the base every swept knob overrides
    sweep: Sweep = Sweep()
    concurrency: list[PositiveInt] = Field(min_length=1)  # closed-loop users per deployment
    workload: WorkloadSpec  # its concurrency is replaced by each value above
    slo: SLO
    cost_model: str = "semianalysis_tco_neocloud"
    # size the fleet for this many concurrent users, or this many requests per second
    demand_users: PositiveInt | None = None
    demand_requests_per_s: PositiveFloat | None = None
    duration_s: PositiveFloat = 3600.0
    warmup_s: float = Field(default=600.0, ge=0)
    seed: int = 0


@dataclass(frozen=True)
class Candidate:
    """One configuration (device + serving knobs) and its scenarios, one per concurrency."""

    config_id: str
    device: str
    knobs: dict[str, Any]
    scenarios: tuple[Scenario, ...]


@dataclass(frozen=True)
class Pruned:
    device: str
    knobs: dict[str, Any]
    reason: str


@functools.cache
def code_fingerprint() -> str:
    """sha256 of the simulator's own source, model cards and hardware profiles: a cached run
    is reused only by the code and data that produced it (a version string alone would hand
    back results of older code after any edit)."""
    import simulator
    from hardware_profiles import PROFILES_DIR

    h = hashlib.sha256()
    for root in (Path(simulator.__file__).parent, PROFILES_DIR):
        for f in sorted(root.rglob("*")):
            if f.suffix in (".py", ".yaml", ".json") and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()


def scenario_hash(scenario: Scenario) -> str:
    """Content hash: the cache key of a run (same scenario, same code -> same result)."""
    payload = code_fingerprint() + scenario.model_dump_json()
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def knob_label(knobs: dict[str, Any]) -> str:
    parts = [f"tp{knobs['tp']}", f"dcp{knobs['dcp']}"]
    if knobs["dp"] > 1:
        parts.append(f"dp{knobs['dp']}")
    if knobs["ep"] > 1:
        parts.append(f"ep{knobs['ep']}")
    if knobs["cpu_offload_bytes"]:
        parts.append(f"offload{knobs['cpu_offload_bytes'] / 2**30:g}GiB")
    if knobs["max_num_seqs"]:
        parts.append(f"seqs{knobs['max_num_seqs']}")
    if knobs["max_num_batched_tokens"]:
        parts.append(f"mbt{knobs['max_num_batched_tokens']}")
    spec = knobs["speculative"]
    if spec:
        parts.append(f"{spec['method']}{spec['num_speculative_tokens']}")
    d = knobs.get("disaggregation")
    if d:
        parts.append(disaggregation_text(d).lower().replace(" ", "-").replace("send-back", "sb"))
    return "-".join(parts)


def disaggregation_text(value: dict[str, Any] | None) -> str:
    """A disaggregation knob as runs.csv shows it: ``aggregated``, ``1P1D send-back`` ..."""
    if not value:
        return "aggregated"
    text = Disaggregation.model_validate(value).label
    default = Disaggregation()
    if value.get("link_bw_bytes_per_s", default.link_bw_bytes_per_s) != (
        default.link_bw_bytes_per_s
    ):
        text += f" {value['link_bw_bytes_per_s'] / 1e9:g}GB/s"
    return text


def expand(space: SearchSpace, source: str = "(search)") -> tuple[list[Candidate], list[Pruned]]:
    """Every (device, knob combination) as a runnable candidate or a pruned one with a reason."""
    card = catalog.model_card(space.model)
    sweep = space.sweep
    candidates: list[Candidate] = []
    pruned: list[Pruned] = []
    for device_name in space.devices:
        try:
            device = catalog.hardware_profile(device_name)
        except SpecError as exc:
            raise SpecError(source, "devices", exc.reason) from None
        for values in itertools.product(*(getattr(sweep, k) for k in KNOBS)):
            knobs = dict(zip(KNOBS, values, strict=True))
            for k in ("speculative", "disaggregation"):
                knobs[k] = knobs[k].model_dump() if knobs[k] is not None else None
            data = {
                **space.serving.model_dump(exclude_unset=True),
                **{k: knobs[k] for k in SERVING_KNOBS},
            }
            disagg = knobs["disaggregation"]
            try:
                serving = ServingConfig.model_validate(data)
                check_deployment(card, serving)
                check_device(serving, device)
                if disagg is not None:  # the scenario's own cross-checks (dp, offload)
                    Scenario.model_validate(
                        {"name": "check", "model": space.model, "device": device_name,
                         "serving": serving, "workload": space.workload,
                         "disaggregation": disagg}
                    )  # fmt: skip
            except ValidationError as exc:
                pruned.append(Pruned(device_name, knobs, first_error(exc, source).reason))
                continue
            except SpecError as exc:
                pruned.append(Pruned(device_name, knobs, f"{exc.field}: {exc.reason}"))
                continue
            memory = plan_memory(card, device, serving, context_tokens=1)
            if memory.num_blocks <= memory.blocks_per_seq:
                pruned.append(Pruned(device_name, knobs, memory.fits_reason))
                continue
            label = f"{device_name}-{knob_label(knobs)}"
            scenarios = tuple(
                Scenario(
                    name=f"{label}-c{users}",
                    model=space.model,
                    device=device_name,
                    serving=serving,
                    workload=space.workload.model_copy(update={"concurrency": users}),
                    slo=space.slo,
                    cost_model=space.cost_model,
                    seed=space.seed,
                    duration_s=space.duration_s,
                    warmup_s=space.warmup_s,
                    disaggregation=disagg,
                )
                for users in space.concurrency
            )
            candidates.append(Candidate(label, device_name, knobs, scenarios))
    return candidates, pruned
