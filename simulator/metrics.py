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
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
class Recorder:
    """Append-only rows; no arithmetic in the engine loop."""

    steps: list[StepRecord] = field(default_factory=list)
    requests: list[ReqState] = field(default_factory=list)  # finished or rejected

    def on_step(self, row: StepRecord) -> None:
        self.steps.append(row)

    def on_done(self, req: ReqState) -> None:
        self.requests.append(req)


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


def _weighted_percentile(
    values: NDArray[np.float64], weights: NDArray[np.float64], q: float
) -> float:
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cum = np.cumsum(w)
    return float(v[np.searchsorted(cum, q / 100.0 * cum[-1])])


def summarize(
    rec: Recorder, num_gpus: int, warmup_s: float = 0.0, end_s: float | None = None
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

    gaps = [g for r in measured for g, _ in r.itl_runs]
    counts = [c for r in measured for _, c in r.itl_runs]
    itl = np.array(gaps)
    wts = np.array(counts, dtype=np.float64)
    ttft = np.array([r.first_token_s - r.arrival_s for r in measured if r.first_token_s])
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
        prefix_hit_rate=(gpu_hit + cpu_hit) / prompt if prompt else 0.0,
        gpu_hit_rate=gpu_hit / prompt if prompt else 0.0,
        cpu_hit_rate=cpu_hit / prompt if prompt else 0.0,
        recomputed_prompt_tokens=sum(r.recomputed_tokens for r in measured),
        preemptions=sum(r.preemptions for r in done),
        steps=step_count,
        mean_step_s=step_time / step_count if step_count else None,
    )
