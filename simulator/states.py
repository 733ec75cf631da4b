"""A request's state inside one replica's engine (``ReqState``, ``Status``), one step's plan
(``StepPlan``) and the interfaces the scheduler is given (its KV cache, remote KV reads, CPU
tier load timing, draft acceptance): what ``simulator.scheduler`` works on, and what the
engine, the metrics and the disaggregation read back."""

from __future__ import annotations

import enum
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from simulator.cache.prefix import HitLike as PrefixHitLike
from simulator.output_ids import output_block_id
from simulator.workload.request import Request


class Status(enum.Enum):
    WAITING = "waiting"
    LOADING = "loading"  # waiting for an asynchronous CPU -> GPU KV load
    RUNNING = "running"
    FINISHED = "finished"
    REJECTED = "rejected"


class CacheLike(Protocol):
    """What the scheduler needs from the replica's KV cache manager (simulator/cache)."""

    def lookup(
        self, req_id: int, num_tokens: int, block_hashes: tuple[int, ...]
    ) -> PrefixHitLike: ...
    def admit(
        self,
        req_id: int,
        num_tokens: int,
        block_hashes: tuple[int, ...],
        hit: PrefixHitLike,
        lookahead_tokens: int,
        remote_tokens: int = 0,
        hit_only: bool = False,
    ) -> bool: ...
    def grow(self, req_id: int, total_tokens: int) -> int: ...
    def commit(
        self, req_id: int, computed_tokens: int, new_block_hashes: Sequence[int] = ()
    ) -> bool: ...
    def free(self, req_id: int) -> None: ...
    def num_blocks_of(self, req_id: int) -> int: ...
    def next_checkpoint(self, req_id: int) -> int | None: ...
    def rename(self, old_hash: int, new_hash: int) -> None: ...


