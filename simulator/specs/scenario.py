"""A scenario: which model on which hardware, deployed how, under what traffic and SLO."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from simulator.specs.frozen import Frozen
from simulator.specs.serving import ServingConfig


class _Replay(Frozen):
    """How sessions are replayed: closed loop (``concurrency`` users running sessions back to
    back), Poisson session arrivals (``session_rate_per_s``), or (traces only, neither given)
    open loop on the trace timestamps. Think times are multiplied by ``think_time_scale`` and
    capped at ``think_time_cap_s``."""

    concurrency: PositiveInt | None = None
    session_rate_per_s: PositiveFloat | None = None
    think_time_scale: PositiveFloat = 1.0
    think_time_cap_s: PositiveFloat | None = None

    @model_validator(mode="after")
    def _one_mode(self) -> Self:
        if self.concurrency is not None and self.session_rate_per_s is not None:
            raise ValueError("give concurrency (closed loop) or session_rate_per_s, not both")
        return self


class _Generated(_Replay):
    sessions: PositiveInt = 200

    @model_validator(mode="after")
    def _needs_mode(self) -> Self:
        if self.concurrency is None and self.session_rate_per_s is None:
            raise ValueError(
                "a generated workload has no timestamps: give concurrency or session_rate_per_s"
            )
        return self


class RandomPromptWorkload(Frozen):
    """InferenceX-style random prompts: lengths uniform integers in [floor(x*r), x] for the
    ISL and the OSL (``sample_random_requests`` of the benchmark_serving.py InferenceMAX v1 ran,
    ``--random-range-ratio 0.8``), no prefix reuse.

    Closed loop with ``concurrency`` requests in flight (InferenceX ``--max-concurrency``,
    request rate inf), or Poisson arrivals at ``request_rate_per_s``.
    """

    kind: Literal["random"] = "random"
    input_tokens: PositiveInt
    output_tokens: PositiveInt
    range_ratio: float = Field(default=0.8, ge=0, le=1)
    num_requests: PositiveInt
    request_rate_per_s: PositiveFloat | None = None  # None: closed loop
    concurrency: PositiveInt | None = None

    @model_validator(mode="after")
    def _one_mode(self) -> Self:
        if (self.request_rate_per_s is None) == (self.concurrency is None):
            raise ValueError("give exactly one of concurrency (closed loop), request_rate_per_s")
        return self


class TraceWorkload(_Replay):
    """A trace file (or directory of agentic traces) read from disk.

    ``format`` is detected from the content when omitted. Neither ``concurrency`` nor
    ``session_rate_per_s``: open loop on the trace timestamps x ``time_scale``.
    ``skip_bad``: skip malformed records (counted) instead of stopping at the first.
    ``limit``: read at most this many sessions (one request is one session in Mooncake/Azure).
    """

    kind: Literal["trace"] = "trace"
    path: str
    format: Literal["agentic", "mooncake", "azure"] | None = None
    time_scale: PositiveFloat = 1.0
    skip_bad: bool = False
    limit: PositiveInt | None = None


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


class SLO(Frozen):
    interactivity_tok_per_s_p90: PositiveFloat | None = None  # 1 / P90 ITL
    ttft_s_p90: PositiveFloat | None = None


class Scenario(Frozen):
    name: str = Field(min_length=1)
    model: str  # a model card name or a path to a card YAML
    device: str  # a hardware profile name or a path to a profile YAML
    serving: ServingConfig = ServingConfig()
    workload: WorkloadSpec
    slo: SLO = SLO()
    cost_model: str = "semianalysis_tco_neocloud"
    seed: int = 0
    duration_s: PositiveFloat | None = None  # None: until the workload is exhausted
    warmup_s: float = Field(default=0.0, ge=0)  # requests arriving earlier are not measured
    # how data-parallel replicas share requests
    router: Literal["round_robin", "least_loaded", "session_affinity"] = "session_affinity"
