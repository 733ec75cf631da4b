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
import math
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import simpy

from simulator.cache.prefix import HitLike
from simulator.cache.transfer import Nics
from simulator.cost.shapes import StepShape
from simulator.cost.step import StepCostModel
from simulator.disaggregation import DisaggSpec, PrefillDecode
from simulator.records import HitRecord, OpenStep, Recorder, StepRecord
from simulator.scheduler import Scheduler
from simulator.states import ReqState, StepPlan
from simulator.workload.replay import Due, Replay
from simulator.workload.request import EMPTY_IDS, Request

MAX_FAST_FORWARD = 256
ACCEPT_BLOCK = 4096  # uniforms drawn at a time for speculative acceptance
PROGRESS_EVERY_S = 0.25  # wall seconds between progress reports while nothing finishes
ProcessGenerator = Generator[simpy.Event, object, None]
RouterPolicy = Literal["round_robin", "least_loaded", "session_affinity"]


class SchedulerStallError(RuntimeError):
    """The cache is full and nothing can be preempted or admitted: a configuration error."""


@dataclass
class ReplicaParts:
    scheduler: Scheduler
    cost: StepCostModel
    block_tokens: int  # sequence tokens per scheduler block (block size x dcp)
    load_bytes: Callable[[HitLike], float]  # per GPU, over its own host link
    host_bw_bytes_per_s: float
    host_latency_s: float
    blocks_used: Callable[[], int]


