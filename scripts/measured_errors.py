"""Score the measured-table lookup on every measured device and write the error file the
planner states as its op-latency uncertainty (``hardware_profiles/measured_errors.json``).

    .venv/bin/python scripts/measured_errors.py [--out hardware_profiles/measured_errors.json]

Three checks, each per op class (rows pooled):
* ``kfold``: each device's tables, 5-fold held out by shape;
* ``leave_one_device_out``: each device predicted from the others (the transfer rule);
* ``leave_family_out``: Hopper (H100, H200) predicted from Blackwell only and Blackwell from
  Hopper only: the closest thing to an unmeasured vendor, whose tables do not exist.
Nothing here is fitted to these scores; they are what the planner reports as its error.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from hardware_profiles import PROFILES_DIR
from simulator import catalog
from simulator.measured.device import measured_device_names, tables_for
from simulator.measured.package import data_source
from simulator.measured.tables import read_frames
from simulator.measured.validate import Score, by_class, kfold, leave_device_out

FAMILIES = {"hopper": ("h100", "h200"), "blackwell": ("b200", "b300", "gb200", "gb300")}


def _rows(scores: list[Score]) -> dict[str, dict[str, Any]]:
    return {s.op_class: s.as_dict() for s in by_class(scores)}


def _pooled(per_device: dict[str, list[Score]]) -> dict[str, dict[str, Any]]:
    """All devices' rows of each op class together."""
    flat = [s for scores in per_device.values() for s in scores]
    return _rows(flat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=PROFILES_DIR / "measured_errors.json")
    args = ap.parse_args()
    source = data_source()
    if source is None:
        raise SystemExit("aiconfigurator-core is not installed: pip install '.[measured]'")
    names = list(measured_device_names())
    frames = {
        n: read_frames(source.tables(catalog.hardware_profile(n).measured_tables or ""))
        for n in names
    }
    out: dict[str, Any] = {
        "package": "aiconfigurator-core",
        "package_version": source.package_version,
        "generated_by": "scripts/measured_errors.py",
    }
    start = time.perf_counter()
    kf = {n: kfold(frames[n], catalog.hardware_profile(n)) for n in names}
    out["kfold"] = {n: _rows(s) for n, s in kf.items()}
    out["kfold_pooled"] = _pooled(kf)
    lodo, basis = {}, {}
    for n in names:
        profile = catalog.hardware_profile(n)
        tables = tables_for(profile, exclude=(n,))
        assert tables is not None
        lodo[n] = leave_device_out(frames[n], tables, profile)
        basis[n] = tables.basis
    out["leave_one_device_out"] = {n: {"basis": basis[n], **_rows(s)} for n, s in lodo.items()}
    out["leave_one_device_out_pooled"] = _pooled(lodo)
    lfo = {}
    for fam, members in FAMILIES.items():
        for n in members:
            if n not in frames:
                continue
            profile = catalog.hardware_profile(n)
            tables = tables_for(profile, exclude=members)
            assert tables is not None
            lfo[n] = leave_device_out(frames[n], tables, profile)
            basis[f"{n}:{fam}"] = tables.basis
    out["leave_family_out"] = {n: _rows(s) for n, s in lfo.items()}
    out["leave_family_out_pooled"] = _pooled(lfo)
    out["wall_s"] = round(time.perf_counter() - start, 1)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=False) + "\n")
    print(f"wrote {args.out} in {out['wall_s']} s")
    for check in ("kfold_pooled", "leave_one_device_out_pooled", "leave_family_out_pooled"):
        print(check)
        for cls, r in out[check].items():
            prior = r["prior_median_ape"]
            print(
                f"  {cls:14s} rows {r['rows']:7d}  median {r['median_ape']:5.1f} %"
                f"  P90 {r['p90_ape']:6.1f} %  prior {'-' if prior is None else f'{prior:.1f} %'}"
            )


if __name__ == "__main__":
    main()
