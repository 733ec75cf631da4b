"""The WEKA / AgentX agentic trace reader."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulator.specs.loading import SpecError
from simulator.workload import trace_source
from simulator.workload.agentic import parse_trace
from simulator.workload.id_runs import common_blocks, expand_runs, maximal_runs
from simulator.workload.request import SubagentGroup, Turn, chain, content_keys, scope_key


def items(path: Path, **kw: Any) -> list[list[Turn | SubagentGroup]]:
    return [list(s.items) for s in trace_source(path, **kw).open()]


def test_expand_runs() -> None:
    runs = ((1, 3), (7, 7), (5, 6))
    assert expand_runs(runs).tolist() == [1, 2, 3, 7, 5, 6]
    for start in range(8):  # any slice, without making the ids before it
        for stop in range(start, 9):
            assert expand_runs(runs, start, stop).tolist() == [1, 2, 3, 7, 5, 6][start:stop]


def test_common_blocks_is_the_first_difference_of_the_expanded_ids() -> None:
    """On maximal runs the leading ids two prompts share, counted in run space, equal the
    first index where their expanded ids differ: random prompts built of a few runs each
    (as the traces' ranges are), cut, extended, diverging inside a run or between runs."""
    rng = np.random.default_rng(3)
    base = [(0, 99), (500, 520), (130, 131), (7, 7), (900, 1100)]
    for _ in range(400):
        k = int(rng.integers(0, len(base) + 1))
        a = [*base[:k]]
        if a and rng.random() < 0.5:  # end the last run early
            lo, hi = a[-1]
            a[-1] = (lo, int(rng.integers(lo, hi + 1)))
        if rng.random() < 0.5:
            a.append((int(rng.integers(0, 1200)),) * 2)
        b = [*base[: int(rng.integers(0, len(base) + 1))]]
        ra, rb = maximal_runs(a), maximal_runs(b)
        ea, eb = expand_runs(ra), expand_runs(rb)
        m = min(len(ea), len(eb))
        differ = np.flatnonzero(ea[:m] != eb[:m])
        assert common_blocks(ra, rb) == (int(differ[0]) if len(differ) else m)
        assert expand_runs(ra).tolist() == expand_runs(tuple(a)).tolist()


def test_split_ranges_give_the_ids_of_joined_ones() -> None:
    """``[a, b], [b + 1, c]`` in a ranges-encoded trace is the run ``[a, c]``: turns whose
    ranges are split differently still share their prefix, and get the ids made from scratch."""
    scope = scope_key("agentic", "s")
    prompts = [[[0, 99]], [[0, 49], [50, 149]], [[0, 149], 150, [151, 160]], [[0, 9], [20, 30]]]
    requests = [
        {"t": float(i), "in": 64 * sum(1 if isinstance(x, int) else x[1] - x[0] + 1 for x in ids),
         "out": 1, "hash_ids": ids}
        for i, ids in enumerate(prompts)
    ]  # fmt: skip
    trace = {"id": "s", "hash_ids_encoding": "ranges", "requests": requests}
    turns = list(parse_trace(trace, "s").items)
    for turn, ids in zip(turns, prompts, strict=True):
        assert isinstance(turn, Turn)
        plain = [v for x in ids for v in ([x] if isinstance(x, int) else range(x[0], x[1] + 1))]
        fresh = chain(content_keys(scope, np.array(plain, dtype=np.int64)))
        assert turn.block_hashes.tolist() == fresh.tolist()


def test_each_turns_ids_are_a_fresh_chain_of_its_blocks() -> None:
    """Turns extend the previous turn's chain ids; they must equal the ids made from scratch
    whatever the overlap: a longer prompt, one that diverges inside, a shorter one, the same
    one, one with nothing in common, a partial last block (given or not), a repeat after a
    divergence."""
    rng = np.random.default_rng(7)
    base = rng.integers(0, 10**6, 400).tolist()
    prompts = [
        base[:100], base[:250], [*base[:120], 5, 6, 7, *base[123:300]], base[:50],
        base[:50], [1, 2, 3], [], base[:300], [*base[:120], 5, 6, 7],
    ]  # fmt: skip
    requests = [
        {"t": float(i), "in": max(1, 64 * len(ids) + (i % 3 - 1) * 10), "out": 1, "hash_ids": ids}
        for i, ids in enumerate(prompts)
    ]
    turns = list(parse_trace({"id": "s", "requests": requests}, "s").items)
    scope = scope_key("agentic", "s")
    assert len(turns) == len(prompts)
    for turn, ids in zip(turns, prompts, strict=True):
        assert isinstance(turn, Turn)
        full = ids[: turn.prompt_tokens // 64]  # a partial last block's id is not used
        fresh = chain(content_keys(scope, np.array(full, dtype=np.int64)))
        assert turn.block_hashes.tolist() == fresh.tolist()
        assert not turn.block_hashes.flags.writeable


def test_session_structure_and_times(weka_file: Path) -> None:
    src = trace_source(weka_file)
    assert src.kind == "agentic"
    sessions = list(src.open())
    assert [s.key for s in sessions] == ["trace_a", "trace_b"]
    t0, group, t1, t2 = list(sessions[0].items)
    assert isinstance(t0, Turn)
    assert isinstance(group, SubagentGroup)
    assert isinstance(t1, Turn)
    assert isinstance(t2, Turn)
    assert (t0.prompt_tokens, t0.output_tokens, len(t0.block_hashes)) == (1000, 10, 15)
    assert t0.think_time_s == 0.0
    assert t1.think_time_s == pytest.approx(4.5)  # after the last sub-agent finished (30.5)
    assert t2.think_time_s == 2.0
    assert (t1.block_hashes[:15] == t0.block_hashes).all()
    sub1, sub2 = group.sessions
    assert (sub1.key, sub1.start_s, sub2.start_s) == ("trace_a/agent_1", 10.5, 10.5)
    s1 = list(sub1.items)
    assert [t.think_time_s for t in s1] == [pytest.approx(0.5), 4.0]  # spawn delay, then trace
    assert [t.offset_s for t in s1] == [0.0, 6.0]


def test_ids_are_scoped_per_trace(weka_file: Path) -> None:
    a, b = items(weka_file)
    assert isinstance(a[0], Turn)
    assert isinstance(b[0], Turn)
    assert not set(a[0].block_hashes.tolist()) & set(b[0].block_hashes.tolist())


def test_plain_ranges_gzip_json_and_directory_agree(
    tmp_path: Path,
    make_weka_trace: Callable[..., dict[str, Any]],
    write_records: Callable[[Path, list[Any]], Path],
) -> None:
    ranged = write_records(tmp_path / "r.jsonl.gz", [make_weka_trace("x", ranges=True)])
    folder = tmp_path / "upstream"
    folder.mkdir()
    (folder / "trace_0001.json").write_text(json.dumps(make_weka_trace("x", ranges=False)))
    got = [items(ranged)[0], items(folder)[0]]
    for a, b in zip(*got, strict=True):
        if isinstance(a, Turn):
            assert isinstance(b, Turn)
            assert (a.block_hashes == b.block_hashes).all()
            assert a.prompt_tokens == b.prompt_tokens


def bad_trace(mutate: Callable[[dict[str, Any]], None], make: Callable[..., dict[str, Any]]) -> Any:
    t = make("bad")
    mutate(t)
    return t


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda t: t["requests"][0].pop("in"), "missing field 'in'"),
        (lambda t: t["requests"][0].update({"out": -3}), "requests[0].out: must be >= 0"),
        (lambda t: t["requests"][0].update({"in": 5000}), "15 block ids for 5000 tokens"),
        (lambda t: t["requests"][0].update({"hash_ids": [[5, 2]]}), "bad element [5, 2]"),
        (lambda t: t["requests"][1]["requests"][0].update({"t": "x"}), "expected a number"),
        (lambda t: t.update({"hash_ids_encoding": "zip"}), "unknown 'zip'"),
        (lambda t: t.pop("requests"), "missing field 'requests'"),
    ],
)
def test_malformed_trace_names_file_line_and_reason(
    tmp_path: Path,
    make_weka_trace: Callable[..., dict[str, Any]],
    write_records: Callable[[Path, list[Any]], Path],
    mutate: Callable[[dict[str, Any]], None],
    reason: str,
) -> None:
    path = write_records(
        tmp_path / "t.jsonl", [make_weka_trace("ok"), bad_trace(mutate, make_weka_trace)]
    )
    with pytest.raises(SpecError) as err:
        items(path)
    assert err.value.file == str(path)
    assert err.value.field == "line 2"
    assert reason in err.value.reason


def test_bad_json_and_skip_bad(
    tmp_path: Path,
    make_weka_trace: Callable[..., dict[str, Any]],
    write_records: Callable[[Path, list[Any]], Path],
) -> None:
    path = write_records(tmp_path / "t.jsonl", [make_weka_trace("a"), make_weka_trace("b")])
    path.write_text(path.read_text() + "{not json\n" + json.dumps([1]) + "\n")
    with pytest.raises(SpecError, match=r"t\.jsonl: line 3: invalid JSON"):
        items(path)
    src = trace_source(path, skip_bad=True)
    assert [s.key for s in src.open()] == ["a", "b"]
    assert src.bad.count == 2
    assert "line 4" in src.bad.reasons[1]
