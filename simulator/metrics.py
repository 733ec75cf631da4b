"""Recorder rows -> tables -> the summary a capacity planner reports (DESIGN section 2).

The measured window is [``warmup_s``, end]: end = ``end_s`` (the scenario's ``duration_s``),
except when the workload ran out before it (no request outstanding, none to come) or no end
is given: then the window ends at the last token emitted (``window_end_reason``
"workload_ended", else "duration"). Every figure counts what happened inside the window,
whether or not its request finished there:

- Tokens processed = prompt tokens served from cache (GPU, CPU tier, or pulled from the other
  pool) counted when their request is admitted (``HitRecord``), prompt tokens computed counted
  over their step (``StepRecord.prompt_computed``, pro rata of the step's time inside the
  window), and output tokens counted when they reach the client. Each prompt token counts
  once per request: recomputation after a preemption is not work done twice.
  Throughput per GPU = tokens processed / window / GPUs; output-only throughput likewise.
- ITL: time between consecutive output tokens of one request; TPOT = (E2E - TTFT)/(out - 1).
  Interactivity (tok/s/user) = 1 / ITL at the stated percentile, TTFT excluded, over every
  inter-token gap that ends inside the window (requests still running at the end included):
  the P90 interactivity is 1 / (P90 of those gaps).
- TTFT over requests that arrived after the warm-up and whose first token lands in the
  window; E2E and ``requests_finished`` over those that arrived after the warm-up and
  finished inside it.
- Prefix-cache hit rate = prompt tokens served from cache / prompt tokens processed, both
  inside the window. By tier: ``gpu_hit_rate``, ``cpu_hit_rate`` (the host tier),
  ``store_hit_rate`` (the remote KV store, ``kv_store``) and, disaggregated, ``remote_hit_rate``
  (pulled back from the decode side); they sum to ``prefix_hit_rate``.
  ``prefix_hit_rate_quarters``: the same in each quarter of the window; quarters that differ
  by more than ``UNSTEADY_HIT_SPREAD`` mean the window holds a change of the cache's state.
  ``recomputed_prompt_tokens`` is over the finished requests counted in
  ``requests_finished``; ``preemptions`` over every finished request, as before.
- Saturation (``saturated``): the waiting queue (requests not admitted, all replicas; the
  value each step leaves, held until that replica's next step) either grows through the window
  (``queue grows``: at the end at least max(2, 10 %) above its value at the start, and its
  time-average over the second half at least one request above the first half's) or never
  drains (``queue never drains``: requests wait during at least 95 % of the window).

With no ``end_s`` (``plan validate``: no warm-up, no duration) every request finishes and the
window runs from 0 to the last finish: all tokens / that time, as InferenceMAX measures it.

Disaggregated runs (``Pools`` given) keep these meanings over all GPUs of both pools and add
per-pool figures, as InferenceX reports disaggregated runs: prompt tokens processed in the
window per prefill GPU, output tokens per decode GPU. Their hit rates are the prefill side's
(what it did not compute: its own cache, its CPU tier, or blocks pulled back from the decode
side, ``remote_hit_rate``).
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from simulator.scheduler import ReqState, Status
from simulator.specs.frozen import Frozen

# quarters of the window whose prefix-hit rates differ by more than this (a fraction) mark a
# run as not steady: an assumption (a cache switching between ~90 % and ~0 % hits,
# docs/kv-pressure.md, is far above it; a steady agentic run varies by a few points)
UNSTEADY_HIT_SPREAD = 0.15


@dataclass(slots=True)
class StepRecord:
    replica: int
    start_s: float
    step_s: float
    steps: int  # > 1 when identical decode steps were fast-forwarded together
    decodes: int
    prefill_tokens: int
    kv_blocks_used: int
    breakdown_s: tuple[float, ...]  # seconds by category, in ``cost.shapes.CATEGORIES`` order
    kv_blocks_held: int = 0  # of the used: blocks finished requests keep (disaggregation)
    prompt_computed: int = 0  # prompt tokens computed for the first time by their request
    waiting: int = 0  # requests this step left in the waiting queue (not admitted)


@dataclass(slots=True)
class HitRecord:
    """Prompt tokens a request held when it was admitted (its prefix-cache hit), by tier."""

    replica: int
    t_s: float
    gpu_tokens: int
    cpu_tokens: int
    remote_tokens: int  # pulled from the other pool (send-back)


@dataclass(slots=True)
class OpenStep:
    """A step (or fast-forwarded run of ``steps`` decode steps) still running when the run
    stopped at its duration: its prompt tokens count pro rata, and the tokens of a
    fast-forwarded run's steps that had reached the client count as emitted."""

    replica: int
    start_s: float
    step_s: float  # one step
    steps: int
    prompt_computed: int
    waiting: int
    decodes: list[ReqState]  # a fast-forwarded run's requests (one token per step each)
    output_delay_s: float


