"""The step model's questions to the measured tables: which kind, family and axes each op
line maps to, bound once per line name (``Curve``), answered per step in microseconds.

Mapping rules (docs/measured.md has the sources):

* plain GEMMs: the table's format for the weight precision (fp8 block-scaled weights read
  the per-tensor FP8 rows, fp16/fp32 the BF16 rows); MXFP4 / INT4 dense GEMMs have no table
  and get the roofline fitted to the device's GEMM tables;
* MoE: routed experts only (the table excludes router GEMM, shared experts and collectives,
  and includes routing, both grouped GEMMs, the activation and the weighted sum); TP and EP
  as the table measures them (tp with ep 1, or ep with tp 1); token skew as vLLM's
  collector draws it (``moe_distribution``);
* attention: per-rank heads; decode queries of a speculative verify count as requests;
  a prefill chunk over a cached prefix is looked up at the causal length with the same
  (query, key) pairs;
* MLA: the attention core derived from the module tables (norms, RoPE, kv_b for new tokens,
  absorbed BMMs excluded: they are their own lines), for the DeepSeek MLA layout only;
* KDA / GDN: the recurrent kernels (KDA decode's fused kernel includes the short conv and
  gated norm, so those lines are dropped);
* collectives: vLLM's all-reduce table (custom all-reduce, NCCL above its limit), NCCL's
  for the rest.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from simulator.measured.kinds import KIND_CLASS
from simulator.specs.loading import SpecError
from simulator.specs.model import ModelCard
from simulator.specs.serving import ServingConfig

if TYPE_CHECKING:
    from simulator.measured.device import DeviceTables
    from simulator.measured.lookup import Curve

GEMM_TABLE_PRECISION = {"bf16": "bf16", "fp16": "bf16", "fp32": "bf16", "fp8_block": "fp8"}
KV_TABLE_DTYPE = {"auto": "bf16", "bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp8_ds_mla": "fp8"}
# routers with grouped / bias-corrected top-k and many fine experts: the aiconfigurator SDK's
# per-model skew (models/deepseek.py etc.: 1.01; generic MoE in models/moe.py: 1.2)
LOW_SKEW_MODEL_TYPES = frozenset(
    {"deepseek_v3", "kimi_k2", "kimi_k3", "kimi_linear", "minimax_m3", "nemotron_h"}
)
DEEPSEEK_MLA = (512, 64, 128, 128)  # kv_lora, rope, nope, v of the module tables
_MISSING = object()


def moe_distribution(card: ModelCard, serving: ServingConfig) -> str:
    if serving.moe_token_distribution != "auto":
        return serving.moe_token_distribution
    return "power_law_1.01" if card.model_type in LOW_SKEW_MODEL_TYPES else "power_law_1.2"


def causal_length(pairs: float, sequences: float) -> float:
    """The new-token count whose causal (query, key) pairs, with no prefix, equal ``pairs``
    per sequence: s (s + 1) / 2 = pairs / sequences."""
    per = pairs / max(sequences, 1.0)
    return (math.sqrt(1.0 + 8.0 * per) - 1.0) / 2.0


class Lookups:
    """Curves of one step model, by op line name (None: the line stays on the roofline)."""

    def __init__(
        self,
        tables: DeviceTables | None,
        card: ModelCard,
        serving: ServingConfig,
        skip_classes: frozenset[str] = frozenset(),
    ) -> None:
        self.tables, self.card, self.serving = tables, card, serving
        self.skip = skip_classes  # answered by the device's own calibration instead
        self._by_name: dict[str, Any] = {}
        mla = card.mla
        self.mla_ok = (
            mla is not None
            and (mla.kv_lora_rank, mla.qk_rope_head_dim, mla.qk_nope_head_dim, mla.v_head_dim)
            == DEEPSEEK_MLA
        )

    def _bind(
        self,
        name: str,
        kind: str,
        family: dict[str, Any],
        fixed: dict[str, float],
        free: tuple[str, ...],
    ) -> Curve | None:
        found = self._by_name.get(name, _MISSING)
        if found is _MISSING:
            t = self.tables
            skip = t is None or kind not in t.models or KIND_CLASS.get(kind, kind) in self.skip
            found = None if skip else t.curve(kind, family, fixed, free)  # type: ignore[union-attr]
            self._by_name[name] = found
        return found  # type: ignore[no-any-return]

    def gemm(self, name: str, precision: str, n: float, k: float) -> Curve | None:
        dtype = GEMM_TABLE_PRECISION.get(precision, precision)
        return self._bind(name, "gemm", {"dtype": dtype}, {"n": n, "k": k}, ("m",))

    def bmm(self, name: str, which: str, heads: float) -> Curve | None:
        if not self.mla_ok:
            return None
        return self._bind(name, "bmm", {"which": which}, {"num_heads": heads}, ("num_tokens",))

    def moe(
        self,
        name: str,
        precision: str,
        hidden: float,
        tp: int,
        ep: int,
        num_experts: float | None = None,
    ) -> Curve | None:
        """``num_experts``: the physical experts the EP group holds (EPLB's redundant copies
        included); None: the card's."""
        moe = self.card.moe
        assert moe is not None
        family = {
            "dtype": precision,
            "hidden": hidden,
            "inter": moe.expert_intermediate_size,
            "topk": moe.top_k,
            "num_experts": moe.num_experts if num_experts is None else num_experts,
            "tp": 1 if ep > 1 else tp,
            "ep": ep,
            "distribution": moe_distribution(self.card, self.serving),
        }
        kind = "moe"
        if self.serving.moe_kernel != "auto" and self._has("moe_kernel"):
            kind = "moe_kernel"
            family["kernel"] = self.serving.moe_kernel
            self._check_kernel(precision)
        if not self.card.gated_mlp and not self._measured(kind, family):
            # the tables time gated experts (w13 of 2 x inter), except their own rows of the
            # non-gated model (docs/hybrid-mamba.md); elsewhere a non-gated expert of width I
            # is read as the gated one of width 2 I / 3: the same FLOPs and weight bytes
            family["inter"] = moe.expert_intermediate_size * 2.0 / 3.0
        return self._bind(name, kind, family, {}, ("num_tokens",))

    def _has(self, kind: str) -> bool:
        """Whether the device's tables answer ``kind`` (not on priors or its calibration)."""
        t = self.tables
        return t is not None and kind in t.models and KIND_CLASS[kind] not in self.skip

    def _check_kernel(self, precision: str) -> None:
        """A named MoE kernel must have rows of this format on the device (or on the device
        its tables come from); else the answer would be another kernel's, silently."""
        assert self.tables is not None
        model = self.tables.models.get("moe_kernel")
        grids = getattr(getattr(model, "source", model), "grids", {})
        timed = {(fam[0], fam[1]) for fam in grids}
        kernel = self.serving.moe_kernel
        if (kernel, precision) in timed:
            return
        have = sorted({k for k, p in timed if p == precision})
        raise SpecError(
            "serving",
            "moe_kernel",
            f"no measured {kernel} MoE rows for {precision} experts on this device"
            f" ({self.tables.basis}; kernels timed for {precision}: {', '.join(have) or 'none'})",
        )

    def _measured(self, kind: str, family: dict[str, Any]) -> bool:
        """Whether the tables hold this very family (on this device or the transfer's)."""
        model = self.tables.models.get(kind) if self.tables is not None else None
        if model is None:
            return False
        fam = model.family(**family)
        return bool(model.nearest(fam) == fam)

    def attention(
        self, name: str, phase: str, head_dim: float, window: float, heads: float, kv_heads: float
    ) -> Curve | None:
        kv = KV_TABLE_DTYPE.get(self.serving.kv_cache_dtype)
        if kv is None:
            return None
        family = {
            "kv_dtype": kv,
            "head_dim": head_dim,
            "window": 0.0 if math.isinf(window) else window,
            "num_heads": heads,
            "num_kv_heads": kv_heads,
        }
        free = ("batch", "ctx_len") if phase == "decode" else ("batch", "seq_len")
        return self._bind(name, f"attn_{phase}", family, {}, free)

    def mla(self, name: str, phase: str, heads: float) -> Curve | None:
        kv = KV_TABLE_DTYPE.get(self.serving.kv_cache_dtype)
        if not self.mla_ok or kv is None:
            return None
        free = ("batch", "ctx_len") if phase == "decode" else ("batch", "seq_len")
        return self._bind(name, f"mla_{phase}", {"kv_dtype": kv}, {"num_heads": heads}, free)

    def linear(self, name: str, phase: str, hk: float, hv: float) -> Curve | None:
        la = self.card.linear_attention
        assert la is not None
        if (la.head_k_dim, la.head_v_dim) != (128, 128) or (la.kind != "kda" and phase == "verify"):
            return None
        family = {"kind": la.kind, "num_k_heads": hk, "num_v_heads": hv}
        free = {
            "prefill": ("batch", "seq_len"),
            "decode": ("batch",),
            "verify": ("batch", "queries"),
        }
        return self._bind(name, f"kda_{phase}", family, {}, free[phase])

    def linear_mixed(self, name: str, hk: float, hv: float) -> LongerOf | None:
        """The chunked prefill of a batch with decodes in it (``LongerOf`` the curve's
        answers at the prefills alone and at every sequence of the batch)."""
        key = name + "|mixed"
        found = self._by_name.get(key, _MISSING)
        if found is _MISSING:
            curve = self.linear(name, "prefill", hk, hv)
            found = self._by_name[key] = None if curve is None else LongerOf(curve)
        return found  # type: ignore[no-any-return]

    def collective(self, name: str, op_class: str, world: float) -> Curve | None:
        return self._bind(name, op_class, {"world": world}, {}, ("bytes",))

    def moe_alltoall(
        self, name: str, backend: str, phase: str, world: float
    ) -> tuple[Curve | None, float]:
        """vLLM's DeepEP dispatch or combine (the ``moe_a2a`` table), bound at the measured
        EP size nearest ``world`` (the tables hold one per system: 4 on GB200 / GB300, 8 on
        HGX), and that size; (None, 0) where the device has no such table."""
        model = self.tables.models.get("moe_alltoall") if self.tables is not None else None
        if model is None or "alltoall" in self.skip:
            return None, 0.0
        near = model.nearest(model.family(world=world, backend=backend, phase=phase))
        if near is None:
            return None, 0.0
        measured = float(near[0])
        family = {"world": measured, "backend": backend, "phase": phase}
        return self._bind(name, "moe_alltoall", family, {}, ("bytes",)), measured


