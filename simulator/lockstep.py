"""Decode accounting in lockstep: a replica's steady decodes advanced by one clock.

In a vLLM step every running request that is past its prompt decodes one token (the token
budget is never short of the running count when ``max_num_batched_tokens >=
max_num_seqs``). Walking those requests one by one in every step (their counters, their
block capacity, their token times) was most of the engine loop on long-output workloads.
Here the decodes at the head of the running list form a *cohort*: ``Scheduler.running[:size]``.
A member's state is kept as where it stood when it joined (its computed and generated
tokens, ``ls_computed`` / ``ls_generated``, at the cohort's tick ``ls_base``) plus the ticks
since, one per committed cohort step (a fast-forwarded run counts its steps). The cohort keeps:

- the sum of its members' context (``context_tokens``): what step pricing needs of them;
- a heap of the tick at which each member's blocks are full (``kv_cap``): only those members
  are visited in a step, in running order, to take their next block;
- a heap of the tick at which each member has all its output tokens: its finish;
- a log of the cohort's steps (when their tokens reached the client, and for a fast-forwarded
  run its step time and step count). A member's inter-token runs are written from the log
  when it leaves (finish, preemption) or when the run's end reads it (``sync``): the same
  numbers, in the same order, as one append per step would have made.

So a step costs O(members whose blocks fill or who finish), not O(running requests). The
cohort is a prefix of the running list: requests join at its end (the first decode right
after it, in running order), and leave from anywhere (a finish) or from its end (a
preemption takes ``running[-1]``), so the prefix stays a prefix. It is used only where
nothing else reads a decode's state while it runs: no speculative decoding
(``simulation._replica_parts``). A disaggregated decode pool qualifies: the proxy reads a
request's state only when it finishes (its pin, the send-back). Without lazy output ids (a
CPU tier, recurrent state, disaggregation) a member's commit matters only where its tokens
fill a block (its output id, caching, the CPU tier's offer, a recurrent-state crossing): a
third heap says when, and those commits run in running order with the finishes, as the
per-request commit loop would. A sliding
window or a sparse span caps what each decode attends: per cap, the members still below it
are counted apart, and a heap says when each reaches it, so the capped sums stay exact.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from simulator.scheduler import Scheduler
    from simulator.states import ReqState

# off only to compare with the per-request path (tests, benchmarks); the answers are the same
ENABLED = True
NO_STEP_S = float("nan")  # a log entry of one step: its gap is the time since the last token
_F64 = 8  # bytes per log value
SHORT_SYNC = 16  # log entries up to which ``sync`` writes runs in a loop, not through numpy


def applies(sched: Scheduler, window: float, sparse_span: float) -> bool:
    """Whether a replica's decodes can run in lockstep (see the module docstring)."""
    whole = all(c == math.inf or float(c).is_integer() for c in (window, sparse_span))
    return (
        ENABLED
        and sched.k == 0
        and whole  # capped sums of whole numbers: exact in any order
        and sched.token_budget >= sched.max_num_seqs
    )


