"""The user's data folder: where it is, and that what ``calibrate`` / ``plan fit`` put there is
what the simulator then uses (before the built-in profile of the same name)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hardware_profiles import PROFILES_DIR
from simulator import catalog
from simulator.cost.latency import LatencyModels
from simulator.userdata import latency_models_file, plan_home, user_device_dir


def test_plan_home_and_the_user_device_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PLAN_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert plan_home() == tmp_path / "xdg" / "hybrid-capacity-planner"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert plan_home() == tmp_path / "h" / ".local" / "share" / "hybrid-capacity-planner"
    monkeypatch.setenv("PLAN_HOME", str(tmp_path / "ph"))
    assert user_device_dir("h100") == tmp_path / "ph" / "profiles" / "h100"
    assert latency_models_file("h100") == PROFILES_DIR / "h100" / "latency_models.json"
    assert latency_models_file("my-gpu") is None
    for name in ("h100", "my-gpu"):  # the user's fit first
        user = user_device_dir(name) / "latency_models.json"
        user.parent.mkdir(parents=True)
        user.write_text("{}")
        assert latency_models_file(name) == user


def test_a_profile_in_the_user_folder_shadows_the_built_in_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLAN_HOME", str(tmp_path))
    catalog.hardware_profile.cache_clear()
    try:
        assert not catalog.hardware_profile("h100").calibrated
        user = user_device_dir("h100")
        user.mkdir(parents=True)
        text = (PROFILES_DIR / "h100" / "profile.yaml").read_text()
        assert "calibrated: false" in text
        (user / "profile.yaml").write_text(text.replace("calibrated: false", "calibrated: true"))
        catalog.hardware_profile.cache_clear()
        assert catalog.hardware_profile("h100").calibrated
        # a new device calibrated by the user is listed and found by name
        shutil.copytree(user, user.parent / "my-gpu")
        p = user.parent / "my-gpu" / "profile.yaml"
        p.write_text(p.read_text().replace("name: h100", "name: my-gpu", 1))
        assert "my-gpu" in catalog.device_names()
        assert catalog.hardware_profile("my-gpu").name == "my-gpu"
    finally:
        catalog.hardware_profile.cache_clear()


def test_the_simulator_reads_the_users_fitted_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLAN_HOME", str(tmp_path))
    profile = catalog.hardware_profile("h100")
    built_in = LatencyModels.for_device(profile, use_tables=False).fitted["gemm"]
    doc = json.loads((PROFILES_DIR / "h100" / "latency_models.json").read_text())
    gemm = next(m for m in doc["models"] if m["op_class"] == "gemm")
    gemm["roofline"]["compute_efficiency"] /= 2  # a fit of the user's: half as fast
    user = user_device_dir("h100")
    user.mkdir(parents=True)
    (user / "latency_models.json").write_text(json.dumps(doc))
    mine = LatencyModels.for_device(profile, use_tables=False).fitted["gemm"]
    assert mine != built_in
    assert mine.roofline is not None
    assert built_in.roofline is not None
    assert mine.roofline.compute_efficiency == pytest.approx(
        built_in.roofline.compute_efficiency / 2
    )
