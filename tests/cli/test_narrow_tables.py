"""Tables in an 80-column terminal wrap instead of truncating: no ellipsis, no line wider
than the terminal, every name and number whole on its line."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from simulator import catalog
from simulator.cli import app
from simulator.cli.tables import PlanConsole, fit_table

runner = CliRunner()
WIDTH = 80


def narrow(*args: str, width: int = WIDTH) -> str:
    """`plan ARGS` as a terminal of ``width`` columns shows it (stdout is captured: the
    console takes $COLUMNS)."""
    result = runner.invoke(app, list(args), env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.stderr
    return result.stdout


def check_fits(text: str, width: int = WIDTH) -> None:
    assert "…" not in text, text
    wide = [line for line in text.splitlines() if len(line) > width]
    assert not wide, wide


def cells(text: str) -> set[str]:
    """Every cell of every table row, stripped (a whole cell is on one line)."""
    return {c.strip() for line in text.splitlines() for c in re.split(r"[│┃]", line)}


def test_profiles_list_keeps_names_and_numbers_whole() -> None:
    text = narrow("profiles", "list")
    check_fits(text)
    got = cells(text)
    for name in catalog.device_names():
        d = catalog.hardware_profile(name)
        assert name in got, name
        assert f"{d.usable_memory_bytes / 2**30:,.1f}" in got, name
        assert f"{d.peak_flops_per_s.bf16 / 1e15:.2f}" in got, name
        assert d.status in got, name
    for name in catalog.model_names():
        assert name in got, name
    for name in catalog.cost_models():
        assert name in got, name


def test_models_list_is_a_table_of_every_card() -> None:
    text = narrow("models", "list")
    check_fits(text)
    got = cells(text)
    for name in catalog.model_names():
        card = catalog.model_card(name)
        assert name in got, name
        assert str(card.layers.count) in got, name
    assert "hf id" in text
    assert "params" in text
    code = runner.invoke(app, ["models", "list", "--json"])
    assert json.loads(code.stdout) == catalog.model_names()


def test_memory_detail_fits() -> None:
    text = narrow("memory", "--model", "kimi-k3", "--device", "mi355x", "--tp", "8")
    check_fits(text)
    data = json.loads(
        runner.invoke(
            app, ["memory", "--model", "kimi-k3", "--device", "mi355x", "--tp", "8", "--json"]
        ).stdout
    )
    assert f"{data['kv_capacity_tokens']:,}" in cells(text)


def test_memory_comparison_splits_in_two_when_narrow() -> None:
    args = ["memory", "--model", "kimi-k3", "--device", "mi355x", "--device", "h200",
            "--tp", "8", "--dcp", "1", "--dcp", "8", "--context", "142000"]  # fmt: skip
    text = narrow(*args)
    check_fits(text)
    rows = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    got = cells(text)
    for r in rows:
        assert f"{r['kv_bytes_per_token_per_gpu']:,.0f}" in got
        assert f"{r['max_seqs_at_context']:,}" in got
    assert "memory per GPU" in text
    assert "capacity" in text
    wide = narrow(*args, width=200)  # one table when there is room
    assert "capacity (sessions" not in wide
    assert "sessions/GPU" in wide


def test_examples_list_fits() -> None:
    text = narrow("examples", "list")
    check_fits(text)
    got = cells(text)
    for p in Path(catalog.__file__).parent.joinpath("examples").glob("*.yaml"):
        assert p.stem in got


@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_fit_table_never_ellipsises(width: int) -> None:
    t = Table(title="made up")
    for header in ("name", "description", "value one", "value two", "status"):
        t.add_column(header, justify="right" if header.startswith("value") else "left")
    for i in range(5):
        t.add_row(f"device-{i}x", "a long description " * (i + 1), f"{12345.678 * i:,.1f}",
                  f"{i / 7:.3f}", "announced")  # fmt: skip
    out = io.StringIO()
    Console(width=width, file=out, highlight=False).print(fit_table(t, width))
    check_fits(out.getvalue(), width)
    if width >= 60:  # room for them: the numbers and names stay whole on one line
        got = cells(out.getvalue())
        assert {"device-4x", "49,382.7", "0.571", "announced"} <= got


def test_the_plan_console_fits_every_table_it_prints() -> None:
    t = Table()
    for i in range(12):
        t.add_column(f"column number {i}", justify="right")
    t.add_row(*(f"{1e6 * i:,.0f}" for i in range(12)))
    out = io.StringIO()
    PlanConsole(width=WIDTH, file=out, highlight=False).print(t)
    check_fits(out.getvalue())
