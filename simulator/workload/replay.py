"""Replay: turn a stream of sessions into timed requests for an engine's own event loop.

The engine drives it with three calls and knows nothing of sessions:

- ``initial()``: requests due at the start (closed loop: each user's first turn);
- ``arrivals()``: a lazy, time-ordered iterator of open arrivals (open loop: every request;
  Poisson: each session's first turn), so a million-request trace replays in bounded memory;
- ``on_finish(request, finish_s)``: the requests that become due because this one finished
  (the session's next turn after its think time; sub-agents spawned; the parent's turn after
  its sub-agents joined; a closed-loop user's next session).

Modes:
- ``closed_loop(users)``: a fixed number of users, each running sessions back to back (AgentX);
  a turn is due ``think`` after the previous turn's completion (think x scale, capped).
- ``open_loop(time_scale)``: every request at its trace time x ``time_scale`` (0.5 = twice as
  fast), whatever the engine's progress. Sessions start at their trace start (0 for agentic
  traces: all sessions run side by side, so all of them are held open).
- ``poisson_sessions(rate, seed)``: sessions start at Poisson times; turns inside a session
  follow completions as in closed loop.

Request length: with ``max_model_len`` a request whose prompt + max_tokens exceed it is
answered at once, as vLLM's API server answers it with HTTP 400 before the engine sees it: it
never reaches the engine, it is counted in ``rejected`` and handed to ``on_reject(request,
time, reason)`` (the simulation records it as a rejected request), and its session goes on
from that moment as after any finished turn. A request due after ``horizon_s`` (the run's
end) is left to the engine, which never delivers it.

Sub-agents: a :class:`SubagentGroup` is spawned when the parent reaches it (after the parent
request that issued it finished); its sub-agents run concurrently, each as its own sequential
chain (its own session id, ``parent_session_id``/``parent_request_id`` set), and the parent's
next turn is due its think time after the *last* sub-agent finished. In open loop the
sub-agents' requests keep their trace times.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from simulator.workload.request import Request, Session, SubagentGroup, Turn
from simulator.workload.source import BadRecords

Due = tuple[float, Request]
# a request refused for its length: (request, when, why)
RejectHook = Callable[[Request, float, str], None]


def length_error(request: Request, max_model_len: int) -> str | None:
    """Why vLLM refuses ``request`` (prompt + max_tokens beyond max_model_len), else None."""
    total = request.prompt_tokens + request.output_tokens
    if total <= max_model_len:
        return None
    return (
        f"prompt {request.prompt_tokens:,} + max_tokens {request.output_tokens:,} ="
        f" {total:,} tokens exceed max_model_len {max_model_len:,} (vLLM answers HTTP 400)"
    )


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    users: int
    think_time_scale: float = 1.0
    think_time_cap_s: float | None = None
    ramp_s: float = 0.0  # user k starts at k x ramp_s / users


@dataclass(frozen=True, slots=True)
class OpenLoop:
    time_scale: float = 1.0


@dataclass(frozen=True, slots=True)
class PoissonSessions:
    rate_per_s: float
    seed: int = 0
    think_time_scale: float = 1.0
    think_time_cap_s: float | None = None


ReplayMode = ClosedLoop | OpenLoop | PoissonSessions


def closed_loop(
    users: int,
    think_time_scale: float = 1.0,
    think_time_cap_s: float | None = None,
    ramp_s: float = 0.0,
) -> ClosedLoop:
    if users < 1:
        raise ValueError(f"users must be >= 1, got {users}")
    if not ramp_s >= 0:
        raise ValueError(f"ramp_s must be >= 0, got {ramp_s}")
    return ClosedLoop(users, think_time_scale, think_time_cap_s, ramp_s)


def open_loop(time_scale: float = 1.0) -> OpenLoop:
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    return OpenLoop(time_scale)


def poisson_sessions(
    rate_per_s: float,
    seed: int = 0,
    think_time_scale: float = 1.0,
    think_time_cap_s: float | None = None,
) -> PoissonSessions:
    if rate_per_s <= 0:
        raise ValueError(f"rate_per_s must be > 0, got {rate_per_s}")
    return PoissonSessions(rate_per_s, seed, think_time_scale, think_time_cap_s)


class IdCounter:
    def __init__(self) -> None:
        self._requests = itertools.count()
        self._sessions = itertools.count()

    def request(self) -> int:
        return next(self._requests)

    def session(self) -> int:
        return next(self._sessions)


def _request(
    turn: Turn, rid: int, sid: int, index: int, t: float, think_s: float, parent: _Parent
) -> Request:
    return Request(
        request_id=rid,
        session_id=sid,
        turn=index,
        prompt_tokens=turn.prompt_tokens,
        output_tokens=turn.output_tokens,
        block_hashes=turn.block_hashes,
        block_tokens=turn.block_tokens,
        arrival_s=t,
        think_time_s=think_s,
        parent_session_id=parent[0],
        parent_request_id=parent[1],
    )


_Parent = tuple[int | None, int | None]
_Spawn = tuple[Iterator[tuple[float, "Request | _Spawn"]], ...]


def _timed(
    session: Session, base_s: float, scale: float, ids: IdCounter, parent: _Parent
) -> Iterator[tuple[float, Request | _Spawn]]:
    """A session's requests at their trace times (non-decreasing); a sub-agent group becomes a
    spawn marker carrying the sub-agents' own timed streams."""
    sid = ids.session()
    last_rid: int | None = None
    t_prev = base_s
    index = 0
    for item in session.items:
        if isinstance(item, Turn):
            t = max(t_prev, base_s + item.offset_s * scale)
            last_rid = ids.request()
            yield t, _request(item, last_rid, sid, index, t, item.think_time_s, parent)
            index += 1
            t_prev = t
        elif item.sessions:
            starts = [base_s + c.start_s * scale for c in item.sessions]
            spawn = tuple(
                _timed(c, max(t_prev, s), scale, ids, (sid, last_rid))
                for c, s in zip(item.sessions, starts, strict=True)
            )
            t_prev = max(t_prev, min(starts))
            yield t_prev, spawn