class Lockstep:
    """One replica's cohort of steady decodes (see the module docstring)."""

    __slots__ = (
        "_stamp", "below", "below_offset", "caps", "crossings", "ctx_offset", "edge_tokens",
        "edges", "finishes", "grows", "log", "size", "tick",
    )  # fmt: skip

    def __init__(
        self, window: float = math.inf, sparse_span: float = math.inf, edge_tokens: int = 0
    ) -> None:
        self.size = 0  # members: the scheduler's running[:size]
        self.tick = 0  # cohort steps committed so far (a fast-forwarded run counts its steps)
        self.ctx_offset = 0  # sum over members of (ls_computed - ls_base)
        # (due tick, run_seq, stamp, member): valid while the member holds that stamp
        self.grows: list[tuple[int, int, int, ReqState]] = []
        self.finishes: list[tuple[int, int, int, ReqState]] = []
        # without lazy output ids a member's commit matters where its tokens fill a block
        # (its output id, the cache, a CPU tier, a recurrent-state crossing): every
        # ``edge_tokens`` (0: never); the tick at which each member's next one is due
        self.edge_tokens = edge_tokens
        self.edges: list[tuple[int, int, int, ReqState]] = []
        # per cohort step: token time, step seconds (NO_STEP_S for one step), steps
        self.log = (array("d"), array("d"), array("d"))
        self._stamp = 0
        # a sliding window and a sparse span cap each decode's attended context: per cap,
        # the members whose context is still below it (their count and offset sum; bit j of
        # ``ls_below``) and a heap of the ticks at which they reach it
        self.caps = (window, sparse_span)
        self.below = [0, 0]
        self.below_offset = [0, 0]
        self.crossings: tuple[list[tuple[int, int, int, ReqState]], ...] = ([], [])

    def context_tokens(self) -> int:
        """Sum of the members' computed tokens now."""
        return self.ctx_offset + self.size * self.tick

    def computed(self, req: ReqState) -> int:
        return req.ls_computed + self.tick - req.ls_base

    def capped_context(self, j: int) -> float:
        """Sum over members of min(this step's context, cap j): ``Replica._shape``'s
        ``min(kv, window)`` (j = 0) or ``min(kv, sparse_span)`` (j = 1) for each decode."""
        cap = self.caps[j]
        if cap == math.inf:
            return float(self.context_tokens() + self.size)
        heap, bit = self.crossings[j], 1 << j
        while heap and heap[0][0] <= self.tick:  # members whose context reached the cap
            _, _, stamp, req = heapq.heappop(heap)
            if req.ls_fin == stamp and req.ls_below & bit:
                req.ls_below &= ~bit
                self.below[j] -= 1
                self.below_offset[j] -= req.ls_computed - req.ls_base
        n = self.below[j]
        return self.below_offset[j] + n * (self.tick + 1) + (self.size - n) * cap

    def join(self, req: ReqState) -> None:
        """``req`` (a decode, right after the cohort in running order, its blocks taken for
        this step) becomes its last member; this step's token is the cohort's."""
        t = self.tick
        req.ls_base, req.ls_computed, req.ls_generated = t, req.computed, req.generated
        req.ls_log = len(self.log[0])
        self.size += 1
        self.ctx_offset += req.computed - t
        self.regrown(req)
        self._stamp += 1
        req.ls_fin = self._stamp
        due = t + req.request.output_tokens - req.generated
        heapq.heappush(self.finishes, (due, req.run_seq, self._stamp, req))
        if self.edge_tokens:
            self.next_edge(req)
        req.ls_below = 0
        for j, cap in enumerate(self.caps):
            if req.computed + 1 < cap < math.inf:  # below it: reaches it at tick ``cross``
                req.ls_below |= 1 << j
                self.below[j] += 1
                self.below_offset[j] += req.computed - t
                cross = t + int(cap) - 1 - req.computed
                heapq.heappush(self.crossings[j], (cross, req.run_seq, self._stamp, req))

    def regrown(self, req: ReqState) -> None:
        """(Re)file the member under the tick at which its blocks are full (``kv_cap``)."""
        self._stamp += 1
        req.ls_grow = self._stamp
        due = req.ls_base + req.kv_cap - req.ls_computed
        heapq.heappush(self.grows, (due, req.run_seq, self._stamp, req))

    def next_grow(self) -> ReqState | None:
        """The next member (running order) whose next token needs another block now."""
        heap = self.grows
        while heap and heap[0][0] <= self.tick:
            _, _, stamp, req = heapq.heappop(heap)
            if req.ls_grow == stamp:
                return req
        return None

    def next_edge(self, req: ReqState) -> None:
        """File the member under the tick at which its tokens next fill a block."""
        computed, e = self.computed(req), self.edge_tokens
        due = self.tick + (computed // e + 1) * e - computed
        heapq.heappush(self.edges, (due, req.run_seq, req.ls_fin, req))

    def due(self) -> list[ReqState]:
        """Members whose tokens filled a block or who have all their output tokens now, in
        running order (each once; the member's edge is filed again by the caller)."""
        out: dict[int, ReqState] = {}
        for heap in (self.finishes, self.edges):
            while heap and heap[0][0] <= self.tick:
                _, seq, stamp, req = heapq.heappop(heap)
                if req.ls_fin == stamp:
                    out[seq] = req
        if len(out) < 2:
            return list(out.values())
        return [out[seq] for seq in sorted(out)]

    def ended(self, req: ReqState) -> bool:
        """Whether the member has all its output tokens."""
        return req.ls_generated + self.tick - req.ls_base >= req.request.output_tokens

    def min_remaining(self) -> int:
        """Fewest output tokens a member still has to make."""
        heap = self.finishes
        while heap[0][3].ls_fin != heap[0][2]:
            heapq.heappop(heap)
        return heap[0][0] - self.tick

    def reserve(self, steps: int, grow: Callable[[int, int], int]) -> int:
        """Fast-forward: blocks for ``steps`` more tokens of every member, in running order,
        halving ``steps`` where they do not fit (``Replica._fast_forward_steps``)."""
        heap, limit, due = self.grows, self.tick + steps, []
        while heap and heap[0][0] < limit:  # only these hold fewer than ``steps`` more
            _, seq, stamp, req = heapq.heappop(heap)
            if req.ls_grow == stamp:
                due.append((seq, req))
        due.sort(key=lambda d: d[0])
        for _, r in due:
            computed = self.computed(r)
            while steps > 1 and computed + steps > r.kv_cap:
                cap = grow(r.req_id, computed + steps)
                if cap:
                    r.kv_cap = cap
                    break
                steps //= 2
            self.regrown(r)
        return steps

    def record(self, token_s: float, step_s: float, steps: int) -> None:
        """The cohort's tokens of a committed step (``step_s`` NO_STEP_S) or of a run of
        ``steps`` fast-forwarded steps ``step_s`` apart reached the client at ``token_s``."""
        ts, ss, ns = self.log
        ts.append(token_s)
        ss.append(step_s)
        ns.append(steps)
        self.tick += steps

    def sync(self, req: ReqState) -> None:
        """Bring a member's own fields up to now: computed, generated, its token runs."""
        done = self.tick - req.ls_base
        if done:
            a, b = req.ls_log, len(self.log[0])
            req.computed = req.ls_computed + done
            req.generated = req.ls_generated + done
            if b - a <= SHORT_SYNC:
                self._write_runs(req, a, b)
            else:
                views = [np.frombuffer(c, np.float64, b - a, a * _F64) for c in self.log]
                ts, ss, ns = views
                prev = np.empty(b - a)
                prev[0] = req.last_token_s
                prev[1:] = ts[:-1]
                runs = np.empty(2 * (b - a))
                runs[0::2] = np.where(np.isnan(ss), ts - prev, ss)
                runs[1::2] = ns
                req.itl_runs.frombytes(runs.tobytes())
                req.itl_end_s.frombytes(ts.tobytes())
                req.last_token_s = float(ts[-1])
                del views, ts, ss, ns  # release the log's buffers: it grows again
            req.ls_base, req.ls_computed, req.ls_generated = self.tick, req.computed, req.generated
            req.ls_log = b

    def _write_runs(self, req: ReqState, a: int, b: int) -> None:
        """``sync``'s runs for log entries a..b one by one (numpy's per-call cost is more
        than a short slice's loop): the same floats."""
        ts, ss, ns = self.log
        runs, ends, prev = req.itl_runs, req.itl_end_s, req.last_token_s
        for i in range(a, b):
            t, step_s = ts[i], ss[i]
            runs.append(t - prev if step_s != step_s else step_s)  # type: ignore[operator]
            runs.append(ns[i])
            ends.append(t)
            prev = t
        req.last_token_s = prev

    def leave(self, req: ReqState) -> None:
        """A member finishes or is preempted: its fields up to date, out of the cohort."""
        self.sync(req)
        self.size -= 1
        offset = req.ls_computed - req.ls_base
        self.ctx_offset -= offset
        for j in (0, 1):
            if req.ls_below & 1 << j:
                self.below[j] -= 1
                self.below_offset[j] -= offset
        req.ls_grow = req.ls_fin = -1
        req.ls_below = 0
