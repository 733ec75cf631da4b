"""Sizing page: nothing runs before Size is pressed (it says how many simulations at most and
the plan size command); then a real quick sizing end to end (Llama 3.3 70B for 8 users on
H200, and D270, which cannot hold it: about 10 s): the answer, the ranked table, the vllm
serve line of the top row, the reason D270 is not served, the runs in the run cache; an
error line keeps that answer under it."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from streamlit.testing.v1 import AppTest

OpenPage = Callable[..., AppTest]
PAGE = "app_pages/sizing.py"
WORKERS = max(1, min(4, os.cpu_count() or 1))  # as the page runs them


def test_sizing_end_to_end(app: OpenPage, tmp_path: Path) -> None:
    at = app(PAGE)
    assert not at.exception, [e.value for e in at.exception]
    assert at.info[0].value.startswith("Press Size to search at most")
    assert not at.success
    at.selectbox(key="sizing_model").set_value("llama-3.3-70b")
    at.number_input(key="sizing_users").set_value(8)
    at.number_input(key="sizing_slo_interactivity").set_value(20.0)
    at.multiselect(key="sizing_devices").set_value(["h200", "d270"])
    at.selectbox(key="sizing_seeds").set_value(1).run()
    assert at.checkbox(key="sizing_quick").value  # the page's default
    planned = re.fullmatch(
        rf"Press Size to search at most (\d+) simulations \({WORKERS} at a time\): 8 users of"
        r" llama-3.3-70b at 20 tok/s/user P90\.",
        at.info[0].value,
    )
    assert planned, at.info[0].value
    assert at.code[0].value == (
        "plan size --model llama-3.3-70b --users 8 --slo-interactivity 20 --devices h200,d270"
        " --seeds 1 --quick"
    )
    start = time.monotonic()
    at.button(key="sizing_start").click().run(timeout=120)
    took = time.monotonic() - start
    print(f"sizing end to end: {took:.1f} s")
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    request, result = at.session_state["sizing_shown"]
    assert request.quick
    assert request.seeds == 1
    answer = at.success[0].value
    assert answer == result.answer
    assert answer.startswith("Buy 1 node of 8x H200")
    ranked = at.dataframe[0].value
    assert list(ranked.device) == ["h200"]
    assert list(ranked["rank"]) == [1]
    top = ranked.config_id.iloc[0]
    serve = at.code[0].value
    assert serve == result.commands[top]
    assert serve.startswith("vllm serve meta-llama/Llama-3.3-70B-Instruct")
    assert "--tensor-parallel-size 2" in serve  # TP2: the smallest TP the 70B weights fit at
    assert any(m.value.startswith("- d270: does not fit") for m in at.markdown)
    assert 0 < result.simulations <= int(planned[1])
    assert len(list((tmp_path / "runs").glob("*.json"))) == result.simulations
    # an error keeps the answer under its line
    at.text_input(key="sizing_cache").set_value(" ").run()
    assert [e.value for e in at.error] == ["sizing: run cache: give a folder for the runs"]
    assert at.success[0].value == answer
    assert "The last sizing that ran, unchanged:" in [c.value for c in at.caption]
