"""MLA split-KV decode and KDA recurrent decode against their float64 numpy references.

On CPU the kernels run in Triton's interpreter (``TRITON_INTERPRET=1``, set before triton is
imported); that checks shapes, launches and numerics, not speed. On a GPU box run with
``TRITON_INTERPRET=0`` to test the compiled kernels on CUDA.
"""

import os

import numpy as np
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")

torch = pytest.importorskip(
    "torch", reason="the calibration extra (torch CPU + triton) is not installed"
)
triton = pytest.importorskip(
    "triton", reason="the calibration extra (torch CPU + triton) is not installed"
)

# the kernel modules import torch and triton at module level, so they follow the skips
from kernels_calibration.kda_decode import kda_decode, kda_decode_reference  # noqa: E402
from kernels_calibration.mla_decode import (  # noqa: E402
    merge_attn_partials,
    mla_decode,
    mla_decode_reference,
    pack_paged_cache,
)

pytestmark = [
    # triton 3.5.1's interpreter calls int() on a 1-element array for a loop bound read from
    # memory (``range(start, end)`` over seq_lens); numpy 2.2 deprecates that. Interpreter only.
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning"),
]

REL_TOL = 1e-4
KV_LORA_RANK = 32  # L (512 in DeepSeek/Kimi), shrunk
ROPE_DIM = 8  # R (64), shrunk
QK_NOPE_DIM = 16  # P (128): only enters through the softmax scale 1/sqrt(P + R)
SM_SCALE = (QK_NOPE_DIM + ROPE_DIM) ** -0.5
PAGE_SIZE = 16


