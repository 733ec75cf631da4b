"""q/k RMSNorm lines: per head (Qwen3) an elementwise line, across heads (MiniMax-M2) also a
TP all-reduce of the variances; none for models without it."""

from __future__ import annotations

import pytest

from simulator import catalog
from simulator.cost.shapes import OpLine
from simulator.cost.step import shape_of
from tests.simulator.cost.test_step import decode, model

# (card, tp) -> (has the norm line, has the variance all-reduce)
CASES = {
    "llama: none": ("llama-3.3-70b", 4, False, False),
    "qwen3 per head, tp4": ("qwen3-32b", 4, True, False),
    "qwen3-moe per head": ("qwen3-235b-a22b-fp8", 4, True, False),
    "minimax across heads, tp1: nothing to reduce": ("minimax-m2.5", 1, True, False),
    "minimax across heads, tp4": ("minimax-m2.5", 4, True, True),
}


def lines(card: str, tp: int, tokens: int = 32) -> dict[str, OpLine]:
    cost = model(card, "b200", tp=tp).step(*decode(tokens, 1000), detail=True)
    return {x.name: x for x in cost.lines}


@pytest.mark.parametrize(("card", "tp", "norm", "reduce"), CASES.values(), ids=CASES)
def test_qk_norm_lines(card: str, tp: int, norm: bool, reduce: bool) -> None:
    got = lines(card, tp)
    assert ("gqa.qk_norm" in got) == norm
    assert ("gqa.qk_norm_allreduce" in got) == reduce


def test_the_norm_moves_the_queries_and_keys_of_the_step() -> None:
    g = catalog.model_card("qwen3-32b").gqa
    assert g is not None
    tp, tokens = 4, 32
    got = lines("qwen3-32b", tp, tokens)["gqa.qk_norm"]
    heads = g.num_heads / tp + max(g.num_kv_heads / tp, 1.0)
    assert got.bytes == pytest.approx(tokens * heads * g.head_dim * 4.0)  # bf16 in and out
    assert got.count == catalog.model_card("qwen3-32b").layers.count


def test_the_variance_all_reduce_is_two_floats_a_token_a_layer() -> None:
    tokens = 48
    got = lines("minimax-m2.5", 4, tokens)["gqa.qk_norm_allreduce"]
    assert got.bytes == pytest.approx(tokens * 8.0)
    assert got.count == catalog.model_card("minimax-m2.5").layers.count


def test_the_norm_makes_a_step_slower_by_its_own_lines() -> None:
    m = model("minimax-m2.5", "b200", tp=4)
    shape = shape_of(*decode(32, 1000))
    cost = m.price(shape, detail=True)
    extra = sum(x.seconds for x in cost.lines if "qk_norm" in x.name)
    assert extra > 0
    assert m.price(shape).seconds == pytest.approx(cost.seconds)  # the template path agrees
