"""What a run's op latencies came from, and the error the planner states for them.

``describe(latency)`` after a simulation: which source answered how many op evaluations
(measured table inside its grid, fitted = table extrapolated or transferred or a fitted
roofline, prior = the profile's roofline), the tables' provenance, and the op-latency error
from ``hardware_profiles/measured_errors.json`` (``scripts/measured_errors.py``): the k-fold
held-out error for a measured device, the leave-one-device-out error for a transferred one
(and, for a vendor with no measured device at all, the larger leave-family-out error).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from simulator.measured.errors import load_errors
from simulator.measured.kinds import KIND_CLASS
from simulator.measured.lookup import MEASURED
from simulator.measured.package import data_source, switched_off, unavailable_note

if TYPE_CHECKING:
    from simulator.cost.latency import LatencyModels


def error_band(latency: LatencyModels) -> dict[str, Any] | None:
    """Median APE per op class of the check that matches how this device is answered."""
    t = latency.tables
    errors = load_errors()
    if t is None or not errors:
        return None
    if t.measured:
        rows = errors.get("kfold", {}).get(latency.profile.name)
        check = "k-fold held out by shape on this device's tables"
    elif "new vendor" not in t.basis:
        rows = errors.get("leave_one_device_out_pooled")
        check = "leave-one-device-out over the measured devices"
    else:
        rows = errors.get("leave_family_out_pooled")
        check = (
            "leave-family-out (Hopper from Blackwell and back; the prior's error where the"
            " class stays on the prior): no device of this vendor has public tables"
        )
    if not rows:
        return None
    classes = t.classes()
    by_class = {}
    for cls, r in rows.items():
        if not isinstance(r, dict):
            continue
        value = r["median_ape"] if cls in classes else r.get("prior_median_ape")
        if value is not None:
            by_class[cls] = round(float(value), 1)
    return {"check": check, "median_ape_by_class": by_class}


def describe(latency: LatencyModels) -> dict[str, Any]:
    """Sources of the op evaluations priced so far, provenance and the stated error."""
    counts: Counter[str] = Counter()
    by_class: dict[str, Counter[str]] = {}
    t = latency.tables
    if t is not None:
        for curve in t._curves.values():
            if curve is None or not curve.queries:
                continue
            cls = KIND_CLASS.get(curve.model.kind, curve.model.kind)
            inside = curve.queries - curve.outside
            good = t.measured and curve.status == MEASURED
            measured, fitted = (inside, curve.outside) if good else (0, curve.queries)
            by_class.setdefault(cls, Counter()).update(measured=measured, fitted=fitted)
            counts.update(measured=measured, fitted=fitted)
    for cls, n in latency.queries.items():  # evaluations the tables did not answer
        if cls in latency.calibrated:
            label = "calibrated"
        else:
            label = "fitted" if cls in latency.fitted else "prior"
        by_class.setdefault(cls, Counter())[label] += n
        counts[label] += n
    total = sum(counts.values()) or 1
    seconds = latency.seconds_by_source
    total_s = sum(seconds.values()) or 1.0
    out: dict[str, Any] = {
        "basis": t.basis if t is not None else "roofline priors",
        "share_of_gpu_time": {k: round(v / total_s, 4) for k, v in sorted(seconds.items())},
        "share_of_op_evaluations": {k: round(v / total, 4) for k, v in sorted(counts.items())},
        "by_class": {c: dict(v) for c, v in sorted(by_class.items())},
        "error": error_band(latency),
    }
    if t is not None:
        out["provenance"] = t.provenance()
    elif data_source() is None or switched_off():
        out["note"] = unavailable_note()
    return out


def one_line(info: dict[str, Any]) -> str:
    """The line a run prints about its op latencies."""
    if "note" in info:
        return str(info["note"])
    share = info["share_of_gpu_time"]
    parts = [f"{k} {v:.0%}" for k, v in sorted(share.items(), key=lambda kv: -kv[1]) if v]
    shares = f"{', '.join(parts)} of simulated GPU time" if parts else "no step simulated"
    text = f"op latencies: {info['basis']} ({shares})"
    err = info.get("error")
    if err:
        values = sorted(err["median_ape_by_class"].values())
        if values:
            text += f"; stated op error {values[0]:g}-{values[-1]:g} % median APE by op class"
    return text
