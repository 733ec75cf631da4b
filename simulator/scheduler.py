"""vLLM v1 step formation for one replica (``v1/core/sched/scheduler.py:Scheduler.schedule``).

No prefill or decode phases: each request has ``computed`` tokens and ``num_tokens`` (prompt +
generated + drafts); every step hands out tokens so that ``computed`` catches up. Rules:

- RUNNING requests first, in list order (decodes and ongoing chunks), then WAITING ones FCFS,
  packed into ``max_num_batched_tokens`` and ``max_num_seqs``; chunked prefill always on.
- A running request that cannot get its blocks preempts the newest running request
  (``running[-1]``), repeatedly, until it fits or preempts itself. Preemption is recompute:
  all blocks are freed (hashed ones stay cached), ``computed`` drops to 0, and the request
  goes back to the head of the waiting queue.
- WAITING requests are admitted only if nothing was preempted this step, only if the whole
  prompt fits in the free blocks (``full_sequence_must_fit``), and a failed admission stops
  the scan (head-of-line blocking). Admission takes blocks for the hit only; the first chunk's
  come from ``grow`` like every later chunk's (vLLM allocates the scheduled tokens).
- Hybrid models: every non-final prefill chunk ends on a block boundary
  (``_mamba_block_aligned_split``), so recurrent states exist at block boundaries.
- A prompt hit in the CPU tier is loaded asynchronously: the request waits
  (``WAITING_FOR_REMOTE_KVS``) and takes no compute until the load has landed.
- Disaggregation: a request with ``remote_tokens`` reads its KV from another replica
  (``RemoteKv`` decides how much and times it); it waits the same way. A finished request with
  ``keep_blocks`` keeps its blocks (``held``) until the engine releases them: a prefill-side
  request until the decode side has read them, a decode-side one while send-back pins them.
"""

from __future__ import annotations

from collections import deque

from simulator.cache.block_pool import SINK
from simulator.cache.prefix import HitLike as PrefixHitLike
from simulator.cache.prefix import PrefixHit
from simulator.lockstep import NO_STEP_S, Lockstep
from simulator.states import (
    AcceptanceSampler,
    CacheLike,
    LoadTimer,
    RemoteKv,
    ReqState,
    Status,
    StepPlan,
)


