"""A scenario: which model on which hardware, deployed how, under what traffic and SLO."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from simulator.specs import limits
from simulator.specs.frozen import Spec
from simulator.specs.limits import at_most
from simulator.specs.pools import Disaggregation, KvStore, pool_checks
from simulator.specs.serving import ServingConfig

Sessions = Annotated[
    PositiveInt,
    at_most(limits.MAX_GENERATED_SESSIONS, "sessions of a built-in generator (a longer run is"
            " no planning input but hours of generation)"),
]  # fmt: skip
Tokens = Annotated[
    PositiveInt,
    at_most(limits.MAX_GENERATED_TOKENS, "tokens (10x the longest context of any card)"),
]


def warmup_inside_duration(
    warmup_s: float, info: ValidationInfo, default: float | None = None
) -> float:
    """A ``warmup_s`` validator: the warm-up must leave some of ``duration_s`` to measure
    (``default``: the field's, said when it is the one that does not)."""
    duration_s = info.data.get("duration_s")
    if duration_s is not None and warmup_s >= duration_s:
        was = " (the default: give a smaller warmup_s)" if warmup_s == default else ""
        raise ValueError(f"{warmup_s:g} s{was} leaves nothing of duration_s {duration_s:g} s")
    return warmup_s


def ramp_inside_duration(duration_s: float | None, info: ValidationInfo) -> float | None:
    """A ``duration_s`` validator: closed-loop users all start inside the run (a user the
    ramp starts at or after ``duration_s`` would never send a request)."""
    ramp_s = getattr(info.data.get("workload"), "ramp_s", 0.0)
    if duration_s is not None and ramp_s and ramp_s >= duration_s:
        raise ValueError(
            f"workload.ramp_s {ramp_s:g} s reaches duration_s {duration_s:g} s: the users it"
            " starts at or after the end never run"
        )
    return duration_s


def too_few_for_users(workload: object, users: int) -> str | None:
    """Why ``users`` closed-loop users cannot all run on ``workload`` (a generator with fewer
    sessions, or random prompts with fewer requests, than users: the run would hold fewer in
    flight than it is labelled with), else None."""
    have = getattr(workload, "sessions", None) or getattr(workload, "num_requests", None)
    if have is None or have >= users:
        return None
    what = "sessions" if hasattr(workload, "sessions") else "num_requests"
    return (
        f"{what} {have:,} is below concurrency {users:,}: at most {have:,} users would ever"
        f" run; give {what} >= concurrency"
    )


SIM_TIME = at_most(limits.MAX_TRACE_TIME_S, limits.SIM_TIME_WHY)


def check_arrival_span(count: int, rate_per_s: float | None, what: str, rate: str) -> None:
    """Poisson arrivals of ``count`` at ``rate_per_s`` span ~count / rate seconds: refused
    past the simulated-time bound (1e-15 per s put the arrivals where TTFT read 0.0 s)."""
    if rate_per_s is not None and count / rate_per_s > limits.MAX_TRACE_TIME_S:
        raise ValueError(
            f"{what} {count:,} at {rate} {rate_per_s:g} arrive over ~{count / rate_per_s:.3g} s,"
            f" past {limits.MAX_TRACE_TIME_S:g} {limits.SIM_TIME_WHY}: raise the rate"
        )


def known_cost_model(name: str) -> str:
    """``name`` if the catalog has it (the scenario's field is named in the error, not the
    command line's)."""
    from simulator import catalog  # the catalog reads specs: imported when first used

    models = catalog.cost_models()
    if name not in models:
        raise ValueError(f"unknown cost model {name!r}; known: {', '.join(models)}")
    return name


class _Replay(Spec):
    """How sessions are replayed: closed loop (``concurrency`` users running sessions back to
    back), Poisson session arrivals (``session_rate_per_s``), or (traces only, neither given)
    open loop on the trace timestamps. Think times are multiplied by ``think_time_scale`` and
    capped at ``think_time_cap_s``. ``ramp_s`` (closed loop): the users start evenly over
    the first ``ramp_s`` seconds (user k at k x ramp_s / concurrency) instead of all at 0."""

    concurrency: PositiveInt | None = None
    session_rate_per_s: PositiveFloat | None = None
    think_time_scale: Annotated[PositiveFloat, at_most(limits.MAX_TIME_SCALE, "x think times")] = (
        1.0
    )
    think_time_cap_s: Annotated[PositiveFloat | None, SIM_TIME] = None
    ramp_s: Annotated[float, Field(ge=0.0, allow_inf_nan=False), SIM_TIME] = 0.0

    @model_validator(mode="after")
    def _one_mode(self) -> Self:
        if self.concurrency is not None and self.session_rate_per_s is not None:
            raise ValueError("give concurrency (closed loop) or session_rate_per_s, not both")
        if self.ramp_s > 0 and self.concurrency is None:
            raise ValueError("ramp_s starts closed-loop users: it needs concurrency")
        return self


class _Generated(_Replay):
    sessions: Sessions = 200

    @model_validator(mode="after")
    def _needs_mode(self) -> Self:
        if self.concurrency is None and self.session_rate_per_s is None:
            raise ValueError(
                "a generated workload has no timestamps: give concurrency or session_rate_per_s"
            )
        short = self.concurrency and too_few_for_users(self, self.concurrency)
        if short:
            raise ValueError(short)
        check_arrival_span(self.sessions, self.session_rate_per_s, "sessions",
                           "session_rate_per_s")  # fmt: skip
        return self


class RandomPromptWorkload(Spec):
    """InferenceX-style random prompts: lengths uniform integers in [floor(x*r), x] for the
    ISL and the OSL (``sample_random_requests`` of the benchmark_serving.py InferenceMAX v1
    ran, ``--random-range-ratio 0.8``; ``output_range_ratio``, when given, is the OSL's r),
    no prefix reuse.

    Closed loop with ``concurrency`` requests in flight (InferenceX ``--max-concurrency``,
    request rate inf), or Poisson arrivals at ``request_rate_per_s``.
    """

    kind: Literal["random"] = "random"
    input_tokens: Tokens
    output_tokens: Tokens
    range_ratio: float = Field(default=0.8, ge=0, le=1)
    output_range_ratio: float | None = Field(default=None, ge=0, le=1)  # None: range_ratio
    num_requests: Annotated[
        PositiveInt,
        at_most(limits.MAX_GENERATED_REQUESTS, "requests of the random generator"),
    ]
    request_rate_per_s: PositiveFloat | None = None  # None: closed loop
    concurrency: PositiveInt | None = None

    @model_validator(mode="after")
    def _one_mode(self) -> Self:
        if (self.request_rate_per_s is None) == (self.concurrency is None):
            raise ValueError("give exactly one of concurrency (closed loop), request_rate_per_s")
        short = self.concurrency and too_few_for_users(self, self.concurrency)
        if short:
            raise ValueError(short)
        check_arrival_span(self.num_requests, self.request_rate_per_s, "num_requests",
                           "request_rate_per_s")  # fmt: skip
        return self


class TraceWorkload(_Replay):
    """A trace file (or directory of agentic traces) read from disk.

    ``format`` is detected from the content when omitted. Neither ``concurrency`` nor
    ``session_rate_per_s``: open loop on the trace timestamps x ``time_scale``.
    ``skip_bad``: skip malformed records (counted) instead of stopping at the first.
    ``limit``: read at most this many sessions (one request is one session in Mooncake/Azure).
    """

    kind: Literal["trace"] = "trace"
    path: Annotated[str, Field(min_length=1)]  # "" would name the scenario's own folder
    format: Literal["agentic", "mooncake", "azure"] | None = None
    time_scale: Annotated[PositiveFloat, at_most(limits.MAX_TIME_SCALE, "x trace timestamps")] = 1.0
    skip_bad: bool = False
    limit: PositiveInt | None = None

    @model_validator(mode="after")
    def _options_of_the_mode(self) -> Self:
        """Each mode's own options only: given to another mode they did nothing, unsaid."""
        looped = self.concurrency is not None or self.session_rate_per_s is not None
        if looped and self.time_scale != 1.0:
            raise ValueError(
                "time_scale scales the trace's timestamps in an open-loop replay; with"
                " concurrency or session_rate_per_s turns follow completions: drop one"
            )
        if not looped and (self.think_time_scale != 1.0 or self.think_time_cap_s is not None):
            raise ValueError(
                "think_time_scale / think_time_cap_s: an open-loop replay keeps the trace's"
                " own times (no think time is simulated); give concurrency or"
                " session_rate_per_s, or drop them"
            )
        return self


class AgenticWorkload(_Generated):
    """Built-in agentic-coding sessions (parameters fitted to the 710 WEKA Claude Code traces;
    see ``simulator/workload/generators.py``)."""

    kind: Literal["agentic"] = "agentic"


class ChatWorkload(_Generated):
    """Built-in multi-turn chat sessions (see ``simulator/workload/generators.py``)."""

    kind: Literal["chat"] = "chat"


WorkloadSpec = Annotated[
    RandomPromptWorkload | TraceWorkload | AgenticWorkload | ChatWorkload,
    Field(discriminator="kind"),
]


INTERACTIVITY_TARGET = (
    limits.at_least(limits.SLO_INTERACTIVITY_BOUNDS[0], "tok/s per user (a token every 1,000 s)"),
    at_most(limits.SLO_INTERACTIVITY_BOUNDS[1], "tok/s per user"),
)
TTFT_TARGET = (
    limits.at_least(limits.SLO_TTFT_BOUNDS_S[0], "seconds (0.1 ms)"),
    at_most(limits.SLO_TTFT_BOUNDS_S[1], "seconds (11 days)"),
)


class SLO(Spec):
    interactivity_tok_per_s_p90: Annotated[PositiveFloat | None, *INTERACTIVITY_TARGET] = None
    ttft_s_p90: Annotated[PositiveFloat | None, *TTFT_TARGET] = None

    @property
    def has_target(self) -> bool:
        """Whether any target is given (else :meth:`met` answers None)."""
        return self.interactivity_tok_per_s_p90 is not None or self.ttft_s_p90 is not None

    def met(self, interactivity_p90: float | None, ttft_s_p90: float | None) -> bool | None:
        """Whether a run's P90s meet every target given; None when no target is given (a
        run without a measured P90 misses the target)."""
        checks = []
        if self.interactivity_tok_per_s_p90 is not None:
            checks.append(
                interactivity_p90 is not None
                and interactivity_p90 >= self.interactivity_tok_per_s_p90
            )
        if self.ttft_s_p90 is not None:
            checks.append(ttft_s_p90 is not None and ttft_s_p90 <= self.ttft_s_p90)
        return all(checks) if checks else None


def gaps_for_interactivity(slo: SLO, info: ValidationInfo) -> SLO:
    """An ``slo`` validator: an interactivity target needs inter-token gaps, and random
    prompts of one output token have none (every such run would read "SLO missed")."""
    workload = info.data.get("workload")
    if (
        slo.interactivity_tok_per_s_p90 is not None
        and isinstance(workload, RandomPromptWorkload)
        and workload.output_tokens <= 1
    ):
        raise ValueError(
            "interactivity_tok_per_s_p90: every request outputs one token"
            " (workload.output_tokens 1), so there is no inter-token gap to measure; give"
            " ttft_s_p90 instead, or more output tokens"
        )
    return slo


class Scenario(Spec):
    name: str = Field(min_length=1)
    model: str  # a model card name or a path to a card YAML
    device: str  # a hardware profile name or a path to a profile YAML
    serving: ServingConfig = ServingConfig()
    workload: WorkloadSpec
    slo: SLO = SLO()
    cost_model: str = "semianalysis_tco_neocloud"
    seed: limits.Seed = 0
    duration_s: Annotated[PositiveFloat | None, SIM_TIME] = None  # None: until exhausted
    # requests arriving earlier are not measured
    warmup_s: Annotated[float, Field(ge=0), SIM_TIME] = 0.0
    # how data-parallel replicas share requests (with disaggregation: within each pool)
    router: Literal["round_robin", "least_loaded", "session_affinity"] = "session_affinity"
    disaggregation: Disaggregation | None = None  # None: aggregated (dp replicas)
    # a remote KV store below the host tier (Mooncake Store), shared by the replicas
    kv_store: KvStore | None = None

    @field_validator("disaggregation")
    @classmethod
    def _pools_replace_dp(
        cls, d: Disaggregation | None, info: ValidationInfo
    ) -> Disaggregation | None:
        serving = info.data.get("serving")
        if d is None or serving is None:
            return d
        if serving.dp != 1 and not d.per_pool:
            raise ValueError(
                f"prefill_replicas and decode_replicas replace serving.dp: set dp 1, or give"
                f" the pools' dp in prefill_serving / decode_serving (got dp {serving.dp})"
            )
        pool_checks(d, serving)
        if serving.cpu_offload_bytes and not d.prefill_prefix_caching:
            raise ValueError(
                "cpu_offload_bytes: the host tier sits behind the prefill pool's prefix cache;"
                " set prefill_prefix_caching true or drop cpu_offload_bytes"
            )
        return d

    @field_validator("kv_store")
    @classmethod
    def _store_behind_prefix_cache(
        cls, store: KvStore | None, info: ValidationInfo
    ) -> KvStore | None:
        serving, d = info.data.get("serving"), info.data.get("disaggregation")
        if store is None or serving is None:
            return store
        if not serving.enable_prefix_caching:
            raise ValueError(
                "the store is looked up behind the prefix cache: set"
                " serving.enable_prefix_caching true or drop kv_store"
            )
        if d is not None and not d.prefill_prefix_caching:
            raise ValueError(
                "the store sits behind the prefill pool's prefix cache; set"
                " disaggregation.prefill_prefix_caching true or drop kv_store"
            )
        return store

    @field_validator("cost_model")
    @classmethod
    def _known_cost_model(cls, name: str) -> str:
        return known_cost_model(name)

    @field_validator("slo")
    @classmethod
    def _gaps_for_interactivity(cls, slo: SLO, info: ValidationInfo) -> SLO:
        return gaps_for_interactivity(slo, info)

    @field_validator("duration_s")
    @classmethod
    def _ramp_inside_duration(cls, duration_s: float | None, info: ValidationInfo) -> float | None:
        return ramp_inside_duration(duration_s, info)

    @field_validator("warmup_s")
    @classmethod
    def _warmup_inside_duration(cls, warmup_s: float, info: ValidationInfo) -> float:
        return warmup_inside_duration(warmup_s, info)

    @property
    def num_gpus(self) -> int:
        """GPUs of the deployment: dp x tp, or each pool's instances x tp x dp."""
        d = self.disaggregation
        if d is None:
            return self.serving.num_gpus
        return d.pool_gpus(self.serving, "prefill") + d.pool_gpus(self.serving, "decode")
