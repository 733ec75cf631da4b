"""A search space: devices x serving knobs x concurrency (``simulator.planner.expand`` turns
it into scenarios or pruned combinations).

Invalid combinations (TP not dividing the heads, DCP not dividing TP or beyond what the KV
heads allow, TP beyond the scale-up domain, weights that do not fit, disaggregation with
dp > 1) are pruned with the reason, never run. The ``disaggregation`` knob lists
prefill/decode splits (``null``: aggregated), so one search compares aggregated and xPyD
deployments of each device; the closed-loop ``concurrency`` is then per deployment (all its
prefill and decode replicas).

The base ``serving`` holds what is not swept: a knob set there keeps its value unless the
sweep lists it (a knob set in both with different values is an error); a knob set in neither
takes the sweep's default. A value listed twice in the sweep runs once (the repeat is noted
among the pruned); a device or concurrency listed twice is refused (likely a typo).
Configuration ids are unique: when two configurations read alike (acceptance 0.5 and 0.9 both
print ``eagle2``), each gets a short hash of its knob values.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    ModelWrapValidatorHandler,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    SerializationInfo,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from simulator.specs import limits
from simulator.specs.frozen import Spec
from simulator.specs.pools import Disaggregation
from simulator.specs.scenario import (
    SIM_TIME,
    SLO,
    WorkloadSpec,
    gaps_for_interactivity,
    ramp_inside_duration,
    too_few_for_users,
)
from simulator.specs.serving import (
    All2AllBackend,
    LatentPlacement,
    ServingConfig,
    SpeculativeConfig,
)


class Sweep(Spec):
    """Values to try for each knob; the cartesian product is searched (one value: fixed)."""

    tp: list[PositiveInt] = Field(default_factory=lambda: [8], min_length=1)
    dcp: list[PositiveInt] = Field(default_factory=lambda: [1], min_length=1)
    dp: list[PositiveInt] = Field(default_factory=lambda: [1], min_length=1)
    ep: list[PositiveInt] = Field(default_factory=lambda: [1], min_length=1)
    cpu_offload_bytes: list[float] = Field(default_factory=lambda: [0.0], min_length=1)
    max_num_seqs: list[PositiveInt | None] = Field(default=[None], min_length=1)
    max_num_batched_tokens: list[PositiveInt | None] = Field(default=[None], min_length=1)
    speculative: list[SpeculativeConfig | None] = Field(default=[None], min_length=1)
    # wide EP and latent MoE (docs/rack-scale.md): EPLB's redundant experts, the busiest EP
    # rank's load over the mean, the EP dispatch backend, the latent projections' placement
    eplb_redundant_experts: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=lambda: [0], min_length=1
    )
    moe_load_imbalance: list[Annotated[float, Field(ge=1.0)]] = Field(
        default_factory=lambda: [1.0], min_length=1
    )
    all2all_backend: list[All2AllBackend] = Field(default=["generic"], min_length=1)
    latent_moe_projection: list[LatentPlacement] = Field(default=["replicated"], min_length=1)
    # prefill/decode splits to try; null = aggregated (dp replicas)
    disaggregation: list[Disaggregation | None] = Field(default=[None], min_length=1)
    # values listed more than once (dropped, the first kept), for expand's note
    _repeated: dict[str, list[Any]] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _run_each_value_once(cls, data: Any, handler: ModelWrapValidatorHandler[Sweep]) -> Sweep:
        """Drop repeated values, keeping the order (compared once validated: 0 and 0.0 are
        one offload size), and remember them."""
        sweep = handler(data)
        kept: dict[str, list[Any]] = {}
        repeated: dict[str, list[Any]] = {}
        for knob in type(sweep).model_fields:
            unique: list[Any] = []
            for value in getattr(sweep, knob):
                if value in unique:
                    repeated.setdefault(knob, []).append(value)
                else:
                    unique.append(value)
            if knob in repeated:
                kept[knob] = unique
        if kept:
            sweep = sweep.model_copy(update=kept)
        sweep._repeated = repeated
        return sweep


KNOBS = ("tp", "dcp", "dp", "ep", "cpu_offload_bytes", "max_num_seqs",
         "max_num_batched_tokens", "speculative", "eplb_redundant_experts",
         "moe_load_imbalance", "all2all_backend", "latent_moe_projection",
         "disaggregation")  # fmt: skip
SERVING_KNOBS = KNOBS[:-1]  # the ones that are ServingConfig fields
# knobs added after configuration ids were first published: at these values they stay out
# of an id's hash (so the ids of earlier searches do not change)
LATER_KNOB_DEFAULTS: dict[str, Any] = {
    "eplb_redundant_experts": 0,
    "moe_load_imbalance": 1.0,
    "all2all_backend": "generic",
    "latent_moe_projection": "replicated",
}


class SearchSpace(Spec):
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
    # (the scenarios' bound on simulated time, checked here: 1e10 s was an internal error)
    duration_s: Annotated[PositiveFloat, SIM_TIME] = 3600.0
    warmup_s: Annotated[float, Field(ge=0), SIM_TIME] = 600.0
    seed: limits.Seed = 0
    # replicates: every point runs under seeds seed, seed + 1, ...; the SLO must hold on all
    seeds: PositiveInt = 3
    # "max_load": per configuration the most users meeting the SLO, by bracketing and integer
    # bisection between min(concurrency) and max(concurrency), to within load_tolerance of
    # the load (or one user); "grid": exactly the listed concurrencies
    search: Literal["max_load", "grid"] = Field(default="max_load", validate_default=True)
    load_tolerance: float = Field(default=0.05, ge=0, lt=1)
    # max_load: a load's seeds run in turn and stop at the first that misses the SLO (or
    # saturates): the load fails whatever the rest give, so its row in the runs table holds
    # the seeds that ran; every_seed runs them all anyway (the same answer, more simulations)
    every_seed: bool = False

    @property
    def seeds_can_stop(self) -> bool:
        """A probe's seeds may stop before the last: a max-load search of several seeds,
        without ``every_seed``."""
        return self.search == "max_load" and self.seeds > 1 and not self.every_seed

    @field_validator("devices", "concurrency")
    @classmethod
    def _each_once(cls, values: list[Any], info: ValidationInfo) -> list[Any]:
        """A device or load listed twice would run once and read as one: likely a typo for
        another value, so it is refused rather than dropped."""
        seen: list[Any] = []
        for value in values:
            if value in seen:
                raise ValueError(f"{value} is listed twice")
            seen.append(value)
        return values

    @field_validator("demand_requests_per_s")
    @classmethod
    def _one_demand(cls, rate: float | None, info: ValidationInfo) -> float | None:
        users = info.data.get("demand_users")
        if rate is not None and users is not None:
            raise ValueError(
                f"give demand_users ({users}) or demand_requests_per_s ({rate:g}), not both:"
                " the fleet is sized for one demand"
            )
        return rate

    @field_validator("cost_model")
    @classmethod
    def _known_cost_model(cls, name: str) -> str:
        from simulator.specs.scenario import known_cost_model

        return known_cost_model(name)

    @field_validator("warmup_s")
    @classmethod
    def _warmup_inside_duration(cls, warmup_s: float, info: ValidationInfo) -> float:
        from simulator.specs.scenario import warmup_inside_duration

        return warmup_inside_duration(warmup_s, info, cls.model_fields["warmup_s"].default)

    @field_validator("workload")
    @classmethod
    def _closed_loop(cls, workload: WorkloadSpec, info: ValidationInfo) -> WorkloadSpec:
        """Every point of a search is a closed loop of ``concurrency`` users: a rate would
        clash with the concurrency each point sets."""
        for rate in ("request_rate_per_s", "session_rate_per_s"):
            if getattr(workload, rate, None) is not None:
                raise ValueError(
                    f"{rate}: a search runs each point as a closed loop of `concurrency` users;"
                    f" drop {rate} (and size the fleet with demand_requests_per_s)"
                )
        if "concurrency" not in info.data:  # it failed: its own error is reported
            return workload
        levels = info.data["concurrency"] or [1]
        template = getattr(workload, "concurrency", None)
        if template not in (None, 1, *levels):
            raise ValueError(
                f"concurrency {template} is replaced by each searched level ({levels}): the"
                " template's concurrency is not used; write 1, or add it to concurrency"
            )
        users = max(levels)
        short = too_few_for_users(workload, users)
        if short:
            raise ValueError(f"{short} (the largest concurrency searched)")
        return workload

    @field_validator("slo")
    @classmethod
    def _gaps_for_interactivity(cls, slo: SLO, info: ValidationInfo) -> SLO:
        return gaps_for_interactivity(slo, info)

    @field_validator("search")
    @classmethod
    def _max_load_needs_a_target(cls, search: str, info: ValidationInfo) -> str:
        """The max-load search brackets the most users that meet the SLO: without a target
        every load would pass and the answer would be the largest concurrency listed."""
        slo = info.data.get("slo")
        if search == "max_load" and slo is not None and not slo.has_target:
            raise ValueError(
                "max_load looks for the most users meeting the SLO, and slo gives no target:"
                " give slo.interactivity_tok_per_s_p90 and/or slo.ttft_s_p90, or search: grid"
            )
        return search

    @field_validator("duration_s")
    @classmethod
    def _ramp_inside_duration(cls, duration_s: float, info: ValidationInfo) -> float:
        return ramp_inside_duration(duration_s, info) or duration_s

    @field_serializer("serving", "sweep")
    def _as_given(self, value: BaseModel, info: SerializationInfo) -> dict[str, Any]:
        """The fields given, not the defaults: a dumped space (``space.yaml``, the dashboard's
        JSON) must read back with the same base knobs set and the same knobs swept."""
        return value.model_dump(mode=info.mode, exclude_unset=True)
