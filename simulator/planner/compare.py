"""Comparisons across a search's configurations: knob sensitivity around each device's best,
the throughput / interactivity envelope, and aggregated against disaggregated serving."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from simulator.planner.analysis import operating_points
from simulator.planner.space import KNOBS, SearchSpace

if TYPE_CHECKING:
    import pandas as pd


def sensitivity(space: SearchSpace, runs: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """Throughput change from moving each swept knob one step from a device's best config,
    at the same concurrency (``throughput_change`` a fraction, ``throughput_change_pct`` the
    same in percent)."""
    import pandas as pd

    rows = []
    for _, b in best.iterrows():
        for knob in KNOBS:
            values = getattr(space.sweep, knob)
            # speculative decoding and the xPyD split are compared elsewhere (mode_comparison):
            # a split changes the deployment's GPUs, so one step at equal users is not like
            if len(values) < 2 or knob in ("speculative", "disaggregation"):
                continue
            current = next((i for i, v in enumerate(values) if _equal_scalar(v, b[knob])), None)
            if current is None:
                continue
            for step in (-1, 1):
                j = current + step
                if not 0 <= j < len(values):
                    continue
                same = runs[(runs.device == b.device) & (runs.concurrency == b.concurrency)]
                for other in KNOBS:  # (runs of older versions lack the newer knobs)
                    if other != knob and other in same.columns:
                        same = same[_equal(same[other], b[other])]
                moved = same[_equal(same[knob], values[j])]
                if moved.empty:
                    rows.append({"device": b.device, "knob": knob, "from": b[knob],
                                 "to": values[j], "throughput_change": None,
                                 "throughput_change_pct": None,
                                 "note": "pruned or not run"})  # fmt: skip
                    continue
                m = moved.iloc[0]
                change = m.throughput_tok_per_s_per_gpu / b.throughput_tok_per_s_per_gpu - 1
                rows.append({"device": b.device, "knob": knob, "from": b[knob], "to": values[j],
                             "throughput_change": change, "throughput_change_pct": 100 * change,
                             "note": "meets SLO" if m.slo_met else "misses SLO"})  # fmt: skip
    return pd.DataFrame(rows)


def _missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _equal_scalar(a: object, b: object) -> bool:
    return (_missing(a) and _missing(b)) or a == b


def _equal(column: pd.Series, value: object) -> pd.Series:
    """Elementwise equality where a missing knob (None / NaN: the vLLM default) equals itself."""
    if _missing(value):
        return column.isna()
    return column == value


def frontier(runs: pd.DataFrame) -> pd.DataFrame:
    """The throughput-per-GPU vs P90-interactivity envelope of ``runs`` (Pareto: no other run
    is at least as interactive with more throughput), ordered by interactivity."""
    if runs.empty or "interactivity_p90" not in runs.columns:
        return runs.iloc[0:0]
    pts = runs.dropna(subset=["interactivity_p90"]).sort_values(
        ["interactivity_p90", "throughput_tok_per_s_per_gpu"], ascending=[False, False]
    )
    keep, best = [], -math.inf
    for idx, tput in zip(pts.index, pts.throughput_tok_per_s_per_gpu, strict=True):
        if tput > best:
            keep.append(idx)
            best = tput
    return pts.loc[keep].sort_values("interactivity_p90")


def mode_comparison(runs: pd.DataFrame) -> pd.DataFrame:
    """Per device: the best SLO-meeting aggregated and disaggregated configurations (by tokens
    per dollar, else throughput per GPU), the best split, and which wins by how much. Empty
    when the search has no disaggregated configuration."""
    import pandas as pd

    if runs.empty or "mode" not in runs or not (runs["mode"] == "disaggregated").any():
        return pd.DataFrame()
    points = operating_points(runs)
    if points.empty:
        points = runs.iloc[0:0]
    key = (
        "tokens_per_usd" if points.tokens_per_usd.notna().any() else "throughput_tok_per_s_per_gpu"
    )
    rows = []
    for device in dict.fromkeys(runs.device):
        row: dict[str, Any] = {"device": device, "key": key}
        for mode in ("aggregated", "disaggregated"):
            mine = points[(points.device == device) & (points["mode"] == mode)]
            if mine.empty:
                row[f"{mode}_config"] = row[f"{mode}_value"] = None
                continue
            b = mine.sort_values(key, ascending=False).iloc[0]
            row[f"{mode}_config"] = b.config_id
            row[f"{mode}_value"] = b[key]
            row[f"{mode}_tok_per_s_per_gpu"] = b.throughput_tok_per_s_per_gpu
            row[f"{mode}_users"] = b.concurrency
            row[f"{mode}_ttft_p90_s"] = b.ttft_p90_s
            if mode == "disaggregated":
                row["best_split"] = b.disaggregation
        agg, dis = row["aggregated_value"], row["disaggregated_value"]
        if agg is None and dis is None:
            row["winner"] = "neither meets the SLO"
        elif agg is None or (dis is not None and dis > agg):
            row["winner"] = "disaggregated"
        else:
            row["winner"] = "aggregated"
        row["disaggregated_vs_aggregated"] = dis / agg - 1 if agg and dis is not None else None
        rows.append(row)
    return pd.DataFrame(rows)
