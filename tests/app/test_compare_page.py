"""Compare page: nothing runs before Compare is pressed; then per device its best tokens per
dollar, the frontier figures and tables; prices and the SLO re-judge the same runs."""

from __future__ import annotations

import os
from collections.abc import Callable

from streamlit.testing.v1 import AppTest

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
    at.multiselect(key="compare_devices").set_value(["mi355x", "h200"])
    at.multiselect(key="compare_users").set_value([]).run()
    assert [e.value for e in at.error] == ["compare: users: pick at least one value"]
    at.multiselect(key="compare_users").set_value([8]).run()
    assert not at.error
    # h200 cannot hold Kimi K3: pruned with its reason, not run
    assert at.info[0].value == (
        f"Press Compare to run 1 simulation ({WORKERS} at a time; a few seconds each),"
        " 1 configuration pruned."
    )
