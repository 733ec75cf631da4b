"""Search over xPyD splits: expansion and pruning, per-pool columns, fleet size, the
aggregated-vs-disaggregated comparison and its report section."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator.planner.analysis import best_per_device, pruned_table, runs_table
from simulator.planner.compare import frontier, mode_comparison, sensitivity
from simulator.planner.executor import run_all
from simulator.planner.expand import expand
from simulator.planner.report import markdown, write_report
from simulator.planner.space import SearchSpace

SPLIT = {"prefill_replicas": 1, "decode_replicas": 1}
SPACE = {
    "name": "tiny-pd",
    "model": "llama-3.3-70b",
    "devices": ["h100"],
    "sweep": {"tp": [8], "dp": [1, 2],
              "disaggregation": [None, SPLIT, {**SPLIT, "send_back": True}]},
    "concurrency": [2, 6],
    "workload": {"kind": "chat", "sessions": 12, "concurrency": 1},
    "slo": {"interactivity_tok_per_s_p90": 20.0},
    "cost_model": "semianalysis_tco_neocloud",
    "demand_users": 60,
    "duration_s": 300.0,
    "warmup_s": 0.0,
}  # fmt: skip


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    space = SearchSpace.model_validate(SPACE)
    candidates, pruned = expand(space)
    out = tmp_path_factory.mktemp("pd-search")
    results = run_all([sc for c in candidates for sc in c.scenarios], out / "cache", workers=2)
    runs = runs_table(space, candidates, results)
    return space, candidates, pruned, runs, out


def test_splits_expand_and_dp_conflicts_are_pruned(searched) -> None:  # type: ignore[no-untyped-def]
    _, candidates, pruned, _, _ = searched
    ids = sorted(c.config_id for c in candidates)
    assert ids == ["h100-tp8-dcp1", "h100-tp8-dcp1-1p1d", "h100-tp8-dcp1-1p1d-sb",
                   "h100-tp8-dcp1-dp2"]  # fmt: skip
    assert len(pruned) == 2  # the two splits with dp 2
    assert all("replace serving.dp" in p.reason for p in pruned)
    table = pruned_table(pruned)
    assert set(table.disaggregation) == {"1P1D", "1P1D send-back"}
    by_id = {c.config_id: c for c in candidates}
    sc = by_id["h100-tp8-dcp1-1p1d-sb"].scenarios[0]
    assert sc.disaggregation is not None
    assert sc.disaggregation.send_back
    assert sc.num_gpus == 16
    assert by_id["h100-tp8-dcp1"].scenarios[0].disaggregation is None


def test_runs_carry_the_mode_and_per_pool_figures(searched) -> None:  # type: ignore[no-untyped-def]
    space, _, _, runs, _ = searched
    split = runs[runs["mode"] == "disaggregated"]
    agg = runs[runs["mode"] == "aggregated"]
    assert set(split.disaggregation) == {"1P1D", "1P1D send-back"}
    assert set(agg.disaggregation) == {"aggregated"}
    assert (split.gpus_per_deployment == 16).all()
    assert set(agg.gpus_per_deployment) == {8, 16}  # dp 1 and dp 2
    assert split.prefill_input_tok_per_s_per_gpu.notna().all()
    assert agg.prefill_input_tok_per_s_per_gpu.isna().all()
    sb = split[split.disaggregation == "1P1D send-back"]
    assert (sb.send_back_pulls > 0).any()
    best = best_per_device(space, runs)
    for _, b in best.iterrows():
        assert b.gpus == b.replicas * b.gpus_per_deployment
    sens = sensitivity(space, runs, best)
    assert "disaggregation" not in set(sens.get("knob", []))


def test_mode_comparison_names_the_best_split(searched) -> None:  # type: ignore[no-untyped-def]
    _, _, _, runs, _ = searched
    modes = mode_comparison(runs)
    assert list(modes.device) == ["h100"]
    (m,) = modes.itertuples()
    ok = runs[runs.slo_met]
    key = m.key
    for mode in ("aggregated", "disaggregated"):
        mine = ok[ok["mode"] == mode]
        value = getattr(m, f"{mode}_value")
        if mine.empty:
            assert value is None
        else:
            assert value == mine[key].max()
    if m.disaggregated_config is not None:
        assert m.best_split in {"1P1D", "1P1D send-back"}
    assert m.winner in {"aggregated", "disaggregated", "neither meets the SLO"}
    assert mode_comparison(runs[runs["mode"] == "aggregated"]).empty


def test_report_has_the_aggregated_vs_disaggregated_section(searched) -> None:  # type: ignore[no-untyped-def]
    space, _, pruned, runs, out = searched
    best = best_per_device(space, runs)
    paths = write_report(
        out, space, runs, best, sensitivity(space, runs, best), pruned_table(pruned)
    )
    assert "modes.csv" in {p.name for p in paths}
    md = markdown(space, best, runs, len(pruned))
    assert "## Aggregated or disaggregated" in md
    # the link the runs used: H100's profile NIC (ConnectX-7), and the descriptor cost
    assert "profile NICs: h100 50 GB/s, 5 us" in md
    assert "2.5 us per NIXL descriptor" in md
    page = (out / "report.html").read_text()
    assert "Aggregated or disaggregated" in page
    assert "aggregated frontier" in page
    assert "disaggregated frontier" in page


def test_frontier_is_the_pareto_envelope() -> None:
    runs = pd.DataFrame(
        {
            "interactivity_p90": [10.0, 20.0, 30.0, 15.0, None],
            "throughput_tok_per_s_per_gpu": [900.0, 700.0, 300.0, 600.0, 5000.0],
        }
    )
    env = frontier(runs)
    assert list(env.interactivity_p90) == [10.0, 20.0, 30.0]  # (15, 600) is dominated
