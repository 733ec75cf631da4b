"""`plan workload stats` through CliRunner: traces, generators, bad input -> one line + exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app

runner = CliRunner()

MOONCAKE = [
    {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
    {"timestamp": 500, "input_length": 1600, "output_length": 6, "hash_ids": [0, 1, 3, 4]},
    {"timestamp": 1500, "input_length": 1024, "output_length": 7, "hash_ids": [0, 9]},
]


def plan(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def mooncake(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MOONCAKE))
    return path


def test_stats_of_a_trace_detects_the_format(mooncake: Path) -> None:
    code, out, _ = plan("workload", "stats", str(mooncake), "--json")
    assert code == 0
    data = json.loads(out)
    assert (data["kind"], data["requests"], data["hit_blocks"], data["prompt_blocks"]) == (
        "mooncake",
        3,
        3,
        9,
    )
    assert data["think_time_s"] is None
    code, out, _ = plan("workload", "stats", str(mooncake))
    assert code == 0
    assert "block reuse (unlimited cache)" in out
    assert "33.3 %" in out


def test_stats_of_the_generators() -> None:
    code, out, _ = plan("workload", "stats", "agentic", "--sessions", "5", "--seed", "1", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["sessions"] == 5
    assert data["block_reuse"] > 0.8
    code, out, _ = plan("workload", "stats", "random", "--sessions", "50", "--isl", "100",
                        "--osl", "10", "--json")  # fmt: skip
    data = json.loads(out)
    assert (code, data["requests"], data["block_reuse"]) == (0, 50, None)
    assert 80 <= data["prompt_tokens"]["p10"] <= data["prompt_tokens"]["p99"] <= 100
    code, out, _ = plan("workload", "stats", "chat", "--sessions", "20", "--limit", "7")
    assert code == 0
    assert "requests" in out


def test_skip_bad_counts_and_reports(mooncake: Path) -> None:
    mooncake.write_text(mooncake.read_text() + "{broken\n")
    code, _, err = plan("workload", "stats", str(mooncake))
    assert code == 2
    assert err.strip() == f"error: {mooncake}: line 4: invalid JSON: Expecting property name " \
        "enclosed in double quotes"  # fmt: skip
    code, out, _ = plan("workload", "stats", str(mooncake), "--skip-bad")
    assert code == 0
    assert "line 4: invalid JSON" in out
    code, out, _ = plan("workload", "stats", str(mooncake), "--skip-bad", "--json")
    assert json.loads(out)["bad_records"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope.jsonl"], "nope.jsonl: (file): no such file or directory"),
        (["agentic", "--format", "azure"], "format: --format does not apply to the agentic"),
        (["agentic", "--sessions", "0"], "(arguments): sessions: must be at least 1"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: list[str], message: str) -> None:
    code, _, err = plan("workload", "stats", *args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_a_reuse_count_past_its_memory_bound_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # 10^6 agentic sessions filled 24 GB before the bound (the real one is 2^27 block ids)
    monkeypatch.setattr("simulator.workload.stats.MAX_REUSE_IDS", 5000)
    code, _, err = plan("workload", "stats", "agentic", "--sessions", "3")
    assert code == 2
    assert err.strip().startswith("error: agentic: blocks: more than 5,000 distinct prompt blocks")
    assert err.strip().endswith("read fewer with --limit N")
    code, out, _ = plan("workload", "stats", "agentic", "--sessions", "3", "--limit", "1", "--json")
    assert (code, json.loads(out)["requests"]) == (0, 1)


def test_unknown_format_and_undetectable_file(tmp_path: Path, mooncake: Path) -> None:
    odd = tmp_path / "odd.txt"
    odd.write_text("hello\n")
    code, _, err = plan("workload", "stats", str(odd))
    assert code == 2
    assert "cannot detect the trace format; give --format agentic|mooncake|azure" in err
    code, _, err = plan("workload", "stats", str(mooncake), "--format", "parquet")
    assert code == 2
    assert "unknown trace format 'parquet'" in err


def test_stats_of_the_shared_agentic_traces(shared_data: Path) -> None:
    path = shared_data / "agentic_cc_traces_weka" / "cc_traces_weka_710.jsonl.gz"
    code, out, _ = plan("workload", "stats", str(path), "--limit", "2000", "--json")
    assert code == 0
    assert json.loads(out)["requests"] == 2000
