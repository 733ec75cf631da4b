"""Step time of one engine step: every layer's ops, priced by the latency models, summed.

A step is a batch of requests, each with ``new_tokens`` scheduled this step and
``context_tokens`` already in its KV cache. A request is a *decode* when it schedules at
most 1 + K tokens (K draft tokens) on top of an existing context, else a *prefill* chunk.

All layers of one kind have the same shapes, so each distinct op is priced once per step and
multiplied by its layer count: a step costs a few dozen vectorised evaluations whatever the
model depth or batch size. The engine can keep the sums of ``StepShape`` up to date itself
and call ``StepCostModel.price`` directly.

Step time = max(GPU time, CPU time) (async scheduling overlaps the CPU work of step n+1 with
the GPU work of step n). Pure-decode batches are padded to the CUDA-graph capture sizes.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numpy.typing import NDArray

from simulator.cost import ops
from simulator.cost.compiled import CompiledPricer
from simulator.cost.latency import LatencyModels
from simulator.cost.layers import StepOps
from simulator.cost.lookups import Lookups
from simulator.cost.moe_ep import AllToAllCurve
from simulator.cost.shapes import (
    StepCost,
    StepShape,
)
from simulator.kv_layout import attention_bytes_per_token_per_layer
from simulator.sparse_attention import attention_spans
from simulator.specs.hardware import HardwareProfile
from simulator.specs.model import MODULE_GROUPS, ModelCard, ModuleGroup
from simulator.specs.precision import (
    COMPUTE_DTYPE_OF,
    WEIGHT_FORMATS,
)
from simulator.specs.serving import ServingConfig
from simulator.weights import precision_of

if TYPE_CHECKING:
    from simulator.measured.lookup import Curve


class GemmShape(NamedTuple):
    """One plain GEMM of a step: its first op name, output width n, depth k, weight width."""

    name: str
    n: int
    k: int
    weight_bytes_per_elem: float


def cuda_graph_sizes(max_num_seqs: int, decode_query_len: int) -> list[int]:
    """vLLM capture sizes: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16),
    max = min(2 x max_num_seqs x decode query length, 512) (``config/vllm.py``)."""
    top = min(2 * max_num_seqs * decode_query_len, 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    return [s for s in sizes if s <= top]


def shape_of(
    new_tokens: NDArray[np.int64],
    context_tokens: NDArray[np.int64],
    decode_query_len: int = 1,
    window: float = np.inf,
    sparse_span: float = np.inf,
) -> StepShape:
    """The sums of a step from per-request (new, context) arrays."""
    new = np.asarray(new_tokens, dtype=np.float64)
    ctx = np.asarray(context_tokens, dtype=np.float64)
    dec = ((new <= decode_query_len) & (ctx > 0)).astype(np.float64)
    pre = 1.0 - dec
    kv = ctx + new
    num_decodes = int(dec.sum())
    decode_kv = float(dec @ kv)
    prefill_kv = float(pre @ kv)
    pairs = float(pre @ (new * ctx + new * (new + 1) / 2.0))
    windowed = bool(np.isfinite(window))
    return StepShape(
        num_decodes=num_decodes,
        decode_tokens=int(dec @ new),
        decode_kv=decode_kv,
        decode_kv_window=float(dec @ np.minimum(kv, window)) if windowed else decode_kv,
        decode_kv_sparse=(
            float(dec @ np.minimum(kv, sparse_span)) if np.isfinite(sparse_span) else decode_kv
        ),
        num_prefills=new.size - num_decodes,
        prefill_tokens=int(pre @ new),
        prefill_kv=prefill_kv,
        prefill_kv_window=float(pre @ np.minimum(kv, new + window)) if windowed else prefill_kv,
        prefill_pairs=pairs,
        prefill_pairs_window=(
            float(pre @ ops.causal_pairs(new, ctx, window)) if windowed else pairs
        ),
        prefill_pairs_sparse=(
            float(pre @ ops.causal_pairs(new, ctx, sparse_span))
            if np.isfinite(sparse_span)
            else pairs
        ),
    )


class StepCostModel:
    """Prices engine steps of one model on one device under one serving config."""

    def __init__(
        self,
        card: ModelCard,
        device: HardwareProfile,
        serving: ServingConfig,
        latency: LatencyModels | None = None,
        max_num_seqs: int = 1024,
    ) -> None:
        self.card, self.device, self.serving = card, device, serving
        self.latency = latency or LatencyModels.for_device(device)
        self.lookups = Lookups(self.latency.tables, card, serving, self.latency.calibrated)
        self.use_templates = True
        # EP dispatch / combine curves by line (None: the device's table or prior), made
        # at the first step that asks (simulator/cost/moe_ep.py)
        self.alltoall_curves: dict[str, AllToAllCurve | None] = {}
        # plain GEMM lines by (name, module group): weight bytes per element, peak FLOP/s and
        # measured curve (``StepOps.gemm``)
        self.gemm_lines: dict[tuple[str, str], tuple[float, float, Curve | None]] = {}
        self.decode_query_len = 1 + serving.num_speculative_tokens
        self.graph_sizes = cuda_graph_sizes(max_num_seqs, self.decode_query_len)
        self.pricer = CompiledPricer(self)
        kinds = card.layer_kinds
        self.counts = {k: float(sum(1 for x in kinds if x == k)) for k in set(kinds)}
        self.n_moe = float(sum(card.moe_layer_mask))
        self.n_dense_mlp = float(card.num_dense_mlp_layers)
        # RMSNorms per step: one before each mixer and one before each MLP
        self.n_norms = float(card.layers.count - self.counts.get("none", 0.0)) + float(
            card.layers.count - len(card.layers.mlp_free)
        )
        self.window = (
            float(card.gqa.sliding_window_tokens)
            if card.gqa is not None and card.gqa.sliding_window_tokens
            else np.inf
        )
        groups: tuple[ModuleGroup, ...] = MODULE_GROUPS
        self.group_peak = {
            grp: device.peak_flops_per_s.for_dtype(
                COMPUTE_DTYPE_OF[precision_of(card, serving, grp)]
            )
            for grp in groups
        }
        self.group_weight_bytes = {
            grp: WEIGHT_FORMATS[precision_of(card, serving, grp)].bits_per_element / 8
            for grp in groups
        }
        self.mla_kv_bytes_per_token = (
            attention_bytes_per_token_per_layer(card, serving, "mla") if card.mla else 0.0
        )
        g = card.gqa
        self.sparse_span = (
            float((g.sparse_topk_blocks or 0) + 1) * (g.sparse_block_tokens or 0)
            if g is not None and g.sparse_block_tokens
            else np.inf
        )
        spans = attention_spans(card)  # sparse MLA, DeepSeek-V4 (simulator/sparse_attention.py)
        if spans is not None:
            self.window, self.sparse_span = spans

    # ---------------------------------------------------------------- public API

    def step(
        self,
        new_tokens: NDArray[np.int64],
        context_tokens: NDArray[np.int64],
        detail: bool = False,
    ) -> StepCost:
        shape = shape_of(
            new_tokens, context_tokens, self.decode_query_len, self.window, self.sparse_span
        )
        return self.price(shape, detail)

    def step_seconds(
        self, new_tokens: NDArray[np.int64], context_tokens: NDArray[np.int64]
    ) -> float:
        return self.step(new_tokens, context_tokens).seconds

    def price(self, shape: StepShape, detail: bool = False) -> StepCost:
        """The step's cost: through the per-key templates (``simulator.cost.compiled``)
        unless ``detail`` (the op lines) is asked for or ``use_templates`` is off."""
        if not detail and self.use_templates:
            return self.pricer.price(shape)
        builder = StepOps(self, shape)
        builder.build()
        return builder.finish(detail)

    def gemm_shapes(self) -> list[GemmShape]:
        """The plain GEMMs a step of this model asks about, as (name, n, k, weight bytes per
        element), one per distinct (n, k, width): what the calibration job measures.

        Read off a step with one decode and one prefill chunk, so every layer kind's
        projections (decode-only and prefill-only ones too, e.g. MLA's absorbed BMMs vs the
        kv_b up-projection) appear."""
        shape = shape_of(np.array([1, 64]), np.array([64, 0]), self.decode_query_len)
        builder = StepOps(self, shape)
        builder.want_shapes = True
        builder.build()
        seen: dict[tuple[float, float, float], GemmShape] = {}
        for i, (_, n, k, w) in builder.shapes.items():
            seen.setdefault((n, k, w), GemmShape(builder.rows[i][0], int(n), int(k), w))
        return list(seen.values())

    def cpu_seconds(self, shape: StepShape) -> float:
        """CPU time of a step: the profile's per-step base plus a cost per scheduled request."""
        r = self.device.roofline
        return r.cpu_step_overhead_s + r.cpu_step_per_request_s * shape.num_requests

    def padded(self, shape: StepShape) -> int:
        """Tokens the GEMMs run on: pure-decode batches pad up to a CUDA-graph size."""
        t = shape.num_tokens
        if shape.num_prefills or t == 0 or t > self.graph_sizes[-1]:
            return t
        return self.graph_sizes[bisect.bisect_left(self.graph_sizes, t)]
