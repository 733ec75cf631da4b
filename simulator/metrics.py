"""Recorder rows -> tables -> the summary a capacity planner reports (DESIGN section 2).

- ITL: time between consecutive output tokens of one request; TPOT = (E2E - TTFT)/(out - 1).
- Interactivity (tok/s/user) = 1 / ITL at the stated percentile, TTFT excluded: the P90
  interactivity is 1 / (P90 ITL over all output tokens of the window).
- Total tokens = input tokens (cached and computed) + output tokens. Throughput per GPU =
  total tokens of the requests finished in the measured window / window / GPUs; output-only
  throughput likewise.
- Prefix-cache hit rate = prompt tokens served from cache (GPU or CPU tier) / prompt tokens.
The measured window starts after ``warmup_s`` and ends at the scenario's ``duration_s`` (or the
last finish when the workload runs out).

Disaggregated runs (``Pools`` given) keep these meanings over all GPUs of both pools and add
per-pool figures, as InferenceX reports disaggregated runs: input tokens per prefill GPU, output
tokens per decode GPU. Their hit rates are the prefill side's (what it did not compute: its
own cache, its CPU tier, or blocks pulled back from the decode side, ``remote_hit_rate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.scheduler import ReqState, Status
from simulator.specs.frozen import Frozen


@dataclass(slots=True)
class StepRecord:
    replica: int
    start_s: float
    step_s: float
    steps: int  # > 1 when identical decode steps were fast-forwarded together
    decodes: int
    prefill_tokens: int
    kv_blocks_used: int
    breakdown_s: dict[str, float]
    kv_blocks_held: int = 0  # of the used: blocks finished requests keep (disaggregation)


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

    def on_step(self, row: StepRecord) -> None:
        self.steps.append(row)

    def on_done(self, req: ReqState) -> None:
        self.requests.append(req)

    def on_transfer(self, row: TransferRecord) -> None:
        self.transfers.append(row)

    def on_pin(self, row: PinRecord) -> None:
        self.pins.append(row)


@dataclass(frozen=True, slots=True)
class Pools:
    """A disaggregated deployment: replicas ``0 .. prefill_replicas-1`` prefill, the rest
    decode, ``gpus_per_replica`` GPUs and ``num_blocks`` KV blocks each."""

    prefill_replicas: int
    decode_replicas: int
    gpus_per_replica: int
    num_blocks: int


class Summary(Frozen):
    """Headline figures over the measured window."""

    window_s: float
    num_gpus: int
    requests_finished: int
    requests_rejected: int
    throughput_tok_per_s_per_gpu: float
    output_tok_per_s_per_gpu: float
    interactivity_tok_per_s_p50: float | None
    interactivity_tok_per_s_p90: float | None
    interactivity_tok_per_s_p99: float | None
    ttft_s_p50: float | None
    ttft_s_p90: float | None
    ttft_s_p99: float | None
    e2e_s_p50: float | None
    prefix_hit_rate: float
    gpu_hit_rate: float
    cpu_hit_rate: float
    recomputed_prompt_tokens: int
    preemptions: int
    steps: int
    mean_step_s: float | None
    # disaggregated runs only (None, or 0, when aggregated)
    remote_hit_rate: float = 0.0  # prompt tokens pulled back from the decode side / prompt
    prefill_gpus: int | None = None
    decode_gpus: int | None = None
    prefill_input_tok_per_s_per_gpu: float | None = None  # prompt tokens / window / prefill GPU
    decode_output_tok_per_s_per_gpu: float | None = None  # output tokens / window / decode GPU
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


def _weighted_percentile(
    values: NDArray[np.float64], weights: NDArray[np.float64], q: float
) -> float:
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cum = np.cumsum(w)
    return float(v[np.searchsorted(cum, q / 100.0 * cum[-1])])


def summarize(
    rec: Recorder,
    num_gpus: int,
    warmup_s: float = 0.0,
    end_s: float | None = None,
    pools: Pools | None = None,
) -> Summary:
    """The summary over [warmup_s, end_s] (end: the last finish when not given): requests
    that arrived after the warm-up and finished inside the window."""
    done = [r for r in rec.requests if r.status is Status.FINISHED and r.finish_s is not None]
    rejected = sum(1 for r in rec.requests if r.status is Status.REJECTED)
    measured = [
        r
        for r in done
        if r.arrival_s >= warmup_s and (end_s is None or (r.finish_s or 0.0) <= end_s)
    ]
    end = (
        end_s if end_s is not None else max((r.finish_s or 0.0 for r in measured), default=warmup_s)
    )
    window = max(end - warmup_s, 1e-9)
    prompt = float(sum(r.prompt_tokens for r in measured))
    output = float(sum(r.generated for r in measured))
    gpu_hit = float(sum(r.gpu_hit_tokens for r in measured))
    cpu_hit = float(sum(r.cpu_hit_tokens for r in measured))
    remote_hit = float(sum(r.remote_hit_tokens for r in measured)) if pools else 0.0

    gaps = [g for r in measured for g, _ in r.itl_runs]
    counts = [c for r in measured for _, c in r.itl_runs]
    itl = np.array(gaps)
    wts = np.array(counts, dtype=np.float64)
    ttft = np.array(
        [r.first_token_s - r.arrival_s for r in measured if r.first_token_s is not None]
    )
    e2e = np.array([r.finish_s - r.arrival_s for r in measured if r.finish_s is not None])

    def inter(q: float) -> float | None:
        if itl.size == 0:
            return None
        gap = _weighted_percentile(itl, wts, q)
        return 1.0 / gap if gap > 0 else None

    def pct(a: NDArray[np.float64], q: float) -> float | None:
        return float(np.percentile(a, q)) if a.size else None

    step_time = sum(s.step_s for s in rec.steps)
    step_count = sum(s.steps for s in rec.steps)
    extra = (
        _pool_figures(rec, pools, done, measured, warmup_s, end, window, prompt, output)
        if pools is not None
        else {}
    )
    return Summary(
        window_s=window,
        num_gpus=num_gpus,
        requests_finished=len(measured),
        requests_rejected=rejected,
        throughput_tok_per_s_per_gpu=(prompt + output) / window / num_gpus,
        output_tok_per_s_per_gpu=output / window / num_gpus,
        interactivity_tok_per_s_p50=inter(50),
        # P90 interactivity = 1 / P90 ITL (the slow tail of inter-token gaps)
        interactivity_tok_per_s_p90=inter(90),
        interactivity_tok_per_s_p99=inter(99),
        ttft_s_p50=pct(ttft, 50),
        ttft_s_p90=pct(ttft, 90),
        ttft_s_p99=pct(ttft, 99),
        e2e_s_p50=pct(e2e, 50),
        prefix_hit_rate=(gpu_hit + cpu_hit + remote_hit) / prompt if prompt else 0.0,
        gpu_hit_rate=gpu_hit / prompt if prompt else 0.0,
        cpu_hit_rate=cpu_hit / prompt if prompt else 0.0,
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
    measured: list[ReqState],
    warmup_s: float,
    end_s: float,
    window_s: float,
    prompt: float,
    output: float,
) -> dict[str, Any]:
    """Per-pool throughput, KV use of each pool (step-time weighted over the window), the
    prefill -> decode reads and the send-back pins of the measured requests."""
    p_gpus = pools.prefill_replicas * pools.gpus_per_replica
    d_gpus = pools.decode_replicas * pools.gpus_per_replica
    blocks = max(pools.num_blocks, 1)

    def usage(decode: bool) -> tuple[float | None, float | None, float | None, float | None]:
        rows = [
            s
            for s in rec.steps
            if (s.replica >= pools.prefill_replicas) == decode and warmup_s <= s.start_s < end_s
        ]
        weight = sum(s.step_s for s in rows)
        if not rows or weight <= 0:
            return None, None, None, None
        used = sum(s.kv_blocks_used * s.step_s for s in rows) / weight / blocks
        held = sum(min(s.kv_blocks_held, s.kv_blocks_used) * s.step_s for s in rows) / weight
        peak_used = max(s.kv_blocks_used for s in rows) / blocks
        peak_held = max(min(s.kv_blocks_held, s.kv_blocks_used) for s in rows) / blocks
        return used, peak_used, held / blocks, peak_held

    p_used, _, _, _ = usage(False)
    d_used, d_peak, d_pinned, d_pinned_peak = usage(True)
    ids = {r.req_id for r in measured}
    reads = [t for t in rec.transfers if t.kind == "kv" and t.req_id in ids]
    pulls = [t for t in rec.transfers if t.kind == "send_back" and t.req_id in ids]
    read_s = np.array([t.landed_s - t.asked_s for t in reads])
    pull_s = np.array([t.landed_s - t.asked_s for t in pulls])
    expired = sum(1 for p in rec.pins if p.outcome == "expired" and warmup_s <= p.end_s <= end_s)

    def pct(a: NDArray[np.float64], q: float) -> float | None:
        return float(np.percentile(a, q)) if a.size else None

    return {
        "remote_hit_rate": sum(r.remote_hit_tokens for r in measured) / prompt if prompt else 0.0,
        "prefill_gpus": p_gpus,
        "decode_gpus": d_gpus,
        "prefill_input_tok_per_s_per_gpu": prompt / window_s / p_gpus,
        "decode_output_tok_per_s_per_gpu": output / window_s / d_gpus,
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
        "send_back_pulls": sum(1 for r in measured if r.send_back == "pull"),
        "send_back_recomputes": sum(1 for r in measured if r.send_back == "recompute"),
        "send_back_expired": expired,
        "send_back_pull_s_p50": pct(pull_s, 50),
    }
