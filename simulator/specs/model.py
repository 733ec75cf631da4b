"""Model cards: the architecture facts the planner needs, each traceable to a config.json.

Layer lists are 1-based, as in the Hugging Face configs they come from
(``linear_attn_config.full_attn_layers`` etc.). ``ModelCard.layer_kinds`` gives the
0-based per-layer view the code uses.
"""

from __future__ import annotations

from collections import Counter
from functools import cached_property
from typing import Annotated, Literal

from pydantic import Field, PositiveInt, model_validator

from simulator.specs import limits
from simulator.specs.frozen import Spec
from simulator.specs.limits import at_most
from simulator.specs.precision import StateDtype, WeightPrecision
from simulator.specs.sparse import CompressedAttentionConfig, DsaIndexerConfig
from simulator.specs.vision import VisionConfig

# Token mixer of a layer.
#   mla          multi-head latent attention (DeepSeek/Kimi), full context
#   gqa          grouped-query softmax attention, full context
#   swa          grouped-query softmax attention over a sliding window
#   sparse_gqa   grouped-query attention reading top-k blocks chosen by an indexer (MiniMax-M3)
#   kda          Kimi Delta Attention (linear, recurrent state)
#   gdn          gated DeltaNet (linear, recurrent state; Qwen3-Next / Qwen3.5)
#   mamba2       Mamba2 selective state space (SSD; recurrent state; Nemotron-H)
#   none         no token mixer: an MLP-only block (Nemotron-H "E" and "-" blocks)
#   sparse_mla   MLA attending the top-k tokens a DSA indexer picks (GLM-5, DeepSeek-V3.2)
#   csa          DeepSeek-V4 compressed sparse attention: window + top-k of 4x-compressed entries
#   hca          DeepSeek-V4 heavily compressed attention: window + all 128x-compressed entries
#   swa_mqa      DeepSeek-V4 sliding-window layer (compress ratio 0): the window only
LayerKind = Literal[
    "mla",
    "gqa",
    "swa",
    "sparse_gqa",
    "kda",
    "gdn",
    "mamba2",
    "none",
    "sparse_mla",
    "csa",
    "hca",
    "swa_mqa",
]
FULL_ATTENTION_KINDS: frozenset[str] = frozenset(
    {"mla", "gqa", "sparse_gqa", "sparse_mla", "csa", "hca"}
)
# the kinds of simulator/specs/sparse.py (memory: simulator/sparse_attention.py)
SPARSE_KINDS: frozenset[str] = frozenset({"sparse_mla", "csa", "hca", "swa_mqa"})
LINEAR_KINDS: frozenset[str] = frozenset({"kda", "gdn", "mamba2"})
# softmax-attention kinds (full or windowed): what an MTP module's attention is
ATTENTION_KINDS: frozenset[str] = FULL_ATTENTION_KINDS | {"swa"}

# Groups of weights that may carry different precisions (and shard differently under TP/EP).
ModuleGroup = Literal[
    "embedding",
    "lm_head",
    "attention",
    "linear_attention",
    "dense_mlp",
    "router",
    "shared_experts",
    "routed_experts",
    "moe_latent",
    "mtp",
]
MODULE_GROUPS: tuple[ModuleGroup, ...] = (
    "embedding",
    "lm_head",
    "attention",
    "linear_attention",
    "dense_mlp",
    "router",
    "shared_experts",
    "routed_experts",
    "moe_latent",
    "mtp",
)


class MLAConfig(Spec):
    """Multi-head latent attention. KV cache holds kv_lora_rank + qk_rope_head_dim per token."""

    num_heads: PositiveInt
    q_lora_rank: PositiveInt | None
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: int = Field(ge=0)
    v_head_dim: PositiveInt
    output_gate: bool = False  # Kimi K3 mla_use_output_gate: sigmoid(W x) gates the heads
    indexer: DsaIndexerConfig | None = None  # `sparse_mla` layers (DSA lightning indexer)


QKNorm = Literal["none", "per_head", "across_heads"]


class GQAConfig(Spec):
    """Softmax attention with grouped KV heads (full, sliding-window or block-sparse layers)."""

    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    output_gate: bool = False  # Qwen3.5 attn_output_gate
    # RMSNorm of the queries and keys before RoPE: per_head (Qwen3, Qwen3-Next / 3.5: q_norm and
    # k_norm of head_dim weights, vLLM qwen3.py / qwen3_next.py), across_heads (MiniMax-M2: one
    # norm over all heads, so TP ranks all-reduce its variances, q's and k's together, once a
    # layer: vLLM MiniMaxText01RMSNormTP.forward_qk)
    qk_norm: QKNorm = "none"
    sliding_window_tokens: PositiveInt | None = None  # for `swa` layers
    # block-sparse attention (`sparse_gqa` layers): an indexer picks top-k blocks per query
    sparse_block_tokens: PositiveInt | None = None
    sparse_topk_blocks: PositiveInt | None = None
    index_num_heads: PositiveInt | None = None
    index_head_dim: PositiveInt | None = None

    @model_validator(mode="after")
    def _heads_group(self) -> GQAConfig:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}"
            )
        return self