@dataclass(slots=True)
class TransferRecord:
    """One KV read between replicas (disaggregation)."""

    kind: str  # "kv": prefill -> decode; "send_back": decode -> prefill (the next turn)
    src: int
    dst: int
    req_id: int
    asked_s: float  # the reader admitted the request
    start_s: float  # both NICs free
    landed_s: float
    bytes_per_gpu: float
    tokens: int
    descriptors: int = 0  # NIXL descriptors one reader rank posted


@dataclass(slots=True)
class PinRecord:
    """Blocks a finished decode-side request kept for send-back, and how the pin ended."""

    replica: int
    req_id: int
    start_s: float
    end_s: float
    blocks: int
    tokens: int
    outcome: str  # "pulled", "declined" (the next turn recomputed), "expired", "replaced"


@dataclass
class Recorder:
    """Append-only rows; no arithmetic in the engine loop."""

    steps: list[StepRecord] = field(default_factory=list)
    requests: list[ReqState] = field(default_factory=list)  # finished or rejected
    transfers: list[TransferRecord] = field(default_factory=list)
    pins: list[PinRecord] = field(default_factory=list)
    hits: list[HitRecord] = field(default_factory=list)
    # set by the engine when the run stops
    end_s: float | None = None  # simulated time the run stopped
    workload_ended: bool = False  # no request outstanding and none to come
    speculative: bool = False  # a speculative verify's tokens reach the client together
    unfinished: list[ReqState] = field(default_factory=list)  # client requests in the system
    waiting_at_end: int = 0  # of those, in a waiting queue (never admitted, or preempted)
    open_steps: list[OpenStep] = field(default_factory=list)  # one per replica still busy
    # the API servers' busy spans, one per request with prompt work to do, flat (start, end,
    # start, end, ...): 16 bytes a request where a list of tuples took ~110
    frontend_busy: array[float] = field(default_factory=lambda: array("d"))
    frontends: int = 1

    def frontend_spans(self) -> list[tuple[float, float]]:
        """``frontend_busy`` as (start, end) pairs."""
        b = self.frontend_busy
        return [(b[i], b[i + 1]) for i in range(0, len(b), 2)]

    def on_step(self, row: StepRecord) -> None:
        self.steps.append(row)

    def on_done(self, req: ReqState) -> None:
        self.requests.append(req)

    def on_transfer(self, row: TransferRecord) -> None:
        self.transfers.append(row)

    def on_pin(self, row: PinRecord) -> None:
        self.pins.append(row)

    def on_hit(self, row: HitRecord) -> None:
        self.hits.append(row)


@dataclass(frozen=True, slots=True)
class Pools:
    """A disaggregated deployment: replicas ``0 .. prefill_replicas-1`` prefill, the rest
    decode, ``gpus_per_replica`` GPUs and ``num_blocks`` KV blocks each."""

    prefill_replicas: int
    decode_replicas: int
    gpus_per_replica: int
    num_blocks: int
    # the prefill pool's, when the pools have their own parallelism (None: as the decode's)
    prefill_gpus_per_replica: int | None = None
    prefill_num_blocks: int | None = None