@pytest.fixture
def device() -> str:
    """CPU under the interpreter; CUDA when the compiled kernels are asked for and present."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu"
    if not torch.cuda.is_available():
        pytest.skip("TRITON_INTERPRET is off and there is no CUDA device")
    return "cuda"


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """||got - ref|| / ||ref|| (Frobenius), the FLA-style gate."""
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def _mla_inputs(
    seed: int, seq_lens: list[int], num_heads: int
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(len(seq_lens), num_heads, KV_LORA_RANK + ROPE_DIM, generator=gen)
    contexts = [torch.randn(n, KV_LORA_RANK + ROPE_DIM, generator=gen) for n in seq_lens]
    return q, contexts


def _run_mla(
    q: torch.Tensor, contexts: list[torch.Tensor], num_splits: int, seed: int, device: str
) -> tuple[np.ndarray, np.ndarray]:
    kv_cache, block_table, seq_lens = pack_paged_cache(
        contexts, PAGE_SIZE, torch.Generator().manual_seed(seed + 1)
    )
    out, lse = mla_decode(
        q.to(device),
        kv_cache.to(device),
        block_table.to(device),
        seq_lens.to(device),
        kv_lora_rank=KV_LORA_RANK,
        sm_scale=SM_SCALE,
        num_splits=num_splits,
    )
    return out.cpu().double().numpy(), lse.cpu().double().numpy()


@pytest.mark.parametrize("num_splits", [1, 2, 3, 4])
@pytest.mark.parametrize(
    ("seq_lens", "num_heads"),
    [([5, 70], 4), ([16, 33], 4), ([1, 47], 20)],
    ids=["ctx5-70", "page-edges", "ctx1-47-h20"],
)
def test_mla_decode_matches_reference(
    seq_lens: list[int], num_heads: int, num_splits: int, device: str
) -> None:
    q, contexts = _mla_inputs(
        seed=len(seq_lens) + sum(seq_lens), seq_lens=seq_lens, num_heads=num_heads
    )
    out, lse = _run_mla(q, contexts, num_splits, seed=7, device=device)
    ref_out, ref_lse = mla_decode_reference(
        q.numpy(), [c.numpy() for c in contexts], KV_LORA_RANK, SM_SCALE
    )
    assert out.shape == (len(seq_lens), num_heads, KV_LORA_RANK)
    assert lse.shape == (len(seq_lens), num_heads)
    assert rel_err(out, ref_out) < REL_TOL
    assert rel_err(lse, ref_lse) < REL_TOL


def test_mla_decode_empty_sequence_gives_zero_and_neg_inf(device: str) -> None:
    q, contexts = _mla_inputs(seed=3, seq_lens=[0, 9], num_heads=4)
    out, lse = _run_mla(q, contexts, num_splits=2, seed=3, device=device)
    ref_out, ref_lse = mla_decode_reference(
        q[1:].numpy(), [contexts[1].numpy()], KV_LORA_RANK, SM_SCALE
    )
    assert np.all(out[0] == 0.0)
    assert np.all(np.isneginf(lse[0]))
    assert rel_err(out[1:], ref_out) < REL_TOL
    assert rel_err(lse[1:], ref_lse) < REL_TOL


def _dcp_rank_of_positions(num_tokens: int, dcp_size: int, placement: str) -> np.ndarray:
    """Rank owning each position: vLLM's ``(p // I) % DCP`` interleave, or contiguous halves."""
    positions = np.arange(num_tokens)
    if placement == "halves":
        return (positions >= (num_tokens + 1) // 2).astype(int)
    interleave = {"interleave1": 1, "interleave-page": PAGE_SIZE}[placement]
    return (positions // interleave) % dcp_size


@pytest.mark.parametrize("placement", ["halves", "interleave1", "interleave-page"])
def test_mla_dcp_lse_merge_equals_full_context(placement: str, device: str) -> None:
    seq_lens = [9, 70]
    q, contexts = _mla_inputs(seed=11, seq_lens=seq_lens, num_heads=4)
    full_out, full_lse = _run_mla(q, contexts, num_splits=2, seed=11, device=device)

    part_outs, part_lses = [], []
    for rank in range(2):
        shard = [
            ctx[torch.from_numpy(_dcp_rank_of_positions(ctx.shape[0], 2, placement) == rank)]
            for ctx in contexts
        ]
        out, lse = _run_mla(q, shard, num_splits=2, seed=20 + rank, device=device)
        part_outs.append(torch.from_numpy(out).float())
        part_lses.append(torch.from_numpy(lse).float())
    merged_out, merged_lse = merge_attn_partials(
        torch.stack(part_outs, dim=2).to(device), torch.stack(part_lses, dim=2).to(device)
    )
    merged_out_np = merged_out.cpu().double().numpy()
    merged_lse_np = merged_lse.cpu().double().numpy()

    ref_out, ref_lse = mla_decode_reference(
        q.numpy(), [c.numpy() for c in contexts], KV_LORA_RANK, SM_SCALE
    )
    assert rel_err(merged_out_np, ref_out) < REL_TOL
    assert rel_err(merged_lse_np, ref_lse) < REL_TOL
    assert rel_err(merged_out_np, full_out) < REL_TOL
    assert rel_err(merged_lse_np, full_lse) < REL_TOL


def _kda_inputs(
    rng: np.random.Generator, num_seqs: int, num_heads: int, dk: int, dv: int
) -> dict[str, np.ndarray]:
    """Random activations; g = log(sigmoid(x)) <= 0 and beta = sigmoid(x) in (0, 1)."""
    return {
        "q": rng.standard_normal((num_seqs, num_heads, dk)).astype(np.float32),
        "k": rng.standard_normal((num_seqs, num_heads, dk)).astype(np.float32),
        "v": rng.standard_normal((num_seqs, num_heads, dv)).astype(np.float32),
        "g": (-np.logaddexp(0.0, -rng.standard_normal((num_seqs, num_heads, dk)))).astype(
            np.float32
        ),
        "beta": (1.0 / (1.0 + np.exp(-rng.standard_normal((num_seqs, num_heads))))).astype(
            np.float32
        ),
    }


KDA_SHAPES = [(16, 16, 32), (16, 32, 16), (12, 20, 16)]  # (dk, dv, block_v)
KDA_IDS = ["dk16-dv16", "dk16-dv32-2vblocks", "dk12-dv20-masked"]


@pytest.mark.parametrize(("dk", "dv", "block_v"), KDA_SHAPES, ids=KDA_IDS)
def test_kda_decode_one_step_matches_reference(dk: int, dv: int, block_v: int, device: str) -> None:
    rng = np.random.default_rng(0)
    x = _kda_inputs(rng, num_seqs=2, num_heads=2, dk=dk, dv=dv)
    state0 = (0.5 * rng.standard_normal((2, 2, dk, dv))).astype(np.float32)
    state = torch.from_numpy(state0.copy()).to(device)
    o, state_out = kda_decode(
        *(torch.from_numpy(x[n]).to(device) for n in ("q", "k", "v", "g", "beta")),
        state,
        block_v=block_v,
    )
    ref_o, ref_state = kda_decode_reference(**x, state=state0)
    assert state_out is state  # updated in place
    assert rel_err(o.cpu().double().numpy(), ref_o) < REL_TOL
    assert rel_err(state.cpu().double().numpy(), ref_state) < REL_TOL


@pytest.mark.parametrize(("dk", "dv", "block_v"), KDA_SHAPES, ids=KDA_IDS)
def test_kda_decode_multi_step_from_zero_state(dk: int, dv: int, block_v: int, device: str) -> None:
    num_steps = 8
    rng = np.random.default_rng(1)
    state = torch.zeros((2, 2, dk, dv), dtype=torch.float32, device=device)
    ref_state = np.zeros((2, 2, dk, dv))
    for _ in range(num_steps):
        x = _kda_inputs(rng, num_seqs=2, num_heads=2, dk=dk, dv=dv)
        o, _ = kda_decode(
            *(torch.from_numpy(x[n]).to(device) for n in ("q", "k", "v", "g", "beta")),
            state,
            block_v=block_v,
        )
        ref_o, ref_state = kda_decode_reference(**x, state=ref_state)
        assert rel_err(o.cpu().double().numpy(), ref_o) < REL_TOL
    assert rel_err(state.cpu().double().numpy(), ref_state) < REL_TOL
