"""What a run served, checked before its figures are believed: a run that served nothing,
or fewer closed-loop users than it is labelled with, is the input's fault (one line, exit 2),
not an answer of zeros."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.metrics import Summary
from simulator.records import Recorder
from simulator.specs.loading import SpecError
from simulator.specs.scenario import SLO, TraceWorkload
from simulator.states import Status
from simulator.window import last_token_s

if TYPE_CHECKING:
    from simulator.workload.replay import Replay


def check_served(
    recorder: Recorder,
    summary: Summary,
    workload: Any,
    replay: Replay,
    duration_s: float | None,
    source: str | Path,
    warmup_s: float = 0.0,
) -> None:
    """A run that served nothing answers nothing: no request arrived (an empty trace, every
    record skipped as malformed, every timestamp after ``duration_s``), or vLLM would have
    refused every request for its length. Either is the input's fault: one line, exit 2.
    So is a closed loop of more users than the trace has sessions (the figures would be of
    fewer users than the run is labelled with), and a workload that ends inside the warm-up
    (nothing is measured: every figure would read zero)."""
    open_ = summary.requests_in_flight_at_end + summary.requests_waiting_at_end
    if not recorder.requests and not open_:
        raise _nothing_arrived(workload, replay, duration_s, source)
    # every request refused first: a trace of one too-long prompt "ran out after 0 users"
    if not open_ and all(r.status is Status.REJECTED for r in recorder.requests):
        first = recorder.requests[0]
        length = "max_model_len" in (first.reject_reason or "")
        raise SpecError(
            source,
            "serving.max_model_len" if length else "serving",
            f"every request ({len(recorder.requests):,}) is refused, e.g. request"
            f" {first.req_id}: {first.reject_reason}: nothing was served"
            + (f"; {_LENGTH_FIX}" if length else ""),
        )
    if replay.idle_users and isinstance(workload, TraceWorkload):
        users = workload.concurrency or 0
        ran = users - replay.idle_users
        raise SpecError(
            source, "workload.concurrency",
            f"{users:,} users, but the sessions of {Path(workload.path).name} run out after"
            f" {ran:,}: at most {ran:,} users would ever run; give concurrency <= {ran:,}",
        )  # fmt: skip
    last = last_token_s(recorder) or 0.0
    if summary.window_end_reason == "workload_ended" and warmup_s > 0 and last <= warmup_s:
        raise SpecError(
            source, "warmup_s",
            f"the workload ended at {last:,.1f} s, inside warmup_s {warmup_s:,g} s: nothing is"
            " measured; lower warmup_s or give the workload more requests or sessions",
        )  # fmt: skip


# what to do when every request is too long (the model's context, a trace's prompts or a
# generator drawing long sessions first: one agentic user may draw a 250k-token session)
_LENGTH_FIX = (
    "give requests that fit (shorter prompts or max_tokens), a larger max_model_len where"
    " the model's context allows, or more users or sessions, so that some requests fit"
)


def _nothing_arrived(
    workload: Any, replay: Replay, duration_s: float | None, source: str | Path
) -> SpecError:
    """Why no request reached the engine, naming the trace when there is one."""
    if not isinstance(workload, TraceWorkload):
        return SpecError(source, "(records)", "the workload sent no request")
    bad = replay.bad
    if bad is not None and bad.count:
        why = f"every record is malformed ({bad.count:,} skipped: {bad.reasons[0]})"
    elif replay.issued and duration_s is not None:
        why = f"no request arrives within duration_s {duration_s:g} s (the first comes later)"
    else:
        why = "the trace holds no request"
    return SpecError(workload.path, "(records)", why)


def check_measurable(summary: Summary, slo: SLO, source: str | Path) -> None:
    """An interactivity target on a run whose finished requests output one token each: there
    is no inter-token gap to measure, so "SLO met: no" would be a verdict on nothing (random
    prompts of one token are refused by the spec; a trace is known only once replayed)."""
    if (
        slo.interactivity_tok_per_s_p90 is not None
        and summary.interactivity_tok_per_s_p90 is None
        and summary.requests_finished > 0
    ):
        raise SpecError(
            source, "slo.interactivity_tok_per_s_p90",
            f"none of the {summary.requests_finished:,} requests finished in the window output"
            " more than one token: there is no inter-token gap to measure; give"
            " slo.ttft_s_p90 instead",
        )  # fmt: skip
