"""The simulator's known error per device: the band every headline figure carries beside
its replicate interval, and the stated error of its latencies.

``hardware_profiles/model_error.json`` (``scripts/model_error.py``, from the end-to-end
validations) gives, per device:

- the median absolute percentage error of throughput per GPU against the InferenceMAX
  serving points (docs/validation.md): ``model_error``. A device without validated points
  takes the pooled error of the devices answered the same way (measured tables, or tables
  transferred from another device); with no file at all, the last published figure below;
- the median APE and the median bias of TTFT and TPOT against the measured vLLM serving
  points of aiconfigurator-core's silicon sample (docs/validation-silicon.md):
  ``latency_error``. A device with measured tables but no points takes the pooled figure of
  the measured devices; a device whose tables are transferred has none (no measured
  serving point of its vendor's latencies is in that set), and says so.

These restate the validations; nothing is corrected by them.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

from hardware_profiles import PROFILES_DIR
from simulator.specs.loading import SpecError

MODEL_ERROR_FILE = PROFILES_DIR / "model_error.json"
# docs/validation-2026-11-30-priors.md: 921 InferenceMAX v1 points on roofline priors
FALLBACK = (
    28.9,
    "end to end, InferenceMAX v1, roofline priors (docs/validation-2026-11-30-priors.md)",
)


@dataclass(frozen=True)
class ModelError:
    median_ape_pct: float
    basis: str
    pooled: bool = False  # the pooled figure of devices answered the same way


@dataclass(frozen=True)
class StatedLatency:
    """TTFT / TPOT against measured serving points: median APE and median bias, percent
    (bias < 0: the simulated latency is lower than measured, i.e. the simulator is optimistic)."""

    ttft_median_ape_pct: float
    ttft_bias_pct: float
    tpot_median_ape_pct: float
    tpot_bias_pct: float
    points: int
    basis: str
    pooled: bool = False  # the measured devices' pooled figure: none of this device's own

    def text(self) -> str:
        """``TTFT 17 %, TPOT 10 % (simulated lower: median bias -17 % / -4 %; 222 ...)``"""
        biases = (self.ttft_bias_pct, self.tpot_bias_pct)
        side = (
            "simulated lower: "
            if max(biases) < 0
            else ("simulated higher: " if min(biases) > 0 else "")
        )
        return (
            f"TTFT {self.ttft_median_ape_pct:.0f} %, TPOT {self.tpot_median_ape_pct:.0f} %"
            f" ({side}median bias {biases[0]:+.0f} % / {biases[1]:+.0f} %; {self.points}"
            f" measured vLLM serving points{POOLED if self.pooled else ''},"
            " docs/validation-silicon.md)"
        )


POOLED = " of the devices with measured tables, pooled"
NO_LATENCY_POINTS = (
    "TTFT / TPOT not validated on this device (no measured serving point;"
    " docs/validation-silicon.md covers the NVIDIA devices with measured tables)"
)
ON_PRIORS = (
    "TTFT / TPOT not validated on roofline priors (docs/validation-silicon.md's figures are"
    " with the measured op tables)"
)


def _on_priors() -> bool:
    """Runs read no measured table (not installed, or ``PLAN_MEASURED=off``): the figures
    validated with the tables do not apply, the last published priors figure does."""
    from simulator.measured.package import tables_available

    return not tables_available()


@cache
def _load() -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(MODEL_ERROR_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return data


def _measured(device: str) -> bool:
    """Whether ``device``'s op latencies come from its own measured tables."""
    from simulator import catalog
    from simulator.measured.device import measured_device_names

    try:
        measured = catalog.hardware_profile(device).measured_tables is not None
    except SpecError:  # a profile given by path that no longer loads: the wider band
        return False
    return measured and device in measured_device_names()


def model_error(device: str) -> ModelError:
    """The error band of ``device``'s simulated throughput (median APE, percent)."""
    data = {} if _on_priors() else _load()
    row = data.get("devices", {}).get(device)
    if row:
        return ModelError(float(row["throughput_median_ape_pct"]), str(row["basis"]))
    if data:
        group = "measured" if _measured(device) else "transferred"
        pooled = data.get("pooled", {}).get(group)
        if pooled:
            return ModelError(
                float(pooled["throughput_median_ape_pct"]), str(pooled["basis"]), pooled=True
            )
    return ModelError(*FALLBACK)


