"""The errors of a silicon validation and its report: which points run under which seeds,
and their median APE and bias by model, system and both.

Kept apart from :mod:`simulator.validation.silicon` (the rows, their mapping, one point's
simulation) because the run cache's key covers that module's code and not this one's: what
runs is named by each scenario's hash (point, requests, seed), and the errors are computed,
never cached, so editing how a report is assembled keeps every cached point.
"""

from __future__ import annotations

import statistics
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from simulator.specs.loading import SpecError
from simulator.validation.run import median_or_none, report_json
from simulator.validation.silicon import default_data, load_silicon, select
from simulator.validation.silicon_sim import SiliconResult, run_points
from simulator.validation.silicon_spread import Spread, spreads


@dataclass(frozen=True)
class LatencyError:
    """Errors of one group of points (a model, a system, a model on a system, or all)."""

    model: str
    system: str
    points: int  # simulated
    not_simulated: int
    median_ape_ttft_pct: float | None
    median_ape_tpot_pct: float | None
    bias_ttft_pct: float | None  # median signed error; positive = simulated slower
    bias_tpot_pct: float | None


def group_error(results: Sequence[SiliconResult], model: str, system: str) -> LatencyError:
    ok = [r for r in results if r.ok]
    et = [e for r in ok if (e := r.err_ttft_pct) is not None]
    ep = [e for r in ok if (e := r.err_tpot_pct) is not None]
    return LatencyError(
        model=model,
        system=system,
        points=len(ok),
        not_simulated=len(results) - len(ok),
        median_ape_ttft_pct=median_or_none([abs(e) for e in et]),
        median_ape_tpot_pct=median_or_none([abs(e) for e in ep]),
        bias_ttft_pct=median_or_none(et),
        bias_tpot_pct=median_or_none(ep),
    )


def _groups(
    results: Sequence[SiliconResult], key: Callable[[SiliconResult], tuple[str, str]]
) -> list[LatencyError]:
    groups: dict[tuple[str, str], list[SiliconResult]] = {}
    for r in results:
        groups.setdefault(key(r), []).append(r)
    return [group_error(groups[k], *k) for k in sorted(groups)]


def by_model_system(results: Sequence[SiliconResult]) -> list[LatencyError]:
    return _groups(results, lambda r: (r.point.card, r.point.device))


def by_model(results: Sequence[SiliconResult]) -> list[LatencyError]:
    return _groups(results, lambda r: (r.point.card, "all"))


def by_system(results: Sequence[SiliconResult]) -> list[LatencyError]:
    return _groups(results, lambda r: ("all", r.point.device))


@dataclass
class SiliconReport:
    data: Path
    rows: int
    skipped: Counter[str]
    not_selected: int
    requests_per_conc: int
    seed: int
    limit: int | None
    models: list[str]
    results: list[SiliconResult]
    # how far the data's own repeats and vLLM versions differ (every mappable point)
    spread: list[Spread] = field(default_factory=list)
    # (seed, headline) of every replicate, ``seed`` first: the whole validation once per seed
    replicates: list[tuple[int, LatencyError]] = field(default_factory=list)

    @property
    def overall(self) -> LatencyError:
        return group_error(self.results, "all", "all")

    def to_json(self) -> dict[str, Any]:
        return {
            **report_json(self),
            "limit": self.limit,
            "models": self.models,
            "overall": asdict(self.overall),
            "by_model": [asdict(g) for g in by_model(self.results)],
            "by_system": [asdict(g) for g in by_system(self.results)],
            "groups": [asdict(g) for g in by_model_system(self.results)],
            "spread": [asdict(s) for s in self.spread],
            "replicates": [{"seed": k, **asdict(g)} for k, g in self.replicates],
        }


def validate(
    data: str | Path | None = None,
    models: Iterable[str] = (),
    limit: int | None = None,
    requests_per_conc: int = 10,
    seed: int = 0,
    workers: int = 1,
    progress: Callable[[int, int, SiliconResult], None] | None = None,
    cache_dir: Path | None = None,
    replicates: int = 1,
) -> SiliconReport:
    """``replicates``: the points simulated under seeds ``seed``, ``seed + 1``, ...; the report's
    tables are the first seed's, its ``replicates`` every seed's headline."""
    if replicates < 1:
        raise SpecError("(arguments)", "replicates", f"must be >= 1, got {replicates}")
    path = Path(data) if data is not None else default_data()
    loaded = load_silicon(path)
    models = list(models)
    chosen = select(loaded.points, models, limit)
    if not chosen:  # a table of 0 points, exit 0, was the answer
        why = (
            f"the --models filter leaves none of its {len(loaded.points):,} points"
            if loaded.points
            else f"no point to simulate ({loaded.rows:,} rows, {sum(loaded.skipped.values()):,}"
            " skipped)"
        )
        raise SpecError(path, "(points)", why)
    runs = []
    for k in range(replicates):
        offset = k * len(chosen)
        step = (
            None
            if progress is None
            else partial(_shifted, progress, offset, replicates * len(chosen))
        )
        runs.append(run_points(chosen, requests_per_conc, seed + k, workers, step, cache_dir))
    results = runs[0]
    if not any(r.ok for r in results):  # nothing to compare: no honest table
        common = Counter(r.status for r in results).most_common(2)
        raise SpecError(
            path, "(points)",
            f"none of its {len(results):,} points could be simulated: "
            + "; ".join(f"{status} ({n:,})" for status, n in common),
        )  # fmt: skip
    return SiliconReport(
        data=path,
        rows=loaded.rows,
        skipped=loaded.skipped,
        not_selected=len(loaded.points) - len(chosen),
        requests_per_conc=requests_per_conc,
        seed=seed,
        limit=limit,
        models=models,
        results=results,
        spread=spreads(loaded.points),
        replicates=[(seed + k, group_error(r, "all", "all")) for k, r in enumerate(runs)],
    )


