"""Write the per-device end-to-end errors the planner states (model_error.json).

    .venv/bin/plan validate inferencemax --out out/validation ...
    .venv/bin/plan validate silicon --out out/silicon ...
    .venv/bin/python scripts/model_error.py --inferencemax out/validation/points.csv \\
        --silicon out/silicon/points.csv

Either file may be given alone: the other section of the existing file is kept.

- ``--inferencemax``: per device, the median absolute percentage error of simulated
  throughput per GPU over its vLLM-served InferenceMAX points (the benchmark a capacity plan
  is most like: throughput at a concurrency); pooled over the devices answered the same way,
  measured tables (NVIDIA) or transferred tables (AMD), for devices without validated points.
- ``--silicon``: per device, the median APE and the median bias (signed error) of TTFT and
  TPOT over its measured vLLM serving points (aiconfigurator-core's silicon sample, the
  first seed's simulation); pooled over every device of the file (all have measured tables).

These are the validation results restated, nothing is fitted to them.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import statistics
import sys
from pathlib import Path
from typing import Any, NoReturn

from hardware_profiles import PROFILES_DIR
from simulator import catalog
from simulator.planner.uncertainty import latency_figures


def _fail(message: str) -> NoReturn:
    """One line and exit 2, as the CLI answers a bad file."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def _read(path: Path, keep: str, want: tuple[str, ...]) -> list[dict[str, str]]:
    try:
        with path.open() as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        _fail(f"{path}: cannot read it ({exc.__class__.__name__}: {exc})")
    missing = [c for c in (*want, "status") if rows and c not in rows[0]]
    if missing:
        _fail(f"{path}: missing column(s) {', '.join(missing)}: not a {keep} points.csv")
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        _fail(f"{path}: no simulated point (status ok): not a {keep} points.csv")
    return ok


def _run_date(path: Path) -> str:
    """The day the validation wrote ``path`` (its points are that day's code)."""
    return dt.date.fromtimestamp(path.stat().st_mtime).isoformat()


def throughput_section(path: Path) -> dict[str, Any]:
    rows = [
        r
        for r in _read(path, "plan validate inferencemax", ("engine", "device", "err_tput_pct"))
        if r["engine"] == "vllm"
    ]
    by_device: dict[str, list[float]] = {}
    for r in rows:
        by_device.setdefault(r["device"], []).append(abs(float(r["err_tput_pct"])))
    source = f"InferenceMAX v1 vLLM points ({_run_date(path)}, docs/validation.md)"
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
    return {"devices": devices, "pooled": pooled}


def _latency_row(errors: list[tuple[float, float]], basis: str) -> dict[str, Any]:
    return {**latency_figures(errors), "basis": basis}


def latency_section(path: Path) -> dict[str, Any]:
    rows = _read(path, "plan validate silicon", ("device", "err_ttft_pct", "err_tpot_pct"))
    by_device: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        by_device.setdefault(r["device"], []).append(
            (float(r["err_ttft_pct"]), float(r["err_tpot_pct"]))
        )
    source = (
        "measured vLLM serving points of aiconfigurator-core's silicon sample (random prompts,"
        " no prefix reuse; the run's first seed, docs/validation-silicon.md gives the seeds'"
        f" range; {_run_date(path)})"
    )
    devices = {d: _latency_row(v, f"{len(v)} {source}") for d, v in sorted(by_device.items())}
    every = [e for v in by_device.values() for e in v]
    pooled = {"measured": _latency_row(every, f"pooled over {len(every)} {source}")}
    return {"devices": devices, "pooled": pooled}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inferencemax", type=Path, help="points.csv of plan validate inferencemax")
    ap.add_argument("--silicon", type=Path, help="points.csv of plan validate silicon")
    ap.add_argument("--out", type=Path, default=PROFILES_DIR / "model_error.json")
    args = ap.parse_args()
    if args.inferencemax is None and args.silicon is None:
        ap.error("give --inferencemax, --silicon or both")
    try:
        data: dict[str, Any] = json.loads(args.out.read_text())
    except (OSError, ValueError):
        data = {}
    data["generated_by"] = "scripts/model_error.py"
    if args.inferencemax is not None:
        data |= throughput_section(args.inferencemax)
    if args.silicon is not None:
        data["latency"] = latency_section(args.silicon)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out}")
    for d, r in data.get("devices", {}).items():
        print(f"  {d:8s} throughput {r['throughput_median_ape_pct']:5.1f} % over {r['points']}")
    for d, r in data.get("latency", {}).get("devices", {}).items():
        print(
            f"  {d:8s} TTFT {r['ttft_median_ape_pct']:5.1f} % (bias {r['ttft_bias_pct']:+.1f} %),"
            f" TPOT {r['tpot_median_ape_pct']:5.1f} % (bias {r['tpot_bias_pct']:+.1f} %)"
            f" over {r['points']}"
        )


if __name__ == "__main__":
    main()
