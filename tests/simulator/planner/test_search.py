"""Search: expansion and pruning, cached execution, operating points, fleet size, report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from simulator.cli import app
from simulator.planner.analysis import best_per_device, operating_points, pruned_table, runs_table
from simulator.planner.compare import sensitivity
from simulator.planner.executor import read_cached, run_all
from simulator.planner.expand import expand
from simulator.planner.report import write_report
from simulator.planner.space import SearchSpace
from simulator.specs.scenario import Scenario

SPACE = {
    "name": "tiny",
    "model": "llama-3.3-70b",
    "devices": ["h100", "h200"],
    "sweep": {"tp": [1, 3, 8], "dcp": [1, 2]},
    "concurrency": [2, 8],
    "workload": {"kind": "random", "input_tokens": 512, "output_tokens": 32,
                 "num_requests": 24, "concurrency": 1},
    "slo": {"interactivity_tok_per_s_p90": 20.0},
    "cost_model": "semianalysis_tco_neocloud",
    "demand_users": 100,
    "duration_s": 600.0,
    "warmup_s": 0.0,
}  # fmt: skip


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    space = SearchSpace.model_validate(SPACE)
    candidates, pruned = expand(space)
    out = tmp_path_factory.mktemp("search")
    scenarios = [sc for c in candidates for sc in c.scenarios]
    results = run_all(scenarios, out / "cache", workers=2)
    return space, candidates, pruned, results, out


def test_invalid_combinations_are_pruned_with_reasons(searched) -> None:  # type: ignore[no-untyped-def]
    _, candidates, pruned, _, _ = searched
    reasons = {(p.device, p.knobs["tp"], p.knobs["dcp"]): p.reason for p in pruned}
    assert "serving.tp" in reasons["h100", 3, 1]  # 3 does not divide 64 heads
    assert "dcp" in reasons["h100", 1, 2]  # dcp 2 does not divide tp 1
    assert "weights exceed" in reasons["h100", 1, 1]  # 141 GB of bf16 on one 80 GB GPU
    # 8 KV heads on TP8: one per rank, nothing replicated for DCP to shard (vLLM refuses it)
    assert "tp 8 // 8 KV heads" in reasons["h100", 8, 2]
    assert {(c.device, c.knobs["tp"], c.knobs["dcp"]) for c in candidates} == {
        ("h100", 8, 1), ("h200", 8, 1),
    }  # fmt: skip
    assert all(len(c.scenarios) == 2 for c in candidates)


def test_cached_runs_are_not_run_again(searched) -> None:  # type: ignore[no-untyped-def]
    _, candidates, _, results, out = searched
    scenarios = [sc for c in candidates for sc in c.scenarios]
    calls: list[tuple[int, int]] = []
    again = run_all(scenarios, out / "cache", workers=2, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(len(scenarios), len(scenarios))]  # everything came from the cache
    assert again == results


def test_operating_point_fleet_and_cost(searched) -> None:  # type: ignore[no-untyped-def]
    space, candidates, pruned, results, _ = searched
    runs = runs_table(space, candidates, results)
    assert (runs.slo_met == (runs.interactivity_p90 >= 20.0)).all()
    ok = runs[runs.tokens_per_usd.notna()]
    assert (ok.tokens_per_usd == ok.throughput_tok_per_s_per_gpu * 3600 / ok.usd_per_gpu_hour).all()
    points = operating_points(runs)
    for _, p in points.iterrows():
        same = runs[(runs.config_id == p.config_id) & runs.slo_met]
        assert p.throughput_tok_per_s_per_gpu == same.throughput_tok_per_s_per_gpu.max()
    best = best_per_device(space, runs)
    assert set(best.device) <= {"h100", "h200"}
    for _, b in best.iterrows():
        assert b.replicas == -(-100 // b.concurrency)  # ceil(demand / users per replica)
        assert b.gpus == b.replicas * b.tp * b.dp
        assert b.nodes == -(-b.gpus // 8)
    sens = sensitivity(space, runs, best, pruned_table(pruned))
    # TP8 DCP1 is all that ran: TP3 (heads) and DCP2 (KV heads) one step away were pruned
    assert sorted(zip(sens.device, sens.knob, sens.to, strict=True)) == [
        ("h100", "dcp", 2), ("h100", "tp", 3), ("h200", "dcp", 2), ("h200", "tp", 3)
    ]  # fmt: skip
    assert sens.note.str.startswith("pruned: ").all()


def test_report_is_self_contained(searched) -> None:  # type: ignore[no-untyped-def]
    space, candidates, pruned, results, out = searched
    runs = runs_table(space, candidates, results)
    best = best_per_device(space, runs)
    paths = write_report(
        out, space, runs, best, sensitivity(space, runs, best), pruned_table(pruned)
    )
    names = {p.name for p in paths}
    assert {"report.html", "report.md", "runs.csv", "best.csv", "pruned.csv"} <= names
    page = (out / "report.html").read_text()
    assert 'src="https://cdn.plot.ly' not in page  # plotly.js is inlined: opens offline
    assert "Plotly.newPlot" in page
    # every report states where each device's op latencies come from ...
    from simulator.measured.package import tables_available

    assert ("measured: h100_sxm" if tables_available() else "roofline priors") in page
    # ... and the end-to-end error known for it, with its source
    assert "error band" in page
    assert "InferenceMAX" in page
    assert "Best configuration per device" in (out / "report.md").read_text()


def test_plan_search_cli(tmp_path: Path) -> None:
    space = dict(SPACE, devices=["h100"], sweep={"tp": [8]}, concurrency=[4])
    f = tmp_path / "space.yaml"
    f.write_text(yaml.safe_dump(space))
    result = CliRunner().invoke(app, ["search", str(f), "--out", str(tmp_path / "o"), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["runs"] == 1
    # the space is written beside its results and reads back as the same space
    written = SearchSpace.model_validate(
        yaml.safe_load((tmp_path / "o" / "space.yaml").read_text())
    )
    assert written == SearchSpace.model_validate(space)
    bad = dict(space, colour="blue")
    f.write_text(yaml.safe_dump(bad))
    result = CliRunner().invoke(app, ["search", str(f)])
    assert result.exit_code == 2
    assert "colour" in result.stderr
    f.write_text(yaml.safe_dump(dict(space, devices=[])))
    result = CliRunner().invoke(app, ["search", str(f)])
    assert result.exit_code == 2
    assert "devices" in result.stderr


def test_fleet_for_a_request_rate_demand(searched) -> None:  # type: ignore[no-untyped-def]
    space, candidates, _, results, _ = searched
    by_rate = space.model_copy(update={"demand_users": None, "demand_requests_per_s": 3.0})
    runs = runs_table(by_rate, candidates, results)
    best = best_per_device(by_rate, runs)
    for _, b in best.iterrows():
        assert b.replicas == -(-3.0 // b.requests_per_s)  # ceil(demand / rate per replica)
        assert b.requests_per_s > 0


def test_cached_runs_are_keyed_on_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run cached by other code (or other cards / profiles) is not handed back."""
    from simulator.planner import fingerprint

    scenario = Scenario.model_validate(
        {"name": "k", "model": "llama-3.3-70b", "device": "h100", "serving": {"tp": 8},
         "workload": {"kind": "agentic", "sessions": 2, "concurrency": 1}}
    )  # fmt: skip
    before = fingerprint.scenario_hash(scenario)
    assert fingerprint.scenario_hash(scenario) == before
    monkeypatch.setattr(fingerprint, "code_fingerprint", lambda: "edited code")
    assert fingerprint.scenario_hash(scenario) != before


