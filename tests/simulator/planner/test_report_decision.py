"""The capacity report reads as a purchasing decision: the answer first, devices ranked by
the fleet's USD per hour, racks for NVL72 systems, "does not fit" told apart from "misses the
SLO", sensitivity in percent, a readable page width, one frontier figure with a legend entry
per device and each device's operating point marked.

The runs tables here are synthetic (no simulation): every expectation is derived from the
table the test builds, not typed in from a report."""

from __future__ import annotations

import math
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from simulator import catalog
from simulator.planner.analysis import NODE_GPUS, best_per_device, fleet_unit, pruned_table
from simulator.planner.answer import answer
from simulator.planner.compare import frontier, sensitivity
from simulator.planner.expand import expand
from simulator.planner.report import html_report, markdown, write_report
from simulator.planner.report_figures import frontier_figure
from simulator.planner.space import SearchSpace
from simulator.planner.verdicts import config_label, min_gpus_for_weights, verdicts

WORKLOAD = {"kind": "random", "input_tokens": 512, "output_tokens": 32, "num_requests": 6000,
            "concurrency": 1}  # fmt: skip
SLO = 20.0


def space_of(**update: Any) -> SearchSpace:
    data = {
        "name": "decide",
        "model": "llama-3.3-70b",
        "devices": ["h100", "h200"],
        "sweep": {"tp": [8], "dcp": [1]},
        "concurrency": [4, 16, 64],
        "workload": WORKLOAD,
        "slo": {"interactivity_tok_per_s_p90": SLO},
        "demand_users": 1000,
        **update,
    }
    return SearchSpace.model_validate(data)


def run_row(
    space: SearchSpace,
    device: str,
    users: int,
    tput: float,
    inter: float,
    tp: int = 8,
    dcp: int = 1,
    offload: float = 0.0,
) -> dict[str, Any]:
    """One synthetic point with the columns runs_table writes that the report reads."""
    price = catalog.cost_model(space.cost_model).usd_per_gpu_hour.get(device)
    knobs = f"tp{tp}-dcp{dcp}" + (f"-offload{offload / 2**30:g}GiB" if offload else "")
    return {
        "config_id": f"{device}-{knobs}", "device": device, "tp": tp, "dcp": dcp, "dp": 1,
        "ep": 1, "cpu_offload_bytes": offload, "max_num_seqs": None,
        "max_num_batched_tokens": None, "speculative": "", "disaggregation": "aggregated",
        "mode": "aggregated", "gpus_per_deployment": tp, "concurrency": users, "seeds": 3,
        "throughput_tok_per_s_per_gpu": tput,
        "throughput_tok_per_s_per_gpu_ci_low": tput * 0.97,
        "throughput_tok_per_s_per_gpu_ci_high": tput * 1.03,
        "output_tok_per_s_per_gpu": tput / 10,
        "interactivity_p90": inter, "interactivity_p90_ci_low": inter * 0.98,
        "interactivity_p90_ci_high": inter * 1.02, "interactivity_p90_worst": inter * 0.98,
        "ttft_p90_s": 0.5, "ttft_p90_s_ci_low": 0.4, "ttft_p90_s_ci_high": 0.6,
        "ttft_p90_s_worst": 0.6, "saturated": False, "requests_per_s": users / 10,
        "usd_per_gpu_hour": price,
        "tokens_per_usd": tput * 3600 / price if price else None,
        "tokens_per_usd_ci_low": tput * 0.97 * 3600 / price if price else None,
        "tokens_per_usd_ci_high": tput * 1.03 * 3600 / price if price else None,
        "usd_per_m_output_tok": price / (tput / 10 * 3600) * 1e6 if price else None,
        "usd_per_user_hour": price * tp / users if price else None,
        "slo_met": inter * 0.98 >= SLO, "wall_s": 1.0,
    }  # fmt: skip