@dataclass(slots=True, eq=False)
class ReqState:
    """Engine-side state of one request."""

    request: Request
    block_hashes: tuple[int, ...]  # prompt chain ids at the engine block size
    arrival_s: float
    enqueued_s: float = 0.0  # when it joined this replica's waiting queue (async admission)
    computed: int = 0
    generated: int = 0
    status: Status = Status.WAITING
    ready_s: float = 0.0  # LOADING: when the CPU -> GPU load lands
    first_token_s: float | None = None
    last_token_s: float | None = None
    finish_s: float | None = None
    preemptions: int = 0
    reject_reason: str = ""
    # prompt tokens by where they came from (first admission only)
    gpu_hit_tokens: int = 0
    cpu_hit_tokens: int = 0
    recomputed_tokens: int = 0
    # of the CPU hit, tokens loaded from the remote KV store, and when (the client's, for a
    # disaggregated prefill-side request; simulator.cache.remote_tier)
    store_hit_tokens: int = 0
    store_hit_s: float | None = None
    accounted: bool = False
    # runs of inter-token gaps, flat: gap s, tokens, gap s, tokens ... (doubles: 16 bytes a
    # run, where a tuple in a list took ~100; a long replay keeps millions; ``itl_pairs``)
    itl_runs: array[float] = field(default_factory=lambda: array("d"))
    # per run of ``itl_runs``: when its last token reached the client. A run's tokens arrive
    # ``gap`` apart up to that time (a fast-forwarded run; runs of one token), or all at that
    # time (one emission: a speculative verify, a first emission of gap 0). Fast-forward is
    # off with speculative decoding, so ``Recorder.speculative`` tells which, exactly
    itl_end_s: array[float] = field(default_factory=lambda: array("d"))
    # prompt tokens counted as processed (served from cache or computed) for the window
    # throughput: a high-water mark, so recomputation after a preemption is not counted
    # twice; a disaggregated request's prefill side counts on its client
    prompt_done: int = 0
    # ids of full blocks past the prompt's (prompt tail + output); provisional until the
    # session's next turn shows which chain ids they carry (Engine renames them then)
    output_hashes: list[int] = field(default_factory=list)
    replica: int = 0
    # tokens its KV blocks hold without another ``grow`` (what the last one returned; 0 when
    # it holds none): the scheduler skips the call below it
    kv_cap: int = 0
    # when it joined the running list (the order of ``Scheduler.running``; a counter)
    run_seq: int = 0
    # lockstep decode accounting (``simulator.lockstep``): where it stood when it joined the
    # cohort (tick, computed, generated, log length) and its heap stamps (-1: no member)
    ls_base: int = 0
    ls_computed: int = 0
    ls_generated: int = 0
    ls_log: int = 0
    ls_grow: int = -1
    ls_fin: int = -1
    ls_below: int = 0  # bit j: its context is below cap j (window, sparse span)
    # disaggregation (all unused in aggregated runs)
    remote_tokens: int = 0  # computed tokens once a remote read lands; cleared at admission
    keep_blocks: bool = False  # finished: the scheduler holds its blocks until released
    client: ReqState | None = None  # a prefill-side request: the client request it serves
    remote_hit_tokens: int = 0  # prompt tokens pulled back from the decode side (send-back)
    send_back: str = ""  # "pull", "recompute", "expired", "none" (no pinned sequence fits)
    prefill_preemptions: int = 0
    prefill_done_s: float | None = None  # the prefill side's result reached the proxy
    kv_ready_s: float | None = None  # the decode side's read of the prefill KV landed
    # copies of the request's fields, read in every step (plain slots, not properties)
    req_id: int = field(init=False)
    prompt_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.req_id = self.request.request_id
        self.prompt_tokens = self.request.prompt_tokens

    def emit(self, tokens: int, token_s: float) -> None:
        """``tokens`` output tokens reached the client at ``token_s`` (capped at the request's
        output length): the first token, or a run of the inter-token gaps."""
        tokens = min(tokens, self.request.output_tokens - self.generated)
        if self.first_token_s is None:
            self.first_token_s = token_s
            if tokens > 1:
                self.itl_runs.append(0.0)
                self.itl_runs.append(tokens - 1)
                self.itl_end_s.append(token_s)
        else:
            assert self.last_token_s is not None
            gap = (token_s - self.last_token_s) / tokens  # tokens of one verify share the gap
            self.itl_runs.append(gap)
            self.itl_runs.append(tokens)
            self.itl_end_s.append(token_s)
        self.last_token_s = token_s
        self.generated += tokens

    def new_output_hashes(self, computed: int, block_tokens: int) -> list[int]:
        """Provisional ids for blocks that ``computed`` tokens fill past the known ones."""
        known = len(self.block_hashes) + len(self.output_hashes)
        full = computed // block_tokens
        if full <= known:
            return []
        new = [output_block_id(self.req_id, i) for i in range(known, full)]
        self.output_hashes.extend(new)
        return new

    def itl_pairs(self) -> list[tuple[float, int]]:
        """``itl_runs`` as (gap s, tokens) pairs."""
        runs = self.itl_runs
        return [(runs[i], int(runs[i + 1])) for i in range(0, len(runs), 2)]

    @property
    def all_hashes(self) -> tuple[int, ...]:
        """Chain ids of every full block of the sequence (a preempted request hits its own)."""
        return self.block_hashes + tuple(self.output_hashes)

    @property
    def num_tokens(self) -> int:
        """Tokens the KV cache must hold: prompt plus generated output."""
        return self.prompt_tokens + self.generated

    @property
    def prefilling(self) -> bool:
        return self.computed < self.num_tokens - 1 or self.generated == 0


@dataclass(slots=True)
class StepPlan:
    """What one step computes: (request, new tokens, context before the step, is a decode)."""

    entries: list[tuple[ReqState, int, int, bool]]
    preempted: list[ReqState]
    started_loads: list[ReqState]
    # decodes of the lockstep cohort (``Scheduler.running[:cohort]``), one token each, not
    # in ``entries``
    cohort: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(e[1] for e in self.entries) + self.cohort


class RemoteKv(Protocol):
    """How a replica reads KV from another one (the engine implements it)."""

    def tokens(self, req: ReqState, hit: PrefixHitLike) -> int:
        """Pure: the tokens ``req`` counts computed once the read lands (0: compute locally)."""
        ...

    def admitted(
        self, req: ReqState, hit: PrefixHitLike, tokens: int, now_s: float
    ) -> float | None:
        """``req`` was admitted with ``tokens`` from ``tokens()``: start the read and return
        when it lands, or None when nothing is read (the source is told at once)."""
        ...


class LoadTimer(Protocol):
    """Seconds until a CPU -> GPU load of ``hit`` has landed."""

    def __call__(self, hit: PrefixHitLike) -> float: ...


# Accepted draft tokens out of ``drafts`` scheduled ones (seeded by the engine).
AcceptanceSampler = Callable[[int], int]