def _shifted(
    progress: Callable[[int, int, SiliconResult], None],
    offset: int,
    total: int,
    done: int,
    _total: int,
    result: SiliconResult,
) -> None:
    progress(offset + done, total, result)  # one bar over every replicate


# the InferenceX client warms the server up with 2 x conc requests, at the same concurrency,
# before the timed run since this commit date (SemiAnalysisAI/InferenceX d053ae24e, #480:
# benchmark_lib.sh passes --num-warmups $((2 * max_concurrency))); rows measured earlier ran
# on a server whose first timed burst was its first traffic
WARMUP_SINCE = "2026-01-21"


def _quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def _era(results: Sequence[SiliconResult], warm: bool, model: str | None = None) -> str:
    rows = [
        r for r in results
        if r.ok and r.point.measured is not None
        and (r.point.measured >= WARMUP_SINCE) == warm
        and (model is None or r.point.card == model)
    ]  # fmt: skip
    errs = [e for r in rows if (e := r.err_ttft_pct) is not None]
    if not errs:
        return "none"
    ape = statistics.median(abs(e) for e in errs)
    return f"{ape:.1f} % (bias {statistics.median(errs):+.1f} %, {len(errs)} points)"


def wave_paragraph(results: Sequence[SiliconResult]) -> str:
    """The caveat's text from the simulated points (``SiliconResult`` rows that ran)."""
    share, factor = [], []
    for r in results:
        first, mean, n = r.sim_ttft_ms_first_wave, r.sim_ttft_ms, r.finished
        c = r.point.conc
        if not r.ok or first is None or mean is None or n <= c or first <= 0:
            continue
        share.append(c * first / (n * mean))
        # if every later request were simulated exactly, the first wave would have to be this
        # many times the simulated one for the simulated mean to equal the measured
        factor.append(1.0 + n * (r.point.ttft_ms - mean) / (c * first))
    if len(share) < 4:
        return ""
    s1, s2, s3 = _quartiles(share)
    f1, f2, f3 = _quartiles(factor)
    both = sorted(
        {r.point.card for r in results if r.point.measured and r.point.measured < WARMUP_SINCE}
        & {r.point.card for r in results if r.point.measured and r.point.measured >= WARMUP_SINCE}
    )
    per_model = "".join(
        f" {m}: {_era(results, False, m)} before, {_era(results, True, m)} after;" for m in both
    )
    return textwrap.fill(
        "- **The first wave**: the client starts `conc` requests at once and counts them in the"
        " mean. In the simulation that first tenth of the requests carries a median"
        f" {s2:.0%} of the summed TTFT (quartiles {s1:.0%} to {s3:.0%}, over {len(share):,}"
        " points; `sim_ttft_ms_first_wave` in `points.csv`), so the headline TTFT error is"
        " for a good part an error on that burst. Were every later request simulated exactly,"
        f" the measured means would need the first wave {f2:.2f}x the simulated one (median;"
        f" quartiles {f1:.2f} to {f3:.2f}). Cold-start work the simulator does not have"
        " (kernels compiled or tuned at their first shape) would fall there, mostly before"
        f" {WARMUP_SINCE}: since then the InferenceX client first sends 2 x conc warm-up"
        " requests at the same concurrency (SemiAnalysisAI/InferenceX d053ae24e, #480). Each"
        " is the run's first prompt again (`test_input`): where the script passes"
        " `--no-enable-prefix-caching` they are full prefills of the first wave's size; where"
        " it leaves vLLM's prefix caching on (the MiniMax-M2.5 FP8 H100 / H200 and Kimi-K2.5"
        " INT4 H200 scripts) all but the first are cache hits, and the timed first wave can"
        " still be the first batched prefills that server sees. TTFT"
        f" median APE of rows measured before: {_era(results, False)}; on or after:"
        f" {_era(results, True)}; models with rows of both:{per_model} the models differ"
        " between the two sets and so do the vLLM versions, so read this as a hint, not a"
        " measurement of cold start. The rows' medians (InferenceX records them, the package"
        " does not) would tell the burst from the steady state. A diagnostic only: nothing"
        " was changed by it.",
        width=92,
        subsequent_indent="  ",
    )