def sweep_rows(
    space: SearchSpace, device: str, scale: float, tp: int = 8, **kw: Any
) -> list[dict[str, Any]]:
    """A configuration at every load of the space: more users, more tok/s/GPU, less
    interactivity (``scale`` scales the throughput)."""
    return [
        run_row(space, device, u, scale * 100 * u**0.7, 400 / u**0.5, tp=tp, **kw)
        for u in space.concurrency
    ]


def runs_of(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------ the answer


@pytest.mark.parametrize(
    "scales",
    [
        {"h100": 1.0, "h200": 1.6, "mi355x": 1.2},
        {"h100": 2.0, "h200": 1.0, "mi355x": 1.1},
        {"h100": 1.0, "h200": 1.0, "mi355x": 3.0},
    ],
)
def test_answer_names_the_cheapest_fleet_and_the_runner_up(scales: dict[str, float]) -> None:
    space = space_of(devices=list(scales))
    runs = runs_of([r for d, s in scales.items() for r in sweep_rows(space, d, s)])
    best = best_per_device(space, runs)
    cost = dict(zip(best.device, best.fleet_usd_per_hour, strict=True))
    cheapest, second = sorted(cost, key=lambda d: cost[d])[:2]
    headline, text = answer(space, best, runs)
    assert text.startswith("Buy ")
    top = best[best.device == cheapest].iloc[0]
    assert f"{int(top.units)} {top.unit}s of {int(top.unit_gpus)}x {cheapest.upper()}" in text
    assert f"${cost[cheapest]:,.0f}/hour" in headline
    runner = text.split("runner-up:")[1]
    assert second.upper() in runner
    assert f"({100 * (cost[second] / cost[cheapest] - 1):+.1f} %)" in runner
    # the range from the model's error band is the fleet bought at the band's ends
    lo, hi = top.fleet_usd_per_hour_band_low, top.fleet_usd_per_hour_band_high
    assert lo <= cost[cheapest] <= hi
    assert f"range ${lo:,.0f}-${hi:,.0f}" in text
    md = markdown(space, best, runs, 0)
    assert md.splitlines()[0] == f"# {headline}"  # the answer is the first line
    page, _ = html_report(space, runs, best, sensitivity(space, runs, best), pd.DataFrame())
    assert page.index("Answer.") < page.index("<h2>")  # before any section


def test_ranking_follows_the_fleet_cost_with_a_demand_else_tokens_per_usd() -> None:
    scales = {"h100": 1.0, "h200": 1.5, "mi355x": 1.3, "b300": 2.2}
    for demand in (1000, None):
        space = space_of(devices=list(scales), demand_users=demand)
        runs = runs_of([r for d, s in scales.items() for r in sweep_rows(space, d, s)])
        best = best_per_device(space, runs)
        assert list(best["rank"]) == list(range(1, len(scales) + 1))
        if demand:
            assert best.fleet_usd_per_hour.is_monotonic_increasing
        else:
            assert "fleet_usd_per_hour" not in best.columns
            assert best.tokens_per_usd.is_monotonic_decreasing
            _, text = answer(space, best, runs)
            assert text.startswith(f"Best value: {best.device.iloc[0].upper()}")
            assert "No demand given" in text
    # the tokens-per-USD winner is not the cheapest fleet when its deployments round worse
    space = space_of(devices=["h100", "h200"], demand_users=1000, concurrency=[4, 600])
    runs = runs_of([
        run_row(space, "h200", 600, 8000.0, 30.0),  # ceil(1000 / 600) = 2 deployments: 16 GPUs
        run_row(space, "h100", 500, 3900.0, 30.0, tp=4),  # 2 deployments of 4 GPUs: 8
    ])  # fmt: skip
    best = best_per_device(space, runs)
    assert best.tokens_per_usd.idxmax() != best.fleet_usd_per_hour.idxmin()
    assert best.device.iloc[0] == best.loc[best.fleet_usd_per_hour.idxmin(), "device"]


def test_without_a_price_devices_rank_by_throughput_and_the_answer_says_why() -> None:
    # d270 is announced and unpriced: no fleet cost, no tokens per USD
    space = space_of(devices=["d270"], demand_users=100)
    assert catalog.cost_model(space.cost_model).usd_per_gpu_hour.get("d270") is None
    runs = runs_of(sweep_rows(space, "d270", 1.0, tp=1))
    best = best_per_device(space, runs)
    assert best.fleet_usd_per_hour.isna().all()
    assert int(best.units.iloc[0]) == math.ceil(int(best.gpus.iloc[0]) / NODE_GPUS)
    headline, text = answer(space, best, runs)
    assert headline.startswith(f"{space.name}: best value D270")
    assert f"No price for these devices in {space.cost_model}" in text
    assert "ranked by throughput per GPU" in markdown(space, best, runs, 0)


# ------------------------------------------------------------------------------ the fleet


@pytest.mark.parametrize(
    ("device", "tp", "demand"),
    [("gb300", 4, 500), ("gb300", 8, 72), ("gb200", 8, 73), ("h100", 4, 500), ("b300", 8, 9)],
)
def test_nvl72_systems_are_bought_by_the_rack(device: str, tp: int, demand: int) -> None:
    space = space_of(devices=[device], demand_users=demand, concurrency=[1])
    best = best_per_device(space, runs_of([run_row(space, device, 1, 1000.0, 100.0, tp=tp)]))
    (b,) = best.itertuples()
    domain = catalog.hardware_profile(device).scale_up.domain_size  # type: ignore[union-attr]
    gpus = demand * tp  # one user per deployment of tp GPUs
    assert b.gpus == gpus
    assert (b.unit, b.unit_gpus) == (("rack", domain) if domain > NODE_GPUS else ("node", 8))
    assert b.units == math.ceil(gpus / b.unit_gpus)
    assert b.gpus_bought == b.units * b.unit_gpus
    assert b.nodes == math.ceil(gpus / NODE_GPUS)  # kept as before: GPUs / 8
    assert b.units_band_low <= b.units <= b.units_band_high
    assert b.fleet_usd_per_hour == pytest.approx(b.gpus_bought * b.usd_per_gpu_hour)
    assert b.usd_per_hour == pytest.approx(b.gpus * b.usd_per_gpu_hour)
    text = markdown(space, best, runs_of([]), 0)
    assert f"by the {b.unit} of {b.unit_gpus} GPUs" in text


def test_the_cost_per_user_is_of_the_fleet_bought_and_the_band_ends_of_the_demand() -> None:
    """usd_per_user_hour read the GPUs in use in best.csv and the racks bought in the report
    ($3.34 vs $3.96 for one gb300 answer); the band ends scaled the rounded-up fleet, one
    deployment too many (700 users at 30 a deployment, +19.5 %: 21 where 20 are needed)."""
    space = space_of(devices=["gb300"], demand_users=125, concurrency=[1])
    b = best_per_device(space, runs_of([run_row(space, "gb300", 1, 1000.0, 100.0, tp=4)])).iloc[0]
    assert b.gpus_bought > b.gpus  # 7 racks, 500 GPUs in use
    assert b.usd_per_user_hour == pytest.approx(b.fleet_usd_per_hour / 125)
    space = space_of(devices=["h200"], demand_users=700, concurrency=[30])
    b = best_per_device(space, runs_of([run_row(space, "h200", 30, 1000.0, 100.0, tp=8)])).iloc[0]
    assert b.replicas == 24  # ceil(700 / 30)
    f = 1.0 + b.model_error_pct / 100.0
    assert b.units_band_low == math.ceil(700 / (30 * f))
    f = max(1.0 - b.model_error_pct / 100.0, 0.05)
    assert b.units_band_high == math.ceil(700 / (30 * f))


def test_500_gb300_gpus_are_7_racks() -> None:
    space = space_of(devices=["gb300"], demand_users=125, concurrency=[1])
    best = best_per_device(space, runs_of([run_row(space, "gb300", 1, 1000.0, 100.0, tp=4)]))
    assert (int(best.gpus.iloc[0]), int(best.units.iloc[0])) == (500, 7)
    assert best.unit.iloc[0] == "rack"
    _headline, text = answer(space, best, runs_of([]))
    assert "7 racks of 72x GB300 (504 GPUs, 500 in use)" in text
    assert fleet_unit("gb300") == ("rack", 72)
    assert fleet_unit("mi355x") == ("node", 8)


# ------------------------------------------------------------------ does not fit / misses


def test_does_not_fit_and_misses_the_slo_are_told_apart() -> None:
    # Kimi K2 (1T parameters) on 8 H100s: the weights do not fit, every configuration pruned
    space = space_of(model="kimi-k2", devices=["h100", "gb300", "mi355x"], sweep={"tp": [8]})
    candidates, pruned = expand(space)
    assert {c.device for c in candidates} == {"gb300", "mi355x"}
    assert all(p.device == "h100" and "weights exceed" in p.reason for p in pruned)
    runs = runs_of(
        sweep_rows(space, "mi355x", 1.0)
        # gb300: ran, but too slow at every load
        + [run_row(space, "gb300", u, 900.0 * u, 15.0 / u) for u in space.concurrency]
    )
    best = best_per_device(space, runs)
    assert list(best.device) == ["mi355x"]
    table = pruned_table(pruned)
    found = {v.device: v for v in verdicts(space, runs, best, table)}
    need = min_gpus_for_weights(space, "h100")
    assert need is not None
    assert need > 8
    assert found["h100"].kind == "does_not_fit"
    assert found["h100"].text.startswith(
        f"does not fit: needs at least {need} GPUs for the weights (has 8 per node"
    )
    low = min(space.concurrency)
    at_low = runs[(runs.device == "gb300") & (runs.concurrency == low)].interactivity_p90.max()
    assert found["gb300"].kind == "misses_slo"
    assert found["gb300"].text.startswith(
        f"misses the SLO: best P90 interactivity {at_low:,.1f} tok/s/user"
    )
    assert f"lowest load tried ({low} users" in found["gb300"].text
    assert found["mi355x"].kind == "meets"
    md = markdown(space, best, runs, len(pruned), pruned=table)
    assert "(or fits)" not in md
    assert f"- h100: {found['h100'].text}." in md
    assert f"- gb300: {found['gb300'].text}." in md
    # without the pruned table (the CLI's stdout) the memory check alone still tells
    assert {v.device: v.kind for v in verdicts(space, runs, best)}["h100"] == "does_not_fit"
    # nothing meets: the first line says so, and why for each device
    two = space.model_copy(update={"devices": ["h100", "gb300"]})
    slow = runs[runs.device == "gb300"]
    none = best.iloc[0:0]
    headline, text = answer(two, none, slow, table)
    assert (
        headline
        == f"{space.name}: no device meets the SLO (h100 does not fit, gb300 misses the SLO)"
    )
    assert text.startswith("No device meets the SLO (P90 interactivity >= 20 tok/s/user): ")
    assert found["h100"].text in text
    assert found["gb300"].text in text
    md = markdown(two, none, slow, len(pruned), pruned=table)
    assert md.splitlines()[0] == f"# {headline}"


@pytest.mark.parametrize(
    ("model", "device", "tp", "has"),
    [
        ("kimi-k2", "h100", [8], "has 8 per node, TP tried up to 8"),
        ("kimi-k2", "h100", [8, 16], "has 8 per node, TP tried up to 16"),  # 16: beyond NVLink
        ("deepseek-v3", "d270", [1], "has 1 per deployment: no scale-up fabric"),
    ],
)
def test_a_device_whose_weights_do_not_fit_says_how_many_gpus_they_need(
    model: str, device: str, tp: list[int], has: str
) -> None:
    space = space_of(model=model, devices=[device], sweep={"tp": tp})
    candidates, pruned = expand(space)
    assert not candidates
    table = pruned_table(pruned)
    (v,) = verdicts(space, runs_of([]), runs_of([]), table)
    need = min_gpus_for_weights(space, device)
    assert v.kind == "does_not_fit"
    assert v.text == f"does not fit: needs at least {need} GPUs for the weights ({has})"


def test_min_gpus_for_the_weights_is_the_smallest_group_that_holds_them() -> None:
    from simulator.deployment import check_deployment
    from simulator.memory import activation_reserve_bytes
    from simulator.specs.loading import SpecError
    from simulator.weights import weights_per_gpu

    space = space_of(model="kimi-k2", devices=["h100"])
    card, device = catalog.model_card(space.model), catalog.hardware_profile("h100")
    budget = space.serving.gpu_memory_utilization * device.usable_memory_bytes

    def fits(tp: int) -> bool | None:
        trial = space.serving.model_copy(update={"tp": tp, "dp": 1, "ep": 1, "dcp": 1})
        try:
            check_deployment(card, trial)
        except SpecError:
            return None
        used = sum(g.bytes_per_gpu for g in weights_per_gpu(card, trial))
        return used + activation_reserve_bytes(card, trial, device) < budget

    need = min_gpus_for_weights(space, "h100")
    assert need is not None
    assert fits(need) is True
    assert not any(fits(tp) for tp in range(1, need))


# ------------------------------------------------------------------------------ the tables


def test_sensitivity_reads_in_percent_with_knob_names() -> None:
    space = space_of(devices=["h100"], sweep={"tp": [8], "dcp": [1, 2]})
    runs = runs_of(sweep_rows(space, "h100", 1.0) + sweep_rows(space, "h100", 0.956, dcp=2))
    best = best_per_device(space, runs)
    sens = sensitivity(space, runs, best)
    (s,) = sens.itertuples()
    assert s.throughput_change_pct == pytest.approx(100 * s.throughput_change)
    md = markdown(space, best, runs, 0, sens=sens)
    row = next(line for line in md.splitlines() if "decode context parallel (DCP)" in line)
    assert f"| {100 * s.throughput_change:+.1f} % |" in row
    assert f"{s.throughput_change:.4f}" not in md  # no raw fraction


class _Tables(HTMLParser):
    """The header cells of each table of a page, by the table's class."""

    def __init__(self) -> None:
        super().__init__()
        self.headers: dict[str, list[str]] = {}
        self._table: str | None = None
        self._th = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = dict(attrs).get("class") or f"table{len(self.headers)}"
            self.headers[self._table] = []
        self._th = tag == "th"

    def handle_endtag(self, tag: str) -> None:
        self._th = False if tag == "th" else self._th

    def handle_data(self, data: str) -> None:
        if self._th and self._table is not None:
            self.headers[self._table].append(data)


RAW = ("cpu_offload_bytes", "wall_s", "throughput_tok_per_s_per_gpu", "config_id",
       "usd_per_hour", "interactivity_p90")  # fmt: skip


def test_the_page_has_a_readable_width_and_readable_columns(tmp_path: Path) -> None:
    space = space_of(devices=["h100", "gb300"], sweep={"tp": [8], "cpu_offload_bytes": [0, 2**40]})
    runs = runs_of(
        sweep_rows(space, "h100", 1.0, offload=2.0**40) + sweep_rows(space, "gb300", 1.5)
    )
    best = best_per_device(space, runs)
    write_report(tmp_path, space, runs, best, sensitivity(space, runs, best), pd.DataFrame())
    page = (tmp_path / "report.html").read_text()
    width = re.search(r"body\{[^}]*max-width:(\d+)px", page)
    assert width is not None
    assert 1000 <= int(width.group(1)) <= 1200
    assert re.search(r"\.box\{[^}]*overflow-x:auto", page)
    assert "<div class='box'><table class='decision'>" in page  # it scrolls in its own box
    parser = _Tables()
    parser.feed(page)
    decision = parser.headers["decision"]
    assert len(decision) <= 16
    assert not [h for h in decision if any(raw in h for raw in RAW)]
    for tables in parser.headers.values():  # no raw column in any table of the page
        assert not {h for h in tables if h in RAW or h == "1099511627776"}
    assert "offload 1 TiB" in page
    assert config_label(best[best.device == "h100"].iloc[0]) == "TP8, offload 1 TiB"
    # the CSVs keep every raw column
    assert "cpu_offload_bytes" in (tmp_path / "best.csv").read_text().splitlines()[0]
    assert "wall_s" in (tmp_path / "runs.csv").read_text().splitlines()[0]
    md = (tmp_path / "report.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| # |"))
    assert not [raw for raw in RAW if raw in header]
    assert "$/hour" in header


