"""KV transfer cost between pools: NIXL descriptors, different TP on the two sides, the link's
precedence (scenario, device profile ``scale_out``, default), checked against hand arithmetic."""

from __future__ import annotations

import pytest

from simulator import catalog
from simulator.cache import Nics, TransferSizer, reserve
from simulator.cache.transfer import NIXL_DESCRIPTOR_S, TransferCost
from simulator.kv_layout import kv_layout
from simulator.specs import ServingConfig
from simulator.specs.hardware import Link
from simulator.specs.pools import (
    DEFAULT_LINK_BW_BYTES_PER_S,
    DEFAULT_LINK_LATENCY_S,
    Disaggregation,
)
from tests.simulator.test_disaggregation import BLOCK, BW, LATENCY, SIZER, engine, only

H100 = catalog.hardware_profile("h100")
GPT_OSS = catalog.model_card("gpt-oss-120b")  # GQA, 8 KV heads


def test_descriptors_are_pages_times_regions_times_source_ranks() -> None:
    cost = TransferCost(SIZER, descriptor_s=1e-6, regions_per_page=2, fan_in=3)
    # tokens [32, 160): blocks 2..9 = 8 blocks per layer, 2 full-attention layers
    assert cost.descriptors(32, 160) == 8 * 2 * 2 * 3
    assert cost.descriptors(160, 160) == 0
    hybrid = TransferCost(TransferSizer(BLOCK, BLOCK, 0, 1e6, 2, 0, 1), regions_per_page=2)
    assert hybrid.descriptors(0, 40) == 3 * 2 * 2 + 1  # + one state page, one region
    assert TransferCost(SIZER).send_bytes(5.0) is None  # same sides: reserve's old path


def test_reserve_with_sender_bytes_and_overhead() -> None:
    a, b = Nics(2e9, 1e-3), Nics(1e9, 2e-3)
    start, landed = reserve(a, b, 1.0, 4e9, send_bytes_per_gpu=10e9, overhead_s=0.5)
    # the longer side: 10e9 / 2e9 = 5 s (the receiver's 4e9 / 1e9 = 4 s), + 0.5 s posting
    assert start == 1.0
    assert landed == pytest.approx(1.0 + 5.0 + 0.5 + 2e-3, rel=1e-12)
    assert a.send_free_s == b.recv_free_s == pytest.approx(6.5, rel=1e-12)


@pytest.mark.parametrize(
    ("p_tp", "d_tp", "fan_in", "send_ratio", "page_ratio"),
    [
        (2, 1, 2, 0.5, 2.0),  # D holds 8 heads per rank: reads 4 from each of 2 P ranks
        (1, 2, 1, 2.0, 0.5),  # each P rank serves 2 D ranks, half its heads each
        (4, 4, 1, 1.0, 1.0),
    ],
)
def test_different_tp_reads_the_heads_from_the_ranks_holding_them(
    p_tp: int, d_tp: int, fan_in: int, send_ratio: float, page_ratio: float
) -> None:
    p_layout = kv_layout(GPT_OSS, ServingConfig(tp=p_tp))
    d_layout = kv_layout(GPT_OSS, ServingConfig(tp=d_tp))
    assert d_layout.page_bytes == pytest.approx(p_layout.page_bytes * page_ratio)
    cost = TransferCost.between(d_layout, p_layout, d_tp, p_tp, 1, 1e-6, 2)
    assert (cost.fan_in, cost.send_ratio) == (fan_in, send_ratio)
    # heads sharded on both sides: every P rank sends exactly its own page once per page
    assert d_layout.page_bytes * cost.send_ratio == pytest.approx(p_layout.page_bytes)


def test_mla_latent_is_read_from_one_rank() -> None:
    card = catalog.model_card("deepseek-v3")  # MLA, no recurrent layers
    p_layout = kv_layout(card, ServingConfig(tp=8))
    d_layout = kv_layout(card, ServingConfig(tp=2))
    cost = TransferCost.between(d_layout, p_layout, 2, 8, 1)
    assert cost.fan_in == 1  # the latent is replicated on every TP rank
    assert cost.send_ratio == 1.0


def test_engine_read_time_adds_descriptor_posting() -> None:
    d_s = 2e-6
    eng = engine([[(160, 4, 0.0)]], kv_cost=TransferCost(SIZER, d_s, regions_per_page=2))
    rec = eng.run()
    (t,) = only(rec)
    # 10 blocks x 2 layers x 2 regions (K, V) = 40 descriptors; 10 blocks x 2 MB
    assert t.descriptors == 40
    assert t.landed_s == pytest.approx(t.start_s + 20e6 / BW + 40 * d_s + LATENCY, rel=1e-12)


OUT = Link(kind="infiniband", bw_bytes_per_s=25e9, latency_s=4e-6)
WITH_OUT = H100.model_copy(update={"scale_out": OUT})
NO_OUT = H100.model_copy(update={"scale_out": None})


@pytest.mark.parametrize(
    ("fields", "device", "want"),
    [
        ({}, NO_OUT, (DEFAULT_LINK_BW_BYTES_PER_S, DEFAULT_LINK_LATENCY_S, NIXL_DESCRIPTOR_S)),
        ({}, WITH_OUT, (25e9, 4e-6, NIXL_DESCRIPTOR_S)),
        ({"link_bw_bytes_per_s": 1e10}, WITH_OUT, (1e10, 4e-6, NIXL_DESCRIPTOR_S)),
        ({"kv_descriptor_s": 0.0}, WITH_OUT, (25e9, 4e-6, 0.0)),
        ({"link_latency_s": 1e-3}, WITH_OUT, (25e9, 1e-3, NIXL_DESCRIPTOR_S)),
        ({"kv_descriptor_s": 1e-7}, NO_OUT, (DEFAULT_LINK_BW_BYTES_PER_S, 1e-5, 1e-7)),
        ({"link_bw_bytes_per_s": 1e10, "kv_descriptor_s": 3e-6}, WITH_OUT, (1e10, 4e-6, 3e-6)),
    ],
)
def test_link_precedence(fields: dict[str, float], device: object, want: tuple) -> None:  # type: ignore[type-arg]
    assert Disaggregation(**fields).link(device) == want  # type: ignore[arg-type]
