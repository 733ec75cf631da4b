"""The simulator's known error per device: the band every headline figure carries beside
its replicate interval.

``hardware_profiles/model_error.json`` (``scripts/model_error.py``, from the end-to-end
validations: docs/validation.md and docs/validation-silicon.md) gives, per device, the
median absolute percentage error of throughput per GPU against measured serving points.
A device without validated points takes the pooled error of the devices answered the same
way (measured tables, or tables transferred from another device); with no file at all, the
last published end-to-end figure below.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from hardware_profiles import PROFILES_DIR
from simulator.specs.loading import SpecError

MODEL_ERROR_FILE = PROFILES_DIR / "model_error.json"
# docs/validation.md of 2026-11-30: 921 InferenceMAX v1 points on roofline priors
FALLBACK = (28.9, "end to end, InferenceMAX v1, roofline priors (docs/validation.md, 2026-11-30)")


@dataclass(frozen=True)
class ModelError:
    median_ape_pct: float
    basis: str


@cache
def _load() -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(MODEL_ERROR_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return data


def model_error(device: str) -> ModelError:
    """The error band of ``device``'s simulated throughput (median APE, percent)."""
    from simulator import catalog
    from simulator.measured.device import measured_device_names

    data = _load()
    row = data.get("devices", {}).get(device)
    if row:
        return ModelError(float(row["throughput_median_ape_pct"]), str(row["basis"]))
    if data:
        try:
            measured = catalog.hardware_profile(device).measured_tables is not None
        except SpecError:  # a profile given by path that no longer loads: the wider band
            measured = False
        group = "measured" if measured and device in measured_device_names() else "transferred"
        pooled = data.get("pooled", {}).get(group)
        if pooled:
            return ModelError(float(pooled["throughput_median_ape_pct"]), str(pooled["basis"]))
    return ModelError(*FALLBACK)