class Summary(Frozen):
    """Headline figures over the measured window (module docstring: exact definitions)."""

    window_s: float  # window_end_s - window_start_s
    window_start_s: float  # the warm-up
    window_end_s: float
    window_end_reason: Literal["duration", "workload_ended"]
    num_gpus: int
    requests_finished: int  # arrived after the warm-up, finished inside the window
    requests_in_flight_at_end: int  # admitted, not finished when the run stopped
    requests_waiting_at_end: int  # in a waiting queue when the run stopped
    requests_rejected: int
    throughput_tok_per_s_per_gpu: float
    output_tok_per_s_per_gpu: float
    prompt_tokens_in_window: float  # served from cache or computed (pro rata of steps)
    output_tokens_in_window: float
    saturated: bool
    saturation_reason: str | None  # "queue grows: ..." or "queue never drains: ..."
    interactivity_tok_per_s_p50: float | None
    interactivity_tok_per_s_p90: float | None
    interactivity_tok_per_s_p99: float | None
    ttft_s_p50: float | None
    ttft_s_p90: float | None
    ttft_s_p99: float | None
    e2e_s_p50: float | None
    prefix_hit_rate: float
    # the same in each quarter of the window (None: no prompt tokens there): a spread over
    # UNSTEADY_HIT_SPREAD means the cache changed state inside the window (``unsteady``)
    prefix_hit_rate_quarters: tuple[float | None, ...] = ()
    gpu_hit_rate: float
    cpu_hit_rate: float  # the host tier's (store loads excluded)
    recomputed_prompt_tokens: int
    preemptions: int
    steps: int
    mean_step_s: float | None
    # prompt tokens loaded from the remote KV store (kv_store, Mooncake-style) / prompt
    store_hit_rate: float = 0.0
    # disaggregated runs only (None, or 0, when aggregated)
    remote_hit_rate: float = 0.0  # prompt tokens pulled back from the decode side / prompt
    prefill_gpus: int | None = None
    decode_gpus: int | None = None
    # the window's prompt tokens (both pools) / window / prefill GPU; output / decode GPU
    prefill_input_tok_per_s_per_gpu: float | None = None
    decode_output_tok_per_s_per_gpu: float | None = None
    prefill_kv_usage_mean: float | None = None  # used / pool blocks, step-time weighted
    decode_kv_usage_mean: float | None = None
    decode_kv_usage_peak: float | None = None
    decode_kv_pinned_share_mean: float | None = None  # send-back pinned / pool blocks
    decode_kv_pinned_share_peak: float | None = None
    decode_preemptions: int | None = None
    kv_transfer_s_p50: float | None = None  # prefill -> decode read: admission to landed
    kv_transfer_s_p90: float | None = None
    kv_transfer_bytes_per_gpu_mean: float | None = None
    send_back_pulls: int = 0  # turns that pulled their context back from the decode side
    send_back_recomputes: int = 0  # turns under the threshold: recomputed, pin freed
    send_back_expired: int = 0  # pins the TTL freed before any turn read them
    send_back_pull_s_p50: float | None = None


def _pct(a: NDArray[np.float64], q: float) -> float | None:
    return float(np.percentile(a, q)) if a.size else None


def window_end(
    rec: Recorder, warmup_s: float, end_s: float | None
) -> tuple[float, Literal["duration", "workload_ended"]]:
    """Where the measured window ends, and why: ``end_s``, or the last token emitted when no
    end is given or the workload ran out before ``end_s``."""
    last = max(
        [r.finish_s for r in rec.requests if r.status is Status.FINISHED and r.finish_s is not None]
        + [r.last_token_s for r in rec.unfinished if r.last_token_s is not None],
        default=None,
    )
    if end_s is None or (rec.workload_ended and (last is None or last < end_s)):
        return max(last if last is not None else warmup_s, warmup_s), "workload_ended"
    return max(end_s, warmup_s), "duration"


@dataclass
class _Window:
    """Tokens processed in [w0, w1] and the inter-token gaps that end there."""

    gpu: float = 0.0  # prompt tokens served from the GPU cache
    cpu: float = 0.0
    remote: float = 0.0
    computed: float = 0.0  # prompt tokens computed
    output: float = 0.0
    itl: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    itl_weights: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))

    @property
    def prompt(self) -> float:
        return self.gpu + self.cpu + self.remote + self.computed


def _overlap_share(
    start: NDArray[np.float64], dur: NDArray[np.float64], w0: float, w1: float
) -> NDArray[np.float64]:
    """Share of each interval [start, start + dur] inside [w0, w1] (1 when inside)."""
    stop = start + dur
    inside = (start >= w0) & (stop <= w1)
    with np.errstate(divide="ignore", invalid="ignore"):
        part = np.clip(np.minimum(stop, w1) - np.maximum(start, w0), 0.0, None) / dur
    point = (dur <= 0) & (start >= w0) & (start <= w1)
    return np.where(inside | point, 1.0, np.where(dur > 0, part, 0.0))


