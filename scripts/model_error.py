"""Write the per-device end-to-end error band the planner states (model_error.json).

    .venv/bin/plan validate inferencemax --out out/validation ...
    .venv/bin/python scripts/model_error.py --inferencemax out/validation/points.csv

Per device: the median absolute percentage error of simulated throughput per GPU over its
vLLM-served InferenceMAX points (the benchmark a capacity plan is most like: throughput at a
concurrency). Pooled: the same over the devices answered the same way, measured tables
(NVIDIA) or transferred tables (AMD), for devices without validated points. These are the
validation results restated, nothing is fitted to them.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import statistics
from pathlib import Path

from hardware_profiles import PROFILES_DIR
from simulator import catalog


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inferencemax", type=Path, required=True, help="points.csv of the run")
    ap.add_argument("--out", type=Path, default=PROFILES_DIR / "model_error.json")
    args = ap.parse_args()
    with args.inferencemax.open() as f:
        rows = [r for r in csv.DictReader(f) if r["engine"] == "vllm" and r["status"] == "ok"]
    by_device: dict[str, list[float]] = {}
    for r in rows:
        by_device.setdefault(r["device"], []).append(abs(float(r["err_tput_pct"])))
    source = f"InferenceMAX v1 vLLM points ({dt.date.today().isoformat()}, docs/validation.md)"
    devices = {
        d: {
            "throughput_median_ape_pct": round(statistics.median(v), 1),
            "points": len(v),
            "basis": f"{source}: {len(v)} points of this device",
        }
        for d, v in sorted(by_device.items())
    }
    groups: dict[str, list[float]] = {"measured": [], "transferred": []}
    for d, v in by_device.items():
        measured = catalog.hardware_profile(d).measured_tables is not None
        groups["measured" if measured else "transferred"] += v
    pooled = {
        g: {
            "throughput_median_ape_pct": round(statistics.median(v), 1),
            "points": len(v),
            "basis": f"{source}: pooled over {len(v)} points of devices with"
            + (" measured tables" if g == "measured" else " transferred tables"),
        }
        for g, v in groups.items()
        if v
    }
    data = {"generated_by": "scripts/model_error.py", "devices": devices, "pooled": pooled}
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}")
    for d, r in devices.items():
        print(f"  {d:8s} {r['throughput_median_ape_pct']:5.1f} % over {r['points']} points")
    for g, r in pooled.items():
        print(f"  pooled {g}: {r['throughput_median_ape_pct']:.1f} % over {r['points']} points")


if __name__ == "__main__":
    main()