def _tiny(seed: int) -> Scenario:
    # short random prompts: the agentic generator's first prompts (250k tokens) exceed the
    # 131,072-token context of Llama 3.3 and are rejected as vLLM rejects them
    return Scenario.model_validate(
        {"name": f"tiny-{seed}", "model": "llama-3.3-70b", "device": "h100",
         "serving": {"tp": 8}, "seed": seed, "duration_s": 120.0,
         "workload": {"kind": "random", "input_tokens": 2048, "output_tokens": 64,
                      "num_requests": 8, "concurrency": 1}}
    )  # fmt: skip


def test_a_torn_cache_entry_is_run_again(tmp_path: Path) -> None:
    from simulator.planner.fingerprint import scenario_hash

    sc = _tiny(0)
    (tmp_path / f"{scenario_hash(sc)}.json").write_text('{"throughput_tok_per')  # a kill mid-write
    results = run_all([sc], tmp_path, workers=1)
    assert results[sc.name]["throughput_tok_per_s_per_gpu"] > 0
    assert json.loads((tmp_path / f"{scenario_hash(sc)}.json").read_text()) == results[sc.name]
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(
    ("field", "value"),
    [("throughput_tok_per_s_per_gpu", "abc"), ("saturated", "maybe"), ("wall_s", "slow")],
)
def test_an_edited_cache_entry_is_run_again(tmp_path: Path, field: str, value: str) -> None:
    from simulator.planner.fingerprint import scenario_hash

    sc = _tiny(0)
    first = run_all([sc], tmp_path, workers=1)[sc.name]
    path = tmp_path / f"{scenario_hash(sc)}.json"
    path.write_text(json.dumps({**first, field: value}))
    again = run_all([sc], tmp_path, workers=1)[sc.name]  # simulated again: wall_s differs
    assert {k: v for k, v in again.items() if k != "wall_s"} == {
        k: v for k, v in first.items() if k != "wall_s"
    }
    assert json.loads(path.read_text()) == again


