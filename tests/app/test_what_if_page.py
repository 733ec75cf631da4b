"""What-if page: the default scenario's numbers, the numbers moving with the device and the
offload size, bad combinations as one inline line, a stopped run."""

from __future__ import annotations

from collections.abc import Callable

from streamlit.testing.v1 import AppTest

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
    assert number(delta) == number(offload[THROUGHPUT]) - number(b300[THROUGHPUT])


def test_invalid_combination_is_one_inline_line(app: OpenPage) -> None:
    at = app()
    at.selectbox(key="whatif_dcp").set_value(8)
    at.selectbox(key="whatif_tp").set_value(4).run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        "what-if: serving.dcp: dcp 8 must divide tp 4 (DCP reuses the TP ranks)"
    ]
    assert not at.metric  # nothing simulated
    at.selectbox(key="whatif_tp").set_value(16).run()  # the model allows it, the node not
    assert [e.value for e in at.error] == [
        "what-if: serving.tp: tp 16 exceeds the scale-up domain of mi355x (8 GPUs)"
    ]
    at.selectbox(key="whatif_tp").set_value(8)
    at.selectbox(key="whatif_device").set_value("h200").run()  # 186 GiB of weights per GPU
    assert len(at.error) == 1
    assert "h200" in at.error[0].value
    assert "weights exceed" in at.error[0].value


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
