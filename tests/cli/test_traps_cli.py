"""Silent traps end to end: each bad input is one ``error: file: field: reason`` line and exit
code 2; each fixed answer shows in the command's output (see tests/simulator/test_traps.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from simulator.cli import app
from simulator.planner.expand import expand
from simulator.planner.space import SearchSpace

runner = CliRunner()


def plan(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


SPACE: dict[str, Any] = {
    "name": "traps",
    "model": "llama-3.1-8b",
    "devices": ["h100"],
    "concurrency": [2],
    "workload": {"kind": "random", "input_tokens": 256, "output_tokens": 8,
                 "num_requests": 6, "concurrency": 1},
    "slo": {},
    "search": "grid",  # no SLO: a max_load search needs a target
    "duration_s": 60.0,
    "warmup_s": 0.0,
}  # fmt: skip

SCENARIO: dict[str, Any] = {
    "name": "traps",
    "model": "llama-3.1-8b",
    "device": "h100",
    "serving": {"tp": 1},
    "workload": {"kind": "random", "input_tokens": 1_000, "output_tokens": 100,
                 "num_requests": 12, "concurrency": 2},
}  # fmt: skip


def _yaml(tmp: Path, name: str, data: dict[str, Any]) -> str:
    f = tmp / name
    f.write_text(yaml.safe_dump(data))
    return str(f)


def _search(tmp: Path, **over: Any) -> list[str]:
    return ["search", _yaml(tmp, "space.yaml", {**SPACE, **over}), "--out", str(tmp / "o")]


def _run(tmp: Path, **serving: Any) -> list[str]:
    return ["run", _yaml(tmp, "s.yaml", {**SCENARIO, "serving": serving})]


MEM = ["memory", "--model", "llama-3.3-70b", "--device", "h200", "--tp", "8"]

BAD: list[tuple[str, Callable[[Path], list[str]], str, list[str]]] = [
    ("search-base-vs-sweep", lambda t: _search(t, serving={"tp": 2}, sweep={"tp": [4, 8]}),
     "space.yaml", ["sweep.tp", "serving.tp"]),
    ("search-base-vs-sweep-offload",
     lambda t: _search(t, serving={"cpu_offload_bytes": 1e11},
                       sweep={"cpu_offload_bytes": [0.0, 2e11]}),
     "space.yaml", ["sweep.cpu_offload_bytes", "serving.cpu_offload_bytes"]),
    ("search-both-demands", lambda t: _search(t, demand_users=100, demand_requests_per_s=2.0),
     "space.yaml", ["demand_requests_per_s", "demand_users"]),
    ("search-max-model-len-beyond-card",
     lambda t: _search(t, serving={"max_model_len": 500_000}),
     "space.yaml", ["serving.max_model_len", "131,072"]),
    ("run-gqa-dcp-beyond-kv-heads",
     lambda t: ["run", _yaml(t, "s.yaml", {**SCENARIO, "model": "llama-3.3-70b",
                                           "device": "h200", "serving": {"tp": 8, "dcp": 8}})],
     "s.yaml", ["serving.dcp", "8 KV heads"]),
    ("run-max-model-len-beyond-card", lambda t: _run(t, tp=1, max_model_len=500_000),
     "s.yaml", ["serving.max_model_len", "131,072"]),
    ("memory-gqa-dcp-beyond-kv-heads", lambda t: [*MEM, "--dcp", "8"],
     "(arguments)", ["serving.dcp", "tp 8 // 8 KV heads = 1"]),
    ("memory-gqa-dcp-2", lambda t: [*MEM, "--dcp", "2"], "(arguments)", ["serving.dcp"]),
    ("memory-max-model-len-beyond-card", lambda t: [*MEM, "--max-model-len", "500000"],
     "(arguments)", ["serving.max_model_len"]),
]  # fmt: skip


@pytest.mark.parametrize(("build", "file", "needles"), [c[1:] for c in BAD],
                         ids=[c[0] for c in BAD])  # fmt: skip
def test_trap_inputs_are_one_line_and_exit_2(
    build: Callable[[Path], list[str]], file: str, needles: list[str], tmp_path: Path
) -> None:
    code, stdout, stderr = plan(*build(tmp_path))
    assert code == 2, (stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    assert file in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_memory_never_says_a_context_beyond_the_model_fits() -> None:
    code, stdout, _ = plan(*MEM, "--context", "500000", "--json")
    assert code == 0
    data = json.loads(stdout)
    assert data["fits"] is False
    assert "max_model_len 131,072" in data["fits_reason"]
    code, stdout, _ = plan(*MEM, "--context", "500000")
    assert code == 0
    assert "NO: context 500,000 tokens exceeds max_model_len" in stdout
    code, stdout, _ = plan(*MEM, "--context", "40000", "--max-model-len", "32768", "--json")
    assert json.loads(stdout)["fits"] is False
    # comparing devices: the row says NO and the reason is printed under the table
    code, stdout, _ = plan(*MEM, "--device", "b200", "--context", "500000")
    assert code == 0
    assert stdout.count("exceeds max_model_len") == 2


def test_run_counts_requests_beyond_max_model_len_as_rejected(tmp_path: Path) -> None:
    f = _yaml(tmp_path, "s.yaml", {**SCENARIO, "serving": {"tp": 1, "max_model_len": 1_050}})
    code, stdout, stderr = plan("run", f, "--json", "--out", str(tmp_path / "out"))
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["requests_rejected"] > 0
    assert data["requests_rejected"] + data["requests_finished"] == 12
    import pandas as pd

    requests = pd.read_csv(tmp_path / "out" / "requests.csv")
    rejected = requests[requests.status == "rejected"]
    assert len(rejected) == data["requests_rejected"]
    assert (rejected.prompt_tokens > 1_050 - 100).all()  # max_tokens is at most 100
    assert rejected.reject_reason.str.contains("exceed max_model_len 1,050").all()


def test_search_keeps_the_base_serving_and_writes_it_back(tmp_path: Path) -> None:
    code, stdout, stderr = plan(
        *_search(tmp_path, serving={"tp": 2, "max_num_seqs": 16}, sweep={"dcp": [1, 1]}),
        "--json",
    )
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["runs"] == 1
    (best,) = data["best"]
    assert (best["tp"], best["max_num_seqs"], best["dcp"]) == (2, 16, 1)
    assert best["config_id"] == "h100-tp2-dcp1-seqs16"
    assert [p["reason"] for p in data["pruned"]] == [
        "sweep.dcp repeats 1: its configurations run once (the repeat is dropped)"
    ]
    # space.yaml keeps what was given: read back, it expands to the same configuration
    written = SearchSpace.model_validate(
        yaml.safe_load((tmp_path / "o" / "space.yaml").read_text())
    )
    assert written.serving.model_fields_set == {"tp", "max_num_seqs"}
    assert [c.config_id for c in expand(written)[0]] == ["h100-tp2-dcp1-seqs16"]


def test_search_runs_configurations_that_read_alike_separately(tmp_path: Path) -> None:
    spec = [
        {"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": a} for a in (0.3, 0.9)
    ]
    code, _stdout, stderr = plan(*_search(tmp_path, sweep={"speculative": spec}), "--json")
    assert code == 0, stderr
    import pandas as pd

    runs = pd.read_csv(tmp_path / "o" / "runs.csv")
    assert runs.config_id.nunique() == 2
    by_id = runs.groupby("config_id").output_tok_per_s_per_gpu.first()
    assert by_id.iloc[0] != by_id.iloc[1]  # two results, not one shown twice