# ------------------------------------------------------------------------------ the figure


def test_one_frontier_figure_one_legend_entry_per_device_and_marked_points() -> None:
    devices = ["h100", "h200", "mi355x"]
    space = space_of(devices=devices, sweep={"tp": [4, 8]})
    rows = [r for i, d in enumerate(devices) for r in sweep_rows(space, d, 1.0 + 0.3 * i)]
    rows += [r for d in devices for r in sweep_rows(space, d, 0.8, tp=4)]
    runs = runs_of(rows)
    best = best_per_device(space, runs)
    fig = frontier_figure(space, runs, best)
    legend = [t for t in fig.data if t.showlegend is not False]
    assert sorted(t.name for t in legend) == sorted(devices)  # one entry per device
    colours = {t.name: t.line.color for t in legend}
    assert len(set(colours.values())) == len(devices)
    for device in devices:
        mine = runs[runs.device == device]
        env = frontier(mine)
        line = next(t for t in legend if t.name == device)
        assert list(line.x) == list(env.interactivity_p90)  # the Pareto envelope, in x order
        assert line.error_y is not None
        assert line.error_y.array is not None
        star = next(t for t in fig.data if t.name == f"{device} operating point")
        b = best[best.device == device].iloc[0]
        assert (star.x[0], star.y[0]) == (b.interactivity_p90, b.throughput_tok_per_s_per_gpu)
        assert star.marker.symbol == "star"
        assert config_label(b) in star.text[0]
        band = [t for t in fig.data if t.name and t.name.startswith(f"{device} model error")]
        assert len(band) == 2
        assert band[1].fill == "tonexty"
        dots = next(t for t in fig.data if t.name == f"{device} runs")
        assert len(dots.x) == len(mine)
        assert {int(c[1]) for c in dots.customdata} == set(mine.concurrency)  # hover: users
    slo = [s for s in fig.layout.shapes if s.x0 == s.x1 == SLO]
    assert slo  # the SLO as a vertical line
    assert fig.layout.xaxis.title.text.startswith("P90 interactivity")


@pytest.mark.parametrize("target_s", [0.61, 0.7, 5.0])
def test_a_ttft_pass_inside_the_stated_ttft_error_is_called_marginal(target_s: float) -> None:
    from simulator.measured.package import tables_available
    from simulator.planner.uncertainty import latency_error

    if not tables_available():
        pytest.skip("the stated TTFT error is for runs on the measured tables (extra absent)")
    space = space_of(
        slo={"interactivity_tok_per_s_p90": SLO, "ttft_s_p90": target_s}, devices=["h100"]
    )
    runs = runs_of(sweep_rows(space, "h100", 1.0))
    best = best_per_device(space, runs)
    _, text = answer(space, best, runs)
    lat = latency_error("h100")
    assert lat is not None  # the committed silicon figures
    assert lat.ttft_bias_pct < 0
    worst = float(best.iloc[0].ttft_p90_s_worst)
    marginal = worst / (1 + lat.ttft_bias_pct / 100) > target_s
    assert ("a marginal pass" in text) is marginal
    if target_s != 0.7:  # 0.6 s against 0.61 s is inside any optimistic bias, 5 s outside
        assert marginal is (target_s < 0.7)
