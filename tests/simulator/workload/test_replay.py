"""Replay modes: closed loop, open loop, Poisson sessions; sub-agents; specs -> replays."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from simulator.specs.scenario import (
    AgenticWorkload,
    RandomPromptWorkload,
    TraceWorkload,
)
from simulator.workload import (
    ClosedLoop,
    OpenLoop,
    PoissonSessions,
    Replay,
    build_replay,
    closed_loop,
    open_loop,
    poisson_sessions,
    trace_source,
)
from simulator.workload.request import EMPTY_IDS, Request, Session, SubagentGroup, Turn


def session(key: str, thinks: list[float], start_s: float = 0.0) -> Session:
    offsets = np.cumsum(thinks).tolist()
    turns = [
        Turn(100 * (k + 1), 10, EMPTY_IDS, 64, think, off)
        for k, (think, off) in enumerate(zip(thinks, offsets, strict=True))
    ]
    return Session(key, start_s, iter(turns))


def finish_all(replay: Replay, pending: list[tuple[float, Request]], service_s: float) -> list:
    """Run a toy engine: every request takes ``service_s``; returns (arrival, request) seen."""
    seen = []
    pending = sorted(pending, key=lambda d: d[0])
    while pending:
        t, req = pending.pop(0)
        assert t == req.arrival_s
        seen.append((t, req))
        pending += replay.on_finish(req, t + service_s)
        pending.sort(key=lambda d: (d[0], d[1].request_id))
    return seen


def test_closed_loop_users_run_sessions_back_to_back() -> None:
    sessions = iter([session(f"s{k}", [0.0, 5.0]) for k in range(3)])
    replay = Replay(sessions, closed_loop(users=2))
    first = replay.initial()
    assert [(t, r.session_id, r.turn) for t, r in first] == [(0.0, 0, 0), (0.0, 1, 0)]
    nxt = replay.on_finish(first[0][1], 10.0)
    assert [(t, r.turn, r.think_time_s) for t, r in nxt] == [(15.0, 1, 5.0)]
    after = replay.on_finish(nxt[0][1], 20.0)  # session 0 done: user 0 starts session 2
    assert [(t, r.session_id, r.turn) for t, r in after] == [(20.0, 2, 0)]
    assert not replay.done
    finish_all(replay, [first[1], *after], service_s=1.0)
    assert replay.done
    assert replay.issued == 6
    with pytest.raises(ValueError, match="not outstanding"):
        replay.on_finish(first[0][1], 30.0)
    with pytest.raises(RuntimeError):
        replay.initial()


def test_think_time_scale_and_cap() -> None:
    replay = Replay(iter([session("s", [0.0, 5.0, 1.0])]), closed_loop(1, 2.0, 7.0))
    seen = finish_all(replay, replay.initial(), service_s=1.0)
    assert [r.think_time_s for _, r in seen] == [0.0, 7.0, 2.0]
    assert [t for t, _ in seen] == [0.0, 8.0, 11.0]


def test_closed_loop_sub_agents_run_in_parallel_and_join(weka_file: Path) -> None:
    replay = Replay(trace_source(weka_file, limit=1).open(), closed_loop(users=1))
    ((_, p0),) = replay.initial()
    subs = replay.on_finish(p0, 10.0)
    assert [t for t, _ in subs] == [10.5, 10.5]  # spawned together after the spawn delay
    (_, a0), (_, b0) = subs
    assert {a0.parent_session_id, b0.parent_session_id} == {p0.session_id}
    assert {a0.parent_request_id, b0.parent_request_id} == {p0.request_id}
    assert len({a0.session_id, b0.session_id, p0.session_id}) == 3
    assert replay.on_finish(b0, 12.0) == []  # agent_2 is done; agent_1 still runs
    ((t, a1),) = replay.on_finish(a0, 13.0)
    assert (t, a1.session_id, a1.turn) == (17.0, a0.session_id, 1)
    ((t, p1),) = replay.on_finish(a1, 20.0)  # the last sub-agent finished: the parent resumes
    assert (t, p1.session_id, p1.turn, p1.think_time_s) == (24.5, p0.session_id, 1, 4.5)
    assert p1.parent_session_id is None
    ((t, p2),) = replay.on_finish(p1, 30.0)
    assert t == 32.0
    assert replay.on_finish(p2, 33.0) == []
    assert replay.done


def test_open_loop_keeps_trace_times(weka_file: Path) -> None:
    replay = Replay(trace_source(weka_file).open(), open_loop(time_scale=0.5))
    assert replay.initial() == []
    arrivals = list(replay.arrivals())
    times = [t for t, _ in arrivals]
    assert times == sorted(times)
    per_trace = [t for t, r in arrivals if r.session_id == arrivals[0][1].session_id]
    assert per_trace == [0.0, 17.5, 20.0]
    sub_times = sorted(t for t, r in arrivals if r.parent_session_id is not None)
    assert sub_times == [5.25, 5.25, 5.25, 5.25, 8.25, 8.25]
    assert not replay.done
    for _, r in arrivals:
        assert replay.on_finish(r, 100.0) == []
    assert replay.done


def test_open_loop_streams_lazily() -> None:
    def endless() -> Iterator[Session]:
        for k in itertools.count():
            yield session(str(k), [0.0], start_s=float(k))

    replay = Replay(endless(), open_loop(2.0))
    first = list(itertools.islice(replay.arrivals(), 5))
    assert [t for t, _ in first] == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_poisson_sessions_are_seeded() -> None:
    def times(seed: int) -> list[float]:
        sessions = iter([session(str(k), [0.0]) for k in range(400)])
        replay = Replay(sessions, poisson_sessions(2.0, seed))
        return [t for t, _ in replay.arrivals()]

    a = times(1)
    assert a == times(1)
    assert a != times(2)
    assert np.mean(np.diff(a)) == pytest.approx(0.5, rel=0.15)


def test_poisson_sessions_follow_completions_inside_a_session() -> None:
    replay = Replay(iter([session("s", [0.0, 3.0])]), poisson_sessions(1.0, seed=0))
    ((t0, r0),) = list(replay.arrivals())
    ((t1, r1),) = replay.on_finish(r0, t0 + 2.0)
    assert t1 == pytest.approx(t0 + 5.0)
    assert replay.on_finish(r1, t1 + 1.0) == []
    assert replay.done


def test_mode_factories_validate() -> None:
    with pytest.raises(ValueError, match="users"):
        closed_loop(0)
    with pytest.raises(ValueError, match="time_scale"):
        open_loop(0.0)
    with pytest.raises(ValueError, match="rate_per_s"):
        poisson_sessions(-1.0)


def test_build_replay_picks_the_mode_from_the_spec(weka_file: Path) -> None:
    base = weka_file.parent
    name = weka_file.name
    assert isinstance(build_replay(TraceWorkload(path=name), 0, base).mode, OpenLoop)
    closed = build_replay(TraceWorkload(path=name, concurrency=4, think_time_cap_s=60), 0, base)
    assert closed.mode == ClosedLoop(4, 1.0, 60.0)
    rate = build_replay(TraceWorkload(path=name, session_rate_per_s=0.5), 3, base)
    assert rate.mode == PoissonSessions(0.5, 3)
    rnd = RandomPromptWorkload(input_tokens=100, output_tokens=10, num_requests=5, concurrency=2)
    replay = build_replay(rnd, 0)
    assert len(replay.initial()) == 2
    agentic = build_replay(AgenticWorkload(sessions=2, concurrency=2), 0)
    assert [r.turn for _, r in agentic.initial()] == [0, 0]


def test_a_ramp_starts_the_closed_loop_users_evenly() -> None:
    ramped = build_replay(AgenticWorkload(sessions=8, concurrency=4, ramp_s=100.0), 0)
    assert ramped.mode == ClosedLoop(4, 1.0, None, 100.0)
    assert [t for t, _ in ramped.initial()] == [0.0, 25.0, 50.0, 75.0]  # first turns: no think
    at_once = build_replay(AgenticWorkload(sessions=8, concurrency=4), 0)
    assert [t for t, _ in at_once.initial()] == [0.0] * 4


def test_workload_specs_reject_ambiguous_modes() -> None:
    with pytest.raises(ValidationError, match="not both"):
        TraceWorkload(path="x", concurrency=2, session_rate_per_s=1.0)
    with pytest.raises(ValidationError, match="no timestamps"):
        AgenticWorkload(sessions=3)
    with pytest.raises(ValidationError, match="exactly one"):
        RandomPromptWorkload(input_tokens=1, output_tokens=1, num_requests=1)
    with pytest.raises(ValidationError, match="extra"):
        TraceWorkload(path="x", skipbad=True)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="needs concurrency"):
        AgenticWorkload(sessions=3, session_rate_per_s=1.0, ramp_s=60.0)
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        AgenticWorkload(sessions=3, concurrency=2, ramp_s=-1.0)


def test_a_sub_agent_group_can_open_a_session() -> None:
    group = SubagentGroup(
        (session("a", [1.0]), session("b", [0.0, 2.0]), Session("c", 0, iter(())))
    )
    parent = Session("p", 0.0, iter([group, *session("p", [0.0, 3.0]).items]))
    replay = Replay(iter([parent]), closed_loop(users=1))
    first = replay.initial()
    assert sorted(t for t, _ in first) == [0.0, 1.0]  # a and b start; c is empty
    assert all(r.parent_request_id is None and r.parent_session_id == 0 for _, r in first)
    seen = finish_all(replay, first, service_s=1.0)
    parent_turns = [(t, r.turn) for t, r in seen if r.parent_session_id is None]
    assert parent_turns == [(4.0, 0), (8.0, 1)]  # after b's second turn ends at 4
    assert replay.done


def test_open_loop_on_a_request_trace(mooncake_file: Path) -> None:
    replay = Replay(trace_source(mooncake_file).open(), open_loop())
    got = [(t, r.prompt_tokens, r.block_tokens) for t, r in replay.arrivals()]
    assert got == [(0.0, 1100, 512), (0.5, 1600, 512), (1.5, 1024, 512)]