def _merge(
    sessions: Iterable[tuple[float, Session]], scale: float, ids: IdCounter
) -> Iterator[Due]:
    """Time-ordered requests of sessions given in start order; a session is opened only when
    its start time is reached, so memory holds the sessions in progress."""
    heap: list[tuple[float, int, Request | _Spawn, Iterator[tuple[float, Request | _Spawn]]]]
    heap = []
    seq = itertools.count()

    def push(stream: Iterator[tuple[float, Request | _Spawn]]) -> None:
        nxt = next(stream, None)
        if nxt is not None:
            heapq.heappush(heap, (nxt[0], next(seq), nxt[1], stream))

    pending = iter(sessions)
    upcoming = next(pending, None)
    last_start = 0.0
    while True:
        while upcoming is not None and (not heap or upcoming[0] * scale <= heap[0][0]):
            last_start = max(last_start, upcoming[0] * scale)
            push(_timed(upcoming[1], last_start, scale, ids, (None, None)))
            upcoming = next(pending, None)
        if not heap:
            return
        t, _, item, stream = heapq.heappop(heap)
        if isinstance(item, Request):
            yield t, item
        else:
            for child in item:
                push(child)
        push(stream)


def session_requests(session: Session, ids: IdCounter | None = None) -> Iterator[Request]:
    """One session's requests (sub-agents included) in trace-time order, times relative to the
    session's start: what ``plan workload stats`` reads."""
    for _, req in _merge([(0.0, session)], 1.0, ids or IdCounter()):
        yield req


@dataclass(slots=True, eq=False)
class _Run:
    session_id: int
    items: Iterator[Turn | SubagentGroup]
    parent: _Run | None = None
    user: int | None = None
    turn: int = 0
    waiting: int = 0
    last_request_id: int | None = None


