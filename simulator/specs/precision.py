"""Number formats of weights, KV cache and recurrent state, with their storage cost.

Block-scaled formats carry one scale (and, for asymmetric integer formats, one zero point) per
group of elements, so their true cost per element is
``element_bits + (scale_bits + zero_bits) / group_size`` (MXFP4: 4 + 8/32 = 4.25 bits; GPTQ
int2 in groups of 64: 2 + (16 + 2)/64 = 2.28125 bits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WeightPrecision = Literal[
    "fp32",
    "bf16",
    "fp16",
    "fp8",
    "fp8_block",
    "mxfp4",
    "nvfp4",
    "int4_g128",
    "int4_g32",
    "int3_g128",
    "int3_g64",
    "int2_g128",
    "int2_g64",
    "int2_g32",
]
KvCacheDtype = Literal["auto", "bf16", "fp16", "fp8", "fp8_ds_mla", "nvfp4_ds_mla"]
StateDtype = Literal["fp32", "bf16"]
ComputeDtype = Literal["bf16", "fp8", "fp4"]


@dataclass(frozen=True)
class NumberFormat:
    """Storage layout of a (possibly block-scaled) number format."""

    element_bits: int
    group_size: int = 1  # elements sharing one scale; 1 with scale_bits 0 = unscaled
    scale_bits: int = 0
    source: str = ""
    zero_bits: int = 0  # one zero point per group (asymmetric integer formats), packed

    @property
    def bits_per_element(self) -> float:
        return self.element_bits + (self.scale_bits + self.zero_bits) / self.group_size


# GPTQ layout (AutoGPTQ / GPTQModel checkpoints, read by vLLM's `gptq` method, the one that
# loads 2- and 3-bit weights: GPTQConfig accepts weight_bits 2, 3, 4, 8, while the Marlin and
# compressed-tensors WNA16 kernels take 4 and 8 only): `qweight` packs the b-bit values into
# int32 words (3-bit runs across word boundaries, 32 values in 3 words, no padding); per group
# of `group_size` inputs and per output column, `scales` holds one fp16 scale and `qzeros` one
# b-bit zero point, packed into int32 like the weights (vllm/model_executor/layers/quantization/
# gptq.py, GPTQLinearMethod.create_weights). `g_idx` (one int32 per input row, shared by every
# output column: 32 / out_features bits per element, < 0.01 bit) is left out like the norms.
_GPTQ = "GPTQ checkpoint layout (vLLM gptq.py): int32-packed weights, fp16 scale + b-bit zero"


def _gptq(bits: int, group: int) -> NumberFormat:
    return NumberFormat(bits, group_size=group, scale_bits=16, zero_bits=bits, source=_GPTQ)


WEIGHT_FORMATS: dict[WeightPrecision, NumberFormat] = {
    "fp32": NumberFormat(32),
    "bf16": NumberFormat(16),
    "fp16": NumberFormat(16),
    # per-tensor / per-channel scales: negligible next to the weights
    "fp8": NumberFormat(8),
    # DeepSeek-V3 style: one fp32 scale per 128x128 block (config: weight_block_size [128, 128])
    "fp8_block": NumberFormat(
        8, group_size=128 * 128, scale_bits=32, source="DeepSeek-V3 config.json"
    ),
    # OCP MX spec: 32 fp4 (e2m1) elements share one 8-bit e8m0 scale
    "mxfp4": NumberFormat(4, group_size=32, scale_bits=8, source="OCP Microscaling Formats v1.0"),
    # NVIDIA NVFP4: 16 fp4 elements share one fp8 (e4m3) scale (+ a per-tensor fp32 scale)
    "nvfp4": NumberFormat(4, group_size=16, scale_bits=8, source="NVIDIA NVFP4 (Blackwell) format"),
    # AWQ/GPTQ style int4 with one bf16 scale per 128 (zero points ignored)
    "int4_g128": NumberFormat(4, group_size=128, scale_bits=16),
    # the same with one bf16 scale per 32 (Kimi-K2.5's compressed-tensors int4, group_size 32)
    "int4_g32": NumberFormat(4, group_size=32, scale_bits=16),
    # 2- and 3-bit quantization-aware / GPTQ checkpoints, in the GPTQ layout above (zero point
    # included): int3 g128 3.1484 bits, int3 g64 3.2969, int2 g128 2.1406, int2 g64 2.2813,
    # int2 g32 2.5625
    "int3_g128": _gptq(3, 128),
    "int3_g64": _gptq(3, 64),
    "int2_g128": _gptq(2, 128),
    "int2_g64": _gptq(2, 64),
    "int2_g32": _gptq(2, 32),
}

# Which peak-FLOPs entry of a hardware profile a weight format computes at.
COMPUTE_DTYPE_OF: dict[WeightPrecision, ComputeDtype] = {
    "fp32": "bf16",
    "bf16": "bf16",
    "fp16": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8",
    "mxfp4": "fp4",
    "nvfp4": "fp4",
    "int4_g128": "bf16",
    "int4_g32": "bf16",
    # weight-only: dequantized to bf16 in the GEMM (read at the packed size, math at bf16)
    "int3_g128": "bf16",
    "int3_g64": "bf16",
    "int2_g128": "bf16",
    "int2_g64": "bf16",
    "int2_g32": "bf16",
}

STATE_BYTES: dict[StateDtype, int] = {"fp32": 4, "bf16": 2}


def weight_bytes(num_params: float, precision: WeightPrecision) -> float:
    """Bytes to store ``num_params`` weights in ``precision`` (scales included)."""
    return num_params * WEIGHT_FORMATS[precision].bits_per_element / 8.0


def kv_element_bytes(dtype: KvCacheDtype, model_dtype_bytes: int = 2) -> float:
    """Bytes per cached element for plain (non-MLA-packed) KV cache dtypes."""
    if dtype == "auto":
        return float(model_dtype_bytes)
    if dtype in ("bf16", "fp16"):
        return 2.0
    if dtype == "fp8":
        return 1.0
    raise ValueError(f"kv cache dtype {dtype!r} applies to MLA layers only")


def mla_kv_bytes_per_token(
    dtype: KvCacheDtype, kv_lora_rank: int, rope_dim: int, model_dtype_bytes: int = 2
) -> float:
    """Bytes per token per MLA layer (vLLM ``MLAAttention.get_kv_cache_spec``).

    ``fp8_ds_mla`` packs 512 fp8 NoPE values, 4 fp32 tile scales and 64 bf16 RoPE values (656 B);
    ``nvfp4_ds_mla`` is 352 B. Both are defined for the 512 + 64 DeepSeek layout only.
    """
    if dtype == "fp8_ds_mla":
        return float(kv_lora_rank + 4 * 4 + rope_dim * 2)
    if dtype == "nvfp4_ds_mla":
        if (kv_lora_rank, rope_dim) != (512, 64):
            raise ValueError("nvfp4_ds_mla is defined for kv_lora_rank 512 + rope 64 only")
        return 352.0
    return (kv_lora_rank + rope_dim) * kv_element_bytes(dtype, model_dtype_bytes)