class LongerOf:
    """The larger of one curve's answers at two points ``(a0, b0, a1, b1)``: a varlen kernel
    timed only at equal lengths.

    vLLM's chunked KDA / GDN kernel takes a batch's decodes as length-1 sequences beside its
    prefill chunks (vllm_mechanics.md 6.2). The table holds batches of one length; the
    kernel walks each sequence's chunks in order (``chunk_gated_delta_rule_fwd_h``), so one
    long chunk beside decodes takes at least as long as that chunk alone, and every sequence's
    state is loaded and stored, so at least as long as the same tokens spread evenly over all
    of them. The larger of the two is the bound priced: an 8,192-token chunk with 8 decodes
    was priced as 9 sequences of 911 tokens, cheaper than the chunk alone. Both queries count
    on the curve.
    """

    __slots__ = ("curve", "last_outside")

    def __init__(self, curve: Curve) -> None:
        self.curve = curve
        self.last_outside = False

    def seconds(self, *x: float) -> float:
        c = self.curve
        alone = c.seconds(x[0], x[1])
        alone_outside = c.last_outside
        spread = c.seconds(x[2], x[3])
        if alone >= spread:
            self.last_outside = alone_outside
            return alone
        self.last_outside = c.last_outside
        return spread

    # the bookkeeping of templates (simulator/cost/compiled.py) reads and adds these
    @property
    def status(self) -> int:
        return self.curve.status

    @property
    def queries(self) -> int:
        return self.curve.queries

    @queries.setter
    def queries(self, n: int) -> None:
        self.curve.queries = n

    @property
    def outside(self) -> int:
        return self.curve.outside

    @outside.setter
    def outside(self, n: int) -> None:
        self.curve.outside = n