class Scheduler:
    """One replica's queues and the vLLM v1 rules that turn them into a step."""

    def __init__(
        self,
        cache: CacheLike,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        block_tokens: int,
        hybrid: bool,
        max_request_tokens: int,
        num_speculative_tokens: int = 0,
    ) -> None:
        self.cache = cache
        self.token_budget = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.block_tokens = block_tokens  # sequence tokens one scheduler block covers
        self.hybrid = hybrid
        self.max_request_tokens = max_request_tokens  # what an empty cache could hold
        self.k = num_speculative_tokens
        self.waiting: deque[ReqState] = deque()
        self.loading: list[ReqState] = []  # CPU -> GPU loads in flight (they hold blocks)
        self.holding: deque[ReqState] = deque()  # loads landed, not yet scheduled
        self.running: list[ReqState] = []
        self.remote: RemoteKv | None = None  # disaggregation: reads from other replicas
        self.held: dict[int, int] = {}  # finished requests keeping their blocks -> blocks
        self.held_blocks = 0
        # provisional output ids made when a request's blocks are freed, not as they fill:
        # exact where nothing can read them before then (see ``lazy_output_ids``); and, when
        # no request ever follows another's output (one-request sessions), a finished
        # request's output blocks cached under SINK: nothing can hit them, only their place
        # in the free queue matters
        self.lazy_ids = False
        self.sink_finished = False
        # steady decodes in lockstep (``simulator.lockstep``; set where it applies)
        self.lockstep: Lockstep | None = None
        self._run_seq = 0

    # ---------------------------------------------------------------- queue

    def add(self, state: ReqState, now_s: float | None = None) -> bool:
        """Queue a request (at ``now_s``, default its arrival); False (and REJECTED) if it
        could never fit in this cache."""
        state.enqueued_s = state.arrival_s if now_s is None else now_s
        need = state.request.prompt_tokens + state.request.output_tokens + self.k
        if need > self.max_request_tokens:
            state.status = Status.REJECTED
            state.reject_reason = (
                f"needs {need} tokens of KV cache; the whole cache holds {self.max_request_tokens}"
            )
            return False
        self.waiting.append(state)
        return True

    def sync_lockstep(self) -> None:
        """Bring every cohort member's own fields up to now (what the end of a run reads)."""
        if self.lockstep is not None:
            for req in self.running[: self.lockstep.size]:
                self.lockstep.sync(req)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.loading or self.holding)

    def has_schedulable(self) -> bool:
        """Anything a step could compute now (loads in flight do not count)."""
        return bool(self.waiting or self.running or self.holding)

    def land(self, now_s: float) -> None:
        """Loads that have landed by ``now_s`` hold their blocks and wait to be scheduled."""
        for s in [s for s in self.loading if s.ready_s <= now_s]:
            self.loading.remove(s)
            self.holding.append(s)

    def next_load_s(self) -> float | None:
        return min((s.ready_s for s in self.loading), default=None)

    def release(self, req_id: int) -> None:
        """Free the blocks a finished ``keep_blocks`` request kept."""
        self.held_blocks -= self.held.pop(req_id)
        self.cache.free(req_id)

    def finish(self, req: ReqState, token_s: float) -> None:
        """A request emitted its last token (reaching the client at ``token_s``): it leaves
        the running list and frees its blocks, or keeps them (``keep_blocks``: ``held``)."""
        if req.ls_fin >= 0:
            self.lockstep.leave(req)  # type: ignore[union-attr]
        req.status = Status.FINISHED
        req.finish_s = token_s
        self.running.remove(req)
        self._name_output_blocks(req, self.sink_finished)
        if req.keep_blocks:
            n = self.cache.num_blocks_of(req.req_id)
            self.held[req.req_id] = n
            self.held_blocks += n
        else:
            self.cache.free(req.req_id)

    # ---------------------------------------------------------------- one step

    def schedule(
        self,
        now_s: float,
        load_seconds: LoadTimer | None = None,
        admit_before_s: float | None = None,
    ) -> StepPlan:
        """Form one step (vLLM ``Scheduler.schedule``). ``admit_before_s``: with async
        scheduling the batch of step n + 1 is formed when step n starts, so requests queued
        after that moment wait for step n + 2 (``AsyncScheduler``; the engine passes the
        start of the step in flight)."""
        budget = self.token_budget
        entries: list[tuple[ReqState, int, int, bool]] = []
        preempted: list[ReqState] = []
        self.land(now_s)

        i = 0
        running, k = self.running, self.k
        ls = self.lockstep
        if ls is not None and ls.size:
            # the cohort's decodes: only members whose blocks are full need one more
            while (req := ls.next_grow()) is not None:
                if not self._grow(req, ls.computed(req) + 1, preempted):
                    continue  # it preempted itself
                ls.regrown(req)
            i = ls.size
            budget -= i
        while i < len(running) and budget > 0:
            req = running[i]
            total = req.prompt_tokens + req.generated  # num_tokens, inlined (hot loop)
            computed = req.computed
            if computed >= total:
                i += 1
                continue
            decode = computed >= total - 1 and req.generated > 0  # not prefilling
            num_new = min(1 + k, budget) if decode else self._num_new(req, budget)
            if num_new <= 0:
                i += 1
                continue
            need = computed + num_new + k
            if need > req.kv_cap and not self._grow(req, need, preempted):
                continue  # it preempted itself
            if decode and ls is not None and i == ls.size:
                ls.join(req)  # the first decode right after the cohort
            else:
                entries.append((req, num_new, computed, decode))
            budget -= num_new
            i += 1

        started: list[ReqState] = []
        if not preempted:
            # requests whose KV load landed hold their blocks: they go first
            while self.holding and budget > 0 and len(self.running) < self.max_num_seqs:
                req = self.holding[0]
                num_new = self._num_new(req, budget)
                if not (cap := self.cache.grow(req.req_id, req.computed + num_new + self.k)):
                    break
                req.kv_cap = cap
                self.holding.popleft()
                self._run(req, num_new, entries)
                budget -= num_new
            while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
                req = self.waiting[0]
                if admit_before_s is not None and req.enqueued_s > admit_before_s:
                    break  # not yet seen when this batch was formed
                hit: PrefixHitLike = self.cache.lookup(req.req_id, req.num_tokens, req.all_hashes)
                remote = 0
                if req.remote_tokens and self.remote is not None:
                    remote = self.remote.tokens(req, hit)
                    if remote:  # read from the other replica past the local GPU hit
                        hit = PrefixHit(gpu_tokens=hit.gpu_tokens)
                if not req.accounted:  # where the prompt came from, at first admission
                    req.gpu_hit_tokens = hit.gpu_tokens
                    req.cpu_hit_tokens = hit.cpu_tokens
                    req.recomputed_tokens = hit.recompute_tokens
                if not self.cache.admit(
                    req.req_id, req.num_tokens, req.all_hashes, hit, self.k, remote, hit_only=True
                ):
                    break  # full_sequence_must_fit failed: head-of-line, stop the scan
                self.waiting.popleft()
                store = 0 if req.accounted else getattr(hit, "store_tokens", 0)
                if store:  # remote KV store (simulator.cache.remote_tier), once admitted
                    owner = req.client or req
                    owner.store_hit_tokens, owner.store_hit_s = store, now_s
                req.accounted = True
                req.computed = max(hit.gpu_tokens + hit.cpu_tokens, remote)
                if req.remote_tokens and self.remote is not None:
                    req.remote_tokens = 0  # one read per request (a preempted one recomputes)
                    ready_s = self.remote.admitted(req, hit, remote, now_s)
                    if ready_s is not None:
                        req.status = Status.LOADING
                        req.ready_s = ready_s
                        self.loading.append(req)
                        started.append(req)
                        continue
                if hit.cpu_tokens > 0 and load_seconds is not None:
                    # asynchronous CPU -> GPU load: the request holds its blocks and waits
                    req.status = Status.LOADING
                    req.ready_s = now_s + load_seconds(hit)
                    self.loading.append(req)
                    started.append(req)
                    continue
                num_new = self._num_new(req, budget)
                # admission held only the hit: the first chunk's blocks (they fit: the whole
                # prompt did)
                req.kv_cap = self.cache.grow(req.req_id, req.computed + num_new + self.k)
                assert req.kv_cap, "a prompt that fitted at admission must fit its first chunk"
                self._run(req, num_new, entries)
                budget -= num_new
        if not entries and not started and not self.running and not self.loading and self.holding:
            # every free block is gone to landed loads, none of which can take its first
            # chunk, and nothing runs to free one: vLLM's rules have no way out (its landed
            # loads wait for blocks). Give back the newest, as FCFS preempts the newest running
            # request; the engine schedules again at once, until the oldest can start
            victim = self.holding[-1]
            self._preempt(victim)
            preempted.append(victim)
        return StepPlan(entries, preempted, started, ls.size if ls is not None else 0)

    def commit(
        self, plan: StepPlan, token_s: float, accepted: AcceptanceSampler | None = None
    ) -> list[ReqState]:
        """Apply a finished step: advance ``computed``, emit tokens at ``token_s``, finish.

        A request whose computed tokens reach the end of its sequence samples: one token, or
        with speculative decoding ``a + 1`` tokens of which the ``K - a`` rejected drafts are
        rolled back (``update_from_output``). Tokens reach the client at ``token_s``: the engine
        passes the end of the step plus ``output_delay_s`` (with async scheduling the next
        step runs while this one's output is copied back, detokenised and streamed), the
        same delay for every step, so a request's token times never go backwards.
        """
        finished: list[ReqState] = []
        if plan.cohort:  # the cohort's decodes come first in running order
            finished = self.commit_cohort(token_s, NO_STEP_S, 1)
        # lazy ids: a commit past the prompt's chain-id blocks has nothing to cache
        lazy_past = self.block_tokens if self.lazy_ids else -1
        for req, num_new, _, _ in plan.entries:
            before = req.computed
            computed = before + num_new
            total = req.prompt_tokens + req.generated  # num_tokens, inlined (hot loop)
            sampled = computed >= total
            if sampled:
                drafts = computed - total  # scheduled drafts past the sequence
                took = accepted(drafts) if accepted is not None and drafts > 0 else 0
                computed -= drafts - took
                req.computed = computed
                if took == 0 and req.first_token_s is not None:  # one token: ReqState.emit, inlined
                    runs = req.itl_runs
                    runs.append(token_s - req.last_token_s)  # type: ignore[operator]
                    runs.append(1.0)
                    req.itl_end_s.append(token_s)
                    req.last_token_s = token_s
                    req.generated += 1
                else:
                    req.emit(took + 1, token_s)
                total = req.prompt_tokens + req.generated
            else:
                req.computed = computed
            if lazy_past < 0 or before < len(req.block_hashes) * lazy_past:
                self.commit_cache(req, before, min(computed, total))
            # only a step that sampled can finish a request: one asking for no output tokens
            # still runs its whole prompt (its "first token" is then its finish)
            if sampled and req.generated >= req.request.output_tokens:
                self.finish(req, token_s)
                finished.append(req)
        return finished

    def commit_cohort(self, token_s: float, step_s: float, steps: int) -> list[ReqState]:
        """The lockstep cohort's tokens of one step (``step_s`` NO_STEP_S) or of ``steps``
        fast-forwarded ones: the commits where a member's tokens filled a block, and the
        finishes, in running order (``Scheduler.commit`` without the walk)."""
        ls = self.lockstep
        assert ls is not None
        ls.record(token_s, step_s, steps)
        finished: list[ReqState] = []
        edge = ls.edge_tokens
        for req in ls.due():
            if edge:
                computed = ls.computed(req)
                if computed // edge > (computed - steps) // edge:
                    self.commit_cache(req, computed - steps, computed)
                    if not req.kv_cap:  # short of a state page: grows before its next step
                        ls.regrown(req)
            if ls.ended(req):
                self.finish(req, token_s)
                finished.append(req)
            elif edge:
                ls.next_edge(req)
        return finished

    def commit_cache(self, req: ReqState, before: int, computed: int) -> None:
        """Tell the cache ``computed`` tokens of ``req`` are computed (``before`` were).

        With lazy ids, once every prompt block with a chain id has been committed (cached:
        another request may hit it) a commit has nothing to cache until the free names the
        output blocks, and is skipped; the free's commit brings the count up to date.

        A recurrent-state crossing that could not re-take a page leaves ``kv_cap`` at 0, so the
        request grows again before its next step."""
        if self.lazy_ids:
            if before >= len(req.block_hashes) * self.block_tokens:
                return
            short = self.cache.commit(req.req_id, computed)
        else:
            short = self.cache.commit(
                req.req_id, computed, req.new_output_hashes(computed, self.block_tokens)
            )
        if short:
            req.kv_cap = 0

    def _name_output_blocks(self, req: ReqState, sink: bool = False) -> None:
        """Lazy ids: before its blocks are freed, give a request's filled output blocks their
        provisional ids (cached now, as they would have been when they filled), or SINK."""
        if self.lazy_ids:
            computed = min(req.computed, req.num_tokens)
            if sink:
                known = len(req.block_hashes) + len(req.output_hashes)
                ids = [SINK] * max(computed // self.block_tokens - known, 0)
            else:
                ids = req.new_output_hashes(computed, self.block_tokens)
            self.cache.commit(req.req_id, computed, ids)

    def _run(
        self, req: ReqState, num_new: int, entries: list[tuple[ReqState, int, int, bool]]
    ) -> None:
        req.status = Status.RUNNING
        self._run_seq += 1
        req.run_seq = self._run_seq
        self.running.append(req)
        entries.append((req, num_new, req.computed, not req.prefilling))

    def _num_new(self, req: ReqState, budget: int) -> int:
        remaining = req.num_tokens - req.computed
        if remaining <= 0:
            return 0
        if not req.prefilling:
            return min(1 + self.k, budget)  # a decode (plus K draft tokens to verify)
        num_new = min(remaining, budget)
        end = req.computed + num_new
        if self.hybrid and end < req.num_tokens:
            aligned = end // self.block_tokens * self.block_tokens - req.computed
            if aligned > 0:  # else the chunk keeps private state until the next boundary
                num_new = aligned
        if self.hybrid:
            # chunks also stop at mandatory checkpoints (replay boundary, shared-prefix junction)
            stop = self.cache.next_checkpoint(req.req_id)
            if stop is not None and req.computed < stop < req.computed + num_new:
                num_new = stop - req.computed
        return num_new

    def _grow(self, req: ReqState, need: int, preempted: list[ReqState]) -> bool:
        """Blocks for ``need`` tokens of a running request, preempting the newest running ones
        (vLLM's FCFS recompute preemption) until they fit; False when ``req`` preempted itself."""
        while not (cap := self.cache.grow(req.req_id, need)):
            victim = self.running[-1]
            self._preempt(victim)
            preempted.append(victim)
            if victim is req:
                return False
        req.kv_cap = cap
        return True

    def _preempt(self, req: ReqState) -> None:
        """Free a running request's blocks (or a landed load's: ``holding``) and put it at the
        front of the queue, to recompute what it does not hit."""
        if req.ls_fin >= 0:
            self.lockstep.leave(req)  # type: ignore[union-attr]
        if req.status is Status.LOADING:
            self.holding.remove(req)
        else:
            self.running.remove(req)
        self._name_output_blocks(req)
        self.cache.free(req.req_id)
        req.kv_cap = 0
        req.computed = 0
        req.preemptions += 1
        req.status = Status.WAITING
        self.waiting.appendleft(req)