def _gaps_in_window(
    gaps: NDArray[np.float64],
    counts: NDArray[np.float64],
    ends: NDArray[np.float64],
    w0: float,
    w1: float,
    bunched: bool,
) -> NDArray[np.float64]:
    """How many gaps of each run end inside [w0, w1]. A run's gaps end at ``end - j x gap``
    (j = 0 .. count-1: a fast-forwarded run), or all at ``end`` (``bunched``: the tokens of a
    speculative verify reach the client together; runs of gap 0 likewise)."""
    at_end = np.where((ends >= w0) & (ends <= w1), counts, 0.0)
    if bunched:
        return at_end
    first = ends - (counts - 1) * gaps
    inside = (first >= w0) & (ends <= w1)
    eps = 1e-9  # float noise on a boundary that falls on a token time
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.clip(np.ceil((ends - w1) / gaps - eps), 0.0, None)
        hi = np.minimum(np.floor((ends - w0) / gaps + eps), counts - 1)
    part = np.clip(hi - lo + 1, 0.0, None)
    return np.where(inside, counts, np.where(gaps > 0, part, at_end))


@dataclass
class _PromptLog:
    """A run's prompt tokens as arrays, made once: the admissions' hits by tier and time, and
    the steps' first-time computed prompt tokens; ``within`` cuts any window from them."""

    hit_t: NDArray[np.float64]
    tiers: NDArray[np.int64]  # gpu, cpu, remote tokens per admission
    steps: NDArray[np.float64]  # start, duration, prompt tokens computed per step
    open_steps: list[OpenStep]  # still running when the run stopped (at ``end_s``)
    end_s: float | None

    @classmethod
    def of(cls, rec: Recorder) -> _PromptLog:
        rows = [(s.start_s, s.step_s, s.prompt_computed) for s in rec.steps if s.prompt_computed]
        return cls(
            np.array([h.t_s for h in rec.hits]),
            np.array([(h.gpu_tokens, h.cpu_tokens, h.remote_tokens) for h in rec.hits]),
            np.array(rows, dtype=np.float64),
            [o for o in rec.open_steps if o.prompt_computed] if rec.end_s is not None else [],
            rec.end_s,
        )

    def within(self, w0: float, w1: float) -> _Window:
        """The prompt tokens of [w0, w1]: served from each tier (hits at admission) and
        computed (each step's prompt tokens pro rata of its time in the window)."""
        out = _Window()
        if w1 <= w0:
            return out
        if self.hit_t.size:
            sel = (self.hit_t >= w0) & (self.hit_t <= w1)
            out.gpu, out.cpu, out.remote = (float(x) for x in self.tiers[sel].sum(axis=0))
        if self.steps.size:
            a = self.steps
            out.computed = float((a[:, 2] * _overlap_share(a[:, 0], a[:, 1], w0, w1)).sum())
        # steps still running when the run stopped: pro rata of their time before the stop
        for o in self.open_steps:
            assert self.end_s is not None
            share = _overlap_share(
                np.array([o.start_s]), np.array([o.step_s * o.steps]), w0, min(w1, self.end_s)
            )
            out.computed += o.prompt_computed * float(share[0])
        return out


def hit_rate_quarters(
    rec: Recorder, w0: float, w1: float, log: _PromptLog | None = None
) -> tuple[float | None, ...]:
    """The prefix-hit rate (``Summary.prefix_hit_rate``'s definition) in each quarter of the
    window [w0, w1]; None for a quarter without prompt tokens. A cache that switches state
    inside the window (docs/kv-pressure.md) shows here. ``log``: ``rec``'s, if made already."""
    log = log or _PromptLog.of(rec)
    edges = np.linspace(w0, w1, 5)
    out: list[float | None] = []
    for a, b in itertools.pairwise(edges.tolist()):
        part = log.within(a, b)
        out.append((part.gpu + part.cpu + part.remote) / part.prompt if part.prompt else None)
    return tuple(out)


def quarters_text(quarters: Sequence[float | None]) -> str:
    """``94 % / 93 % / - / 0 %``: the quarters' hit rates as ``plan run`` and the dashboard
    show them."""
    return " / ".join("-" if q is None else f"{100 * q:.0f} %" for q in quarters)


