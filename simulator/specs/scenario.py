"""A scenario: which model on which hardware, deployed how, under what traffic and SLO."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Self

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from simulator.specs import limits
from simulator.specs.frozen import Spec
from simulator.specs.limits import at_most
from simulator.specs.pools import KvStore, Pool, PoolServing
from simulator.specs.serving import ServingConfig

if TYPE_CHECKING:
    from simulator.specs.hardware import HardwareProfile

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
    think_time_scale: PositiveFloat = 1.0
    think_time_cap_s: PositiveFloat | None = None
    ramp_s: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)

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


# Assumption, used when neither the scenario nor the device profile (``scale_out``) gives the
# link: one 400 Gb/s NIC per GPU (ConnectX-7 / Pollara 400 class, as 8-NIC HGX / MI355X nodes
# ship), 400e9 / 8 = 50e9 B/s per direction.
DEFAULT_LINK_BW_BYTES_PER_S = 50e9
# Assumption: one RDMA read round trip plus NIXL's completion notification; the proxy's HTTP
# hops between P and D are not modelled.
DEFAULT_LINK_LATENCY_S = 1e-5


class Disaggregation(Spec):
    """Prefill/decode disaggregation (xPyD, vLLM ``NixlConnector`` pull mode; vllm_mechanics 9).

    ``prefill_replicas`` + ``decode_replicas`` instances (they replace ``serving.dp``). A
    request prefills on a prefill instance (``max_tokens`` 1; hybrids stop one token short so
    that D derives the last state itself), the decode instance reads its KV (and recurrent
    state) over the inter-node link, computes the last prompt token and decodes.
    ``prefill_prefix_caching`` is off by default, as in vLLM's send-back experiment.
    ``send_back`` (``bidirectional_kv_xfer``): a request finished on D keeps its blocks pinned
    for ``serving.decoder_kv_blocks_ttl_s`` and the session's next turn pulls them back to P
    unless fewer than ``serving.kv_recompute_threshold_tokens`` tokens would be reused.

    ``prefill_serving`` / ``decode_serving``: the pool's own parallelism (tp, dp, dcp, ep) and
    batch limits over ``serving`` (``PoolServing``); an instance is tp x dp GPUs and each of
    its DP ranks is one simulated replica (DP attention). Without them both pools run
    ``serving`` with dp 1.

    The link, one GPU's NIC per direction (every TP rank moves its own shard over its own
    NIC): ``link_bw_bytes_per_s`` / ``link_latency_s`` when given, else the device profile's
    ``scale_out`` link, else 50 GB/s and 10 us (assumptions). A read takes latency +
    descriptors x ``kv_descriptor_s`` + bytes / bandwidth (``simulator.cache.transfer``);
    ``kv_descriptor_s`` None: ``NIXL_DESCRIPTOR_S`` (an assumption, sourced there), whichever
    link is used; 0 turns descriptor posting off. The transfers of one replica's NICs in one
    direction run one at a time.
    """

    prefill_replicas: PositiveInt = 1
    decode_replicas: PositiveInt = 1
    prefill_prefix_caching: bool = False
    send_back: bool = False
    link_bw_bytes_per_s: PositiveFloat | None = None  # None: the profile's scale_out
    link_latency_s: float | None = Field(default=None, ge=0)
    kv_descriptor_s: float | None = Field(default=None, ge=0)
    prefill_serving: PoolServing | None = None
    decode_serving: PoolServing | None = None

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
        """``1P1D``, ``2P1D send-back``, ``1P1D send-back P-cache``, and a pool's own
        parallelism: ``1P1D P-cache P-TP8 D-TP1-DP16-EP16`` ..."""
        parts = [f"{self.prefill_replicas}P{self.decode_replicas}D"]
        if self.send_back:
            parts.append("send-back")
        if self.prefill_prefix_caching:
            parts.append("P-cache")
        for tag, pool in (("P", self.prefill_serving), ("D", self.decode_serving)):
            if pool is not None and pool.short:
                parts.append(f"{tag}-{pool.short}")
        return " ".join(parts)

    @property
    def replicas(self) -> int:
        return self.prefill_replicas + self.decode_replicas

    @property
    def per_pool(self) -> bool:
        """Whether a pool has its own parallelism (``prefill_serving`` / ``decode_serving``)."""
        return self.prefill_serving is not None or self.decode_serving is not None

    def pool_serving(self, serving: ServingConfig, pool: Pool) -> ServingConfig:
        """The serving config of one pool's instances (``serving`` without an override)."""
        override = self.prefill_serving if pool == "prefill" else self.decode_serving
        return serving if override is None else override.apply(serving)

    def engine_replicas(self, serving: ServingConfig, pool: Pool) -> int:
        """Simulated replicas of a pool: instances x DP ranks."""
        count = self.prefill_replicas if pool == "prefill" else self.decode_replicas
        return count * self.pool_serving(serving, pool).dp

    def pool_gpus(self, serving: ServingConfig, pool: Pool) -> int:
        return self.engine_replicas(serving, pool) * self.pool_serving(serving, pool).tp

    def link(self, device: HardwareProfile) -> tuple[float, float, float]:
        """(bandwidth per GPU per direction, latency, seconds per descriptor) of the KV link:
        the scenario's, else the profile's ``scale_out``, else the default assumptions."""
        from simulator.cache.transfer import NIXL_DESCRIPTOR_S

        out = device.scale_out
        bw = self.link_bw_bytes_per_s
        if bw is None:
            bw = out.bw_bytes_per_s if out is not None else DEFAULT_LINK_BW_BYTES_PER_S
        latency = self.link_latency_s
        if latency is None:
            latency = out.latency_s if out is not None else DEFAULT_LINK_LATENCY_S
        descriptor_s = NIXL_DESCRIPTOR_S if self.kv_descriptor_s is None else self.kv_descriptor_s
        return bw, latency, descriptor_s


def _pool_checks(d: Disaggregation, serving: ServingConfig) -> None:
    """The pools' servings are valid and compatible; ValueError naming the pool otherwise."""
    pools: dict[str, ServingConfig] = {}
    names: tuple[Pool, Pool] = ("prefill", "decode")
    for pool in names:
        try:
            pools[pool] = d.pool_serving(serving, pool)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            raise ValueError(f"{pool}_serving: {where}: {msg}") from None
    p, dec = pools["prefill"], pools["decode"]
    if p.dcp != dec.dcp:
        raise ValueError(
            f"prefill_serving / decode_serving: dcp {p.dcp} vs {dec.dcp}: both pools must use"
            " one dcp (a KV block maps one to one between them; DCP on one side only is not"
            " modelled)"
        )
    total = d.engine_replicas(serving, "prefill") + d.engine_replicas(serving, "decode")
    if total > limits.MAX_REPLICAS:
        raise ValueError(
            f"(prefill_replicas x dp) + (decode_replicas x dp) = {total:,} simulated replicas"
            f" exceeds {limits.MAX_REPLICAS:,} per deployment (each DP rank is simulated)"
        )


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
        _pool_checks(d, serving)
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
