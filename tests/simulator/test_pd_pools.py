"""P/D pools with their own parallelism: validation (table-driven), GPU counts, per-pool memory
fit, and a DP-attention + wide-EP decode pool run end to end."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from simulator.simulation import simulate
from simulator.specs import Scenario
from simulator.specs.loading import SpecError

WORKLOAD = {"kind": "random", "input_tokens": 1000, "output_tokens": 20, "num_requests": 24,
            "concurrency": 8}  # fmt: skip


def scenario(disagg: dict[str, Any], **fields: Any) -> Scenario:
    base: dict[str, Any] = {
        "name": "pools", "model": "gpt-oss-120b", "device": "h200", "serving": {"tp": 2},
        "workload": WORKLOAD, "disaggregation": disagg,
    }  # fmt: skip
    return Scenario.model_validate({**base, **fields})


DEP4 = {"decode_serving": {"tp": 1, "dp": 4, "ep": 4}}


@pytest.mark.parametrize(
    ("disagg", "fields", "words"),
    [
        ({}, {"serving": {"tp": 2, "dp": 2}}, ["set dp 1", "prefill_serving / decode_serving"]),
        ({"decode_serving": {"tp": 1, "dp": 4, "ep": 2}}, {}, ["decode_serving: ep", "tp*dp"]),
        ({"prefill_serving": {"tp": 2, "dcp": 3}}, {}, ["prefill_serving: dcp", "divide"]),
        ({"decode_serving": {"tp": 2, "dcp": 2}}, {}, ["dcp 1 vs 2", "one dcp"]),
        ({"decode_replicas": 600, "decode_serving": {"dp": 2}}, {},
         ["simulated replicas", "exceeds"]),
        ({"decode_serving": {"tq": 1}}, {}, ["tq"]),
        ({}, {"kv_store": {"capacity_bytes": 1e12}}, ["prefill_prefix_caching"]),
        ({"prefill_prefix_caching": True},
         {"kv_store": {"capacity_bytes": 1e12},
          "serving": {"tp": 2, "enable_prefix_caching": False}},
         ["enable_prefix_caching"]),
        ({}, {"kv_store": {"capacity_bytes": -1}}, ["greater than 0"]),
    ],
)  # fmt: skip
def test_bad_pools_are_one_clear_error(
    disagg: dict[str, Any], fields: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(ValidationError) as err:
        scenario(disagg, **fields)
    text = str(err.value)
    for word in words:
        assert word in text


def test_pool_serving_inherits_and_overrides() -> None:
    s = scenario(
        {"prefill_replicas": 2, "decode_replicas": 3, **DEP4},
        serving={"tp": 2, "ep": 2, "max_num_seqs": 64},
    )
    d = s.disaggregation
    assert d is not None
    p, dec = d.pool_serving(s.serving, "prefill"), d.pool_serving(s.serving, "decode")
    assert (p.tp, p.dp, p.ep, p.max_num_seqs) == (2, 1, 2, 64)  # = serving
    assert (dec.tp, dec.dp, dec.ep, dec.max_num_seqs) == (1, 4, 4, 64)
    # EP on in serving stays on in a pool that changes its shape without naming ep
    on = scenario({"decode_serving": {"tp": 1, "dp": 8}}, serving={"tp": 2, "ep": 2})
    assert on.disaggregation is not None
    assert on.disaggregation.pool_serving(on.serving, "decode").ep == 8
    off = scenario({"decode_serving": {"tp": 1, "dp": 8}})
    assert off.disaggregation is not None
    assert off.disaggregation.pool_serving(off.serving, "decode").ep == 1
    # GPUs: 2 prefill instances x 2 + 3 decode instances x (1 x 4)
    assert s.num_gpus == 2 * 2 + 3 * 4
    assert d.engine_replicas(s.serving, "decode") == 12


def test_dp_attention_decode_pool_runs_end_to_end() -> None:
    s = scenario({"prefill_replicas": 1, "decode_replicas": 1, **DEP4})
    result = simulate(s)
    summary, rec = result.summary, result.recorder
    assert (summary.prefill_gpus, summary.decode_gpus, summary.num_gpus) == (2, 4, 6)
    assert summary.requests_finished == WORKLOAD["num_requests"]
    # replica 0 is the prefill instance; 1..4 the decode instance's DP ranks, each reading
    # its requests' KV from the prefill replica and decoding them
    reads = [t for t in rec.transfers if t.kind == "kv"]
    assert {t.src for t in reads} == {0}
    assert {t.dst for t in reads} == {1, 2, 3, 4}
    decode_steps = {st.replica for st in rec.steps if st.decodes}
    assert decode_steps == {1, 2, 3, 4}
    # a D rank (tp 1, 8 KV heads) holds twice the bytes per GPU of a P rank (tp 2): it reads
    # each page's halves from both P ranks
    assert result.prefill_memory is not None
    t = reads[0]
    assert t.descriptors % 2 == 0
    assert result.step_table().query("replica >= 1").pool.unique().tolist() == ["decode"]


def test_pool_that_does_not_fit_is_named() -> None:
    # Llama 3.3 70B in BF16 (~141 GB of weights) cannot fit one 80 GB H100
    s = Scenario.model_validate({
        "name": "x", "model": "llama-3.3-70b", "device": "h100", "serving": {"tp": 8},
        "workload": WORKLOAD, "disaggregation": {"decode_serving": {"tp": 1, "dp": 8}},
    })  # fmt: skip
    with pytest.raises(SpecError) as err:
        simulate(s)
    assert "decode pool" in str(err.value)


def test_no_pool_overrides_keep_the_old_gpu_count() -> None:
    s = scenario({"prefill_replicas": 2, "decode_replicas": 1})
    assert s.num_gpus == 3 * 2
    summary = simulate(s).summary
    assert (summary.prefill_gpus, summary.decode_gpus) == (4, 2)


def test_pool_ep_knobs_are_validated_against_the_pool() -> None:
    # gpt-oss-120b has 128 experts; with 4 redundant the 132 physical experts must divide ep
    good = scenario({"decode_serving": {"tp": 1, "dp": 4, "ep": 4, "eplb_redundant_experts": 4}})
    assert good.disaggregation is not None
    dec = good.disaggregation.pool_serving(good.serving, "decode")
    assert dec.eplb_redundant_experts == 4
    assert good.disaggregation.pool_serving(good.serving, "prefill").eplb_redundant_experts == 0
    with pytest.raises(ValidationError, match="decode_serving: eplb_redundant_experts"):
        scenario({"decode_serving": {"eplb_redundant_experts": 4}})  # ep 1 on that pool
