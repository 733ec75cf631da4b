"""The stated end-to-end errors: scripts/model_error.py restating the validations, and the
lookups the run line, the reports and size.json read them through."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hardware_profiles import PROFILES_DIR
from simulator.planner import uncertainty
from simulator.planner.uncertainty import (
    FALLBACK,
    NO_LATENCY_POINTS,
    StatedLatency,
    latency_error,
    model_error,
    stated_error_line,
)

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "model_error.py"
SILICON_COLUMNS = ("device", "status", "err_ttft_pct", "err_tpot_pct")


def _write_csv(path: Path, columns: tuple[str, ...], rows: list[tuple[object, ...]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows(rows)
    return path


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, check=False
    )


def test_the_script_restates_median_ape_and_bias_and_keeps_the_other_section(
    tmp_path: Path,
) -> None:
    points = _write_csv(
        tmp_path / "points.csv",
        SILICON_COLUMNS,
        [
            ("h100", "ok", -30.0, 5.0),
            ("h100", "ok", -10.0, -5.0),
            ("h100", "ok", 20.0, -1.0),
            ("h100", "failed", 500.0, 500.0),  # not simulated: not counted
            ("b200", "ok", -40.0, 2.0),
        ],
    )
    out = tmp_path / "model_error.json"
    kept = {"devices": {"h100": {"throughput_median_ape_pct": 9.9, "points": 1, "basis": "x"}}}
    out.write_text(json.dumps(kept))
    done = _script("--silicon", str(points), "--out", str(out))
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert data["devices"] == kept["devices"]  # the throughput section is left as it was
    h100 = data["latency"]["devices"]["h100"]
    assert (h100["ttft_median_ape_pct"], h100["ttft_bias_pct"]) == (20.0, -10.0)
    assert (h100["tpot_median_ape_pct"], h100["tpot_bias_pct"]) == (5.0, -1.0)
    assert h100["points"] == 3
    pooled = data["latency"]["pooled"]["measured"]
    assert pooled["points"] == 4
    assert (pooled["ttft_median_ape_pct"], pooled["ttft_bias_pct"]) == (25.0, -20.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give --inferencemax, --silicon or both"),
        (("--silicon", "{bad}"), "missing column(s) err_tpot_pct"),
        (("--silicon", "{empty}"), "no simulated point (status ok)"),
        (("--silicon", "{nowhere}"), "cannot read it (FileNotFoundError"),
        (("--inferencemax", "{bad}"), "missing column(s) engine, err_tput_pct"),
    ],
)
def test_the_script_refuses_what_it_cannot_read(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    bad = _write_csv(
        tmp_path / "bad.csv", ("device", "status", "err_ttft_pct"), [("h100", "ok", 1)]
    )
    empty = _write_csv(tmp_path / "empty.csv", SILICON_COLUMNS, [])
    nowhere = tmp_path / "nowhere.csv"
    out = tmp_path / "model_error.json"
    given = (a.format(bad=bad, empty=empty, nowhere=nowhere) for a in args)
    done = _script(*given, "--out", str(out))
    assert done.returncode == 2, done.stdout
    assert message in done.stderr
    assert not out.exists()


FILE = {
    "devices": {"h100": {"throughput_median_ape_pct": 9.9, "points": 90, "basis": "own"}},
    "pooled": {
        "measured": {"throughput_median_ape_pct": 7.4, "points": 389, "basis": "pooled m"},
        "transferred": {"throughput_median_ape_pct": 28.2, "points": 403, "basis": "pooled t"},
    },
    "latency": {
        "devices": {
            "h100": {
                "ttft_median_ape_pct": 17.1,
                "ttft_bias_pct": -16.8,
                "tpot_median_ape_pct": 9.8,
                "tpot_bias_pct": -3.8,
                "points": 222,
                "basis": "own points",
            }
        },
        "pooled": {
            "measured": {
                "ttft_median_ape_pct": 19.7,
                "ttft_bias_pct": -18.4,
                "tpot_median_ape_pct": 8.5,
                "tpot_bias_pct": 3.4,
                "points": 1212,
                "basis": "pooled points",
            }
        },
    },
}


@pytest.mark.parametrize(
    ("device", "ape", "pooled"),
    [
        ("h100", 17.1, False),  # its own points
        ("gb200", 19.7, True),  # measured tables, no serving point: the measured devices' figure
        ("mi355x", None, None),  # transferred tables: not validated, and it says so
    ],
)
def test_latency_error_is_the_devices_own_else_pooled_else_none(
    monkeypatch: pytest.MonkeyPatch, device: str, ape: float | None, pooled: bool | None
) -> None:
    from simulator.measured.package import tables_available

    if device == "gb200" and not tables_available():
        pytest.skip("gb200 counts as measured only with the measured extra installed")
    monkeypatch.setattr(uncertainty, "_load", lambda: FILE)
    monkeypatch.setattr(uncertainty, "_on_priors", lambda: False)
    lat = latency_error(device)
    line = stated_error_line(device)
    if ape is None:
        assert lat is None
        assert line.endswith(NO_LATENCY_POINTS)
        assert model_error(device).median_ape_pct == 28.2  # pooled transferred band
        return
    assert lat is not None
    assert (lat.ttft_median_ape_pct, lat.pooled) == (ape, pooled)
    assert ("pooled" in line) is pooled
    assert lat.text() in line


def test_without_the_file_the_published_band_stands_and_no_latency_error_is_claimed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(uncertainty, "_load", dict)
    assert model_error("h100").median_ape_pct == FALLBACK[0]
    assert latency_error("h100") is None
    assert FALLBACK[1] in stated_error_line("h100")


@pytest.mark.parametrize(
    ("ttft", "tpot", "side"),
    [(-17.0, -4.0, "simulated lower: "), (12.0, 3.0, "simulated higher: "), (-14.6, 3.5, "")],
)
def test_the_text_names_the_side_only_when_both_agree(ttft: float, tpot: float, side: str) -> None:
    lat = StatedLatency(15.0, ttft, 6.1, tpot, 157, "b")
    text = lat.text()
    assert f"({side}median bias {ttft:+.0f} % / {tpot:+.0f} %" in text
    assert "simulated" not in text or side


def test_the_committed_figures_are_the_published_validation() -> None:
    """model_error.json's latency section and docs/validation-silicon.md's per-system table
    come from the same run: regenerating one without the other fails here."""
    doc = (ROOT / "docs" / "validation-silicon.md").read_text()
    section = doc[doc.index("Per system:") : doc.index("Per model and system:")]
    rows = re.findall(
        r"^\| all \| (\w+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([-+\d.]+) \| ([-+\d.]+) \|$",
        section,
        re.M,
    )
    assert rows
    committed = json.loads((PROFILES_DIR / "model_error.json").read_text())["latency"]["devices"]
    assert sorted(committed) == sorted(r[0] for r in rows)
    for device, n, ttft, tpot, ttft_bias, tpot_bias in rows:
        c = committed[device]
        assert c["points"] == int(n), device
        assert (c["ttft_median_ape_pct"], c["tpot_median_ape_pct"]) == (float(ttft), float(tpot))
        assert (c["ttft_bias_pct"], c["tpot_bias_pct"]) == (float(ttft_bias), float(tpot_bias))


@pytest.mark.parametrize(
    ("device", "ttft_s", "target_s", "marginal"),
    [
        ("h100", 1.8, 2.0, True),  # 1.8 s at -16.8 %: ~2.16 s measured
        ("h100", 1.6, 2.0, False),  # ~1.92 s: still a pass
        ("h100", 1.8, None, False),  # no TTFT target
        ("h100", float("nan"), 2.0, False),  # no TTFT simulated
        ("mi355x", 1.9, 2.0, False),  # no stated TTFT error: nothing to read it at
    ],
)
def test_a_ttft_pass_is_marginal_only_inside_the_stated_bias(
    monkeypatch: pytest.MonkeyPatch,
    device: str,
    ttft_s: float,
    target_s: float | None,
    marginal: bool,
) -> None:
    monkeypatch.setattr(uncertainty, "_load", lambda: FILE)
    monkeypatch.setattr(uncertainty, "_on_priors", lambda: False)
    text = uncertainty.marginal_ttft_text(device, ttft_s, target_s)
    assert ("a marginal pass" in text) is marginal
    if marginal:
        assert "simulated 17 % low" in text


def test_a_pessimistic_ttft_never_makes_a_pass_marginal(monkeypatch: pytest.MonkeyPatch) -> None:
    high = json.loads(json.dumps(FILE))
    high["latency"]["devices"]["h100"]["ttft_bias_pct"] = 12.0
    monkeypatch.setattr(uncertainty, "_load", lambda: high)
    monkeypatch.setattr(uncertainty, "_on_priors", lambda: False)
    assert uncertainty.marginal_ttft_text("h100", 1.99, 2.0) == ""


def test_on_roofline_priors_the_validated_figures_do_not_apply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PLAN_MEASURED=off (or the extra not installed): every figure of the file was taken
    with the measured tables, so the band is the last priors-based one and no latency error
    is claimed, whatever the file holds."""
    monkeypatch.setattr(uncertainty, "_load", lambda: FILE)
    monkeypatch.setenv("PLAN_MEASURED", "off")
    assert uncertainty._on_priors()
    assert model_error("h100").median_ape_pct == FALLBACK[0]
    assert latency_error("h100") is None
    line = stated_error_line("h100")
    assert line.endswith(uncertainty.ON_PRIORS)
    assert FALLBACK[1] in line
    assert uncertainty.marginal_ttft_text("h100", 1.99, 2.0) == ""


