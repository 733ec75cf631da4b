"""Compare page: nothing runs before Compare is pressed; then per device its best tokens per
dollar, the frontier figures and tables; prices and the SLO re-judge the same runs; only
valid choices offered; runs shared with `plan search` through the run cache."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

OpenPage = Callable[..., AppTest]
PAGE = "app_pages/compare.py"
WORKERS = max(1, min(4, os.cpu_count() or 1))  # as the page runs them


def small(at: AppTest) -> AppTest:
    """Two load levels of 10 simulated minutes: 4 runs."""
    at.multiselect(key="compare_users").set_value([8, 16])
    at.number_input(key="compare_minutes").set_value(10)
    at.number_input(key="compare_warmup").set_value(2)
    # 40 tok/s/user: with the measured tables B300 gives ~46 P90 at 8 users (the prior ~60)
    at.number_input(key="compare_slo_interactivity").set_value(40.0)
    return at.run()


def test_compare_two_devices(app: OpenPage) -> None:
    at = small(app(PAGE))
    assert not at.exception
    assert at.info[0].value.startswith("Press Compare to run 4 simulations")
    assert not at.metric
    at.button(key="compare_start").click().run(timeout=120)
    assert not at.exception
    assert not at.error
    values = {m.label: m.value for m in at.metric}
    assert set(values) == {"mi355x tokens per USD", "b300 tokens per USD"}
    assert all(v.endswith(" M") for v in values.values())  # both meet 40 tok/s/user at 8 users
    figures = at.get("plotly_chart")
    assert len(figures) == 2  # frontier per device, tokens per dollar
    best = at.dataframe[0].value
    assert sorted(best.device) == ["b300", "mi355x"]
    assert (best.interactivity_p90 >= 40).all()
    runs = at.dataframe[1].value
    assert len(runs) == 4
    assert set(runs.concurrency) == {8, 16}

    # another price list judges the same runs: nothing is simulated again
    at.selectbox(key="compare_cost_model").set_value("agentx").run(timeout=5)
    agentx = {m.label: m.value for m in at.metric}
    assert agentx.keys() == values.keys()
    assert agentx != values
    # an SLO no run meets
    at.number_input(key="compare_slo_interactivity").set_value(500.0).run(timeout=5)
    assert {m.value for m in at.metric} == {"-"}
    assert len(at.get("plotly_chart")) == 1  # the frontier only: no SLO-meeting point to price


def test_device_count_and_empty_choices_are_inline_lines(app: OpenPage) -> None:
    at = app(PAGE)
    at.multiselect(key="compare_devices").set_value(["mi355x"]).run()
    assert [e.value for e in at.error] == ["compare: devices: pick two to four devices, not 1"]
    at.multiselect(key="compare_devices").set_value(["mi355x", "h200"]).run()
    # h200 cannot hold Kimi K3: its label says so before anything runs, and it is refused
    labels = at.multiselect(key="compare_devices").options
    assert "h200 (NVIDIA H200 SXM5 141GB) (does not fit: needs 16 GPUs)" in labels
    assert [e.value for e in at.error] == [
        "compare: devices: kimi-k3 does not fit on h200: its weights need 16x h200, more than"
        " the 8 GPUs of one scale-up domain"
    ]
    at.multiselect(key="compare_devices").set_value(["mi355x", "gb200"])
    at.multiselect(key="compare_users").set_value([]).run()
    assert [e.value for e in at.error] == ["compare: users: pick at least one value"]
    at.multiselect(key="compare_users").set_value([8]).run()
    assert not at.error
    # TP: what both devices' domains allow and the weights fit at on one of them (MI355X: 8);
    # GB200 needs TP16 for Kimi K3: at TP8 pruned with its reason, not run
    assert at.selectbox(key="compare_tp").options == ["8"]
    assert at.multiselect(key="compare_dcp").options == ["1", "2", "4", "8"]
    assert at.info[0].value == (
        f"Press Compare to run 1 simulation ({WORKERS} at a time; a few seconds each),"
        " 1 configuration pruned."
    )


def test_runs_are_shared_with_plan_search(app: OpenPage, tmp_path: Path) -> None:
    """The page's runs are plan search's runs: the exported space, run by the CLI, fills a
    cache the page then reads instead of simulating (and the other way round)."""
    from simulator.cli import app as plan

    at = app(PAGE)
    at.selectbox(key="compare_model").set_value("kimi-linear-48b-a3b").run()
    at.multiselect(key="compare_devices").set_value(["h100", "h200"])
    at.multiselect(key="compare_users").set_value([4])
    at.number_input(key="compare_minutes").set_value(2)
    at.number_input(key="compare_warmup").set_value(0).run()
    assert at.info[0].value.startswith("Press Compare to run 2 simulations")
    space = tmp_path / "compare.yaml"
    space.write_text(at.code[-1].value)  # the exported search space
    assert at.code[0].value == "plan search compare.yaml --out OUT"
    out = tmp_path / "out"
    ran = CliRunner().invoke(plan, ["search", str(space), "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    cached = sorted((out / "cache").glob("*.json"))
    assert len(cached) == 2
    at.text_input(key="compare_cache").set_value(str(out / "cache")).run()
    assert at.info[0].value.endswith("; 2 of them in the run cache already.")
    at.button(key="compare_start").click().run(timeout=10)  # read back, nothing simulated
    assert not at.exception
    assert not at.error
    assert len(at.dataframe[-1].value) == 2
    assert sorted((out / "cache").glob("*.json")) == cached
    # the same comparison in the page's own cache: its files are the CLI's
    own = tmp_path / "runs"
    at.text_input(key="compare_cache").set_value(str(own)).run()
    assert "in the run cache" not in at.info[0].value
    at.button(key="compare_start").click().run(timeout=60)
    assert sorted(p.name for p in own.glob("*.json")) == [p.name for p in cached]