class Replay:
    """Timed requests from sessions under one replay mode (see the module docstring)."""

    def __init__(
        self,
        sessions: Iterator[Session],
        mode: ReplayMode,
        max_model_len: int | None = None,
        horizon_s: float | None = None,
        on_reject: RejectHook | None = None,
    ) -> None:
        self.mode = mode
        self.single_turn = False  # every session is one request (build_replay sets it)
        self._sessions = sessions
        self._ids = IdCounter()
        self._outstanding: dict[int, _Run | None] = {}
        self._live_runs = 0
        self._exhausted = False
        self._started = False
        self.issued = 0
        self.max_model_len = max_model_len
        self.horizon_s = horizon_s
        self.on_reject = on_reject
        self.rejected = 0  # requests refused for their length (never given to the engine)
        self.bad: BadRecords | None = None  # the source's malformed records (build_replay)
        self.idle_users = 0  # closed-loop users the sessions ran out before (never started)

    # ---------------------------------------------------------------- the engine's interface

    def initial(self) -> list[Due]:
        """Requests due at the start: each closed-loop user's first turn (else empty), user
        k's at k x ramp_s / users."""
        if self._started:
            raise RuntimeError("initial() may be called once")
        self._started = True
        mode = self.mode
        if not isinstance(mode, ClosedLoop):
            return []
        out: list[Due] = []
        for user in range(mode.users):
            out += self._next_session(user, mode.ramp_s * user / mode.users)
            if self._exhausted:
                self.idle_users = mode.users - user  # this user found no session
                break
        return out

    def arrivals(self) -> Iterator[Due]:
        """Open arrivals in time order, lazily (open loop: all requests; Poisson: first turns)."""
        if isinstance(self.mode, OpenLoop):
            yield from self._open(self.mode.time_scale)
        elif isinstance(self.mode, PoissonSessions):
            yield from self._poisson(self.mode)

    def on_finish(self, request: Request, finish_s: float) -> list[Due]:
        """The requests that become due because ``request`` finished at ``finish_s``."""
        try:
            run = self._outstanding.pop(request.request_id)
        except KeyError:
            raise ValueError(f"request {request.request_id} is not outstanding") from None
        return [] if run is None else self._advance(run, finish_s)

    @property
    def done(self) -> bool:
        """No request outstanding and none will come."""
        return self._exhausted and self._live_runs == 0 and not self._outstanding

    # ---------------------------------------------------------------- modes

    def _refused(self, request: Request, t: float) -> bool:
        """Whether ``request`` (due at ``t``) is refused for its length; if so, reported."""
        if self.max_model_len is None or (self.horizon_s is not None and t > self.horizon_s):
            return False
        reason = length_error(request, self.max_model_len)
        if reason is None:
            return False
        self.rejected += 1
        if self.on_reject is not None:
            self.on_reject(request, t, reason)
        return True

    def _open(self, scale: float) -> Iterator[Due]:
        starts = ((s.start_s, s) for s in self._sessions)
        for t, req in _merge(starts, scale, self._ids):
            self.issued += 1
            if self._refused(req, t):
                continue
            self._outstanding[req.request_id] = None
            yield t, req
        self._exhausted = True

    def _poisson(self, mode: PoissonSessions) -> Iterator[Due]:
        rng = np.random.default_rng(mode.seed)
        heap: list[tuple[float, int, Request]] = []
        t = 0.0
        for session in self._sessions:
            t += float(rng.exponential(1.0 / mode.rate_per_s))
            while heap and heap[0][0] <= t:
                due, _, req = heapq.heappop(heap)
                yield due, req
            run = _Run(self._ids.session(), session.items)
            self._live_runs += 1
            for due, req in self._advance(run, t):
                heapq.heappush(heap, (due, req.request_id, req))
        self._exhausted = True
        while heap:
            due, _, req = heapq.heappop(heap)
            yield due, req

    # ---------------------------------------------------------------- closed-loop machinery

    def _think(self, think_s: float) -> float:
        mode = self.mode
        if isinstance(mode, OpenLoop):
            return think_s
        think_s *= mode.think_time_scale
        return think_s if mode.think_time_cap_s is None else min(think_s, mode.think_time_cap_s)

    def _open_session(self, user: int) -> _Run | None:
        session = next(self._sessions, None)
        if session is None:
            self._exhausted = True
            return None
        self._live_runs += 1
        return _Run(self._ids.session(), session.items, user=user)

    def _next_session(self, user: int, now: float) -> list[Due]:
        run = self._open_session(user)
        return [] if run is None else self._advance(run, now)

    def _advance(self, run: _Run, now: float) -> list[Due]:
        """The requests due next in ``run`` from ``now``; a turn refused for its length ends
        at once and the run goes on (a loop, not a recursion: a user may see thousands of
        refused sessions in a row)."""
        out: list[Due] = []
        current: _Run | None = run
        while current is not None:
            run = current
            for item in run.items:
                if isinstance(item, Turn):
                    think = self._think(item.think_time_s)
                    rid = self._ids.request()
                    parent = (
                        (run.parent.session_id, run.parent.last_request_id)
                        if run.parent is not None
                        else (None, None)
                    )
                    t = now + think
                    req = _request(item, rid, run.session_id, run.turn, t, think, parent)
                    self.issued += 1
                    run.turn += 1
                    run.last_request_id = rid
                    if self._refused(req, t):
                        now = t  # answered at once: the session's next turn follows from here
                        continue
                    self._outstanding[rid] = run
                    out.append((t, req))
                    return out
                if not item.sessions:
                    continue
                run.waiting = len(item.sessions)
                for child in item.sessions:
                    self._live_runs += 1
                    out += self._advance(_Run(self._ids.session(), child.items, parent=run), now)
                return out
            self._live_runs -= 1
            current = self._after(run)
        return out

    def _after(self, run: _Run) -> _Run | None:
        """The run to go on with once ``run`` has no items left: its parent when it was the
        last sub-agent to finish, else its user's next session (None: nothing to go on with)."""
        if run.parent is not None:
            run.parent.waiting -= 1
            return run.parent if run.parent.waiting == 0 else None
        if run.user is not None and not self._exhausted:
            return self._open_session(run.user)
        return None