# one device's (TTFT error %, TPOT error %) pairs: TTFT median APE 17.1, bias -16.8; TPOT 5.0,
# -3.8; 3 points, as the file below says
RUN = [(-20.0, -5.0), (-16.8, -3.8), (17.1, 9.8)]
STATED = {
    "latency": {
        "devices": {
            "h100": {
                "ttft_median_ape_pct": 17.1, "ttft_bias_pct": -16.8, "tpot_median_ape_pct": 5.0,
                "tpot_bias_pct": -3.8, "points": 3, "basis": "b",
            }
        }
    }
}  # fmt: skip


@pytest.mark.parametrize(
    ("run", "stale"),
    [
        ({"h100": RUN}, []),  # this run's figures are the file's
        ({"h100": [(-20.0, -5.0), (-16.84, -3.8), (17.14, 9.8)]}, []),  # the same to 0.1
        ({"h100": [(-20.0, -5.0), (-17.2, -4.7), (17.6, 9.6)]}, ["h100"]),  # another run
        ({"h100": [*RUN, (-16.8, -3.8)]}, ["h100"]),  # another set of points
        ({"h100": RUN, "b200": RUN}, ["b200"]),  # a device the file lacks
        ({}, ["h100"]),  # a device the run lacks
    ],
)
def test_a_stale_latency_section_is_found(
    monkeypatch: pytest.MonkeyPatch, run: dict[str, list[tuple[float, float]]], stale: list[str]
) -> None:
    monkeypatch.setattr(uncertainty, "_load", lambda: STATED)
    assert uncertainty.stale_latency_devices(run) == stale
