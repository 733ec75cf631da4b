"""How a model is deployed: parallelism, precisions, cache and batch limits (vLLM's knobs)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from simulator.specs.frozen import Spec
from simulator.specs.limits import MAX_REPLICAS, VLLM_BLOCK_SIZES, at_most
from simulator.specs.model import ModuleGroup
from simulator.specs.precision import KvCacheDtype, StateDtype, WeightPrecision

GIB = 1 << 30
# vLLM --all2all-backend values the planner prices ("generic": its own two all-to-alls)
All2AllBackend = Literal["generic", "deepep_high_throughput", "deepep_low_latency"]
LatentPlacement = Literal["replicated", "rank_split"]  # latent-MoE projections over TP ranks


class SpeculativeConfig(Spec):
    method: Literal["mtp", "eagle", "draft_model", "ngram"]
    # draft tokens a step verifies: vLLM's proposers run 1-8 (each an extra drafter pass);
    # 1,000 priced a 1.5 s step
    num_speculative_tokens: Annotated[
        PositiveInt, at_most(64, "draft tokens per step (vLLM's proposers run 1-8)")
    ]
    # i.i.d. per-token acceptance a, or the mean accepted length per step; one of the two
    acceptance_rate: float | None = Field(default=None, gt=0, lt=1)
    mean_acceptance_length: float | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_acceptance(self) -> SpeculativeConfig:
        if (self.acceptance_rate is None) == (self.mean_acceptance_length is None):
            raise ValueError("give exactly one of acceptance_rate and mean_acceptance_length")
        if (
            self.mean_acceptance_length is not None
            and self.mean_acceptance_length > self.num_speculative_tokens + 1
        ):
            raise ValueError("mean_acceptance_length exceeds num_speculative_tokens + 1")
        return self


MoEKernel = Literal["auto", "triton", "marlin", "flashinfer_trtllm", "flashinfer_cutlass"]


def _validated(info: ValidationInfo, *names: str) -> bool:
    """Whether the fields a check reads passed their own validation (pydantic leaves a failed
    one out of ``info.data``): if not, their error is reported and the check is skipped, not
    made against a default the user never gave (tp 0 and dcp 8: "dcp 8 must divide tp 1")."""
    return all(n in info.data for n in names)


class ServingConfig(Spec):
    """One replica = tp GPUs (DCP reuses the TP ranks); dp replicas; EP spans tp x dp GPUs."""

    tp: PositiveInt = 1
    # replicas, each simulated: at most MAX_REPLICAS (simulator/specs/limits.py)
    dp: Annotated[
        PositiveInt,
        at_most(
            MAX_REPLICAS,
            "replicas per simulated deployment (each is simulated; size a bigger fleet"
            " with demand_users)",
        ),
    ] = 1
    ep: PositiveInt = 1  # 1 = experts TP-sharded; tp*dp = vLLM --enable-expert-parallel
    dcp: PositiveInt = 1  # decode context parallel, must divide tp
    dcp_interleave_tokens: PositiveInt = 1  # --cp-kv-cache-interleave-size
    weight_precision: dict[ModuleGroup, WeightPrecision] = Field(default_factory=dict)
    kv_cache_dtype: KvCacheDtype = "auto"
    state_dtype: StateDtype | None = None  # None: the card's (vLLM mamba_ssm_cache_dtype)
    gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)
    kv_cache_memory_bytes: float | None = Field(default=None, gt=0)  # --kv-cache-memory-bytes
    max_num_batched_tokens: PositiveInt | None = None  # None: vLLM default by device memory
    max_num_seqs: PositiveInt | None = None  # None: vLLM default by device memory
    # --api-server-count: API-server processes of the deployment, which tokenize prompts
    # side by side (roofline.frontend_s_per_prompt_token). None: vLLM's default, one per DP rank
    api_server_count: (
        Annotated[PositiveInt, at_most(MAX_REPLICAS, "API server processes of one deployment")]
        | None
    ) = None
    # --max-model-len: longest prompt + max_tokens a request may ask for (vLLM answers HTTP
    # 400 beyond it). None: the card's max_context_tokens; more than that is refused
    # (deployment.check_deployment: the card is needed to check it)
    max_model_len: PositiveInt | None = None
    block_size_tokens: PositiveInt = 16  # --block-size; hybrid page alignment can raise it
    enable_prefix_caching: bool = True  # hybrids: align mode (2 state pages per request)
    # recurrent-state checkpoints kept: 0 = vLLM default (replay boundary + shared-prefix
    # junctions), N = also every N tokens, None = every block
    prefix_cache_retention_interval: int | None = Field(default=0, ge=0)
    # hybrids: store the attention remainder with each checkpoint so resume points coincide
    # (True), or resume at the last checkpoint and recompute the rest (False, vLLM default)
    hybrid_store_attention_remainder: bool = False
    # memory outside weights/KV/activations: CUDA graphs, NCCL buffers, allocator slack.
    # Assumption (no vendor figure): vLLM start-up logs show 0.5-2 GiB of graph memory.
    runtime_reserve_bytes: float = Field(default=1.5 * GIB, ge=0)
    cpu_offload_bytes: float = Field(default=0, ge=0)  # per replica, --kv-offloading-size
    speculative: SpeculativeConfig | None = None
    fused_decode_kernels: bool = False
    # token skew across experts as the measured MoE tables draw it: "auto" = the per-model
    # choice of the tables' SDK (power-law 1.01 for DeepSeek/Kimi-style routers, 1.2 else)
    moe_token_distribution: Literal["auto", "balanced", "power_law_1.01", "power_law_1.2"] = "auto"
    # the routed-expert kernel vLLM runs (its MoE oracle, steered by --moe-backend and env
    # flags such as VLLM_USE_FLASHINFER_MOE_FP8=0 or VLLM_MXFP4_USE_MARLIN=1): "auto" = the
    # newest measured MoE table's rows, whatever kernel they time; a name = that kernel's
    # rows from any collection (docs/measured.md, "MoE kernels")
    moe_kernel: MoEKernel = "auto"
    # Wide expert parallelism (docs/rack-scale.md). Redundant physical experts of vLLM's EPLB
    # (--enable-eplb, --eplb-config num_redundant_experts): each EP rank holds
    # (num_experts + eplb_redundant_experts) / ep experts, which must be whole
    eplb_redundant_experts: int = Field(default=0, ge=0)
    # the busiest EP rank's routed (token, expert) pairs over the mean rank's (1: balanced);
    # the routed-expert time of a step is the busiest rank's, and so is the all-to-all's
    # (it receives that share). No effect at ep 1 (every rank holds a slice of every expert)
    moe_load_imbalance: float = 1.0
    # EP dispatch/combine with DP attention (ep = tp x dp, dp > 1): "generic" = two
    # all-to-alls of every routed token copy (NCCL's all-to-all table, else the alpha-beta
    # prior); "deepep_high_throughput" / "deepep_low_latency" = vLLM --all2all-backend,
    # priced from the measured DeepEP tables (aiconfigurator-core moe_a2a) where the device
    # has them, else the generic form
    all2all_backend: All2AllBackend = "generic"
    # latent MoE (card.moe.routed_hidden_size): the hidden <-> latent projections kept whole
    # on every TP rank ("replicated") or split across the TP ranks ("rank_split": 1/tp of the
    # weights and of the GEMMs on each rank, joined by an all-gather and a reduce-scatter)
    latent_moe_projection: LatentPlacement = "replicated"
    # Prefill/decode disaggregation with send-back (vLLM NixlConnector
    # ``bidirectional_kv_xfer``; used only when the scenario has a ``disaggregation`` block):
    # how long the decode side pins a finished request's blocks for the session's next turn
    # (``decoder_kv_blocks_ttl``, default 480 s) ...
    decoder_kv_blocks_ttl_s: PositiveFloat = 480.0
    # ... and the prefill side recomputes instead of pulling them back when
    # 0 < tokens to pull < this (``kv_recompute_threshold``, default 64 tokens)
    kv_recompute_threshold_tokens: int = Field(default=64, ge=0)

    @field_validator("block_size_tokens")
    @classmethod
    def _vllm_block_size(cls, block: int) -> int:
        if block not in VLLM_BLOCK_SIZES:
            sizes = ", ".join(map(str, VLLM_BLOCK_SIZES))
            raise ValueError(
                f"must be one of vLLM's block sizes {sizes} (CacheConfig.BlockSize: a power of"
                f" two up to 256; hybrid models then raise it to align pages), got {block}"
            )
        return block

    @field_validator("ep")
    @classmethod
    def _ep_spans_all_ranks(cls, ep: int, info: ValidationInfo) -> int:
        if not _validated(info, "tp", "dp"):
            return ep
        world = info.data["tp"] * info.data["dp"]
        if ep not in (1, world):
            raise ValueError(
                f"ep must be 1 (TP-sharded experts) or tp*dp = {world}"
                " (vLLM expert parallelism spans all TP x DP ranks)"
            )
        return ep

    @field_validator("eplb_redundant_experts")
    @classmethod
    def _eplb_needs_ep(cls, redundant: int, info: ValidationInfo) -> int:
        if redundant and _validated(info, "ep") and info.data["ep"] == 1:
            raise ValueError(
                f"{redundant} redundant experts need expert parallelism (ep = tp*dp > 1):"
                " vLLM's EPLB places extra copies of experts on EP ranks"
            )
        return redundant

    @field_validator("moe_load_imbalance")
    @classmethod
    def _imbalance_at_least_one(cls, imbalance: float, info: ValidationInfo) -> float:
        if imbalance < 1.0:
            raise ValueError(
                f"must be >= 1 (the busiest EP rank's routed pairs over the mean rank's; 1 ="
                f" balanced: no rank is below the mean), got {imbalance:g}"
            )
        if not _validated(info, "ep"):
            return imbalance
        ep = info.data["ep"]
        if ep == 1 and imbalance != 1.0:  # (accepted, then dropped from the answer unsaid)
            raise ValueError(
                f"{imbalance:g} needs expert parallelism (ep > 1): at ep 1 every rank runs every"
                " expert's share, so no rank is busier than the mean"
            )
        if ep > 1 and imbalance > ep:
            raise ValueError(
                f"{imbalance:g} exceeds ep {ep}: the busiest of {ep} ranks holds at most all"
                f" the pairs, {ep}x the mean"
            )
        return imbalance

    @field_validator("all2all_backend")
    @classmethod
    def _all2all_needs_dp_ep(cls, backend: str, info: ValidationInfo) -> str:
        if not _validated(info, "ep", "dp"):
            return backend
        ep, dp = info.data["ep"], info.data["dp"]
        if backend != "generic" and (ep == 1 or dp == 1):
            raise ValueError(
                f"{backend} dispatches tokens between DP ranks: it needs ep = tp*dp > 1 with"
                f" dp > 1 (got ep {ep}, dp {dp}; without DP, EP ends in a TP all-reduce)"
            )
        return backend

    @field_validator("dcp")
    @classmethod
    def _dcp_divides_tp(cls, dcp: int, info: ValidationInfo) -> int:
        if not _validated(info, "tp"):
            return dcp
        tp = info.data["tp"]
        if tp % dcp:
            raise ValueError(f"dcp {dcp} must divide tp {tp} (DCP reuses the TP ranks)")
        return dcp

    @property
    def gpus_per_replica(self) -> int:
        return self.tp

    @property
    def num_gpus(self) -> int:
        return self.tp * self.dp

    @property
    def num_speculative_tokens(self) -> int:
        return 0 if self.speculative is None else self.speculative.num_speculative_tokens