class StopError(Exception):
    pass


def stop_after_one(done: int, total: int) -> None:
    """A ``progress`` callback that stops the batch once one run is stored."""
    if done >= 1:
        raise StopError


def test_a_stop_from_progress_cancels_the_queued_runs(tmp_path: Path) -> None:
    with pytest.raises(StopError):
        run_all([_tiny(s) for s in range(4)], tmp_path, workers=1, progress=stop_after_one)
    assert len(list(tmp_path.glob("*.json"))) == 1  # the one stored before the stop


def test_the_run_cache_key_covers_the_engine_but_not_the_presentation() -> None:
    from simulator.planner.fingerprint import fingerprinted_files

    names = {name for name, _ in fingerprinted_files()}
    for engine in ("engine.py", "scheduler.py", "simulation.py", "planner/executor.py",
                   "cost/step.py", "model_cards/kimi-k3.yaml", "h100/profile.yaml"):  # fmt: skip
        assert engine in names, engine
    for shown in ("cli/size.py", "planner/report.py", "planner/answer.py", "planner/deploy.py",
                  "api.py", "validation/document.py", "validation/silicon_report.py",
                  "model_error.json"):  # fmt: skip
        assert shown not in names, shown


def test_a_kept_pool_serves_every_batch_with_the_same_workers(tmp_path: Path) -> None:
    from simulator.planner.executor import KeptPool

    with KeptPool(1) as kept:
        first = run_all([_tiny(0)], tmp_path, workers=1, kept=kept)
        pool = kept.get()
        workers = set(pool._processes)  # type: ignore[attr-defined]
        second = run_all([_tiny(1)], tmp_path, workers=1, kept=kept)
        assert kept.get() is pool
        assert set(pool._processes) == workers  # type: ignore[attr-defined]
    assert kept._pool is None  # closed with the block
    alone = run_all([_tiny(0), _tiny(1)], tmp_path / "alone", workers=1)

    def answers(results: dict[str, dict]) -> dict[str, dict]:
        return {k: {f: v for f, v in r.items() if f != "wall_s"} for k, r in results.items()}

    assert answers(alone) == answers({**first, **second})  # warm workers, same answers


def test_a_failed_batch_drops_the_kept_pool(tmp_path: Path) -> None:
    from simulator.planner.executor import KeptPool

    with KeptPool(1) as kept:
        with pytest.raises(StopError):
            run_all(
                [_tiny(s) for s in range(3)], tmp_path, workers=1, progress=stop_after_one,
                kept=kept,
            )  # fmt: skip
        assert kept._pool is None
        again = run_all([_tiny(5)], tmp_path, workers=1, kept=kept)  # a new pool
        assert again["tiny-5"]["throughput_tok_per_s_per_gpu"] > 0


