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
  by more than ``window.UNSTEADY_HIT_SPREAD`` mean the window holds a change of the cache's state.
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

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from simulator.records import Pools, Recorder
from simulator.specs.frozen import Frozen
from simulator.states import ReqState, Status
from simulator.window import (
    PromptLog,
    Window,
    hit_rate_quarters,
    pct,
    saturation,
    window_end,
    window_tokens,
)


def requests_seen(summary: Mapping[str, Any]) -> int:
    """Every request a run saw (a Summary's fields, dumped): refused, finished (inside the
    window or not) or not yet."""
    return int(summary.get("requests_seen", 0))


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
    requests_rejected: int  # refused (past max_model_len) over the whole run
    # every request the run saw: finished (in the window or not), refused, or unfinished at
    # the end (the denominator of the refused share; requests_finished counts the window's)
    requests_seen: int
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
    log = PromptLog.of(rec)
    tok = window_tokens(rec, clients, w0, w1, log)
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
    store = tok.store  # of the CPU-tier hits, recorded with them (HitRecord)
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
        requests_seen=len(rec.requests) + len(rec.unfinished),
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
        ttft_s_p50=pct(ttft, 50),
        ttft_s_p90=pct(ttft, 90),
        ttft_s_p99=pct(ttft, 99),
        e2e_s_p50=pct(e2e, 50),
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
    tok: Window,
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
        "kv_transfer_s_p50": pct(read_s, 50),
        "kv_transfer_s_p90": pct(read_s, 90),
        "kv_transfer_bytes_per_gpu_mean": (
            float(np.mean([t.bytes_per_gpu for t in reads])) if reads else None
        ),
        "send_back_pulls": len(pulls),
        "send_back_recomputes": pins("declined"),
        "send_back_expired": pins("expired"),
        "send_back_pull_s_p50": pct(pull_s, 50),
    }
