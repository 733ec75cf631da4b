"""``--set KEY=VALUE``: ``apply_overrides`` itself, and `plan run` / `plan search` with it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from simulator.cli import app
from simulator.specs import Scenario, SpecError
from simulator.specs.loading import parse
from simulator.specs.overrides import apply_overrides, parse_with_overrides

runner = CliRunner()

SCENARIO: dict[str, Any] = {
    "name": "overrides",
    "model": "llama-3.1-8b",
    "device": "h100",
    "serving": {"tp": 1},
    "workload": {"kind": "random", "input_tokens": 256, "output_tokens": 8,
                 "num_requests": 4, "concurrency": 2},
    "duration_s": 30.0,
}  # fmt: skip

SPACE: dict[str, Any] = {
    "name": "overrides",
    "model": "llama-3.1-8b",
    "devices": ["h100"],
    "concurrency": [1],
    "workload": {"kind": "random", "input_tokens": 256, "output_tokens": 8,
                 "num_requests": 4, "concurrency": 1},
    "slo": {},
    "duration_s": 30.0,
    "warmup_s": 0.0,
    "seeds": 1,
    "search": "grid",
}  # fmt: skip


def plan(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def _yaml(tmp: Path, name: str, data: Any) -> str:
    (tmp / name).write_text(yaml.safe_dump(data, sort_keys=False))
    return str(tmp / name)


# ------------------------------------------------------------------------------ apply_overrides


def test_values_are_read_as_yaml() -> None:
    data = {"serving": {"tp": 8}, "devices": ["mi355x"], "slo": None}
    got = apply_overrides(
        data,
        ["serving.tp=4", "devices=[b300, h200]", "slo.interactivity_tok_per_s_p90=40",
         "serving.enable_prefix_caching=false", "serving.max_num_seqs=null", "name=' 7 '",
         "duration_s=1.5e+3"],
        "(arguments)",
    )  # fmt: skip
    assert got["serving"] == {"tp": 4, "enable_prefix_caching": False, "max_num_seqs": None}
    assert got["devices"] == ["b300", "h200"]
    assert got["slo"] == {"interactivity_tok_per_s_p90": 40}  # a null mapping is made one
    assert got["name"] == " 7 "
    assert got["duration_s"] == 1500.0


def test_the_input_is_left_as_it_was_and_nothing_is_shared() -> None:
    data = {"serving": {"tp": 8}, "devices": ["a", "b"]}
    before = copy.deepcopy(data)
    got = apply_overrides(data, ["serving.tp=2", "devices.1=c"], "(arguments)")
    assert data == before
    assert got == {"serving": {"tp": 2}, "devices": ["a", "c"]}
    got["serving"]["tp"] = 99
    assert data["serving"]["tp"] == 8


def test_missing_mappings_are_made_and_an_unknown_key_is_left_to_validation() -> None:
    got = apply_overrides({}, ["a.b.c=1"], "(arguments)")
    assert got == {"a": {"b": {"c": 1}}}
    with pytest.raises(SpecError) as info:
        parse(Scenario, apply_overrides(SCENARIO, ["serving.tpp=2"], "(arguments)"), "s.yaml")
    assert (info.value.field, info.value.reason) == ("serving.tpp", "unknown field")


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ("serving.tp", "has no '='"),
        ("=4", "empty key"),
        ("  =4", "empty key"),
        ("serving.=4", "empty part"),
        (".tp=4", "empty part"),
        ("serving.tp=", "has no value"),
        ("serving.tp={a: 1, a: 2}", "duplicate key 'a'"),
        ("serving.tp=[1,", "not YAML"),
        ("serving.tp.x=1", "serving.tp is 8, not a mapping"),
        ("devices.x=1", "'x' is not an index"),
        ("devices.2=1", "'2' is not an index"),
    ],
)
def test_a_malformed_item_names_the_source_and_field_set(item: str, reason: str) -> None:
    with pytest.raises(SpecError) as info:
        apply_overrides({"serving": {"tp": 8}, "devices": ["a"]}, [item], "(arguments)")
    err = info.value
    assert (err.file, err.field) == ("(arguments)", "set")
    assert reason in err.reason, err.reason
    assert repr(item) in err.reason  # the item as given


def test_the_same_key_twice_or_overlapping_is_refused() -> None:
    for sets in (["serving.tp=1", "serving.tp=2"], ["serving={tp: 1}", "serving.tp=2"],
                 ["serving.tp=2", "serving={tp: 1}"]):  # fmt: skip
        with pytest.raises(SpecError, match="give it once"):
            apply_overrides({}, sets, "(arguments)")
    assert apply_overrides({}, ["serving.tp=1", "serving.dcp=1"], "x") == {
        "serving": {"tp": 1, "dcp": 1}
    }


def test_errors_of_set_values_name_the_arguments_the_others_the_file() -> None:
    data = {**SCENARIO, "duration_s": -5.0}
    with pytest.raises(SpecError) as info:
        parse_with_overrides(Scenario, data, "s.yaml", ["serving.tp=true", "colour=blue"])
    errors = {(e.file, e.field) for e in info.value.errors()}
    assert errors == {
        ("(arguments)", "serving.tp"),
        ("(arguments)", "colour"),
        ("s.yaml", "duration_s"),
    }, [str(e) for e in info.value.errors()]


# ------------------------------------------------------------------------------ the commands


def test_run_with_set_runs_the_changed_scenario(tmp_path: Path) -> None:
    f = _yaml(tmp_path, "s.yaml", SCENARIO)
    code, stdout, stderr = plan("run", f, "--json")
    assert code == 0, stderr
    plain = json.loads(stdout)
    sets = ["workload.num_requests=7", "serving.max_num_seqs=3", "name=changed"]
    code, stdout, stderr = plan("run", f, *(a for s in sets for a in ("--set", s)), "--json")
    assert code == 0, stderr
    changed = json.loads(stdout)
    assert (plain["requests_finished"], changed["requests_finished"]) == (4, 7)
    assert changed["scenario"] == "changed"
    assert changed["overrides"] == sets
    assert plain["overrides"] == []
    assert yaml.safe_load(Path(f).read_text()) == SCENARIO  # the file itself is not touched


def test_search_with_set_searches_the_changed_space(tmp_path: Path) -> None:
    f = _yaml(tmp_path, "space.yaml", SPACE)
    code, stdout, stderr = plan(
        "search", f, "--out", str(tmp_path / "o"), "--json",
        "--set", "concurrency=[1, 2]", "--set", "sweep.max_num_seqs=[4, 8]",
    )  # fmt: skip
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["planned"]["configurations"] == 2
    assert data["runs"] == 4  # 2 configurations x 2 concurrencies, grid
    written = yaml.safe_load((tmp_path / "o" / "space.yaml").read_text())
    assert written["concurrency"] == [1, 2]
    assert written["sweep"]["max_num_seqs"] == [4, 8]
