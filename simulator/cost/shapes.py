"""The data of one engine step: its request sums (``StepShape``), priced lines and cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from simulator.cost.ops import OpClass

Category = Literal[
    "attention", "recurrent", "moe", "dense", "drafting", "communication", "overhead"
]
CATEGORIES: tuple[Category, ...] = (
    "attention",
    "recurrent",
    "moe",
    "dense",
    "drafting",
    "communication",
    "overhead",
)
CAT_INDEX = {c: i for i, c in enumerate(CATEGORIES)}


@dataclass(frozen=True)
class StepShape:
    """Sums over the requests of one step that the cost depends on (tokens unless named)."""

    num_decodes: int = 0
    decode_tokens: int = 0  # sum of new tokens of decodes (1 + K each)
    decode_kv: float = 0.0  # sum over decodes of keys attended (context + new)
    decode_kv_window: float = 0.0  # the same, capped at the sliding window
    decode_kv_sparse: float = 0.0  # the same, capped at the sparse-attention span
    num_prefills: int = 0
    prefill_tokens: int = 0
    prefill_kv: float = (
        0.0  # sum over prefill chunks of context + new (keys read, latents re-projected)
    )
    prefill_kv_window: float = 0.0
    prefill_pairs: float = 0.0  # causal (query, key) pairs
    prefill_pairs_window: float = 0.0
    prefill_pairs_sparse: float = 0.0  # causal pairs, each query capped at the sparse span

    @property
    def num_tokens(self) -> int:
        return self.decode_tokens + self.prefill_tokens

    @property
    def num_requests(self) -> int:
        return self.num_decodes + self.num_prefills


@dataclass(frozen=True)
class OpLine:
    """One priced op of a step (all layers of its kind together)."""

    name: str
    op_class: OpClass
    category: Category
    count: float  # layers (instances) per step
    flops: float  # per instance
    bytes: float  # per instance
    seconds: float  # all instances


@dataclass(frozen=True)
class StepCost:
    seconds: float  # max(gpu, cpu)
    gpu_s: float
    cpu_s: float
    breakdown_s: dict[str, float]  # by category; sums to `seconds`
    padded_tokens: int  # tokens the GEMMs ran on (CUDA-graph padding included)
    lines: tuple[OpLine, ...] = field(default=())
