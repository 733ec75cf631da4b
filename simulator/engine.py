"""The discrete-event serving engine (SimPy): replicas behind a router, fed by a replay.

One process per replica: schedule a step (vLLM v1 rules), ask the cost model how long it
takes, wait that long, commit, record. Pure-decode steps with an unchanged batch are
fast-forwarded: up to ``MAX_FAST_FORWARD`` identical steps are committed at once (context
growth over the run is ignored when pricing them: < 0.3 % at 100k-token contexts), and an
arrival interrupts the run at the next step boundary. The event count therefore scales with
arrivals, completions and batch changes, not with output tokens.

Async scheduling: the next step runs while a step's output is processed, so a step's tokens
reach the client ``output_delay_s`` (the device profile's ``roofline.output_delay_s``:
device-to-host copy, detokenisation, streaming) after the step ends, not a second step
later; the cost model already takes max(GPU, CPU) per step. The delay is the same for every
step: inter-token gaps equal step durations and token times never go backwards.

Prefill/decode disaggregation: ``simulator.disaggregation`` (two pools of these replicas).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Literal

import numpy as np
import simpy

from simulator.disaggregation import DisaggSpec, PrefillDecode
from simulator.records import Recorder
from simulator.replica import ProcessGenerator, Replica, ReplicaParts
from simulator.states import ReqState
from simulator.workload.replay import Due, Replay
from simulator.workload.request import EMPTY_IDS, Request

ACCEPT_BLOCK = 4096  # uniforms drawn at a time for speculative acceptance
PROGRESS_EVERY_S = 0.25  # wall seconds between progress reports while nothing finishes
RouterPolicy = Literal["round_robin", "least_loaded", "session_affinity"]


class Router:
    def __init__(self, replicas: list[Replica], policy: RouterPolicy) -> None:
        self.replicas = replicas
        self.policy = policy
        self._next = 0

    def pick(self, request: Request) -> Replica:
        if self.policy == "least_loaded":
            return min(self.replicas, key=lambda r: (r.load, r.id))
        if self.policy == "session_affinity":
            return self.replicas[request.session_id % len(self.replicas)]
        replica = self.replicas[self._next % len(self.replicas)]
        self._next += 1
        return replica


class Engine:
    """Wires a replay to replicas; ``run()`` returns the recorder."""

    def __init__(
        self,
        replay: Replay,
        parts: list[ReplicaParts],
        router: RouterPolicy = "session_affinity",
        seed: int = 0,
        acceptance_rate: float | None = None,
        duration_s: float | None = None,
        progress: Callable[[float, int], None] | None = None,
        disaggregation: DisaggSpec | None = None,
    ) -> None:
        self.env = simpy.Environment()
        self.replay = replay
        self.recorder = Recorder()
        self.rng = np.random.default_rng(seed)
        self._uniforms: list[float] = []  # drawn, not yet used (``_accept``)
        self._next_uniform = 0
        self.acceptance_rate = acceptance_rate
        accept = self._accept if acceptance_rate is not None else None
        self.duration_s = duration_s
        self.progress = progress
        self.block_tokens = parts[0].block_tokens
        self.done = 0
        self.live: dict[int, ReqState] = {}  # client requests arrived, not finished/rejected
        self.last_turn: dict[int, ReqState] = {}
        self.pools: PrefillDecode | None = None
        self._last_report_s = time.monotonic()
        tick = self._tick if progress is not None else None
        if disaggregation is None:
            self.replicas = [
                Replica(self.env, i, p, self.recorder, self.finished, accept, tick)
                for i, p in enumerate(parts)
            ]
        else:
            n = disaggregation.prefill_replicas
            if not 0 < n < len(parts):
                raise ValueError("disaggregation needs a prefill and a decode replica at least")
            pools = self.pools = PrefillDecode(self, disaggregation)
            self.replicas = [
                Replica(self.env, i, p, self.recorder, pools.on_finish(i), accept, tick)
                for i, p in enumerate(parts)
            ]
            prefill, decode = self.replicas[:n], self.replicas[n:]
            pools.attach(self.replicas, Router(prefill, router), Router(decode, router))
        self.router = Router(self.replicas, router)
        # the API servers, where a prompt arrives first (disaggregated: the prefill pool's):
        # ``api_server_count`` per deployment, by default one per DP rank as in vLLM; when
        # each is free again
        first = parts[0].cost
        self.frontend_s_per_token = first.device.roofline.frontend_s_per_prompt_token
        front = len(parts) if disaggregation is None else disaggregation.prefill_replicas
        per_deployment = first.serving.api_server_count or first.serving.dp
        self._frontend_free_s = [0.0] * max(1, front // first.serving.dp * per_deployment)

    def _accept(self, drafts: int) -> int:
        """Accepted drafts with i.i.d. acceptance a: the first rejection ends the run.

        The uniforms come from the seeded generator in blocks of ``ACCEPT_BLOCK`` and are
        used in order: the same stream as one ``rng.random(drafts)`` per verify (the
        generator's doubles are consecutive outputs), without numpy's per-call cost."""
        a = self.acceptance_rate
        assert a is not None
        u, i = self._uniforms, self._next_uniform
        if i + drafts > len(u):
            u = self._uniforms = u[i:] + self.rng.random(max(ACCEPT_BLOCK, drafts)).tolist()
            i = 0
        self._next_uniform = i + drafts
        for j in range(drafts):
            if u[i + j] >= a:
                return j
        return drafts

    def _deliver(self, due: Due) -> ProcessGenerator:
        at, request = due
        if at > self.env.now:
            yield self.env.timeout(at - self.env.now)
        state = ReqState(request, request.engine_blocks(self.block_tokens), arrival_s=self.env.now)
        self.live[state.req_id] = state
        self._link_previous_turn(state)
        delay_s = self._frontend_delay_s(state)
        if delay_s > 0.0:  # a callback, not a process: no generator per request
            self.env.timeout(delay_s).callbacks.append(lambda _event: self._route(state))
        else:
            self._route(state)

    def _frontend_delay_s(self, state: ReqState) -> float:
        """Seconds until the API server has the request ready for the engine: the prompt's
        host work (``roofline.frontend_s_per_prompt_token`` x prompt tokens: tokenizing its
        text, priming the detokenizer), after the work already queued there. The earliest
        free of the API servers takes it; each serves its requests in arrival order."""
        work_s = state.request.prompt_tokens * self.frontend_s_per_token
        if work_s <= 0.0:
            return 0.0
        free, now = self._frontend_free_s, self.env.now
        i = free.index(min(free))
        start = max(free[i], now)
        free[i] = start + work_s
        self.recorder.frontend_busy.extend((start, free[i]))
        return free[i] - now

    def _route(self, state: ReqState) -> None:
        if self.pools is None:
            self.router.pick(state.request).submit(state)
        else:
            self.pools.arrive(state)

    def _link_previous_turn(self, state: ReqState) -> None:
        """Give the previous turn's output blocks the chain ids this turn shows they have.

        A turn's prompt is assumed to be the previous prompt + its output + new input when
        it starts with the previous prompt's blocks and is at least that long. vLLM would
        hit those output blocks (same tokens); without this they could never match.
        """
        request = state.request
        prev = self.last_turn.get(request.session_id)
        self.last_turn[request.session_id] = state
        if prev is None or prev.finish_s is None:
            return
        self._link(prev, state)
        if self.pools is None:  # nothing reads a linked turn's ids again (send-back pins do)
            prev.block_hashes, prev.output_hashes = (), []

    def _link(self, prev: ReqState, state: ReqState) -> None:
        request = state.request
        if not prev.output_hashes:
            return
        n = len(prev.block_hashes)
        ids = state.block_hashes
        if len(ids) <= n or ids[:n] != prev.block_hashes:
            return
        if request.prompt_tokens < prev.prompt_tokens + prev.generated:
            return
        cache = self.replicas[prev.replica].sched.cache
        for i, provisional in enumerate(prev.output_hashes, start=n):
            if i >= len(ids):
                break
            cache.rename(provisional, ids[i])

    def _schedule(self, dues: list[Due]) -> None:
        for due in dues:
            self.env.process(self._deliver(due))

    def _open_arrivals(self) -> ProcessGenerator:
        for due in self.replay.arrivals():
            at, _ = due
            if at > self.env.now:
                yield self.env.timeout(at - self.env.now)
            yield from self._deliver(due)

    def _tick(self) -> None:
        """Report progress at least every ``PROGRESS_EVERY_S`` of wall time while steps run,
        even when no request finishes (minute-long prefills): a stop raised by ``progress``
        then ends the run promptly."""
        now = time.monotonic()
        if now - self._last_report_s >= PROGRESS_EVERY_S and self.progress is not None:
            self._last_report_s = now
            self.progress(self.env.now, self.done)

    def finished(self, state: ReqState) -> None:
        """A client request finished or was rejected: record it and let the replay go on."""
        self.recorder.on_done(state)
        self.live.pop(state.req_id, None)
        self.done += 1
        if self.progress is not None:
            self.progress(self.env.now, self.done)
        self._schedule(self.replay.on_finish(state.request, state.finish_s or self.env.now))
        # what the recorder keeps of a finished request: not the trace-level block ids (one
        # uint64 per 64 tokens of prompt: most of a long agentic replay's memory)
        if len(state.request.block_hashes):
            state.request = dataclasses.replace(state.request, block_hashes=EMPTY_IDS)

    def run(self) -> Recorder:
        self._schedule(self.replay.initial())
        self.env.process(self._open_arrivals())
        self.env.run(until=self.duration_s)
        self._record_end()
        return self.recorder

    def _record_end(self) -> None:
        """What the run left unfinished, for the window metrics (``metrics.summarize``)."""
        for r in self.replicas:
            r.sched.sync_lockstep()
        rec = self.recorder
        rec.end_s = self.env.now
        rec.workload_ended = self.replay.done
        rec.speculative = any(r.sched.k for r in self.replicas)
        rec.frontends = len(self._frontend_free_s)
        rec.unfinished = list(self.live.values())
        queued = {(s.client or s).req_id for r in self.replicas for s in r.sched.waiting}
        rec.waiting_at_end = len(queued & self.live.keys())
        rec.open_steps = [r.open_step() for r in self.replicas if r.in_progress is not None]
