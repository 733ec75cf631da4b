"""The MoE FFN's float64 reference and random problems for the grouped MoE GEMM.

``make_inputs`` draws one MoE shape (activations, softmax top-k routing, expert weights in a
weight format of ``moe_formats.WEIGHT_FORMATS``, one expert-parallel rank's share); its
``MoeInputs.run()`` calls ``moe_gemm.fused_moe`` and ``reference()`` computes the same layer
in float64 on the dequantised weights (``moe_reference``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from kernels_calibration.moe_formats import (
    ACTIVATION_DTYPES,
    DENSE_FORMAT_DTYPES,
    MXFP4_BLOCK,
    WEIGHT_FORMATS,
    dequantize_fp8,
    dequantize_mxfp4,
    quantize_fp8,
    quantize_mxfp4,
)
from kernels_calibration.moe_gemm import fused_moe
from kernels_calibration.moe_routing import route


def moe_reference(
    x: np.ndarray,
    w1: np.ndarray,
    w2: np.ndarray,
    topk_weights: np.ndarray,
    topk_ids: np.ndarray,
    expert_map: np.ndarray | None = None,
) -> np.ndarray:
    """The MoE FFN in float64 on dequantised weights ``w1 [L, 2I, H]``, ``w2 [L, H, I]``.

    ``y[t] = sum_j w[t, j] * W2[e] @ (silu(W1[e, :I] @ x[t]) * W1[e, I:] @ x[t])`` over the slots
    whose expert ``e = expert_map[topk_ids[t, j]]`` (or ``topk_ids[t, j]``) is local (>= 0).
    """
    x = np.asarray(x, dtype=np.float64)
    w1 = np.asarray(w1, dtype=np.float64)
    w2 = np.asarray(w2, dtype=np.float64)
    weights = np.asarray(topk_weights, dtype=np.float64)
    ids = np.asarray(topk_ids, dtype=np.int64)
    inter = w1.shape[1] // 2
    local = ids if expert_map is None else np.asarray(expert_map, dtype=np.int64)[ids]
    y = np.zeros((x.shape[0], w2.shape[1]), dtype=np.float64)
    for e in range(w1.shape[0]):
        tokens, slots = np.nonzero(local == e)
        if tokens.size == 0:
            continue
        h = x[tokens] @ w1[e].T
        gate = h[:, :inter]
        act = 0.5 * gate * (1.0 + np.tanh(0.5 * gate)) * h[:, inter:]  # silu(g) = g*sigmoid(g)
        np.add.at(y, tokens, weights[tokens, slots][:, None] * (act @ w2[e].T))
    return y


@dataclass(frozen=True)
class MoeInputs:
    """One MoE problem as ``make_inputs`` builds it; ``run()`` calls ``fused_moe`` on it."""

    x: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor
    weight_format: str
    w1_scale: torch.Tensor | None = None
    w2_scale: torch.Tensor | None = None
    expert_map: torch.Tensor | None = None

    def run(self, **config: int | bool) -> torch.Tensor:
        """``fused_moe`` on these inputs (ids are valid by construction: no host sync)."""
        config.setdefault("validate_ids", False)
        return fused_moe(
            self.x,
            self.w1,
            self.w2,
            self.topk_weights,
            self.topk_ids,
            w1_scale=self.w1_scale,
            w2_scale=self.w2_scale,
            expert_map=self.expert_map,
            **config,  # type: ignore[arg-type]
        )

    def dequantized_weights(self) -> tuple[np.ndarray, np.ndarray]:
        """``(w1 [L, 2I, H], w2 [L, H, I])`` in float64, exactly what the kernel multiplies by."""
        if self.weight_format not in ("fp8", "mxfp4"):
            return _np64(self.w1), _np64(self.w2)
        if self.w1_scale is None or self.w2_scale is None:
            raise ValueError(f"{self.weight_format} inputs need w1_scale and w2_scale")
        dequantize = dequantize_fp8 if self.weight_format == "fp8" else dequantize_mxfp4
        return dequantize(self.w1, self.w1_scale), dequantize(self.w2, self.w2_scale)

    def reference(self) -> np.ndarray:
        """``moe_reference`` on the (rounded) inputs and dequantised weights, float64."""
        w1, w2 = self.dequantized_weights()
        emap = None if self.expert_map is None else self.expert_map.cpu().numpy()
        return moe_reference(
            _np64(self.x), w1, w2, _np64(self.topk_weights), self.topk_ids.cpu().numpy(), emap
        )


def _np64(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(device="cpu", dtype=torch.float64).numpy()


def make_inputs(
    num_tokens: int,
    hidden: int,
    inter: int,
    num_experts: int,
    topk: int,
    weight_format: str = "bf16",
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
    *,
    local_experts: int | None = None,
    ep_rank: int = 0,
) -> MoeInputs:
    """Random inputs for one MoE shape: ``x ~ N(0, 1)``, softmax top-k routing of N(0, 1) logits.

    Expert weights are ``N(0, 1/hidden)`` (w1) and ``N(0, 1/inter)`` (w2), quantised for fp8 /
    mxfp4. ``dtype`` is the activation dtype (default: the format's dtype for dense formats,
    bf16 for quantised ones; dense formats must match it). With ``local_experts = L < E`` the
    inputs are those of EP rank ``ep_rank``, owning global experts ``[ep_rank*L, (ep_rank+1)*L)``:
    routing is over all ``E`` experts, weights exist for the local ones only and ``expert_map``
    maps global ids to local ones (``-1`` elsewhere). Draws come from ``generator`` (default:
    CPU, seed 0) on its device, then move to ``device``; each expert's weights come from its own
    seed derived from the generator, so all EP ranks built from equal generators agree on ``x``,
    the routing and every expert.
    """
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format={weight_format!r} must be one of {WEIGHT_FORMATS}")
    if dtype is None:
        dtype = DENSE_FORMAT_DTYPES.get(weight_format, torch.bfloat16)
    if dtype not in ACTIVATION_DTYPES:
        raise ValueError(f"dtype={dtype} must be one of {ACTIVATION_DTYPES}")
    if weight_format in DENSE_FORMAT_DTYPES and DENSE_FORMAT_DTYPES[weight_format] != dtype:
        raise ValueError(
            f"dense {weight_format} weights need activations of that dtype, got {dtype}"
        )
    if min(num_tokens, hidden, inter, num_experts, topk) < 1 or topk > num_experts:
        raise ValueError(
            f"need positive sizes and topk <= num_experts, got T={num_tokens}, hidden={hidden}, "
            f"inter={inter}, E={num_experts}, topk={topk}"
        )
    if weight_format == "mxfp4" and (hidden % MXFP4_BLOCK or inter % MXFP4_BLOCK):
        raise ValueError(f"mxfp4 needs hidden={hidden} and inter={inter} multiples of 32")
    num_local = num_experts if local_experts is None else local_experts
    if num_local < 1 or ep_rank < 0 or (ep_rank + 1) * num_local > num_experts:
        raise ValueError(
            f"local_experts={local_experts}, ep_rank={ep_rank}: rank must own a slice of "
            f"[0, {num_experts}) experts"
        )
    gen = torch.Generator().manual_seed(0) if generator is None else generator
    gdev = gen.device
    x = torch.randn((num_tokens, hidden), generator=gen, device=gdev).to(device=device, dtype=dtype)
    topk_weights, topk_ids = route(
        gen, topk, num_tokens=num_tokens, num_experts=num_experts, device=device
    )
    base_seed = int(torch.randint(0, 2**62, (1,), generator=gen, device=gdev))
    first = ep_rank * num_local
    parts: dict[str, list[torch.Tensor]] = {"w1": [], "w2": [], "w1_scale": [], "w2_scale": []}
    for g in range(first, first + num_local):  # expert by expert: bounded peak memory
        eg = torch.Generator(device=gdev).manual_seed(base_seed + g)
        for name, shape, fan_in in (
            ("w1", (2 * inter, hidden), hidden),
            ("w2", (hidden, inter), inter),
        ):
            w = torch.randn(shape, generator=eg, device=gdev).to(device) / math.sqrt(fan_in)
            if weight_format == "fp8":
                w, scale = quantize_fp8(w)
                parts[f"{name}_scale"].append(scale)
            elif weight_format == "mxfp4":
                w, scale = quantize_mxfp4(w)
                parts[f"{name}_scale"].append(scale)
            else:
                w = w.to(dtype)
            parts[name].append(w)
    w1, w2 = torch.stack(parts["w1"]), torch.stack(parts["w2"])
    quantised = weight_format in ("fp8", "mxfp4")
    w1_scale = torch.stack(parts["w1_scale"]) if quantised else None
    w2_scale = torch.stack(parts["w2_scale"]) if quantised else None
    expert_map = None
    if local_experts is not None:
        expert_map = torch.full((num_experts,), -1, dtype=torch.int32, device=device)
        expert_map[first : first + num_local] = torch.arange(
            num_local, dtype=torch.int32, device=device
        )
    return MoeInputs(
        x=x,
        w1=w1,
        w2=w2,
        topk_weights=topk_weights,
        topk_ids=topk_ids,
        weight_format=weight_format,
        w1_scale=w1_scale,
        w2_scale=w2_scale,
        expert_map=expert_map,
    )
