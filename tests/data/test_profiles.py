"""Hardware profiles and cost models: they load, their numbers are sane, and they match the csvs."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from hardware_profiles import PROFILES_DIR
from simulator.catalog import cost_models, device_names, hardware_profile
from simulator.specs import HardwareProfile, SpecError, load

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SPECS_CSV = SHARED_DATA / "hardware" / "accelerator_specs.csv"
TCO_CSV = SHARED_DATA / "hardware" / "semianalysis_tco_power.csv"

# Every device the project issue asks for.
ISSUE_DEVICES = [
    "mi355x",
    "b300",
    "gb300",
    "b200",
    "gb200",
    "h200",
    "h100",
    "mi300x",
    "mi325x",
    "d270",
]

# accelerator_specs.csv `gpu` column -> profile name (Gaudi 3 has no profile).
CSV_ROW_TO_PROFILE = {
    "H100": "h100",
    "H200": "h200",
    "B200": "b200",
    "B300 (Blackwell Ultra)": "b300",
    "GB200 (per GPU in NVL72)": "gb200",
    "GB300 (per GPU in NVL72)": "gb300",
    "MI300X": "mi300x",
    "MI325X": "mi325x",
    "MI355X": "mi355x",
    "Crescent Island (Xe3P)": "d270",
}

# The csv column of each SemiAnalysis cost model.
SEMIANALYSIS_COLUMNS = {
    "semianalysis_tco_hyperscaler": "tco_hyperscaler_usd_per_gpu_hr",
    "semianalysis_tco_neocloud": "tco_neocloud_usd_per_gpu_hr",
    "semianalysis_rental_3yr": "rental_3yr_usd_per_gpu_hr",
}

PROFILE_FILES = sorted(PROFILES_DIR.glob("*/profile.yaml"))


def _read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        pytest.skip(f"{path} not found (csv cross-checks need ../shared/data beside the checkout)")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _close(a: float, b: float, rel: float = 0.01) -> bool:
    return abs(a - b) <= rel * abs(b)


# (a) + (b): every profile loads and is named after its folder; every issue device exists


def test_profiles_exist() -> None:
    assert PROFILE_FILES, f"no */profile.yaml under {PROFILES_DIR}"


@pytest.mark.parametrize("path", PROFILE_FILES, ids=lambda p: p.parent.name)
def test_profile_loads_and_is_named_after_its_folder(path: Path) -> None:
    profile = hardware_profile(path.parent.name)
    assert profile.name == path.parent.name
    # loading by path gives the same profile
    assert load(HardwareProfile, path) == profile


@pytest.mark.parametrize("device", ISSUE_DEVICES)
def test_issue_device_has_a_profile(device: str) -> None:
    assert device in device_names()
    assert hardware_profile(device).name == device


@pytest.mark.parametrize("path", PROFILE_FILES, ids=lambda p: p.parent.name)
def test_numbers_are_yaml_numbers_not_strings(path: Path) -> None:
    """PyYAML reads `8e12` / `2.5e15` as strings; pydantic would coerce them silently."""
    number = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key != "sources":
                    walk(value, f"{where}.{key}")
        elif isinstance(node, str):
            assert not number.match(node.strip()), f"{path}: {where} is the string {node!r}"

    walk(yaml.safe_load(path.read_text()), "")


# (c): sanity relations that catch unit mistakes (GB vs GiB, bits vs bytes, TFLOPS vs FLOP/s)


@pytest.mark.parametrize("device", ISSUE_DEVICES)
def test_profile_sanity(device: str) -> None:
    p = hardware_profile(device)
    assert 1e12 <= p.memory_bw_bytes_per_s <= 2e13
    peak = p.peak_flops_per_s
    assert 1e14 <= peak.bf16 <= 1e16
    if peak.fp8 is not None:
        assert peak.fp8 >= peak.bf16
    if peak.fp4 is not None:
        assert peak.fp8 is not None
        assert peak.fp4 >= peak.fp8
    assert 0.85 * p.memory_bytes < p.usable_memory_bytes <= 1.08 * p.memory_bytes
    assert 1e10 <= p.memory_bytes <= 1e12
    if p.scale_up is not None:
        assert 1e10 <= p.scale_up.bw_bytes_per_s <= 2e12
        assert p.scale_up.domain_size >= 2
        assert p.scale_up.latency_s < 1e-3
    assert 1e10 <= p.host_link.bw_bytes_per_s <= 2e12
    assert p.host_link.latency_s < 1e-3
    assert 1e10 <= p.host_dram_bytes_per_gpu <= 1e13
    assert 100 <= p.power_w <= 2000
    r = p.roofline
    assert r.kernel_launch_s < 1e-4
    assert r.cpu_step_overhead_s < 1e-1
    assert not p.calibrated


@pytest.mark.parametrize("device", ISSUE_DEVICES)
def test_every_source_is_substantive(device: str) -> None:
    """Each source names where its number came from (or says it is an assumption)."""
    for field, text in hardware_profile(device).sources.items():
        assert len(text) >= 20, f"{device}: sources.{field} is too terse: {text!r}"


def test_chips_without_fp4() -> None:
    for device in ("h100", "h200", "mi300x", "mi325x"):
        assert hardware_profile(device).peak_flops_per_s.fp4 is None, device


def test_announced_pcie_card() -> None:
    d270 = hardware_profile("d270")
    assert d270.status == "announced"
    assert d270.vendor == "intel"
    assert d270.host_link.kind == "pcie"
    assert d270.scale_up is None or d270.scale_up.kind == "pcie"
    assert "assumption" in d270.sources["peak_flops_per_s"]  # bf16 is half of fp8 by assumption


def test_nvl72_domains() -> None:
    for device in ("gb200", "gb300"):
        p = hardware_profile(device)
        assert p.scale_up is not None
        assert p.scale_up.domain_size == 72
        assert p.scale_up.host_gpus == 4  # a compute tray: a TP8 instance spans two hosts
        assert p.host_link.kind == "nvlink_c2c"


# (d): cross-check against ../shared/data/hardware/accelerator_specs.csv


def _csv_float(text: str) -> float | None:
    text = text.strip().lstrip("~")
    return float(text) if text else None


def _spec_rows() -> list[tuple[str, dict[str, str]]]:
    rows = _read_csv(SPECS_CSV)
    pairs = [(CSV_ROW_TO_PROFILE[r["gpu"]], r) for r in rows if r["gpu"] in CSV_ROW_TO_PROFILE]
    assert len(pairs) == len(CSV_ROW_TO_PROFILE), "a csv row this test knows was renamed or removed"
    return pairs


def test_peaks_and_bandwidths_match_the_specs_csv() -> None:
    checked = 0
    for device, row in _spec_rows():
        p = hardware_profile(device)
        for dtype in ("bf16", "fp8", "fp4"):
            tflops = _csv_float(row[f"{dtype}_dense_tflops"])
            if tflops is not None:
                value = getattr(p.peak_flops_per_s, dtype)
                assert value is not None, f"{device}: csv has {dtype} but the profile lacks it"
                assert _close(value, tflops * 1e12), f"{device} {dtype}: {value} vs csv {tflops}"
                checked += 1
        tb_s = _csv_float(row["hbm_tb_s"])
        if tb_s is not None:
            assert _close(p.memory_bw_bytes_per_s, tb_s * 1e12), f"{device} HBM bandwidth"
            checked += 1
    assert checked >= 30


def test_memory_matches_the_specs_csv() -> None:
    """csv hbm_gb is the datasheet GB figure, or (GB200) the runtime-reported GiB figure."""
    for device, row in _spec_rows():
        p = hardware_profile(device)
        gb = _csv_float(row["hbm_gb"])
        assert gb is not None, device
        nominal_ok = _close(p.memory_bytes, gb * 1e9)
        runtime_gib_ok = _close(p.usable_memory_bytes / 2**30, gb)
        assert nominal_ok or runtime_gib_ok, f"{device}: csv {gb} GB vs profile"


def test_scale_up_matches_the_specs_csv() -> None:
    for device, row in _spec_rows():
        p = hardware_profile(device)
        bidir = _csv_float(row["scale_up_gb_s_per_gpu_bidir"])
        if bidir is None:
            continue
        assert p.scale_up is not None, device
        # csv: bidirectional GB/s per GPU; profile: B/s per GPU per direction
        assert _close(p.scale_up.bw_bytes_per_s, bidir * 1e9 / 2), f"{device} scale-up bandwidth"
        domain = re.match(r"\d+", row["scale_up_domain"])
        assert domain is not None, device
        assert p.scale_up.domain_size == int(domain.group()), f"{device} scale-up domain"


def test_power_matches_the_specs_csv() -> None:
    for device, row in _spec_rows():
        p = hardware_profile(device)
        tdp = row["tdp_w"].strip().lstrip("~")
        if not tdp:
            continue
        if "-" in tdp:  # B300: a range (1100-1400 W) across sources
            low, high = (float(x) for x in tdp.split("-"))
            assert low <= p.power_w <= high, device
        else:
            assert _close(p.power_w, float(tdp)), device


# (e): cost models


def test_cost_models_load_and_price_known_devices() -> None:
    models = cost_models()
    expected = {"agentx", *SEMIANALYSIS_COLUMNS}
    assert expected <= set(models)
    known = set(device_names())
    for cm in models.values():
        assert cm.usd_per_gpu_hour, cm.name
        assert cm.source.strip(), cm.name
        assert cm.description.strip(), cm.name
        for device, price in cm.usd_per_gpu_hour.items():
            assert device in known, f"{cm.name} prices unknown device {device!r}"
            assert price > 0
        for device, kw in cm.all_in_power_kw_per_gpu.items():
            assert device in known, f"{cm.name} gives power for unknown device {device!r}"
            assert 0.1 < kw < 10
        assert "d270" not in cm.usd_per_gpu_hour  # unannounced price
        assert "d270-480gb" not in cm.usd_per_gpu_hour


def test_agentx_prices() -> None:
    agentx = cost_models()["agentx"]
    assert agentx.price("mi355x") == 1.50
    assert agentx.price("b300") == 2.26
    with pytest.raises(KeyError, match="h100"):
        agentx.price("h100")


def test_semianalysis_placeholders_are_disclosed() -> None:
    for name in SEMIANALYSIS_COLUMNS:
        description = cost_models()[name].description
        assert "placeholder" in description, name
        assert "1.2x" in description, name


@pytest.mark.parametrize("name", sorted(SEMIANALYSIS_COLUMNS))
def test_semianalysis_prices_match_the_csv(name: str) -> None:
    rows = {r["gpu"]: r for r in _read_csv(TCO_CSV)}
    cm = cost_models()[name]
    column = SEMIANALYSIS_COLUMNS[name]
    assert set(cm.usd_per_gpu_hour) == set(rows)
    assert set(cm.all_in_power_kw_per_gpu) == set(rows)
    for device, row in rows.items():
        assert cm.usd_per_gpu_hour[device] == float(row[column]), f"{name} {device}"
        assert cm.all_in_power_kw_per_gpu[device] == float(row["all_in_power_kw_per_gpu"])


# (f): a bad profile is one SpecError naming the file and the field


def _valid_profile() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((PROFILES_DIR / "h100" / "profile.yaml").read_text())
    return data


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_valid_copy_loads(tmp_path: Path) -> None:
    assert load(HardwareProfile, _write(tmp_path, _valid_profile())).name == "h100"


def test_negative_memory_is_rejected(tmp_path: Path) -> None:
    data = _valid_profile()
    data["memory_bytes"] = -1
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as err:
        load(HardwareProfile, path)
    assert err.value.file == str(path)
    assert err.value.field == "memory_bytes"
    assert str(path) in str(err.value)
    assert "memory_bytes" in str(err.value)


def test_unknown_field_is_rejected(tmp_path: Path) -> None:
    data = _valid_profile()
    data["hbm_gbytes"] = 80
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as err:
        load(HardwareProfile, path)
    assert err.value.field == "hbm_gbytes"
    assert str(path) in str(err.value)
    assert "unknown field" in str(err.value)


def test_unknown_nested_field_is_rejected(tmp_path: Path) -> None:
    data = _valid_profile()
    data["scale_up"]["bw_gbytes_per_s"] = 450
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as err:
        load(HardwareProfile, path)
    assert err.value.field == "scale_up.bw_gbytes_per_s"
    assert str(path) in str(err.value)


def test_missing_source_is_rejected(tmp_path: Path) -> None:
    data = _valid_profile()
    del data["sources"]["power_w"]
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as err:
        load(HardwareProfile, path)
    assert str(path) in str(err.value)
    assert "power_w" in str(err.value)


def test_empty_source_is_rejected(tmp_path: Path) -> None:
    data = _valid_profile()
    data["sources"]["roofline"] = ""
    path = _write(tmp_path, data)
    with pytest.raises(SpecError, match="roofline"):
        load(HardwareProfile, path)


def test_source_for_unknown_field_is_rejected(tmp_path: Path) -> None:
    data = _valid_profile()
    data["sources"]["tdp"] = "somewhere"
    path = _write(tmp_path, data)
    with pytest.raises(SpecError, match="tdp"):
        load(HardwareProfile, path)


def test_gib_gb_mixup_is_rejected(tmp_path: Path) -> None:
    data = _valid_profile()
    data["usable_memory_bytes"] = data["memory_bytes"] * 1.1
    path = _write(tmp_path, data)
    with pytest.raises(SpecError, match="usable_memory_bytes"):
        load(HardwareProfile, path)


def test_efficiency_above_one_is_rejected(tmp_path: Path) -> None:
    data = _valid_profile()
    data["roofline"]["gemm_compute_efficiency"] = 1.5
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as err:
        load(HardwareProfile, path)
    assert err.value.field == "roofline.gemm_compute_efficiency"
    assert str(path) in str(err.value)


# (g): this year's workstation devices and the D270 480 GB variant (docs/devices.md)

NEW_DEVICES = ["rtx4090", "rtx5090", "rtx-pro-6000", "m3-ultra", "m4-max", "d270-480gb"]
APPLE = ["m3-ultra", "m4-max"]
RTX = ["rtx4090", "rtx5090", "rtx-pro-6000"]


@pytest.mark.parametrize("device", NEW_DEVICES)
def test_new_device_is_sane_and_sourced(device: str) -> None:
    p = hardware_profile(device)
    assert device in device_names()
    assert 5e11 <= p.memory_bw_bytes_per_s <= 2e12  # GDDR, LPDDR and unified memory
    assert 1e13 <= p.peak_flops_per_s.bf16 <= 1e15
    assert 2e10 <= p.memory_bytes <= 6e11
    assert p.usable_memory_bytes <= 1.08 * p.memory_bytes
    assert p.host_link.latency_s < 1e-3
    assert not p.calibrated
    assert p.measured_tables is None  # no public tables: priors or the transfer rule
    for field, text in p.sources.items():
        assert len(text) >= 20, f"{device}: sources.{field} is too terse: {text!r}"


@pytest.mark.parametrize("device", APPLE)
def test_apple_unified_memory_single_device(device: str) -> None:
    p = hardware_profile(device)
    assert (p.vendor, p.runtime, p.scale_up, p.host_link.kind) == ("apple", "mlx", None, "unified")
    assert p.os_reserve_bytes is not None
    assert p.memory_bytes % 2**30 == 0  # Apple's GB are binary
    # the default GPU-wired cap: 0.75 of the memory, the rest kept by macOS
    assert p.usable_memory_bytes == pytest.approx(0.75 * p.memory_bytes)
    assert p.usable_memory_bytes + p.os_reserve_bytes == pytest.approx(p.memory_bytes)
    assert "assumption" in p.sources["usable_memory_bytes"].lower()
    assert "iogpu.wired_limit_mb" in p.sources["usable_memory_bytes"]
    assert (p.peak_flops_per_s.fp8, p.peak_flops_per_s.fp4) == (None, None)


@pytest.mark.parametrize("device", RTX)
def test_rtx_cards_talk_over_pcie(device: str) -> None:
    p = hardware_profile(device)
    assert (p.vendor, p.runtime, p.os_reserve_bytes) == ("nvidia", "vllm", None)
    assert p.scale_up is not None
    assert p.scale_up.kind == "pcie"
    assert p.scale_up.bw_bytes_per_s == p.host_link.bw_bytes_per_s
    assert "NVLink" in p.sources["scale_up"]


def test_geforce_link_pays_for_missing_p2p() -> None:
    pro = hardware_profile("rtx-pro-6000").roofline.link_efficiency
    for device in ("rtx4090", "rtx5090"):
        p = hardware_profile(device)
        assert "peer-to-peer" in p.sources["scale_up"]
        assert p.roofline.link_efficiency < pro


def test_d270_480gb_is_d270_with_more_memory() -> None:
    base, big = hardware_profile("d270"), hardware_profile("d270-480gb")
    memory = {"memory_bytes", "usable_memory_bytes"}
    same = set(HardwareProfile.model_fields) - memory - {"name", "display_name", "sources"}
    assert {f: getattr(big, f) for f in same} == {f: getattr(base, f) for f in same}
    assert big.memory_bytes == 3 * base.memory_bytes == 4.8e11
    assert big.usable_memory_bytes == pytest.approx(3 * base.usable_memory_bytes)
    assert "480 GB" in big.sources["memory_bytes"]


def test_runtime_defaults_to_vllm() -> None:
    assert {hardware_profile(d).runtime for d in ISSUE_DEVICES} == {"vllm"}
    assert "runtime" not in _valid_profile()
