"""Comparisons across a search's configurations: knob sensitivity around each device's best,
the throughput / interactivity envelope, and aggregated against disaggregated serving."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypeGuard

from simulator.planner.analysis import operating_points
from simulator.planner.space import KNOBS, SearchSpace

if TYPE_CHECKING:
    import pandas as pd


def sensitivity(
    space: SearchSpace,
    runs: pd.DataFrame,
    best: pd.DataFrame,
    pruned: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Each device's best configuration against those one knob one step away on that device
    (every other knob equal), compared at their operating points: users per deployment at the
    SLO (``users_from`` / ``users_to``) and throughput per GPU (``throughput_change`` a
    fraction, ``throughput_change_pct`` the same in percent).

    A step is to the next value the device was offered, in the sweep's order: one that ran
    or one pruned (``pruned``, with its reason). ``plan size`` offers each device its own
    TPs and offload sizes, so the merged sweep holds values another device tried."""
    import pandas as pd

    if not _has_rows(runs):
        return pd.DataFrame(columns=SENSITIVITY_COLUMNS)
    points = operating_points(runs)
    rows = []
    for _, b in best.iterrows():
        ran = runs[runs.device == b.device]
        cut = pruned[pruned.device == b.device] if _has_rows(pruned) else None
        for knob in KNOBS:
            values = getattr(space.sweep, knob)
            # speculative decoding and the xPyD split are compared elsewhere (mode_comparison):
            # a split changes the deployment's GPUs, so one step is not like for like
            if len(values) < 2 or knob in ("speculative", "disaggregation"):
                continue
            others = [k for k in KNOBS if k != knob and k in ran.columns]
            near = _alike(ran, b, others)
            near_cut = _alike(cut, b, others) if cut is not None else None
            offered = [v for v in values if _offered(v, knob, near, near_cut)]
            current = next((i for i, v in enumerate(offered) if _equal_scalar(v, b[knob])), None)
            if current is None:
                continue
            for j in (current - 1, current + 1):
                if 0 <= j < len(offered):
                    row = _step(b, knob, offered[j], near, near_cut, points)
                    rows.append({"device": b.device, "knob": knob, "from": b[knob], **row})
    return pd.DataFrame(rows, columns=SENSITIVITY_COLUMNS)


SENSITIVITY_COLUMNS = ("device", "knob", "from", "to", "users_from", "users_to",
                       "throughput_change", "throughput_change_pct", "note")  # fmt: skip


def _has_rows(table: pd.DataFrame | None) -> TypeGuard[pd.DataFrame]:
    return table is not None and not table.empty and "device" in table.columns


def _alike(table: pd.DataFrame, b: pd.Series, knobs: list[str]) -> pd.DataFrame:
    """The rows of ``table`` whose ``knobs`` equal ``b``'s (runs of older versions lack the
    newer knobs: a knob the table lacks is not compared)."""
    for k in knobs:
        if k in table.columns:
            table = table[_equal(table[k], b[k])]
    return table


def _offered(value: object, knob: str, near: pd.DataFrame, cut: pd.DataFrame | None) -> bool:
    return bool(_equal(near[knob], value).any()) or (
        cut is not None and knob in cut.columns and bool(_equal(cut[knob], value).any())
    )


def _step(
    b: pd.Series,
    knob: str,
    to: object,
    near: pd.DataFrame,
    cut: pd.DataFrame | None,
    points: pd.DataFrame,
) -> dict[str, Any]:
    """The sensitivity row's figures for moving ``knob`` of ``b`` to ``to``."""
    row: dict[str, Any] = {"to": to, "users_from": int(b.concurrency), "users_to": None,
                           "throughput_change": None, "throughput_change_pct": None}  # fmt: skip
    moved = near[_equal(near[knob], to)]
    if moved.empty:
        assert cut is not None  # (offered: it ran or was pruned)
        reason = cut[_equal(cut[knob], to)].reason.iloc[0]
        return {**row, "note": f"pruned: {reason}"}
    point = points[points.config_id == moved.config_id.iloc[0]]
    if point.empty:
        return {**row, "note": "misses the SLO at every load tried"}
    p = point.iloc[0]
    change = p.throughput_tok_per_s_per_gpu / b.throughput_tok_per_s_per_gpu - 1
    return {**row, "users_to": int(p.concurrency), "throughput_change": change,
            "throughput_change_pct": 100 * change, "note": "at its operating point"}  # fmt: skip


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
