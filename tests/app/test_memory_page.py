"""Memory page: sessions that fit per device (the README's table), fits on, the stacked bars
adding up to the GPU, bad combinations per device as inline lines."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from streamlit.testing.v1 import AppTest

from simulator import catalog
from simulator.memory import plan_memory
from simulator.specs import ServingConfig

OpenPage = Callable[..., AppTest]
PAGE = "app_pages/memory.py"


def shown(at: AppTest) -> dict[str, str]:
    assert not at.exception, [e.value for e in at.exception]
    return {m.label: m.value for m in at.metric}


def test_sessions_per_device_and_fits_on(app: OpenPage) -> None:
    at = app(PAGE)
    values = shown(at)
    # README "What make demo shows": Kimi K3 TP8, 142,000-token sessions, DCP 1
    assert {d: values[f"{d} sessions"] for d in ("mi355x", "b300", "gb300", "h200")} == {
        "mi355x": "19", "b300": "14", "gb300": "16", "h200": "0",
    }  # fmt: skip
    assert values["Fits on (model alone)"] == "8x mi355x"
    assert [w.value for w in at.warning] == [
        "h200: weights exceed gpu_memory_utilization x usable memory."
    ]
    table = at.dataframe[0].value
    assert list(table.device) == ["mi355x", "b300", "gb300", "h200"]
    assert list(table.fits) == ["yes", "yes", "yes", "NO"]
    assert len(at.get("plotly_chart")) == 1


def test_dcp_and_context_change_the_sessions(app: OpenPage) -> None:
    at = app(PAGE)
    at.selectbox(key="memory_dcp").set_value(8).run()
    values = shown(at)
    assert (values["mi355x sessions"], values["b300 sessions"]) == ("123", "93")
    at.number_input(key="memory_context").set_value(71_000).run()
    assert int(shown(at)["mi355x sessions"]) > 123


def test_bad_combinations_are_inline_lines(app: OpenPage) -> None:
    at = app(PAGE)
    at.selectbox(key="memory_tp").set_value(16).run()
    values = shown(at)
    assert values["gb300 sessions"] != "0"  # NVL72: TP16 fits in its scale-up domain
    assert sorted(e.value for e in at.error) == [
        f"memory ({d}): serving.tp: tp 16 exceeds the scale-up domain of {d} (8 GPUs)"
        for d in ("b300", "h200", "mi355x")
    ]
    # only valid choices: DCP 8 then TP 4 moves DCP to 4, the nearest divisor (an MLA model)
    at.selectbox(key="memory_dcp").set_value(8)
    at.selectbox(key="memory_tp").set_value(4).run()
    assert at.selectbox(key="memory_dcp").options == ["1", "2", "4"]
    assert at.selectbox(key="memory_dcp").value == 4
    assert "TP4 DCP4" in at.markdown[0].value
    # no device takes TP16: the error lines, and the last plan shown under them
    at.selectbox(key="memory_dcp").set_value(1)
    at.selectbox(key="memory_tp").set_value(8).run()
    before = shown(at)
    at.multiselect(key="memory_devices").set_value(["b300"])
    at.selectbox(key="memory_tp").set_value(16).run()
    assert [e.value for e in at.error] == [
        "memory (b300): serving.tp: tp 16 exceeds the scale-up domain of b300 (8 GPUs)"
    ]
    assert "The last plan shown, unchanged:" in [c.value for c in at.caption]
    assert shown(at) == before
    at.multiselect(key="memory_devices").set_value([]).run()
    assert "Pick at least one device" in at.info[0].value


def test_choices_follow_the_model(app: OpenPage) -> None:
    at = app(PAGE)
    assert "fp8_ds_mla" in at.selectbox(key="memory_kv_dtype").options  # Kimi K3: MLA
    at.selectbox(key="memory_kv_dtype").set_value("fp8_ds_mla").run()
    at.selectbox(key="memory_model").set_value("llama-3.3-70b").run()
    assert at.selectbox(key="memory_kv_dtype").options == ["auto", "bf16", "fp8"]
    assert at.selectbox(key="memory_kv_dtype").value == "auto"
    # GQA with 8 KV heads: DCP needs TP beyond 8 (vLLM: dcp <= tp // num_kv_heads)
    assert at.selectbox(key="memory_dcp").options == ["1"]
    at.selectbox(key="memory_tp").set_value(16).run()
    assert at.selectbox(key="memory_dcp").options == ["1", "2"]
    assert not at.exception


@pytest.mark.parametrize(
    ("model", "device", "tp"),
    [("kimi-k3", "mi355x", 8), ("kimi-k3", "h200", 8), ("qwen3.5-397b-a17b", "b300", 4)],
)
def test_bar_segments_add_up_to_the_gpu(model: str, device: str, tp: int) -> None:
    from dashboard.figures import memory_segments  # app/ is on sys.path (conftest)

    profile = catalog.hardware_profile(device)
    r = plan_memory(catalog.model_card(model), profile, ServingConfig(tp=tp), 100_000)
    segments = memory_segments(r)
    assert all(v >= 0 for v in segments.values())
    if r.fits:
        assert sum(segments.values()) == pytest.approx(profile.usable_memory_bytes)
        # the sessions' KV and state pages are what they hold of the block pool
        used = segments["KV cache of the sessions"] + segments["recurrent state pages"]
        assert used == pytest.approx(r.max_seqs_at_context * r.blocks_per_seq * r.bytes_per_block)
        assert used <= r.kv_cache_bytes_per_gpu
    else:  # weights over budget: nothing in the pool
        assert segments["KV cache of the sessions"] == segments["recurrent state pages"] == 0


def test_workstation_devices_are_choices(app: OpenPage) -> None:
    """The page lists every catalog device: the RTX cards and the Macs (docs/devices.md)."""
    at = app(PAGE)
    options = set(at.multiselect(key="memory_devices").options)
    assert {"rtx4090", "rtx5090", "rtx-pro-6000", "m3-ultra", "m4-max", "d270-480gb"} <= options
    at.selectbox(key="memory_model").set_value("llama-3.1-8b").run()
    at.selectbox(key="memory_tp").set_value(1)
    at.number_input(key="memory_context").set_value(8192)
    at.multiselect(key="memory_devices").set_value(["rtx4090", "m3-ultra"]).run()
    values = shown(at)
    assert (values["rtx4090 sessions"], values["m3-ultra sessions"]) == ("4", "334")
