"""Hand-checked FLOPs and bytes of every op class of simulator.cost.ops."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cost import ops


def test_gemm_is_2mnk_and_reads_each_operand_once() -> None:
    w = ops.gemm(4.0, 8192.0, 1024.0, 1.0)  # fp8 weights
    assert w.flops == 2 * 4 * 8192 * 1024
    assert w.bytes == (4 * 1024 + 4 * 8192) * 2 + 8192 * 1024 * 1
    assert w.kernels == 1.0


@pytest.mark.parametrize(
    ("tokens", "expected"), [(8, 57), (32, 162), (64, 221), (256, 256), (1024, 256)]
)
def test_experts_touched_256_experts_top8(tokens: int, expected: int) -> None:
    # vllm_mechanics.md section 7: 256 experts, top-8
    touched = ops.experts_touched(float(tokens), 256.0, 8.0, 256.0)
    assert touched == pytest.approx(expected, abs=1.0)


def test_moe_flops_weights_and_activations() -> None:
    t, h, i, e, k = 64.0, 7168.0, 2048.0, 256.0, 8.0
    w = ops.moe(t, h, i, e, k, ep=1.0, tp=1.0, weight_bytes_per_elem=1.0)
    pairs = t * k
    assert w.flops == pytest.approx(2 * pairs * 3 * h * i)
    touched = 256 * (1 - (255 / 256) ** (t * k))
    assert w.bytes == pytest.approx(touched * 3 * h * i + pairs * (2 * h + 3 * i) * 2)
    assert w.kernels == 5.0
    # EP 8: each rank owns 32 experts and a 1/8 share of the (token, expert) pairs
    w8 = ops.moe(t, h, i, e, k, ep=8.0, tp=1.0, weight_bytes_per_elem=1.0)
    assert w8.flops == pytest.approx(w.flops / 8)


def test_mla_decode_reads_the_latent_cache_once_per_request() -> None:
    w = ops.mla_decode(2.0, 1000.0, 16.0, 576.0)  # fp8 latent: 576 B/token
    assert w.flops == 2 * 2 * 16 * 1000 * (576 + 512)
    q_out = 2 * 16 * (576 + 512) * 2
    assert w.bytes == 2 * 1000 * 576 + q_out
    w656 = ops.mla_decode(1.0, 1000.0, 16.0, 656.0)  # fp8_ds_mla
    assert w656.bytes - 16 * (576 + 512) * 2 == 1000 * 656


def test_mla_prefill_counts_causal_pairs_and_reprojection() -> None:
    s, p, h = 100.0, 50.0, 16.0
    w = ops.mla_prefill(1.0, s, p, h, 1152.0)
    pairs = s * p + s * (s + 1) / 2
    up = 2 * (s + p) * 512 * h * 256
    assert w.flops == pytest.approx(up + 2 * h * pairs * 320)


def test_attn_decode_and_prefill() -> None:
    w = ops.attn_decode(4.0, 1000.0, 32.0, 8.0, 128.0, 2.0)
    assert w.flops == 4 * 4 * 32 * 128 * 1000
    assert w.bytes == 4 * 1000 * 2 * 8 * 128 * 2 + 2 * 4 * 32 * 128 * 2
    p = ops.attn_prefill(1.0, 10.0, 0.0, 32.0, 8.0, 128.0)
    assert p.flops == 4 * 32 * 128 * 55  # 10 * 11 / 2 causal pairs
    windowed = ops.attn_prefill(1.0, 1000.0, 0.0, 1.0, 1.0, 128.0, window=128.0)
    assert windowed.flops == 4 * 128 * 1000 * 128


def test_kda_prefill_is_158_kflop_per_token_head_at_d128() -> None:
    per = ops.kda_prefill_flops_per_token_head(128.0, 128.0)
    assert per == pytest.approx(158e3, rel=0.01)
    w = ops.kda_prefill(2.0, 1000.0, 32.0, 128.0)
    assert w.flops == pytest.approx(2 * 1000 * 32 * per)


def test_kda_decode_reads_and_writes_the_fp32_state() -> None:
    w = ops.kda_decode(1.0, 32.0, 128.0, 128.0)
    state = 32 * 128 * 128 * 4
    assert w.bytes == 2 * state + 32 * 128 * 5 * 2
    assert w.flops == 7 * 32 * 128 * 128


def test_recurrent_state_is_heads_x_dk_x_dv() -> None:
    # Mamba-style heads: dk 128 (state), dv 64 -> half the state of dk = dv = 128
    w = ops.kda_decode(1.0, 32.0, 128.0, 64.0)
    assert w.bytes == 2 * 32 * 128 * 64 * 4 + 32 * (3 * 128 + 2 * 64) * 2
    assert w.flops == 7 * 32 * 128 * 64
    square = ops.kda_prefill(1.0, 64.0, 8.0, 128.0)
    narrow = ops.kda_prefill(1.0, 64.0, 8.0, 128.0, head_v_dim=64.0)
    assert narrow.flops < square.flops
    assert narrow.bytes < square.bytes


def test_ops_accept_arrays() -> None:
    m = np.array([1.0, 2.0, 4.0])
    w = ops.gemm(m, 8.0, 8.0, 2.0)
    assert np.asarray(w.flops).shape == (3,)
    assert np.all(np.diff(np.asarray(w.bytes)) > 0)


def test_elementwise() -> None:
    w = ops.elementwise(1e6, 6.0)
    assert (w.flops, w.bytes) == (4e6, 6e6)