class Replica:
    def __init__(
        self,
        env: simpy.Environment,
        replica_id: int,
        parts: ReplicaParts,
        recorder: Recorder,
        on_finish: Callable[[ReqState], None],
        accept: Callable[[int], int] | None,
        tick: Callable[[], None] | None = None,
    ) -> None:
        self.env = env
        self.tick = tick  # called after every step (the engine's wall-clock progress)
        self.id = replica_id
        self.parts = parts
        self.sched = parts.scheduler
        self.recorder = recorder
        self.on_finish = on_finish
        self.accept = accept
        self._wakeup: simpy.Event | None = None
        self.last_step_s = 0.0
        self.nics: Nics | None = None  # disaggregation: this replica's NICs
        # from a step's end to the client holding its tokens (async output processing)
        self.output_delay_s = parts.cost.device.roofline.output_delay_s
        # recording only: the step (or fast-forwarded run) in progress, for the end of a run:
        # (start, step_s, steps, prompt_computed, waiting, plan)
        self.in_progress: tuple[float, float, int, int, int, StepPlan] | None = None
        self._step_started_s: float | None = None  # start of the step in flight (or last)
        self.process = env.process(self._run())

    @property
    def load(self) -> int:
        s = self.sched
        return len(s.waiting) + len(s.running) + len(s.loading) + len(s.holding)

    def submit(self, state: ReqState) -> None:
        state.replica = self.id
        if not self.sched.add(state, self.env.now):
            state.finish_s = self.env.now
            self.on_finish(state)  # rejected, with its reason
            return
        self.wake()

    def wake(self) -> None:
        """Something changed (a request came, blocks were freed): cut an idle wait or a
        fast-forwarded run at the next step boundary."""
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    def release(self, state: ReqState) -> None:
        """Free the blocks a finished request kept (read by the other side, or unpinned)."""
        self.sched.release(state.req_id)
        self.wake()

    def _load_seconds(self, hit: HitLike) -> float:
        """Transfer time over the host link + its latency + about one step (vLLM's async
        load lands between steps)."""
        p = self.parts
        return p.load_bytes(hit) / p.host_bw_bytes_per_s + p.host_latency_s + self.last_step_s

    def _idle(self) -> ProcessGenerator:
        self._wakeup = self.env.event()
        next_load = self.sched.next_load_s()
        if next_load is not None and next_load <= self.env.now:
            raise SchedulerStallError(f"replica {self.id}: a landed KV load was never scheduled")
        if next_load is not None:
            yield self._wakeup | self.env.timeout(max(next_load - self.env.now, 0.0))
        else:
            yield self._wakeup
        self._wakeup = None

    def _run(self) -> ProcessGenerator:
        env, sched = self.env, self.sched
        while True:
            sched.land(env.now)
            if not sched.has_schedulable():
                yield from self._idle()
                continue
            # async scheduling: this batch was formed when the step now ending started, so
            # requests queued during it join the step after (none when nothing was running)
            lag = self._step_started_s if sched.running else None
            plan = sched.schedule(env.now, self._load_seconds, lag)
            if plan.num_tokens == 0:
                if plan.preempted:  # a landed load given back: schedule again at once
                    continue
                if sched.loading or plan.started_loads or sched.held:
                    yield from self._idle()
                    continue
                raise SchedulerStallError(
                    f"replica {self.id} at t={env.now:.3f}s: nothing fits in the KV cache"
                    f" ({len(sched.waiting)} waiting, {len(sched.running)} running)"
                )
            shape = self._shape(plan)
            cost = self.parts.cost.price(shape)
            step_s = cost.seconds
            steps = self._fast_forward_steps(plan)
            start = env.now
            prompt_computed = self._count_prompt(plan, start)
            waiting = len(sched.waiting)
            self.in_progress = (start, step_s, steps, prompt_computed, waiting, plan)
            if steps > 1:
                self._wakeup = env.event()
                yield self._wakeup | env.timeout(steps * step_s)
                self._wakeup = None
                done = min(steps, max(1, math.ceil((env.now - start) / step_s - 1e-9)))
                self.in_progress = (start, step_s, done, prompt_computed, waiting, plan)
                if start + done * step_s > env.now:
                    yield env.timeout(start + done * step_s - env.now)
                steps = done
            else:
                yield env.timeout(step_s)
            self.in_progress = None
            self.last_step_s = step_s
            self._step_started_s = start + (steps - 1) * step_s  # the last step of a run
            if steps > 1:
                finished = self._commit_decodes(plan, steps, step_s)
            else:
                finished = sched.commit(plan, env.now + self.output_delay_s, self.accept)
            self.recorder.on_step(
                StepRecord(
                    replica=self.id,
                    start_s=start,
                    step_s=step_s * steps,
                    steps=steps,
                    decodes=shape.num_decodes,
                    prefill_tokens=shape.prefill_tokens,
                    kv_blocks_used=self.parts.blocks_used(),
                    breakdown_s=tuple(cost.breakdown_s.values()),  # a tuple: 1/3 a dict's bytes
                    kv_blocks_held=sched.held_blocks,
                    prompt_computed=prompt_computed,
                    waiting=waiting,
                )
            )
            if self.tick is not None:
                self.tick()
            for req in finished:
                self.on_finish(req)

    def open_step(self) -> OpenStep:
        """The step in progress when the run stopped (``in_progress`` is set)."""
        assert self.in_progress is not None
        start, step_s, steps, prompt_computed, waiting, plan = self.in_progress
        # only a fast-forwarded run has tokens that reached the client before its end
        decodes = []
        if steps > 1:
            decodes = self.sched.running[: plan.cohort] + [e[0] for e in plan.entries if e[3]]
        return OpenStep(
            self.id, start, step_s, steps, prompt_computed, waiting, decodes, self.output_delay_s
        )

    def _count_prompt(self, plan: StepPlan, now_s: float) -> int:
        """Recording only: the prompt tokens this step processes for the first time.

        Each request's ``prompt_done`` (its client's, for a disaggregated prefill-side
        request) marks how far its prompt has been counted. Tokens a request holds when it is
        admitted (its cache hit: GPU, CPU tier or pulled from the decode side) are recorded
        at once (``HitRecord``); the prompt tokens the step computes past the mark are
        returned (``StepRecord.prompt_computed``). Recomputation after a preemption, a
        disaggregated decode side's read of the prefill KV and the prompt token it computes
        again are below the mark: not counted twice.
        """
        computed = 0
        for req in plan.started_loads:
            self._count_hit(req, req.computed, now_s)
        for req, new, ctx, decode in plan.entries:
            if decode:
                continue
            owner = req.client or req
            if ctx > owner.prompt_done:  # admitted in this step with cached tokens
                self._count_hit(req, ctx, now_s)
            upto = min(ctx + new, req.prompt_tokens)
            if upto > owner.prompt_done:
                computed += upto - owner.prompt_done
                owner.prompt_done = upto
        return computed

    def _count_hit(self, req: ReqState, held: int, now_s: float) -> None:
        """Record the prompt tokens ``req`` holds at admission past its mark, by tier: the
        first admission's GPU hit, CPU hit, then the tokens pulled from the other pool (a
        later admission's extra hit counts as GPU)."""
        owner = req.client or req
        done = owner.prompt_done
        upto = min(held, req.prompt_tokens)
        if upto <= done:
            return
        gpu_end = req.gpu_hit_tokens
        cpu_end = gpu_end + req.cpu_hit_tokens
        remote_end = cpu_end + owner.remote_hit_tokens
        gpu = max(0, min(upto, gpu_end) - done)
        cpu = max(0, min(upto, cpu_end) - max(done, gpu_end))
        remote = max(0, min(upto, remote_end) - max(done, cpu_end))
        gpu += upto - done - gpu - cpu - remote  # past every tier: a re-admission's hit
        owner.prompt_done = upto
        self.recorder.on_hit(HitRecord(self.id, now_s, gpu, cpu, remote))

    def _shape(self, plan: StepPlan) -> StepShape:
        """The sums the step cost model needs (``step.shape_of`` without numpy overhead)."""
        m = self.parts.cost
        window, span = m.window, m.sparse_span
        dec_n = dec_tok = pre_n = pre_tok = 0
        dec_kv = dec_kv_w = dec_kv_s = 0.0
        pre_kv = pre_kv_w = pairs = pairs_w = pairs_s = 0.0
        if plan.cohort:  # the lockstep decodes: one token each on their context
            ls = self.sched.lockstep
            assert ls is not None
            dec_n = dec_tok = plan.cohort
            dec_kv += ls.context_tokens() + plan.cohort
            dec_kv_w, dec_kv_s = ls.capped_context(0), ls.capped_context(1)
        if window == math.inf and span == math.inf:  # no window, no sparse span: the plain sums
            for _, new, ctx, decode in plan.entries:
                if decode:
                    dec_n += 1
                    dec_tok += new
                    dec_kv += ctx + new
                else:
                    pre_n += 1
                    pre_tok += new
                    pre_kv += ctx + new
                    pairs += new * ctx + new * (new + 1) / 2
            dec_kv_w = dec_kv_s = dec_kv
            pre_kv_w, pairs_w, pairs_s = pre_kv, pairs, pairs
            entries: list[tuple[ReqState, int, int, bool]] = []
        else:
            entries = plan.entries
        for _, new, ctx, decode in entries:
            kv = ctx + new
            if decode:
                dec_n += 1
                dec_tok += new
                dec_kv += kv
                dec_kv_w += min(kv, window)
                dec_kv_s += min(kv, span)
            else:
                pre_n += 1
                pre_tok += new
                pre_kv += kv
                pre_kv_w += min(kv, new + window)
                p = new * ctx + new * (new + 1) / 2
                pairs += p
                pairs_w += min(p, new * window)
                pairs_s += min(p, new * span)
        return StepShape(
            num_decodes=dec_n,
            decode_tokens=dec_tok,
            decode_kv=dec_kv,
            decode_kv_window=dec_kv_w,
            decode_kv_sparse=dec_kv_s,
            num_prefills=pre_n,
            prefill_tokens=pre_tok,
            prefill_kv=pre_kv,
            prefill_kv_window=pre_kv_w,
            prefill_pairs=pairs,
            prefill_pairs_window=pairs_w,
            prefill_pairs_sparse=pairs_s,
        )

    def _fast_forward_steps(self, plan: StepPlan) -> int:
        """How many identical decode steps this plan can stand for (1 = no fast-forward)."""
        s = self.sched
        if s.k or plan.preempted or plan.started_loads or s.holding or s.loading:
            return 1
        if s.waiting and len(s.running) < s.max_num_seqs:
            return 1  # each step would try to admit
        if len(plan.entries) + plan.cohort != len(s.running):
            return 1
        if any(not decode or n != 1 for _, n, _, decode in plan.entries):
            return 1
        steps = min(
            (r.request.output_tokens - r.generated for r, _, _, _ in plan.entries),
            default=MAX_FAST_FORWARD,
        )
        if plan.cohort:
            assert s.lockstep is not None
            steps = min(steps, s.lockstep.min_remaining())
        steps = min(steps, MAX_FAST_FORWARD)
        if steps <= 1:
            return 1
        # every request must be able to hold the tokens of all the steps (running order)
        grow = s.cache.grow
        if plan.cohort:
            steps = s.lockstep.reserve(steps, grow)  # type: ignore[union-attr]
        for r, _, _, _ in plan.entries:
            while steps > 1 and r.computed + steps > r.kv_cap:
                cap = grow(r.req_id, r.computed + steps)
                if cap:
                    r.kv_cap = cap
                    break
                steps //= 2
        return steps

    def _commit_decodes(self, plan: StepPlan, steps: int, step_s: float) -> list[ReqState]:
        """Commit ``steps`` decode steps at once: one token per request per step. Token k
        (1-based) of the run reaches the client at start + k x step_s + ``output_delay_s``,
        the last one at the end of the run + the delay."""
        s = self.sched
        end = self.env.now
        delay = self.output_delay_s
        finished: list[ReqState] = []
        token_s = end + delay
        lazy_past = s.block_tokens if s.lazy_ids else -1  # see Scheduler.commit
        if plan.cohort:  # first in running order, as in Scheduler.commit
            finished = s.commit_cohort(token_s, step_s, steps)
        for req, _, _, _ in plan.entries:
            before = req.computed
            req.computed = before + steps
            if req.first_token_s is None:  # cannot happen for a decode; kept for safety
                req.first_token_s = end - (steps - 1) * step_s + delay
            runs = req.itl_runs
            runs.append(step_s)
            runs.append(steps)
            req.itl_end_s.append(token_s)
            req.generated += steps
            req.last_token_s = token_s
            if lazy_past < 0 or before < len(req.block_hashes) * lazy_past:
                s.commit_cache(req, before, req.computed)
            if req.generated >= req.request.output_tokens:
                s.finish(req, token_s)
                finished.append(req)
        return finished


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
