"""One serving replica of the engine (SimPy process): schedule a step by vLLM v1's rules, ask
the cost model how long it takes, wait, commit, record; identical pure-decode steps
fast-forwarded, up to ``MAX_FAST_FORWARD`` at once (``simulator.engine``'s docstring: the
rules, async output, the router and the replay around it)."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass

import simpy

from simulator.cache.prefix import HitLike
from simulator.cache.transfer import Nics
from simulator.cost.shapes import StepShape
from simulator.cost.step import StepCostModel
from simulator.records import HitRecord, OpenStep, Recorder, StepRecord
from simulator.scheduler import Scheduler
from simulator.states import ReqState, StepPlan

MAX_FAST_FORWARD = 256
ProcessGenerator = Generator[simpy.Event, object, None]


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
        store = min(cpu, owner.store_hit_tokens)  # the store's part of the CPU-tier hit
        self.recorder.on_hit(HitRecord(self.id, now_s, gpu, cpu, remote, store))

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
