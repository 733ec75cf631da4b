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


def warmup_inside_duration(warmup_s: float, info: ValidationInfo) -> float:
    """A ``warmup_s`` validator: the warm-up must leave some of ``duration_s`` to measure."""
    duration_s = info.data.get("duration_s")
    if duration_s is not None and warmup_s >= duration_s:
        raise ValueError(f"{warmup_s:g} s leaves nothing of duration_s {duration_s:g} s")
    return warmup_s


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
    sessions: Sessions = 200

    @model_validator(mode="after")
    def _needs_mode(self) -> Self:
        if self.concurrency is None and self.session_rate_per_s is None:
            raise ValueError(
                "a generated workload has no timestamps: give concurrency or session_rate_per_s"
            )
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


class SLO(Spec):
    interactivity_tok_per_s_p90: PositiveFloat | None = None  # 1 / P90 ITL
    ttft_s_p90: PositiveFloat | None = None

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


# Assumption (no profile has a scale-out field yet): one 400 Gb/s NIC per GPU (ConnectX-7 /
# Pollara 400 class, as 8-NIC HGX / MI355X nodes ship), 400e9 / 8 = 50e9 B/s per direction.
DEFAULT_LINK_BW_BYTES_PER_S = 50e9
# Assumption: one RDMA read round trip plus NIXL's completion notification; the proxy's HTTP
# hops between P and D are not modelled.
DEFAULT_LINK_LATENCY_S = 1e-5


class Disaggregation(Spec):
    """Prefill/decode disaggregation (xPyD, vLLM ``NixlConnector`` pull mode; vllm_mechanics 9).

    ``prefill_replicas`` + ``decode_replicas`` replicas of ``serving.tp`` GPUs each (they
    replace ``serving.dp``). A request prefills on a prefill replica (``max_tokens`` 1; hybrids
    stop one token short so that D derives the last state itself), the decode replica reads its
    KV (and recurrent state) over the inter-node link, computes the last prompt token and
    decodes. ``prefill_prefix_caching`` is off by default, as in vLLM's send-back experiment.
    ``send_back`` (``bidirectional_kv_xfer``): a request finished on D keeps its blocks pinned
    for ``serving.decoder_kv_blocks_ttl_s`` and the session's next turn pulls them back to P
    unless fewer than ``serving.kv_recompute_threshold_tokens`` tokens would be reused.

    ``link_bw_bytes_per_s`` / ``link_latency_s``: one GPU's NIC, per direction; every TP rank
    moves its own shard over its own NIC, so a transfer takes (bytes per GPU) / bandwidth +
    latency, and the transfers of one replica's NICs in one direction run one at a time.
    """

    prefill_replicas: PositiveInt = 1
    decode_replicas: PositiveInt = 1
    prefill_prefix_caching: bool = False
    send_back: bool = False
    link_bw_bytes_per_s: PositiveFloat = DEFAULT_LINK_BW_BYTES_PER_S
    link_latency_s: float = Field(default=DEFAULT_LINK_LATENCY_S, ge=0)

    @model_validator(mode="after")
    def _replicas_bounded(self) -> Self:
        if self.replicas > limits.MAX_REPLICAS:
            raise ValueError(
                f"prefill_replicas + decode_replicas = {self.replicas:,} exceeds"
                f" {limits.MAX_REPLICAS:,} replicas per simulated deployment (each is"
                " simulated; size a bigger fleet with demand_users)"
            )
        return self

    @property
    def label(self) -> str:
        """``1P1D``, ``2P1D send-back``, ``1P1D send-back P-cache`` ..."""
        parts = [f"{self.prefill_replicas}P{self.decode_replicas}D"]
        if self.send_back:
            parts.append("send-back")
        if self.prefill_prefix_caching:
            parts.append("P-cache")
        return " ".join(parts)

    @property
    def replicas(self) -> int:
        return self.prefill_replicas + self.decode_replicas


class Scenario(Spec):
    name: str = Field(min_length=1)
    model: str  # a model card name or a path to a card YAML
    device: str  # a hardware profile name or a path to a profile YAML
    serving: ServingConfig = ServingConfig()
    workload: WorkloadSpec
    slo: SLO = SLO()
    cost_model: str = "semianalysis_tco_neocloud"
    seed: limits.Seed = 0
    duration_s: PositiveFloat | None = None  # None: until the workload is exhausted
    warmup_s: float = Field(default=0.0, ge=0)  # requests arriving earlier are not measured
    # how data-parallel replicas share requests (with disaggregation: within each pool)
    router: Literal["round_robin", "least_loaded", "session_affinity"] = "session_affinity"
    disaggregation: Disaggregation | None = None  # None: aggregated (dp replicas)

    @field_validator("disaggregation")
    @classmethod
    def _pools_replace_dp(
        cls, d: Disaggregation | None, info: ValidationInfo
    ) -> Disaggregation | None:
        serving = info.data.get("serving")
        if d is None or serving is None:
            return d
        if serving.dp != 1:
            raise ValueError(
                f"prefill_replicas and decode_replicas replace serving.dp: set dp 1"
                f" (got dp {serving.dp})"
            )
        if serving.cpu_offload_bytes and not d.prefill_prefix_caching:
            raise ValueError(
                "cpu_offload_bytes: the host tier sits behind the prefill pool's prefix cache;"
                " set prefill_prefix_caching true or drop cpu_offload_bytes"
            )
        return d

    @field_validator("cost_model")
    @classmethod
    def _known_cost_model(cls, name: str) -> str:
        return known_cost_model(name)

    @field_validator("warmup_s")
    @classmethod
    def _warmup_inside_duration(cls, warmup_s: float, info: ValidationInfo) -> float:
        return warmup_inside_duration(warmup_s, info)

    @property
    def num_gpus(self) -> int:
        """GPUs of the deployment: dp x tp, or (prefill + decode replicas) x tp."""
        d = self.disaggregation
        return self.serving.num_gpus if d is None else d.replicas * self.serving.tp
