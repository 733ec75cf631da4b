"""Mamba2 (SSD) layers in the step model: FLOPs and bytes of its ops, and the step's lines.

One Mamba2 layer per token (vLLM ``layers/mamba/mamba_mixer2.py``, ``MambaMixer2.forward``):

1. ``in_proj``: hidden -> z (d_inner, the output gate), x B C (d_inner + 2 n_groups d_state,
   the conv channels) and dt (one per head); column-parallel, all of it split by TP;
2. short causal conv over x B C (``causal_conv1d_fn`` for prefills, ``causal_conv1d_update``
   for decodes);
3. the scan. Prefill tokens go through the chunked SSD scan (``mamba_chunk_scan_combined``:
   chunk cumsum, chunk states, state passing, C B^T, chunk scan: 5 kernels, chunks of
   ``chunk_size`` = 128 tokens in the Nemotron-H configs); decode tokens through
   ``selective_state_update``, which reads the heads x head_dim x d_state state once and
   writes it back. Unlike KDA, vLLM splits one step's prefills and decodes between the two
   kernels, so both run in a mixed step;
4. gated RMSNorm over d_inner (``Mixer2RMSNormGated``, gate z), then ``out_proj`` d_inner ->
   hidden (row-parallel: the TP all-reduce is the one after every mixer).

The public measured op tables have no Mamba2 rows, so the two scan classes
(``mamba2_prefill``, ``mamba2_decode``) are always priced by the roofline prior; the
projections are plain GEMMs (measured where the device has GEMM tables).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.cost import ops
from simulator.cost.ops import ACT_BYTES, FP32, Num, Work
from simulator.specs.precision import STATE_BYTES

if TYPE_CHECKING:
    from simulator.cost.layers import StepOps

SSD_CHUNK_TOKENS = 128  # chunk_size of the Nemotron-H configs (vLLM reads it from the config)
SSD_PREFILL_KERNELS = 5.0  # chunk_cumsum, chunk_state, state_passing, bmm_chunk, chunk_scan


def ssd_prefill_flops_per_token_head(
    state: Num, head_dim: Num, groups_per_head: Num, chunk: float = SSD_CHUNK_TOKENS
) -> Num:
    """Chunked SSD scan (Mamba2 paper, section 6; vLLM ``ssd_combined.py``) per token per head.

    Multiply-adds: chunk states B^T x (d_state x head_dim), output from the carried states
    C h (d_state x head_dim), intra-chunk (L o C B^T) x (chunk x head_dim), C B^T itself
    (chunk x d_state, shared by the heads of a group), and the state passing between chunks
    (d_state x head_dim per chunk). 2 x 25.7 k = 51 kFLOP at d_state 128, head_dim 64,
    chunk 128, 16 heads per group.
    """
    macs = (
        2.0 * state * head_dim
        + chunk * head_dim
        + chunk * state * groups_per_head
        + state * head_dim / chunk
    )
    return 2.0 * macs


def mamba2_prefill(
    batch: Num,
    seq_len: Num,
    heads: Num,
    head_dim: Num,
    state: Num,
    groups: Num,
    state_bytes_per_elem: float = FP32,
) -> Work:
    """The chunked scan of ``batch`` sequences of ``seq_len`` new tokens on one rank (``heads``
    and ``groups`` per rank): x, dt, B, C in and y out (bf16), the per-chunk states written
    and read back in fp32, and each sequence's initial state loaded and final state stored."""
    tokens = batch * seq_len
    flops = tokens * heads * ssd_prefill_flops_per_token_head(state, head_dim, groups / heads)
    acts = tokens * (heads * (2.0 * head_dim + 1.0) + 2.0 * groups * state) * ACT_BYTES
    chunk_states = tokens * heads * 2.0 * state * head_dim * FP32 / SSD_CHUNK_TOKENS
    boundary = batch * heads * 2.0 * state * head_dim * state_bytes_per_elem
    return Work(flops, acts + chunk_states + boundary, kernels=SSD_PREFILL_KERNELS)


def mamba2_decode(
    batch: Num,
    heads: Num,
    head_dim: Num,
    state: Num,
    groups: Num,
    state_bytes_per_elem: float = FP32,
    queries: Num = 1.0,
) -> Work:
    """``selective_state_update``: per head the state decays, takes dt B x^T and gives
    y = C h + D x, about 5 FLOP per state element; the state (heads x head_dim x d_state) is
    read once and written once per query (1 + K under speculative verify, as for KDA)."""
    per_seq = heads * head_dim * state
    flops = 5.0 * batch * queries * per_seq
    state_io = batch * per_seq * state_bytes_per_elem * (1.0 + queries)
    acts = batch * queries * (heads * (2.0 * head_dim + 1.0) + 2.0 * groups * state) * ACT_BYTES
    return Work(flops, state_io + acts)


def add_mamba2_lines(step: StepOps, n: float) -> None:
    """Record the ops of ``n`` Mamba2 layers for the step ``step`` is building."""
    m, s, t = step.m, step.s, step.t
    card, serving = m.card, m.serving
    la = card.linear_attention
    assert la is not None
    tp = serving.tp
    d = float(card.hidden_size)
    heads, groups = la.num_v_heads / tp, la.num_k_heads / tp
    head_dim, state = float(la.head_v_dim), float(la.head_k_dim)
    inner = heads * head_dim
    conv = la.conv_dim / tp
    state_b = float(STATE_BYTES[serving.state_dtype or la.state_dtype])
    bf16 = m.device.peak_flops_per_s.bf16
    step.gemm("mamba2.in_proj", "recurrent", n, t, inner + conv + heads, d, "linear_attention")
    step.add(
        "mamba2.conv1d", "elementwise", "recurrent", n, ops.elementwise(t * conv, 4.0, 8.0), bf16
    )
    if s.num_prefills:
        work = mamba2_prefill(
            s.num_prefills, s.prefill_tokens / s.num_prefills, heads, head_dim, state, groups,
            state_b,
        )  # fmt: skip
        step.add("mamba2.chunked_scan", "mamba2_prefill", "recurrent", n, work, bf16)
    if s.num_decodes:
        q = s.decode_tokens / s.num_decodes
        work = mamba2_decode(s.num_decodes, heads, head_dim, state, groups, state_b, q)
        step.add("mamba2.state_update", "mamba2_decode", "recurrent", n, work, bf16)
    step.add(
        "mamba2.gated_norm", "elementwise", "recurrent", n, ops.elementwise(t * inner, 6.0), bf16
    )
    step.gemm("mamba2.out_proj", "recurrent", n, t, d, inner, "linear_attention")
