"""``workload_stats``: counts, percentiles and unlimited-cache reuse; the shared traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.workload import trace_source, workload_stats
from simulator.workload.request import chain, content_keys
from simulator.workload.stats import BlockSet, ReuseCounter, percentiles


def test_block_set_is_a_set() -> None:
    rng = np.random.default_rng(0)
    blocks, ref = BlockSet(capacity_log2=4), set()
    for _ in range(200):
        ids = rng.integers(0, 2**63, size=int(rng.integers(0, 40)), dtype=np.uint64)
        ids = np.concatenate([ids, ids[:3], np.array([0], dtype=np.uint64)])
        blocks.add_many(ids)
        ref.update(ids.tolist())
    ref.discard(0)
    ref.add(1)  # id 0 is stored as 1
    assert len(blocks) == len(ref)
    assert all(x in blocks for x in ref)
    assert not any(x in blocks for x in range(2, 1000))


def test_reuse_counts_leading_runs() -> None:
    def ids(local: list[int]) -> np.ndarray:
        return chain(content_keys(1, np.asarray(local, dtype=np.int64)))

    reuse = ReuseCounter()
    assert reuse.hits(ids([1, 2, 3])) == 0
    assert reuse.hits(ids([1, 2, 3, 4])) == 3
    assert reuse.hits(ids([1, 9, 3, 4])) == 1
    assert reuse.hits(ids([1, 2, 3, 4, 5])) == 4
    assert reuse.hits(ids([])) == 0


def test_percentiles_of_nothing_are_nan() -> None:
    assert np.isnan(percentiles([])["p50"])
    assert percentiles([1, 2, 3])["p50"] == 2.0


def test_agentic_fixture_stats(weka_file: Path) -> None:
    st = workload_stats(trace_source(weka_file))
    assert (st.requests, st.sessions, st.subagent_sessions) == (12, 2, 4)
    assert st.requests_per_session == pytest.approx(
        {"p10": 6.0, "p50": 6.0, "p90": 6.0, "p99": 6.0, "mean": 6.0}
    )
    # per trace: 16 + 10 + 11 + 4 + 18 + 21 prompt blocks; hits 10 (agent_1) + 15 + 17
    assert (st.prompt_blocks, st.hit_blocks) == (160, 84)
    assert st.block_reuse == pytest.approx(84 / 160)
    assert st.token_reuse == pytest.approx(84 * 64 / (2 * 4944))
    assert st.span_s == 40.0
    assert st.block_tokens == 64
    assert st.think_time_s is not None


def test_mooncake_fixture_stats(mooncake_file: Path) -> None:
    st = workload_stats(trace_source(mooncake_file))
    assert (st.requests, st.sessions, st.span_s, st.arrival_rate_per_s) == (3, 3, 1.5, 2.0)
    assert (st.prompt_blocks, st.hit_blocks) == (9, 3)
    assert st.requests_per_session is None
    assert st.think_time_s is None
    limited = workload_stats(trace_source(mooncake_file), limit=2)
    assert limited.requests == 2


def test_azure_fixture_stats(azure_file: Path) -> None:
    st = workload_stats(trace_source(azure_file))
    assert st.requests == 3
    assert st.block_reuse is None
    assert st.token_reuse is None
    assert st.prompt_tokens["p50"] == 396


@pytest.mark.slow
def test_the_710_agentic_traces(shared_data: Path) -> None:
    """SOURCE.md: 49,334 requests, 96.3 % block reuse with an unlimited per-trace cache."""
    path = shared_data / "agentic_cc_traces_weka" / "cc_traces_weka_710.jsonl.gz"
    st = workload_stats(trace_source(path))
    assert (st.requests, st.sessions, st.subagent_sessions) == (49_334, 710, 63)
    assert f"{100 * (st.block_reuse or 0):.1f}" == "96.3"
    assert f"{100 * (st.token_reuse or 0):.1f}" == "96.3"
    expected = (42_419.6, 103_659.0, 233_633.0, 498_518.66)
    assert [st.prompt_tokens[p] for p in ("p10", "p50", "p90", "p99")] == pytest.approx(expected)
    assert [st.output_tokens[p] for p in ("p10", "p50", "p90")] == [105, 216, 898]
    assert st.think_time_s is not None
    assert st.think_time_s["p50"] == 10.0
    assert st.requests_per_session is not None
    assert st.requests_per_session["p50"] == 45.5


def test_the_mooncake_conversation_trace(shared_data: Path) -> None:
    """SOURCE.md: 12,031 rows, 3,537 s, 36.6 % of blocks reused with an unlimited cache."""
    st = workload_stats(trace_source(shared_data / "mooncake" / "conversation_trace.jsonl"))
    assert (st.requests, round(st.span_s)) == (12_031, 3_537)
    assert f"{100 * (st.block_reuse or 0):.1f}" == "36.6"
    assert round(st.arrival_rate_per_s, 2) == 3.40
    assert [round(st.prompt_tokens[p]) for p in ("p50", "p90", "p99")] == [6_909, 27_367, 85_400]


def test_the_azure_conversation_trace(shared_data: Path) -> None:
    """SOURCE.md: 19,366 rows, 3,502 s, 5.53 req/s, input p50 1,020."""
    path = shared_data / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    st = workload_stats(trace_source(path))
    assert (st.requests, round(st.span_s), round(st.arrival_rate_per_s, 2)) == (19_366, 3_502, 5.53)
    assert (st.prompt_tokens["p50"], st.output_tokens["p50"]) == (1_020, 129)
