"""What-if page: the default scenario's numbers, the numbers moving with the device and the
offload size, only valid combinations offered, an error line over the previous result, the
export as YAML and as a plan command, a stopped run."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import yaml
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from simulator import catalog
from simulator.specs import Scenario
from simulator.specs.loading import parse, read_yaml
from simulator.specs.overrides import apply_overrides

OpenPage = Callable[..., AppTest]
THROUGHPUT = "Throughput (tok/s/GPU)"


def shown(at: AppTest) -> dict[str, str]:
    assert not at.exception, [e.value for e in at.exception]
    return {m.label: m.value for m in at.metric}


def number(text: str) -> float:
    return float(text.replace(",", "").removesuffix("%"))


def test_default_scenario_shows_every_figure(app: OpenPage) -> None:
    at = app()
    values = shown(at)
    assert not at.error
    assert number(values[THROUGHPUT]) > 1000  # tok/s/GPU: Kimi K3 on 8x MI355X, 32 agents
    assert 0 < number(values["P90 tok/s/user"]) < 1000
    assert 0 < number(values["Prefix hit rate"]) <= 100
    assert values["CPU hit rate"] == "0.0%"  # no host tier by default
    percentiles = at.dataframe[0].value  # dataframes carry no key in AppTest
    assert list(percentiles.percentile) == ["P50", "P90", "P99"]
    # interactivity falls and TTFT grows towards the tail
    inter = list(percentiles["interactivity (tok/s/user)"])
    ttft = list(percentiles["TTFT (s)"])
    assert inter == sorted(inter, reverse=True)
    assert ttft == sorted(ttft)
    assert len(at.get("plotly_chart")) == 2  # KV usage over time, step-time breakdown
    assert "8x mi355x" in at.markdown[0].value


def test_device_and_offload_move_the_numbers(app: OpenPage) -> None:
    at = app()
    mi355x = shown(at)
    at.selectbox(key="whatif_device").set_value("b300").run()
    b300 = shown(at)
    assert b300[THROUGHPUT] != mi355x[THROUGHPUT]
    assert b300["Tokens per USD (M)"] != mi355x["Tokens per USD (M)"]
    assert "8x b300" in at.markdown[0].value
    at.select_slider(key="whatif_offload_gib").set_value(1024).run()
    offload = shown(at)
    assert offload[THROUGHPUT] != b300[THROUGHPUT]
    assert number(offload["CPU hit rate"]) > 0  # prompts come back from the 1 TiB host tier
    # the tiles show the change from the previous scenario
    delta = next(m.delta for m in at.metric if m.label == THROUGHPUT)
    # (each tile is rounded on its own: the shown difference may be one off the shown delta)
    assert abs(number(delta) - (number(offload[THROUGHPUT]) - number(b300[THROUGHPUT]))) <= 1


def test_only_valid_combinations_are_offered(app: OpenPage) -> None:
    at = app()
    # Kimi K3 fits on 8x MI355X at TP8 only (TP16 is past its 8-GPU domain, TP4 holds not the
    # weights); MLA: every divisor of TP is a DCP size; 2 TiB of host DRAM behind 8 GPUs
    assert at.selectbox(key="whatif_tp").options == ["8"]
    assert at.selectbox(key="whatif_dcp").options == ["1", "2", "4", "8"]
    assert at.select_slider(key="whatif_offload_gib").options[-1] == "2 TiB"
    labels = at.selectbox(key="whatif_device").options
    devices = dict(zip(labels, catalog.device_names(), strict=True))
    unfit = {name for label, name in devices.items() if "(does not fit: needs" in label}
    # the workstation devices (PCIe cards of 24-96 GB, single Macs, the 480 GB D270 at TP1)
    # cannot hold Kimi K3 either
    assert unfit == {
        "b200", "d270", "h100", "h200", "mi300x",
        "d270-480gb", "m3-ultra", "m4-max", "rtx-pro-6000", "rtx4090", "rtx5090",
    }  # fmt: skip
    label = next(label for label, name in devices.items() if name == "h200")
    assert label.endswith("(does not fit: needs 16 GPUs)")
    assert any("Cannot hold kimi-k3: " in c.value for c in at.sidebar.caption)
    # GQA with 2 KV heads: DCP <= TP // 2; a kept DCP TP no longer allows moves to the nearest
    at.selectbox(key="whatif_model").set_value("qwen3.5-397b-a17b").run()
    assert at.selectbox(key="whatif_tp").options == ["4", "8"]
    assert at.selectbox(key="whatif_dcp").options == ["1", "2", "4"]
    at.selectbox(key="whatif_dcp").set_value(4).run()
    at.selectbox(key="whatif_tp").set_value(4).run()
    assert at.selectbox(key="whatif_dcp").options == ["1", "2"]
    assert at.selectbox(key="whatif_dcp").value == 2
    assert not at.error
    assert "TP4, DCP2" in at.markdown[0].value


def test_an_error_keeps_the_previous_result(app: OpenPage) -> None:
    at = app()
    before = shown(at)
    at.selectbox(key="whatif_device").set_value("h200").run()
    assert [e.value for e in at.error] == [
        "what-if: device: kimi-k3 does not fit on h200: its weights need 16x h200, more than"
        " the 8 GPUs of one scale-up domain"
    ]
    assert "The last scenario that ran, unchanged:" in [c.value for c in at.caption]
    assert shown(at) == before  # the MI355X result, under the error line
    assert "8x mi355x" in at.markdown[0].value
    at.selectbox(key="whatif_device").set_value("mi355x")
    at.number_input(key="whatif_warmup").set_value(40).run()  # more than the 30 minutes
    assert [e.value for e in at.error] == [
        "what-if: warm-up: 40 min leaves nothing of 30 to measure"
    ]
    assert shown(at)[THROUGHPUT] == before[THROUGHPUT]
    at.number_input(key="whatif_warmup").set_value(5).run()
    assert not at.error
    assert "The last scenario that ran, unchanged:" not in [c.value for c in at.caption]


def test_stopped_run_waits_for_run(app: OpenPage) -> None:
    at = app()
    (key,) = at.session_state["whatif_done"]  # the run shown
    at.session_state["whatif_done"] = set()  # as if it had not finished ...
    at.session_state["whatif_stopped"] = key  # ... and Stop had been pressed during it
    at.run()
    assert not at.metric
    assert "Stopped" in at.info[0].value
    at.button(key="whatif_run").click().run()
    assert THROUGHPUT in shown(at)
    assert not at.info


def test_slo_and_prices_judge_without_simulating_again(app: OpenPage) -> None:
    at = app()
    before = shown(at)
    assert "misses" in at.warning[0].value  # 32 agents on 8x MI355X miss 50 tok/s/user P90
    at.number_input(key="whatif_slo_interactivity").set_value(5.0).run(timeout=5)
    assert "meets" in at.success[0].value
    at.selectbox(key="whatif_cost_model").set_value("agentx").run(timeout=5)
    after = shown(at)
    assert after["Tokens per USD (M)"] != before["Tokens per USD (M)"]
    assert after[THROUGHPUT] == before[THROUGHPUT]
    assert len(at.session_state["whatif_done"]) == 1  # one simulation for the three views


def test_batch_cap_and_users_move_the_numbers(app: OpenPage) -> None:
    at = app()
    before = shown(at)
    at.selectbox(key="whatif_max_num_seqs").set_value(8).run()
    capped = shown(at)
    assert "max_num_seqs 8" in at.markdown[0].value
    assert number(capped["P90 TTFT (s)"]) > number(before["P90 TTFT (s)"])  # 32 agents queue
    at.number_input(key="whatif_users").set_value(8).run()
    assert shown(at)[THROUGHPUT] != capped[THROUGHPUT]


def set_flags(command: str) -> tuple[str, list[str]]:
    """(the file, the --set items) of a ``plan run FILE --set K=V ...`` command."""
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:2] == ["plan", "run"]
    assert words[3::2] == ["--set"] * len(words[3::2])
    return words[2], words[4::2]


def test_export_is_the_scenario_simulated(app: OpenPage, tmp_path: Path) -> None:
    from dashboard.export import EXAMPLES_DIR  # app/ is on sys.path (conftest)

    from simulator.cli import app as plan

    at = app()
    at.number_input(key="whatif_slo_ttft").set_value(3.0)  # judged, not simulated again
    at.selectbox(key="whatif_cost_model").set_value("agentx").run()
    scenario, result = at.session_state["whatif_shown"]
    assert scenario.slo.ttft_s_p90 == 3.0
    assert scenario.cost_model == "agentx"
    (text,) = (c.value for c in at.code if c.language == "yaml")
    (command,) = (c.value for c in at.code if c.language == "bash")
    exported = parse(Scenario, yaml.safe_load(text), "what-if.yaml")
    assert exported == scenario
    assert at.get("download_button")
    file_command, example_command = command.split("\n\n")
    assert file_command == "plan run what-if.yaml"
    example, sets = set_flags(example_command.split("\n", 1)[1])
    assert example == "kimi-k3-mi355x-agentic.yaml"
    assert "slo.ttft_s_p90=3.0" in sets
    assert not any(s.startswith("cost_model=") for s in sets)  # the example's is agentx too
    data = apply_overrides(read_yaml(EXAMPLES_DIR / example), sets, "(arguments)")
    assert parse(Scenario, data, example) == scenario
    # the CLI simulates the file to the page's numbers
    path = tmp_path / "what-if.yaml"
    path.write_text(text)
    ran = CliRunner().invoke(plan, ["run", str(path), "--json"])
    assert ran.exit_code == 0, ran.output
    cli = json.loads(ran.stdout)
    summary = result.summary
    assert cli["throughput_tok_per_s_per_gpu"] == summary.throughput_tok_per_s_per_gpu
    assert cli["ttft_s_p90"] == summary.ttft_s_p90


def test_overrides_turn_the_example_into_any_scenario() -> None:
    from dashboard.export import EXAMPLES_DIR, overrides, run_command

    base = read_yaml(EXAMPLES_DIR / "kimi-k3-mi355x-agentic.yaml")
    target = parse(Scenario, base, "base").model_copy(
        update={"name": "b300 with offload", "device": "b300", "cost_model": "agentx"}
    )
    target = target.model_copy(
        update={"serving": target.serving.model_copy(
            update={"dcp": 8, "cpu_offload_bytes": 2.0**40, "max_num_seqs": 64})}
    )  # fmt: skip
    sets = overrides(parse(Scenario, base, "base").model_dump(mode="json"),
                     target.model_dump(mode="json"))  # fmt: skip
    assert sorted(sets) == [
        "device=b300", "name=b300 with offload", "serving.cpu_offload_bytes=1099511627776.0",
        "serving.dcp=8", "serving.max_num_seqs=64",
    ]  # fmt: skip
    assert parse(Scenario, apply_overrides(base, sets, "x"), "x") == target
    _, example_command = run_command(target, "b300.yaml").split("\n\n")
    _, flags = set_flags(example_command.split("\n", 1)[1])
    assert flags == sets  # shell-quoted: "name=b300 with offload" is one word


def test_a_cache_that_switches_state_inside_the_window_is_called_out(app: OpenPage) -> None:
    """32 agents (the default) are steady; at 36 agents Kimi K3 on 8x MI355X DCP 1 swings
    between ~6 % and ~78 % prefix hits inside the window (docs/kv-pressure.md; 40 did before
    the KDA mixed-batch pricing: the switch point moves with the step costs), and the page
    says that its figures depend on the window."""
    at = app()
    assert not [w for w in at.warning if "changed state" in w.value]
    at.number_input(key="whatif_users").set_value(36).run(timeout=120)
    shown(at)
    assert [w for w in at.warning if "changed state inside the measured window" in w.value]


def test_a_saturated_run_is_called_out_and_meets_no_slo(app: OpenPage) -> None:
    """One simulated minute with no warm-up: 1,024 agents never get through the queue. The
    page read it as an ordinary answer (P90 TTFT of the few served) and a TTFT target of 60 s
    as met; the core flags it saturated, and so does the page now."""
    at = app()
    at.number_input(key="whatif_minutes").set_value(1)
    at.number_input(key="whatif_warmup").set_value(0)
    at.number_input(key="whatif_slo_interactivity").set_value(0.0)
    at.number_input(key="whatif_slo_ttft").set_value(60.0)
    at.number_input(key="whatif_users").set_value(1024).run(timeout=120)
    shown(at)
    assert [e for e in at.error if e.value.startswith("SATURATED (")]
    assert [w for w in at.warning if "**misses** the SLO" in w.value and "saturated" in w.value]
    assert not at.success
