"""KDA chunked prefill against the float64 token-by-token recurrence and ``kda_decode``.

Covers lengths that are not multiples of the chunk (64) or of the 16-row sub-blocks, dk != dv,
head dims that are not powers of two, several value blocks, an initial state, strong gates
(which overflow a naive ``exp(G_t) / exp(G_s)``), prefill split in two, equality with ``T``
steps of ``kda_decode`` and bad inputs. On a CPU the kernels run in Triton's interpreter
(``TRITON_INTERPRET=1``, set before triton is imported); on a GPU box run with
``TRITON_INTERPRET=0`` to test the compiled kernels on CUDA.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="the calibration extra (torch CPU + triton) is not installed"
)
pytest.importorskip("triton", reason="the calibration extra (torch CPU + triton) is not installed")

from kernels_calibration.kda_decode import kda_decode  # noqa: E402 (after importorskip)
from kernels_calibration.kda_prefill import (  # noqa: E402
    kda_prefill,
    kda_prefill_reference,
    make_inputs,
)

# triton 3.5's interpreter calls int() on a 1-element array when a runtime value bounds a `for`
# loop; numpy 2.2 deprecates that. Interpreter only.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning:"
    r"triton\.runtime\.interpreter"
)

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
# ||out - ref|| / ||ref||. fp32: the chunk form (explicit triangular inverse) loses a little
# more than the recurrence (~1e-6 on random inputs, ~3e-5 with half the channels decaying
# fully). bf16: the output rounding (the reference sees the same rounded inputs; q, k, v, beta
# bf16, g fp32), and on a GPU TF32 dots inside the chunk.
REL_TOL = {torch.float32: 1e-4, torch.bfloat16: 1e-2}


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def _np(x: torch.Tensor | None) -> np.ndarray | None:
    """float64 copy of what the kernel read (so the reference sees the rounded inputs)."""
    return None if x is None else x.detach().to(device="cpu", dtype=torch.float64).numpy()


def _inputs(
    batch: int,
    seq_len: int,
    heads: int,
    dk: int,
    dv: int,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> tuple[torch.Tensor, ...]:
    """``make_inputs`` (dk = dv) widened to dv value columns when they differ."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v, g, beta, state = make_inputs(batch, seq_len, heads, dk, dtype, DEVICE, gen)
    if dv != dk:
        v = torch.randn((batch, seq_len, heads, dv), generator=gen).to(DEVICE, dtype)
        state = torch.randn((batch, heads, dk, dv), generator=gen).to(DEVICE)
    return q, k, v, g, beta, state


