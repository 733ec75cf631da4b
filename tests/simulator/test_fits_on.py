"""fits_on answers over the devices given (names and profile paths), else the catalog, and
agrees with fits: a device on which the model fits at TP t never needs more than t GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from simulator import catalog
from simulator.cli import app
from simulator.fits import fewest_gpus, fits_on, holds_model_alone
from simulator.memory import plan_memory
from simulator.specs import HardwareProfile, ServingConfig, load


def big_d270(tmp_path: Path) -> str:
    """The issue's custom D270 with 480 GB, passed by path (its name stays ``d270``)."""
    data = catalog.hardware_profile("d270").model_dump(mode="json")
    data["memory_bytes"], data["usable_memory_bytes"] = 4.8e11, 4.608e11
    path = tmp_path / "d270-480.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def test_a_device_passed_by_path_is_the_answer_when_it_fits(tmp_path: Path) -> None:
    path = big_d270(tmp_path)
    big = load(HardwareProfile, path)
    card = catalog.model_card("qwen3-235b-a22b-fp8")  # ~236 GB of FP8 weights
    r = plan_memory(card, big, ServingConfig(), 8192, devices=[big])
    assert r.fits
    assert r.fits_on == "1x d270"  # it was "1x mi325x": the catalog, not the device given
    assert r.fewest_gpus_model_alone == 1
    h100 = catalog.hardware_profile("h100")
    assert fits_on(card, ServingConfig(), [h100, big]) == "1x d270"
    assert (
        fits_on(card, ServingConfig(), [h100])
        == f"{fewest_gpus(card, ServingConfig(), h100)}x h100"
    )


def test_the_cli_answers_over_the_devices_given(tmp_path: Path) -> None:
    path = big_d270(tmp_path)
    args = ["memory", "--model", "qwen3-235b-a22b-fp8", "--device", path]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["fits"], data["fits_on"], data["fewest_gpus_model_alone"]) == (True, "1x d270", 1)
    text = CliRunner().invoke(app, [*args, "--device", "h100"]).stdout
    assert "fits on: 1x d270" in text
    assert "fewest GPUs" in text


def test_without_devices_the_catalog_answers() -> None:
    result = CliRunner().invoke(app, ["memory", "--model", "llama-3.1-8b", "--json"])
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["device"] for r in rows] == catalog.device_names()
    every = [catalog.hardware_profile(n) for n in catalog.device_names()]
    smallest = min(every, key=lambda d: (d.usable_memory_bytes, d.name))
    assert {r["fits_on"] for r in rows} == {f"1x {smallest.name}"}  # 16 GB of BF16 fits anywhere


# (model, device, tp, context): fits at tp => the model alone fits at tp, and fits_on over
# that device alone names no more GPUs than tp
AGREE = [
    ("llama-3.1-8b", "h100", 1, 8192),
    ("llama-3.3-70b", "h100", 1, 8192),
    ("llama-3.3-70b", "h100", 2, 8192),
    ("llama-3.3-70b", "h100", 4, 100_000),
    ("qwen3-235b-a22b-fp8", "h200", 2, 8192),
    ("qwen3-235b-a22b-fp8", "h200", 4, 32_000),
    ("deepseek-v3", "h200", 8, 8192),
    ("gpt-oss-120b", "h100", 1, 8192),
]


@pytest.mark.parametrize(("model", "device", "tp", "context"), AGREE)
def test_fits_on_agrees_with_fits(model: str, device: str, tp: int, context: int) -> None:
    card = catalog.model_card(model)
    profile = catalog.hardware_profile(device)
    serving = ServingConfig(tp=tp)
    r = plan_memory(card, profile, serving, context, devices=[profile])
    alone = holds_model_alone(card, serving, profile)
    assert alone == (r.kv_cache_bytes_per_gpu > 0)  # the test fits applies before sequences
    if r.fits:
        assert alone
        assert r.fewest_gpus_model_alone is not None
        assert r.fewest_gpus_model_alone <= tp
        count = int(r.fits_on.split("x ")[0])
        assert count <= tp
        assert r.fits_on.endswith(f"x {device}")
    if tp == 1:
        assert (r.fits_on == f"1x {device}") == alone


def test_fits_on_needs_a_device() -> None:
    with pytest.raises(ValueError, match="at least one device"):
        fits_on(catalog.model_card("llama-3.1-8b"), ServingConfig(), [])


def test_every_device_leaves_out_those_the_knobs_do_not_suit_and_says_so() -> None:
    # TP 8 exceeds the domain of the PCIe and single-package devices: named, it is bad input
    code = CliRunner().invoke(app, ["memory", "--model", "llama-3.1-8b", "--tp", "8",
                                    "--device", "d270"]).exit_code  # fmt: skip
    assert code == 2
    every = [catalog.hardware_profile(n) for n in catalog.device_names()]
    narrow = sorted(d.name for d in every if (d.scale_up.domain_size if d.scale_up else 1) < 8)
    assert "d270" in narrow
    result = CliRunner().invoke(app, ["memory", "--model", "llama-3.1-8b", "--tp", "8"])
    assert result.exit_code == 0, result.stderr
    for name in narrow:
        assert f"not planned on {name}: serving.tp: tp 8 exceeds the scale-up domain" in (
            result.stdout
        )
    rows = json.loads(
        CliRunner().invoke(app, ["memory", "--model", "llama-3.1-8b", "--tp", "8", "--json"]).stdout
    )
    assert sorted({r["device"] for r in rows} | set(narrow)) == catalog.device_names()
