"""Built-in generators: seeded, documented, and the agentic one matches the traces."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.workload import generator_source, iter_requests, workload_stats
from simulator.workload.fitted import AGENTIC
from simulator.workload.generators import agentic_prompts, chat_sessions
from simulator.workload.request import Turn

# Percentiles (numpy linear) of the 710 WEKA traces, cc_traces_weka_requests.csv (49,334
# requests); test_reference_matches_the_traces checks them against the file when present.
TRACE_PERCENTILES = {
    "prompt_tokens": (42_419.6, 103_659.0, 233_633.0, 498_518.66),
    "output_tokens": (105.0, 216.0, 898.0, 3_686.34),
    "think_time_s": (4.0, 10.0, 162.0, 3_013.81),
    "requests_per_session": (7.0, 45.5, 157.3, 340.92),
}
TRACE_BLOCK_REUSE = 0.9634
PCTS = ("p10", "p50", "p90", "p99")


def test_same_seed_same_workload_whatever_the_order() -> None:
    def snapshot(seed: int, interleave: bool) -> list[tuple[int, int, int]]:
        sessions = list(generator_source("agentic", 4, seed).open())
        if interleave:  # advance the sessions round-robin, as a closed loop would
            iters = [s.items for s in sessions]
            got: list[Turn] = []
            while iters:
                for it in list(iters):
                    t = next(it, None)
                    if t is None:
                        iters.remove(it)
                    else:
                        assert isinstance(t, Turn)
                        got.append(t)
            got.sort(key=lambda t: (t.offset_s, t.prompt_tokens))
        else:
            got = sorted(
                (t for s in sessions for t in s.items if isinstance(t, Turn)),
                key=lambda t: (t.offset_s, t.prompt_tokens),
            )
        return [(t.prompt_tokens, t.output_tokens, int(t.block_hashes[-1])) for t in got]

    a = snapshot(3, interleave=False)
    assert a == snapshot(3, interleave=True)
    assert a != snapshot(4, interleave=False)


def test_agentic_sessions_grow_a_cached_prefix() -> None:
    (s,) = list(generator_source("agentic", 1, 11).open())
    turns = [t for t in s.items if isinstance(t, Turn)]
    assert turns[0].think_time_s == 0.0
    hits = [
        int(np.argmin(np.isin(b.block_hashes, a.block_hashes)) or len(b.block_hashes))
        for a, b in itertools.pairwise(turns)
    ]
    assert np.mean(hits) > 0.9 * np.mean([len(t.block_hashes) for t in turns[1:]])


def test_random_prompts_follow_inferencex_lengths() -> None:
    src = generator_source("random", 2000, 0, input_tokens=1000, output_tokens=100)
    reqs = list(iter_requests(src))
    ins = np.array([r.prompt_tokens for r in reqs])
    outs = np.array([r.output_tokens for r in reqs])
    assert len(reqs) == 2000
    assert (ins.min(), ins.max(), outs.min(), outs.max()) == (800, 1000, 80, 100)
    assert all(len(r.block_hashes) == 0 for r in reqs)
    assert workload_stats(src).block_reuse is None


def test_chat_shares_the_system_prompt_and_grows_the_history() -> None:
    a, b = (list(s.items) for s in chat_sessions(2, seed=5))
    first_a, first_b = a[0], b[0]
    assert isinstance(first_a, Turn)
    assert isinstance(first_b, Turn)
    assert (first_a.block_hashes[:8] == first_b.block_hashes[:8]).all()  # 512 system tokens
    assert first_a.block_hashes[8] != first_b.block_hashes[8]
    for prev, cur in itertools.pairwise(a):
        assert isinstance(prev, Turn)
        assert isinstance(cur, Turn)
        assert cur.prompt_tokens > prev.prompt_tokens + prev.output_tokens
        assert (cur.block_hashes[: len(prev.block_hashes)] == prev.block_hashes).all()


@pytest.mark.slow
def test_agentic_generator_matches_the_trace_percentiles() -> None:
    stats = workload_stats(generator_source("agentic", 1000, 0)).to_dict()
    for name in ("prompt_tokens", "output_tokens", "think_time_s"):
        for p, ref in zip(PCTS, TRACE_PERCENTILES[name], strict=True):
            assert stats[name][p] == pytest.approx(ref, rel=0.10), (name, p)
    assert stats["block_reuse"] == pytest.approx(TRACE_BLOCK_REUSE, abs=0.01)
    # Session-level percentiles need many sessions: count turns without building requests.
    turns = [len(agentic_prompts(np.random.default_rng([9, k]), AGENTIC)[0]) for k in range(20_000)]
    got = np.percentile(turns, [10, 50, 90, 99])
    assert got == pytest.approx(TRACE_PERCENTILES["requests_per_session"], rel=0.10)


def test_reference_matches_the_traces(shared_data: Path) -> None:
    d = pd.read_csv(
        shared_data / "agentic_cc_traces_weka" / "cc_traces_weka_requests.csv",
        dtype={"subagent_id": str},
    )
    cols = {
        "prompt_tokens": d.input_tokens,
        "output_tokens": d.output_tokens,
        "think_time_s": d.think_time_s.dropna(),
        "requests_per_session": d.groupby("trace_id").size(),
    }
    for name, col in cols.items():
        got = np.percentile(col, [10, 50, 90, 99])
        assert got == pytest.approx(TRACE_PERCENTILES[name], rel=1e-6), name
    reuse = d.prefix_hit_blocks64.sum() / d.n_blocks64.sum()
    assert reuse == pytest.approx(TRACE_BLOCK_REUSE, abs=5e-5)
