"""Card aliases (``deepseek-r1`` is the deepseek-v3 card) and this year's workstation devices
end to end: `plan memory`, `plan step` and `plan models list` on them (docs/devices.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from simulator import catalog
from simulator.cli import app

runner = CliRunner()


def plan_json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


# ------------------------------------------------------------------------------ aliases


def test_every_alias_names_a_card_and_no_card() -> None:
    names = set(catalog.model_names())
    for alias, card in catalog.CARD_ALIASES.items():
        assert card in names, alias
        assert alias not in names, f"{alias} is a card of its own: drop the alias"
        assert alias == alias.lower()


@pytest.mark.parametrize(("alias", "card"), sorted(catalog.CARD_ALIASES.items()))
def test_alias_resolves_to_its_card(alias: str, card: str) -> None:
    assert catalog.resolve_model(alias) == card
    assert catalog.resolve_model(alias.upper()) == card
    assert catalog.model_card(alias) == catalog.model_card(card)
    assert alias in catalog.model_aliases(card)


def test_deepseek_r1_plans_as_deepseek_v3() -> None:
    args = ["memory", "--device", "h200", "--tp", "8", "--context", "32000"]
    r1 = plan_json(*args, "--model", "deepseek-r1")
    v3 = plan_json(*args, "--model", "deepseek-v3")
    assert r1 == v3
    assert catalog.resolve_model("DeepSeek-R1") == "deepseek-v3"


def test_unknown_model_lists_the_aliases() -> None:
    result = runner.invoke(app, ["memory", "--model", "deepseek-r9", "--device", "h200"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "unknown model 'deepseek-r9'" in lines[0]
    assert "deepseek-r1 = deepseek-v3" in lines[0]


def test_models_list_and_show_know_the_aliases() -> None:
    result = runner.invoke(app, ["models", "list"], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    for alias in catalog.CARD_ALIASES:
        assert f"= {alias}" in result.stdout
    shown = plan_json("profiles", "show", "deepseek-r1")
    assert shown["name"] == "deepseek-v3"


# ------------------------------------------------------------------------------ devices


@pytest.mark.parametrize(("device", "seqs"), [("rtx4090", 4), ("m3-ultra", 334)])
def test_llama_8b_memory_on_workstations(device: str, seqs: int) -> None:
    """llama-3.1-8b in BF16 (15 GiB of weights) at 8,192 tokens: 4 sequences on 23.55 GiB,
    334 on the M3 Ultra's 384 GiB (macOS's default GPU-wired cap of 512 GiB)."""
    r = plan_json("memory", "--model", "llama-3.1-8b", "--device", device)
    r = r[0] if isinstance(r, list) else r
    assert r["fits"]
    assert r["usable_memory_bytes"] == catalog.hardware_profile(device).usable_memory_bytes
    assert r["max_seqs_at_context"] == seqs


def test_step_on_an_rtx_card_says_where_its_latencies_come_from() -> None:
    r = plan_json("step", "--model", "llama-3.1-8b", "--device", "rtx5090", "--decode", "8")
    # 16 GB of weights and 8 x 1 GiB of KV at 0.82 of 1.79 TB/s: about 16 ms
    assert 0.012 < r["step_s"] < 0.025
    basis = r["tables_basis"]
    assert basis.startswith(("transferred: ", "measured op tables"))  # tables, else not installed


@pytest.mark.parametrize("device", ["m3-ultra", "m4-max"])
def test_step_on_a_mac_runs_on_the_mlx_priors(device: str) -> None:
    r = plan_json("step", "--model", "llama-3.1-8b", "--device", device, "--decode", "1")
    assert set(r["latency_sources"].values()) == {"prior"}
    assert "runtime mlx" in r["tables_basis"]
    profile = catalog.hardware_profile(device)
    # decode reads the 16 GB of weights at 0.75 of the unified memory's bandwidth
    floor = 16.06e9 / (profile.memory_bw_bytes_per_s * profile.roofline.memory_efficiency)
    assert floor < r["step_s"] < 1.2 * floor


def test_a_mac_deploys_with_the_mlx_server() -> None:
    from simulator.planner.deploy import serve_flags
    from simulator.specs import ServingConfig

    assert serve_flags("meta-llama/Llama-3.1-8B", ServingConfig(), "m4-max") == [
        "mlx_lm.server", "--model", "meta-llama/Llama-3.1-8B",
    ]  # fmt: skip
    assert serve_flags("meta-llama/Llama-3.1-8B", ServingConfig(), "rtx5090")[:2] == [
        "vllm", "serve",
    ]  # fmt: skip


def test_a_mac_is_bought_one_machine_at_a_time() -> None:
    from simulator.planner.analysis import fleet_unit

    assert fleet_unit("m3-ultra") == fleet_unit("m4-max") == ("machine", 1)
    assert fleet_unit("rtx5090") == fleet_unit("d270-480gb") == ("node", 8)