class LinearAttentionConfig(Spec):
    """KDA, gated-DeltaNet or Mamba2 layer: a short causal conv plus a (num_v_heads, dk, dv)
    state per sequence.

    Mamba2 reads through the SSD duality (C, B, x play q, k, v): ``num_k_heads`` = n_groups
    (B and C have one d_state vector per group), ``head_k_dim`` = ssm_state_size (d_state),
    ``num_v_heads`` = mamba_num_heads, ``head_v_dim`` = mamba_head_dim; so the SSM state is
    heads x head_dim x d_state and the conv runs over d_inner + 2 n_groups d_state channels,
    as vLLM's ``MambaStateShapeCalculator.mamba2_state_shape`` lays them out."""

    kind: Literal["kda", "gdn", "mamba2"]
    num_k_heads: PositiveInt
    num_v_heads: PositiveInt
    head_k_dim: PositiveInt
    head_v_dim: PositiveInt
    conv_kernel_size: PositiveInt
    state_dtype: StateDtype = "fp32"  # vLLM default mamba_ssm_cache_dtype auto -> fp32
    full_rank_gate: bool = False  # Kimi K3 use_full_rank_gate: gates are D x (H d), no low rank

    @property
    def conv_dim(self) -> int:
        """Channels the short conv runs over: q, k and v (Mamba2: x, B and C)."""
        return 2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim

    @property
    def inner_dim(self) -> int:
        """Width of the mixer's value / output path (Mamba2 d_inner = heads x head_dim)."""
        return self.num_v_heads * self.head_v_dim


class MoEConfig(Spec):
    """Routed experts (+ shared experts); latent MoE when routed_hidden_size is set."""

    num_experts: PositiveInt
    top_k: PositiveInt
    expert_intermediate_size: PositiveInt
    num_shared_experts: int = Field(ge=0)
    shared_intermediate_size: PositiveInt | None = None  # defaults to expert_intermediate_size
    routed_hidden_size: PositiveInt | None = None  # Kimi K3 routed_expert_hidden_size (latent)

    @model_validator(mode="after")
    def _topk(self) -> MoEConfig:
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k {self.top_k} exceeds num_experts {self.num_experts}")
        return self


class LayerLayout(Spec):
    """Which 1-based layers have which token mixer and which MLP.

    A layer is a mixer (``mixers``; ``none`` = no mixer) followed by an MLP: the MoE on
    ``moe_layers``, no MLP on ``mlp_free``, else the dense MLP. Nemotron-H blocks hold one
    of the two: a Mamba2 or attention block is a mixer on ``mlp_free``, an MoE or MLP block
    is a ``none`` mixer with its MLP."""

    count: Annotated[PositiveInt, at_most(limits.MAX_LAYERS, "layers of one model")]
    mixers: dict[LayerKind, list[PositiveInt]]
    moe_layers: list[PositiveInt] = Field(default_factory=list)  # the rest use the dense MLP
    mlp_free: list[PositiveInt] = Field(default_factory=list)  # layers with no MLP at all

    @model_validator(mode="after")
    def _partition(self) -> LayerLayout:
        seen: list[int] = sorted(i for layers in self.mixers.values() for i in layers)
        if seen != list(range(1, self.count + 1)):
            missing = sorted(set(range(1, self.count + 1)) - set(seen))
            dup = sorted(i for i, n in Counter(seen).items() if n > 1)
            extra = sorted(i for i in set(seen) if i > self.count)
            raise ValueError(
                "mixers must list every layer 1..count exactly once"
                f" (missing {missing[:5]}, duplicated {dup[:5]}, beyond count {extra[:5]})"
            )
        bad = [i for i in self.moe_layers if i > self.count]
        if bad:
            raise ValueError(f"moe_layers {bad[:5]} beyond count {self.count}")
        self._check_mlp_free()
        return self

    def _check_mlp_free(self) -> None:
        free = set(self.mlp_free)
        if len(free) != len(self.mlp_free) or any(i > self.count for i in free):
            raise ValueError(f"mlp_free must list distinct layers 1..{self.count}")
        both = sorted(free & set(self.moe_layers))
        if both:
            raise ValueError(f"layers {both[:5]} are in both moe_layers and mlp_free")
        empty = sorted(free & set(self.mixers.get("none", [])))
        if empty:
            raise ValueError(f"layers {empty[:5]} have no mixer (none) and no MLP (mlp_free)")


class PublishedSize(Spec):
    """Published parameter counts, used to check the card's own accounting."""

    total_params: float = Field(gt=0)
    active_params: float | None = Field(default=None, gt=0)
    source: str