def _check(
    inputs: tuple[torch.Tensor, ...],
    initial_state: torch.Tensor | None,
    tol: float,
    **kwargs: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v, g, beta = inputs
    o, state = kda_prefill(q, k, v, g, beta, initial_state, **kwargs)
    ref_kwargs = {n: kwargs[n] for n in ("scale", "use_qk_l2norm") if n in kwargs}
    ref_o, ref_state = kda_prefill_reference(
        *(_np(x) for x in inputs),
        _np(initial_state),
        **ref_kwargs,
    )
    assert o.shape == ref_o.shape
    assert o.dtype == v.dtype
    assert state.shape == ref_state.shape
    assert state.dtype == torch.float32
    assert _rel_err(_np(o), ref_o) < tol
    assert _rel_err(_np(state), ref_state) < REL_TOL[torch.float32]
    return o, state


# (batch, seq_len, heads, dk, dv, chunk_size, block_v, with_initial_state)
SHAPES = [
    pytest.param(1, 1, 1, 16, 16, 64, 64, False, id="T1"),
    pytest.param(1, 64, 2, 16, 16, 64, 64, True, id="T64-one-full-chunk"),
    pytest.param(2, 100, 2, 16, 32, 64, 64, True, id="T100-two-chunks-dk16-dv32"),
    pytest.param(1, 150, 1, 12, 20, 64, 64, True, id="T150-padded-subblocks-dk12-dv20"),
    pytest.param(1, 45, 2, 32, 16, 16, 64, False, id="T45-chunk16-dk32"),
    pytest.param(1, 70, 1, 16, 48, 32, 16, True, id="T70-chunk32-3-value-blocks"),
]


@pytest.mark.parametrize(
    ("batch", "seq_len", "heads", "dk", "dv", "chunk_size", "block_v", "with_state"), SHAPES
)
def test_kda_prefill_matches_reference(
    batch: int,
    seq_len: int,
    heads: int,
    dk: int,
    dv: int,
    chunk_size: int,
    block_v: int,
    with_state: bool,
) -> None:
    q, k, v, g, beta, state = _inputs(batch, seq_len, heads, dk, dv, seed=seq_len)
    _check(
        (q, k, v, g, beta),
        state if with_state else None,
        REL_TOL[torch.float32],
        chunk_size=chunk_size,
        block_v=block_v,
    )


@pytest.mark.parametrize(("seq_len", "dk"), [(100, 16), (37, 32)], ids=["T100-dk16", "T37-dk32"])
def test_kda_prefill_bf16_matches_reference(seq_len: int, dk: int) -> None:
    q, k, v, g, beta, state = _inputs(2, seq_len, 2, dk, dk, torch.bfloat16, seed=1)
    _check((q, k, v, g, beta), state, REL_TOL[torch.bfloat16])


def test_kda_prefill_equals_decode_steps() -> None:
    """T tokens of chunked prefill == T calls of ``kda_decode`` (outputs and final state)."""
    batch, seq_len, heads, dk, dv = 2, 70, 2, 16, 32
    q, k, v, g, beta, state0 = _inputs(batch, seq_len, heads, dk, dv, seed=2)
    o, state = kda_prefill(q, k, v, g, beta, state0)
    dec_state = state0.clone()
    dec_o = torch.stack(
        [
            kda_decode(q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t], dec_state)[0]
            for t in range(seq_len)
        ],
        dim=1,
    )
    assert _rel_err(_np(o), _np(dec_o)) < REL_TOL[torch.float32]
    assert _rel_err(_np(state), _np(dec_state)) < REL_TOL[torch.float32]