def unsteady(quarters: Sequence[float | None]) -> bool:
    """Do the quarters' hit rates differ by more than ``UNSTEADY_HIT_SPREAD``?"""
    known = [q for q in quarters if q is not None]
    return len(known) > 1 and max(known) - min(known) > UNSTEADY_HIT_SPREAD


def _window_tokens(
    rec: Recorder, clients: list[ReqState], w0: float, w1: float, log: _PromptLog
) -> _Window:
    out = log.within(w0, w1)
    if w1 <= w0:
        return out
    stop = rec.end_s if rec.end_s is not None else w1
    open_steps = rec.open_steps if rec.end_s is not None else []
    # output tokens: each request's first emission, then its runs of inter-token gaps
    first = sum(
        1
        for r in clients
        if r.first_token_s is not None and r.generated > 0 and w0 <= r.first_token_s <= w1
    )
    chain = itertools.chain.from_iterable
    runs = np.fromiter(chain(r.itl_runs for r in clients), dtype=np.float64)  # gap, n, ...
    run_ends = np.fromiter(chain(r.itl_end_s for r in clients), dtype=np.float64)
    gaps: list[float] = []  # the open runs'
    counts: list[int] = []
    ends: list[float] = []
    for o in open_steps:  # a fast-forwarded run cut by the stop: its tokens that got out
        n = min(o.steps, math.floor((stop - o.start_s - o.output_delay_s) / o.step_s + 1e-9))
        for r in o.decodes if n >= 1 else ():
            t1 = o.start_s + o.step_s + o.output_delay_s
            gaps.append(t1 - (r.last_token_s if r.last_token_s is not None else t1 - o.step_s))
            counts.append(1)
            ends.append(t1)
            if n >= 2:
                gaps.append(o.step_s)
                counts.append(n - 1)
                ends.append(o.start_s + n * o.step_s + o.output_delay_s)
    g = np.concatenate([runs[0::2], gaps])
    n_in = _gaps_in_window(
        g, np.concatenate([runs[1::2], counts]), np.concatenate([run_ends, ends]), w0, w1,
        rec.speculative,
    )  # fmt: skip
    keep = n_in > 0
    out.itl, out.itl_weights = g[keep], n_in[keep]
    out.output = float(first + n_in.sum())
    return out


def frontend_saturation(rec: Recorder, w0: float, w1: float) -> str | None:
    """The API servers busy with prompt work through at least 95 % of [w0, w1], all of
    them together: requests then queue before the engine, where the waiting queue does not
    see them."""
    if not rec.frontend_busy:
        return None
    spans = np.frombuffer(rec.frontend_busy, dtype=np.float64).reshape(-1, 2)
    busy = float((np.minimum(spans[:, 1], w1) - np.maximum(spans[:, 0], w0)).clip(0.0).sum())
    share = busy / (rec.frontends * (w1 - w0))
    if share < 0.95:
        return None
    return (
        f"API server busy: tokenizing prompts through {share:.0%} of the window"
        f" on {rec.frontends} API server(s) (roofline.frontend_s_per_prompt_token)"
    )


def saturation(rec: Recorder, w0: float, w1: float) -> tuple[bool, str | None]:
    """Does the waiting queue grow through [w0, w1], or never drain (module docstring)?"""
    if w1 <= w0:
        return False, None
    frontend = frontend_saturation(rec, w0, w1)
    if frontend is not None:
        return True, frontend
    # the queue's changes: (time, change of one replica's waiting count); steps are recorded
    # in time order per replica, and a replica's value holds until its next step
    last: dict[int, int] = {}
    changes: list[tuple[float, int]] = []
    rows: Iterable[StepRecord | OpenStep] = itertools.chain(rec.steps, rec.open_steps)
    for row in rows:
        before = last.get(row.replica, 0)
        if row.waiting != before:
            changes.append((row.start_s, row.waiting - before))
            last[row.replica] = row.waiting
    if not changes:
        return False, None
    a = np.array(changes, dtype=np.float64)
    order = np.argsort(a[:, 0], kind="stable")
    times, level = a[order, 0], np.cumsum(a[order, 1])  # all replicas' waiting from t on

    def at(x: float, side: Literal["left", "right"] = "right") -> float:
        i = int(np.searchsorted(times, x, side=side)) - 1
        return float(level[i]) if i >= 0 else 0.0

    def profile(lo: float, hi: float) -> tuple[float, float]:
        """Time-average and share of time with someone waiting over [lo, hi]."""
        inner = (times > lo) & (times < hi)
        edges = np.concatenate(([lo], times[inner], [hi]))
        vals = np.concatenate(([at(lo)], level[inner]))
        dt = np.diff(edges)
        span = hi - lo
        return float((vals * dt).sum() / span), float(dt[vals > 0].sum() / span)

    mid = (w0 + w1) / 2
    start, end = at(w0), at(w1, "left")
    first_half, _ = profile(w0, mid)
    second_half, _ = profile(mid, w1)
    mean, busy = profile(w0, w1)
    if end - start >= max(2.0, 0.1 * start) and second_half - first_half >= 1.0:
        return True, (
            f"queue grows: {start:,.0f} -> {end:,.0f} waiting"
            f" (half means {first_half:,.1f} -> {second_half:,.1f})"
        )
    if busy >= 0.95:
        return True, (
            f"queue never drains: requests waiting through {busy:.0%} of the window"
            f" (mean {mean:,.1f})"
        )
    return False, None


