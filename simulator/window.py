"""The measured window's parts: where it ends, the tokens and inter-token gaps inside it,
the prefix-hit rate by quarter, and whether the queue saturated (definitions:
``simulator.metrics``' docstring)."""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from simulator.records import OpenStep, Recorder, StepRecord
from simulator.states import ReqState, Status

# quarters of the window whose prefix-hit rates differ by more than this (a fraction) mark a
# run as not steady: an assumption (a cache switching between ~90 % and ~0 % hits,
# docs/kv-pressure.md, is far above it; a steady agentic run varies by a few points)
UNSTEADY_HIT_SPREAD = 0.15


def pct(a: NDArray[np.float64], q: float) -> float | None:
    return float(np.percentile(a, q)) if a.size else None


def last_token_s(rec: Recorder) -> float | None:
    """When the run emitted its last token (None: no token)."""
    return max(
        [r.finish_s for r in rec.requests if r.status is Status.FINISHED and r.finish_s is not None]
        + [r.last_token_s for r in rec.unfinished if r.last_token_s is not None],
        default=None,
    )


def window_end(
    rec: Recorder, warmup_s: float, end_s: float | None
) -> tuple[float, Literal["duration", "workload_ended"]]:
    """Where the measured window ends, and why: ``end_s``, or the last token emitted when no
    end is given or the workload ran out before ``end_s``."""
    last = last_token_s(rec)
    if end_s is None or (rec.workload_ended and (last is None or last < end_s)):
        return max(last if last is not None else warmup_s, warmup_s), "workload_ended"
    return max(end_s, warmup_s), "duration"


@dataclass
class Window:
    """Tokens processed in [w0, w1] and the inter-token gaps that end there."""

    gpu: float = 0.0  # prompt tokens served from the GPU cache
    cpu: float = 0.0
    remote: float = 0.0
    store: float = 0.0  # of ``cpu``, the tokens loaded from the remote KV store
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
class PromptLog:
    """A run's prompt tokens as arrays, made once: the admissions' hits by tier and time, and
    the steps' first-time computed prompt tokens; ``within`` cuts any window from them."""

    hit_t: NDArray[np.float64]
    tiers: NDArray[np.int64]  # gpu, cpu, remote, store (part of cpu) tokens per admission
    steps: NDArray[np.float64]  # start, duration, prompt tokens computed per step
    open_steps: list[OpenStep]  # still running when the run stopped (at ``end_s``)
    end_s: float | None

    @classmethod
    def of(cls, rec: Recorder) -> PromptLog:
        rows = [(s.start_s, s.step_s, s.prompt_computed) for s in rec.steps if s.prompt_computed]
        return cls(
            np.array([h.t_s for h in rec.hits]),
            np.array(
                [(h.gpu_tokens, h.cpu_tokens, h.remote_tokens, h.store_tokens) for h in rec.hits]
            ),
            np.array(rows, dtype=np.float64),
            [o for o in rec.open_steps if o.prompt_computed] if rec.end_s is not None else [],
            rec.end_s,
        )

    def within(self, w0: float, w1: float) -> Window:
        """The prompt tokens of [w0, w1]: served from each tier (hits at admission) and
        computed (each step's prompt tokens pro rata of its time in the window)."""
        out = Window()
        if w1 <= w0:
            return out
        if self.hit_t.size:
            sel = (self.hit_t >= w0) & (self.hit_t <= w1)
            out.gpu, out.cpu, out.remote, out.store = (
                float(x) for x in self.tiers[sel].sum(axis=0)
            )
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
    rec: Recorder, w0: float, w1: float, log: PromptLog | None = None
) -> tuple[float | None, ...]:
    """The prefix-hit rate (``Summary.prefix_hit_rate``'s definition) in each quarter of the
    window [w0, w1]; None for a quarter without prompt tokens. A cache that switches state
    inside the window (docs/kv-pressure.md) shows here. ``log``: ``rec``'s, if made already."""
    log = log or PromptLog.of(rec)
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


def _joined(parts: list[array[float]]) -> NDArray[np.float64]:
    """The float arrays end to end, read through their buffers (no Python float per item)."""
    if not parts:
        return np.zeros(0)
    return np.concatenate([np.frombuffer(p, dtype=np.float64) for p in parts])


def window_tokens(
    rec: Recorder, clients: list[ReqState], w0: float, w1: float, log: PromptLog
) -> Window:
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
    runs = _joined([r.itl_runs for r in clients])  # gap, n, gap, n, ...
    run_ends = _joined([r.itl_end_s for r in clients])
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