def test_split_prefill_then_decode_equals_one_prefill() -> None:
    """Chunked prefill / prefix caching: from a cached state, prefill 0..40 then 40..100 from
    the returned state equals one prefill of 0..100, and a decode step continues from it."""
    q, k, v, g, beta, state0 = _inputs(1, 101, 2, 16, 16, seed=3)

    def run(lo: int, hi: int, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return kda_prefill(
            q[:, lo:hi], k[:, lo:hi], v[:, lo:hi], g[:, lo:hi], beta[:, lo:hi], state
        )

    o_all, s_all = run(0, 100, state0)
    o1, s1 = run(0, 40, state0)
    o2, s2 = run(40, 100, s1)
    tol = REL_TOL[torch.float32]
    assert _rel_err(_np(torch.cat([o1, o2], dim=1)), _np(o_all)) < tol
    assert _rel_err(_np(s2), _np(s_all)) < tol
    o_next, _ = kda_decode(q[:, 100], k[:, 100], v[:, 100], g[:, 100], beta[:, 100], s2)
    ref_o, _ = kda_prefill_reference(*(_np(x) for x in (q, k, v, g, beta, state0)))
    assert _rel_err(_np(o_next), ref_o[:, 100]) < tol


def test_initial_state_is_read_not_modified() -> None:
    q, k, v, g, beta, state0 = _inputs(1, 20, 1, 16, 16, seed=4)
    before = state0.clone()
    _, state = kda_prefill(q, k, v, g, beta, state0)
    torch.testing.assert_close(state0, before, rtol=0, atol=0)
    assert state.data_ptr() != state0.data_ptr()


@pytest.mark.parametrize("gate", ["strong", "mixed", "none"])
def test_kda_prefill_gate_extremes(gate: str) -> None:
    """Strong gates: the in-chunk cumulative gate reaches ~-1000, so exp(-G_s) overflows fp32
    in a naive factorisation; the sub-block references keep every exponent <= 0."""
    q, k, v, _, beta, state0 = _inputs(1, 90, 2, 16, 16, seed=5)
    gen = torch.Generator().manual_seed(6)
    uniform = torch.rand(q.shape, generator=gen).to(DEVICE)
    g = {
        "strong": -30.0 * uniform,
        "mixed": torch.where(uniform < 0.5, -50.0, -1e-3),  # half the channels forget at once
        "none": torch.zeros_like(uniform),
    }[gate]
    o, state = _check((q, k, v, g, beta), state0, REL_TOL[torch.float32])
    assert bool(torch.isfinite(o).all())
    assert bool(torch.isfinite(state).all())


def test_kda_prefill_without_l2norm_and_custom_scale() -> None:
    q, k, v, g, beta, state0 = _inputs(1, 50, 2, 16, 16, seed=7)
    k = 0.7 * k / k.norm(dim=-1, keepdim=True)  # keep beta * |k|^2 < 1, a stable recurrence
    _check((q, k, v, g, beta), state0, REL_TOL[torch.float32], scale=0.3, use_qk_l2norm=False)


def test_make_inputs() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v, g, beta, state = make_inputs(2, 5, 3, 16, torch.bfloat16, DEVICE, gen)
    assert q.shape == k.shape == v.shape == g.shape == (2, 5, 3, 16)
    assert beta.shape == (2, 5, 3)
    assert state.shape == (2, 3, 16, 16)
    assert q.dtype == k.dtype == v.dtype == beta.dtype == torch.bfloat16
    assert g.dtype == state.dtype == torch.float32
    assert bool((g < 0).all())
    assert bool(((beta > 0) & (beta < 1)).all())


def _bad_cases() -> list:
    def base(**over: torch.Tensor) -> dict[str, torch.Tensor | None]:
        b, t, h, d = 1, 5, 2, 16
        args: dict[str, torch.Tensor | None] = {
            "q": torch.zeros(b, t, h, d),
            "k": torch.zeros(b, t, h, d),
            "v": torch.zeros(b, t, h, d),
            "g": torch.zeros(b, t, h, d),
            "beta": torch.zeros(b, t, h),
            "initial_state": None,
        }
        args.update(over)
        return args

    return [
        pytest.param(base(k=torch.zeros(1, 5, 2, 8)), {}, "must match", id="k-shape"),
        pytest.param(base(g=torch.zeros(1, 4, 2, 16)), {}, "must match", id="g-shape"),
        pytest.param(base(v=torch.zeros(1, 5, 3, 16)), {}, "must be .B, T, H, dv.", id="v-shape"),
        pytest.param(base(beta=torch.zeros(1, 5, 2, 1)), {}, "beta", id="beta-shape"),
        pytest.param(base(q=torch.zeros(5, 2, 16)), {}, "must be .B, T, H, dk.", id="q-3d"),
        pytest.param(
            base(v=torch.zeros(1, 5, 2, 16, dtype=torch.float16)), {}, "must share", id="dtype"
        ),
        pytest.param(
            base(beta=torch.zeros(1, 5, 2, dtype=torch.int32)), {}, "floating point", id="int-beta"
        ),
        pytest.param(
            base(initial_state=torch.zeros(1, 2, 16, 16, dtype=torch.bfloat16)),
            {},
            "initial_state must be fp32",
            id="state-bf16",
        ),
        pytest.param(
            base(initial_state=torch.zeros(1, 2, 16, 8)),
            {},
            "initial_state must be fp32",
            id="state-shape",
        ),
        pytest.param(base(), {"chunk_size": 48}, "chunk_size", id="chunk-48"),
        pytest.param(base(), {"block_v": 24}, "block_v", id="block-v-24"),
        pytest.param(
            base(**{n: torch.zeros(1, 5, 2, 300) for n in ("q", "k", "g")}),
            {},
            "dk=300",
            id="dk-300",
        ),
    ]


@pytest.mark.parametrize(("args", "kwargs", "match"), _bad_cases())
def test_kda_prefill_rejects_bad_inputs(args: dict, kwargs: dict, match: str) -> None:
    moved = {n: None if t is None else t.to(DEVICE) for n, t in args.items()}
    with pytest.raises(ValueError, match=match):
        kda_prefill(**moved, **kwargs)