def summarize(
    rec: Recorder,
    num_gpus: int,
    warmup_s: float = 0.0,
    end_s: float | None = None,
    pools: Pools | None = None,
) -> Summary:
    """The summary over the window [warmup_s, end] (``window_end``; module docstring)."""
    done = [r for r in rec.requests if r.status is Status.FINISHED and r.finish_s is not None]
    rejected = sum(1 for r in rec.requests if r.status is Status.REJECTED)
    w0 = warmup_s
    w1, reason = window_end(rec, w0, end_s)
    window = max(w1 - w0, 1e-9)
    measured = [r for r in done if r.arrival_s >= w0 and (r.finish_s or 0.0) <= w1]
    clients = done + rec.unfinished
    log = _PromptLog.of(rec)
    tok = _window_tokens(rec, clients, w0, w1, log)
    prompt, output = tok.prompt, tok.output
    ttft = np.array(
        [
            r.first_token_s - r.arrival_s
            for r in clients
            if r.first_token_s is not None and r.arrival_s >= w0 and w0 <= r.first_token_s <= w1
        ]
    )
    e2e = np.array([r.finish_s - r.arrival_s for r in measured if r.finish_s is not None])

    order = np.argsort(tok.itl)
    itl, cum = tok.itl[order], np.cumsum(tok.itl_weights[order])

    def inter(q: float) -> float | None:
        if itl.size == 0:
            return None
        gap = float(itl[np.searchsorted(cum, q / 100.0 * cum[-1])])  # weighted percentile
        return 1.0 / gap if gap > 0 else None

    step_time = sum(s.step_s for s in rec.steps)
    step_count = sum(s.steps for s in rec.steps)
    saturated, why = saturation(rec, w0, w1)
    extra = _pool_figures(rec, pools, done, tok, w0, w1, window) if pools is not None else {}
    # the store's share of the CPU-tier hits, recorded at the same admissions (HitRecord)
    store = sum(
        r.store_hit_tokens
        for r in clients
        if r.store_hit_s is not None and w0 <= r.store_hit_s <= w1 and w1 > w0
    )
    return Summary(
        window_s=window,
        window_start_s=w0,
        window_end_s=w1,
        window_end_reason=reason,
        num_gpus=num_gpus,
        requests_finished=len(measured),
        requests_in_flight_at_end=len(rec.unfinished) - rec.waiting_at_end,
        requests_waiting_at_end=rec.waiting_at_end,
        requests_rejected=rejected,
        throughput_tok_per_s_per_gpu=(prompt + output) / window / num_gpus,
        output_tok_per_s_per_gpu=output / window / num_gpus,
        prompt_tokens_in_window=prompt,
        output_tokens_in_window=output,
        saturated=saturated,
        saturation_reason=why,
        interactivity_tok_per_s_p50=inter(50),
        # P90 interactivity = 1 / P90 ITL (the slow tail of inter-token gaps)
        interactivity_tok_per_s_p90=inter(90),
        interactivity_tok_per_s_p99=inter(99),
        ttft_s_p50=_pct(ttft, 50),
        ttft_s_p90=_pct(ttft, 90),
        ttft_s_p99=_pct(ttft, 99),
        e2e_s_p50=_pct(e2e, 50),
        prefix_hit_rate=(tok.gpu + tok.cpu + tok.remote) / prompt if prompt else 0.0,
        prefix_hit_rate_quarters=hit_rate_quarters(rec, w0, w1, log),
        gpu_hit_rate=tok.gpu / prompt if prompt else 0.0,
        cpu_hit_rate=(tok.cpu - store) / prompt if prompt else 0.0,
        store_hit_rate=store / prompt if prompt else 0.0,
        recomputed_prompt_tokens=sum(r.recomputed_tokens for r in measured),
        preemptions=sum(r.preemptions + r.prefill_preemptions for r in done),
        steps=step_count,
        mean_step_s=step_time / step_count if step_count else None,
        **extra,
    )