def latency_error(device: str) -> StatedLatency | None:
    """The stated TTFT / TPOT error of ``device`` (None: not validated, ``latency_note``)."""
    if _on_priors():
        return None
    section = _load().get("latency", {})
    row = section.get("devices", {}).get(device)
    pooled = row is None
    if pooled and _measured(device):
        row = section.get("pooled", {}).get("measured")
    if not row:
        return None
    return StatedLatency(
        ttft_median_ape_pct=float(row["ttft_median_ape_pct"]),
        ttft_bias_pct=float(row["ttft_bias_pct"]),
        tpot_median_ape_pct=float(row["tpot_median_ape_pct"]),
        tpot_bias_pct=float(row["tpot_bias_pct"]),
        points=int(row["points"]),
        basis=str(row["basis"]),
        pooled=pooled,
    )


def latency_note(device: str) -> str:
    """The stated TTFT / TPOT error in words, or why there is none."""
    return _note(latency_error(device))


def _note(lat: StatedLatency | None) -> str:
    if lat is not None:
        return lat.text()
    return ON_PRIORS if _on_priors() else NO_LATENCY_POINTS


def stated_error(device: str) -> dict[str, Any]:
    """Both, as ``plan run --json`` and the reports carry them."""
    band = model_error(device)
    lat = latency_error(device)
    return {
        "throughput_median_ape_pct": band.median_ape_pct,
        "throughput_basis": band.basis,
        "latency": None if lat is None else asdict(lat),
        "latency_note": _note(lat),
    }


def stated_error_line(device: str) -> str:
    """The line ``plan run`` prints under its op-latency line."""
    band = model_error(device)
    source = band.basis
    if band.basis != FALLBACK[1]:
        source = "InferenceMAX" + (", pooled" if band.pooled else "") + ", docs/validation.md"
    return (
        f"stated end-to-end error on {device}, median APE: throughput"
        f" {band.median_ape_pct:.0f} % ({source}); {latency_note(device)}"
    )


def marginal_ttft_text(device: str, ttft_s: float | None, target_s: float | None) -> str:
    """``; its P90 TTFT ... passes ... by less than the stated TTFT error ...`` where a
    simulated TTFT that meets ``target_s``, read at the device's stated TTFT bias (measured
    ~ simulated / (1 + bias)), would miss it; else nothing."""
    lat = latency_error(device)
    if not target_s or ttft_s is None or ttft_s != ttft_s or lat is None:
        return ""
    if lat.ttft_bias_pct >= 0 or ttft_s / (1 + lat.ttft_bias_pct / 100) <= target_s:
        return ""
    return (
        f"; its P90 TTFT ({ttft_s:.2f} s, worst seed) passes the {target_s:g} s target by less"
        f" than the simulator's stated TTFT error on {device} (simulated"
        f" {-lat.ttft_bias_pct:.0f} % low, median over its measured serving points): a"
        " marginal pass"
    )


# a device's latency row in model_error.json, besides its basis
LATENCY_FIGURES = (
    "ttft_median_ape_pct", "ttft_bias_pct", "tpot_median_ape_pct", "tpot_bias_pct", "points",
)  # fmt: skip


def latency_figures(errors: Sequence[tuple[float, float]]) -> dict[str, float | int]:
    """Median APE and median bias of TTFT and TPOT, to 0.1 point, over (TTFT error %, TPOT
    error %) pairs of simulated points, and their count: a latency row of model_error.json
    (``scripts/model_error.py`` writes them, ``stale_latency_devices`` checks them)."""
    ttft = [e[0] for e in errors]
    tpot = [e[1] for e in errors]
    return {
        "ttft_median_ape_pct": round(statistics.median(abs(e) for e in ttft), 1),
        "ttft_bias_pct": round(statistics.median(ttft), 1),
        "tpot_median_ape_pct": round(statistics.median(abs(e) for e in tpot), 1),
        "tpot_bias_pct": round(statistics.median(tpot), 1),
        "points": len(errors),
    }


def stale_latency_devices(errors: dict[str, list[tuple[float, float]]]) -> list[str]:
    """The devices whose stated TTFT / TPOT figures are not those of ``errors``, a whole silicon
    validation's (TTFT error %, TPOT error %) pairs by device (seed 0): the file is stale."""
    committed = _load().get("latency", {}).get("devices", {})
    stale = []
    for device in sorted(set(committed) | set(errors)):
        row, got = committed.get(device), errors.get(device)
        if row is None or not got or {k: row[k] for k in LATENCY_FIGURES} != latency_figures(got):
            stale.append(device)
    return stale