class ModelCard(Spec):
    name: str = Field(min_length=1)
    hf_id: str
    source: str  # which config.json the numbers come from
    model_type: str
    hidden_size: PositiveInt
    vocab_size: PositiveInt
    tie_word_embeddings: bool = False
    max_context_tokens: PositiveInt
    layers: LayerLayout
    mla: MLAConfig | None = None
    gqa: GQAConfig | None = None
    linear_attention: LinearAttentionConfig | None = None
    compressed_attention: CompressedAttentionConfig | None = None  # csa / hca / swa_mqa layers
    dense_intermediate_size: PositiveInt | None = None
    moe: MoEConfig | None = None
    # MLPs and experts (dense, shared, routed): gated = gate_proj and up_proj then down_proj
    # (SwiGLU, 3 matrices); False = up_proj, activation, down_proj (Nemotron-H relu2, 2)
    gated_mlp: bool = True
    mtp_layers: int = Field(default=0, ge=0)  # num_nextn_predict_layers
    weight_precision: dict[ModuleGroup, WeightPrecision]
    published: PublishedSize | None = None
    # vision encoder + projector (simulator/specs/vision.py): weights and an activation reserve
    vision: VisionConfig | None = None
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _configs_present(self) -> ModelCard:
        kinds = {k for k, v in self.layers.mixers.items() if v}
        if "mla" in kinds and self.mla is None:
            raise ValueError("layers use mla but the card has no `mla` section")
        if kinds & {"gqa", "swa", "sparse_gqa"} and self.gqa is None:
            raise ValueError("layers use gqa/swa/sparse_gqa but the card has no `gqa` section")
        if "swa" in kinds and (self.gqa is None or self.gqa.sliding_window_tokens is None):
            raise ValueError("swa layers need gqa.sliding_window_tokens")
        if "sparse_gqa" in kinds and (
            self.gqa is None
            or self.gqa.sparse_block_tokens is None
            or not self.gqa.sparse_topk_blocks
        ):
            raise ValueError(
                "sparse_gqa layers need gqa.sparse_block_tokens and sparse_topk_blocks"
            )
        if "sparse_mla" in kinds and (self.mla is None or self.mla.indexer is None):
            raise ValueError("sparse_mla layers need an `mla` section with an `indexer`")
        if kinds & {"csa", "hca", "swa_mqa"} and self.compressed_attention is None:
            raise ValueError("csa/hca/swa_mqa layers need a `compressed_attention` section")
        linear = kinds & LINEAR_KINDS
        if len(linear) > 1:
            raise ValueError("a card may use one linear-attention kind only")
        if linear and (self.linear_attention is None or self.linear_attention.kind not in linear):
            raise ValueError(f"layers use {sorted(linear)} but linear_attention does not match")
        if self.layers.moe_layers and self.moe is None:
            raise ValueError("moe_layers listed but the card has no `moe` section")
        if self.num_dense_mlp_layers and self.dense_intermediate_size is None:
            raise ValueError("some layers use the dense MLP but dense_intermediate_size is missing")
        missing = [g for g in self.required_groups() if g not in self.weight_precision]
        if missing:
            raise ValueError(f"weight_precision lacks module groups {missing}")
        return self

    def required_groups(self) -> list[ModuleGroup]:
        """Module groups this architecture has weights in."""
        groups: list[ModuleGroup] = ["embedding"]
        if not self.tie_word_embeddings:
            groups.append("lm_head")
        kinds = self.layer_kinds
        if any(k not in LINEAR_KINDS and k != "none" for k in kinds):
            groups.append("attention")
        if any(k in LINEAR_KINDS for k in kinds):
            groups.append("linear_attention")
        if self.num_dense_mlp_layers:
            groups.append("dense_mlp")
        if self.moe is not None and self.layers.moe_layers:
            groups += ["router", "routed_experts"]
            if self.moe.num_shared_experts:
                groups.append("shared_experts")
            if self.moe.routed_hidden_size is not None:
                groups.append("moe_latent")
        return groups

    @cached_property
    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """Token mixer of each layer, 0-based."""
        out: list[LayerKind] = ["gqa"] * self.layers.count
        for kind, layers in self.layers.mixers.items():
            for i in layers:
                out[i - 1] = kind
        return tuple(out)

    @cached_property
    def moe_layer_mask(self) -> tuple[bool, ...]:
        moe = set(self.layers.moe_layers)
        return tuple(i + 1 in moe for i in range(self.layers.count))

    @cached_property
    def mlp_free_mask(self) -> tuple[bool, ...]:
        """Layers without an MLP, 0-based (Nemotron-H Mamba2 and attention blocks)."""
        free = set(self.layers.mlp_free)
        return tuple(i + 1 in free for i in range(self.layers.count))

    @property
    def num_dense_mlp_layers(self) -> int:
        return self.layers.count - len(self.layers.moe_layers) - len(self.layers.mlp_free)

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices per MLP / expert: 3 gated (SwiGLU), 2 not (relu2)."""
        return 3 if self.gated_mlp else 2

    def count_layers(self, *kinds: str) -> int:
        return sum(1 for k in self.layer_kinds if k in kinds)

    @property
    def is_hybrid(self) -> bool:
        return self.count_layers(*LINEAR_KINDS) > 0

    @property
    def num_attention_heads(self) -> int:
        """Query heads of the softmax-attention layers (what TP must divide)."""
        if self.mla is not None:
            return self.mla.num_heads
        if self.compressed_attention is not None:
            return self.compressed_attention.num_heads
        if self.gqa is not None:
            return self.gqa.num_heads
        return 0