def _pool_figures(
    rec: Recorder,
    pools: Pools,
    done: list[ReqState],
    tok: _Window,
    w0: float,
    w1: float,
    window_s: float,
) -> dict[str, Any]:
    """Per-pool throughput over the window (prompt tokens processed per prefill GPU, output
    tokens per decode GPU), KV use of each pool (step-time weighted over the window), and the
    prefill -> decode reads and send-back decisions that happened inside it."""
    p_per = pools.prefill_gpus_per_replica or pools.gpus_per_replica
    p_gpus = pools.prefill_replicas * p_per
    d_gpus = pools.decode_replicas * pools.gpus_per_replica
    d_blocks = max(pools.num_blocks, 1)
    p_blocks = max(pools.prefill_num_blocks or pools.num_blocks, 1)

    def usage(decode: bool) -> tuple[float | None, float | None, float | None, float | None]:
        rows = [
            s
            for s in rec.steps
            if (s.replica >= pools.prefill_replicas) == decode and w0 <= s.start_s < w1
        ]
        weight = sum(s.step_s for s in rows)
        if not rows or weight <= 0:
            return None, None, None, None
        blocks = d_blocks if decode else p_blocks
        used = sum(s.kv_blocks_used * s.step_s for s in rows) / weight / blocks
        held = sum(min(s.kv_blocks_held, s.kv_blocks_used) * s.step_s for s in rows) / weight
        peak_used = max(s.kv_blocks_used for s in rows) / blocks
        peak_held = max(min(s.kv_blocks_held, s.kv_blocks_used) for s in rows) / blocks
        return used, peak_used, held / blocks, peak_held

    p_used, _, _, _ = usage(False)
    d_used, d_peak, d_pinned, d_pinned_peak = usage(True)
    reads = [t for t in rec.transfers if t.kind == "kv" and w0 <= t.landed_s <= w1]
    pulls = [t for t in rec.transfers if t.kind == "send_back" and w0 <= t.asked_s <= w1]
    read_s = np.array([t.landed_s - t.asked_s for t in reads])
    pull_s = np.array([t.landed_s - t.asked_s for t in pulls])

    def pins(outcome: str) -> int:
        return sum(1 for p in rec.pins if p.outcome == outcome and w0 <= p.end_s <= w1)

    prompt = tok.prompt
    return {
        "remote_hit_rate": tok.remote / prompt if prompt else 0.0,
        "prefill_gpus": p_gpus,
        "decode_gpus": d_gpus,
        "prefill_input_tok_per_s_per_gpu": prompt / window_s / p_gpus,
        "decode_output_tok_per_s_per_gpu": tok.output / window_s / d_gpus,
        "prefill_kv_usage_mean": p_used,
        "decode_kv_usage_mean": d_used,
        "decode_kv_usage_peak": d_peak,
        "decode_kv_pinned_share_mean": d_pinned,
        "decode_kv_pinned_share_peak": d_pinned_peak,
        "decode_preemptions": sum(r.preemptions for r in done),
        "kv_transfer_s_p50": _pct(read_s, 50),
        "kv_transfer_s_p90": _pct(read_s, 90),
        "kv_transfer_bytes_per_gpu_mean": (
            float(np.mean([t.bytes_per_gpu for t in reads])) if reads else None
        ),
        "send_back_pulls": len(pulls),
        "send_back_recomputes": pins("declined"),
        "send_back_expired": pins("expired"),
        "send_back_pull_s_p50": _pct(pull_s, 50),
    }