def test_a_chain_runs_in_turn_up_to_its_first_miss_from_the_pool_or_the_cache(
    tmp_path: Path,
) -> None:
    """A chain stops after the first run whose result misses its SLO, in a worker or read
    from the cache; ``progress``'s total drops by the runs a stop skipped."""
    from simulator.planner.replicates import Chain
    from simulator.specs.scenario import SLO

    plain = run_all([_tiny(0), _tiny(1), _tiny(2)], tmp_path / "plain", workers=1)
    tok = [plain[f"tiny-{s}"]["interactivity_tok_per_s_p90"] for s in range(3)]
    # a target between the runs' figures: the first passes, the second misses
    ranked = sorted(range(3), key=lambda s: -tok[s])
    assert tok[ranked[0]] > tok[ranked[1]]
    target = (tok[ranked[0]] + tok[ranked[1]]) / 2
    chain = Chain(tuple(_tiny(s) for s in (ranked[0], ranked[1], ranked[2])),
                  SLO(interactivity_tok_per_s_p90=target))  # fmt: skip
    seen: list[tuple[int, int]] = []
    got = run_all([chain, _tiny(3)], tmp_path / "c", workers=2,
                  progress=lambda d, t: seen.append((d, t)))  # fmt: skip
    assert sorted(got) == sorted([f"tiny-{ranked[0]}", f"tiny-{ranked[1]}", "tiny-3"])
    assert seen[0] == (0, 4)
    assert seen[-1] == (3, 3)
    # the same runs' figures as alone (a chain's runs are independent simulations)
    for s in ranked[:2]:
        assert got[f"tiny-{s}"]["interactivity_tok_per_s_p90"] == tok[s]
    # from the cache: the stop read back, nothing run (the same wall_s)
    assert run_all([chain, _tiny(3)], tmp_path / "c", workers=2) == got
    # no SLO: the whole chain
    whole = run_all([Chain(chain.scenarios)], tmp_path / "c", workers=1)
    assert sorted(whole) == sorted(f"tiny-{s}" for s in range(3))


def _raising_on(name: str) -> Any:
    """``run_scenario`` that raises for the scenario called ``name`` (forked workers inherit
    the patch)."""
    from simulator.planner import executor

    real = executor.run_scenario

    def run(payload: str) -> dict[str, Any]:
        if Scenario.model_validate_json(payload).name == name:
            raise RuntimeError(f"{name} broke")
        return real(payload)

    return run


def test_a_chain_that_breaks_keeps_the_runs_before_the_break(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later run of a chain that raises: the search fails with that run's error, and the
    runs before it are cached (a resumed search reads them back); a first run that raises
    caches nothing."""
    from simulator.planner import executor
    from simulator.planner.fingerprint import scenario_hash
    from simulator.planner.replicates import Chain

    if executor._context() is not None:
        pytest.skip("the patch reaches forked workers only (threads running: spawn)")
    runs = tuple(_tiny(s) for s in range(3))
    monkeypatch.setattr(executor, "run_scenario", _raising_on("tiny-1"))
    with pytest.raises(RuntimeError, match="tiny-1 broke"):
        run_all([Chain(runs)], tmp_path, workers=1)
    assert [(tmp_path / f"{scenario_hash(sc)}.json").exists() for sc in runs] == [
        True, False, False,
    ]  # fmt: skip
    kept = read_cached(tmp_path / f"{scenario_hash(runs[0])}.json")
    with pytest.raises(RuntimeError, match="tiny-1 broke"):  # the first run
        run_all([Chain(runs[1:] + runs[:1])], tmp_path / "first", workers=1)
    assert not list((tmp_path / "first").glob("*.json"))
    monkeypatch.undo()
    again = run_all([Chain(runs)], tmp_path, workers=1)
    assert again["tiny-0"] == kept  # read back, not run again (the same wall_s)
    assert sorted(again) == ["tiny-0", "tiny-1", "tiny-2"]
