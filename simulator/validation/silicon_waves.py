"""How much of a point's mean TTFT is the closed loop's first wave.

The benchmark client starts ``conc`` requests at once, then one more each time one finishes,
``10 x conc`` in all, with no warm-up cut; the rows hold the mean TTFT over all of them. The
first wave queues behind itself (``conc`` prompts prefilled in a few budget-sized steps), so
its tenth of the requests can carry a large share of the mean. The package gives only the
means, so the simulated split is the one view of it: ``sim_ttft_ms_first_wave`` in
``points.csv`` and the document's caveat (``silicon_report.wave_paragraph``). A diagnostic,
not a fit: nothing is changed by it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def first_wave_ttft_s(finished: pd.DataFrame, conc: int) -> float:
    """Mean TTFT of the ``conc`` earliest-arriving finished requests (the wave sent at once)."""
    first = finished.sort_values(["arrival_s", "request_id"], kind="stable").head(conc)
    return float(first["ttft_s"].mean())
