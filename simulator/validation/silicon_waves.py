"""How much of a point's mean TTFT is the closed loop's first wave.

The benchmark client starts ``conc`` requests at once, then one more each time one finishes,
``10 x conc`` in all, with no warm-up cut; the rows hold the mean TTFT over all of them. The
first wave queues behind itself (``conc`` prompts prefilled in a few budget-sized steps), so
its tenth of the requests can carry a large share of the mean. The package gives only the
means, so the simulated split is the one view of it: ``sim_ttft_ms_first_wave`` in
``points.csv`` and the paragraph below. A diagnostic, not a fit: nothing is changed by it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def first_wave_ttft_s(finished: pd.DataFrame, conc: int) -> float:
    """Mean TTFT of the ``conc`` earliest-arriving finished requests (the wave sent at once)."""
    first = finished.sort_values(["arrival_s", "request_id"], kind="stable").head(conc)
    return float(first["ttft_s"].mean())


def _quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def wave_paragraph(results: Sequence[Any]) -> str:
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
    return (
        "- **The first wave**: the client starts `conc` requests at once and counts them in the"
        " mean. In the simulation that first tenth of the requests carries a median"
        f" {s2:.0%} of the summed TTFT (quartiles {s1:.0%} to {s3:.0%}, over {len(share)}"
        " points; `sim_ttft_ms_first_wave` in `points.csv`), so the headline TTFT error is"
        " for a good part an error on that burst. Were every later request simulated exactly,"
        f" the measured means would need the first wave {f2:.2f}x the simulated one (median;"
        f" quartiles {f1:.2f} to {f3:.2f}). Cold-start work the simulator does not have"
        " (kernels compiled or tuned at their first shape, caches filled) would fall there;"
        " the rows' medians (InferenceX records them, the package does not) would tell the"
        " burst from the steady state. A diagnostic only: nothing was changed by it."
    )
