"""`--json` output is strict JSON whatever the figures: a device the cost model does not price
(m4-max under the neocloud table) has no tokens per dollar, and its NaN was printed as the
bare token NaN, which strict parsers (and jq) refuse. ``print_json`` now writes null for NaN
and infinities and refuses any left over."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from simulator.cli import app
from simulator.output_files import finite

SPACE = {
    "name": "strict", "model": "llama-3.1-8b", "devices": ["h100", "m4-max"],
    "sweep": {"tp": [1]}, "concurrency": [4],
    "workload": {"kind": "random", "input_tokens": 512, "output_tokens": 32,
                 "num_requests": 400, "concurrency": 1},
    "slo": {"interactivity_tok_per_s_p90": 20.0}, "duration_s": 60.0, "warmup_s": 5.0,
    "seeds": 1, "search": "grid",
}  # fmt: skip


def strict(text: str) -> Any:
    def refuse(token: str) -> None:
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_search_with_an_unpriced_device_prints_strict_json(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    result = CliRunner().invoke(app, ["search", str(space), "--json", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    data = strict(result.stdout)
    unpriced = [b for b in data["best"] if b["device"] == "m4-max"]
    assert unpriced, data["best"]  # (it ran and answered: the case this covers)
    assert unpriced[0]["tokens_per_usd"] is None


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, np.float32("nan"), np.float64("inf")]
)
def test_finite_turns_every_non_number_into_null(value: Any) -> None:
    assert strict(json.dumps(finite({"a": [value, (value,)], "b": value}))) == {
        "a": [None, [None]], "b": None
    }  # fmt: skip
