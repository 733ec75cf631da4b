"""`plan size` from the command line: bad input is one line and exit 2 (table-driven), and a
small sizing prints the answer first, the ranked table, the vllm serve line, and --json."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app

runner = CliRunner()
BASE = ["size", "--model", "llama-3.1-8b", "--users", "16", "--slo-interactivity", "40"]
FAST = ["--devices", "h100", "--workload", "random", "--isl", "512", "--osl", "64", "--quick",
        "--seeds", "1", "--set", "duration_s=40", "--set", "warmup_s=0",
        "--set", "workload.num_requests=200"]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["size", "--model", "kimi-k3", "--users", "0", "--slo-interactivity", "50"], "users"),
        (["size", "--model", "kimi-k3", "--users", "10", "--slo-interactivity", "-5"],
         "(arguments): slo-interactivity: "),  # the option's name, not the request field's
        (["size", "--model", "kimi-k3", "--users", "10", "--slo-interactivity", "nan"],
         "(arguments): slo-interactivity: "),
        ([*BASE, "--slo-ttft-p90", "0"], "(arguments): slo-ttft-p90: "),
        # a target no one means: 1e-300 tok/s printed a margin to the SLO of 9e303 %
        (["size", "--model", "kimi-k3", "--users", "10", "--slo-interactivity", "1e-300"],
         "slo-interactivity: 1e-300 is below 0.001"),
        ([*BASE, "--slo-ttft-p90", "1e9"], "slo-ttft-p90: 1e+09 exceeds 1e+06"),
        ([*BASE, "--devices", "nosuch"], "nosuch"),
        ([*BASE, "--workload", "missing/trace.jsonl"], "neither a built-in workload"),
        ([*BASE, "--model", "no-such-model"], "no-such-model"),
        ([*BASE, "--cost-model", "nosuch"], "nosuch"),
        ([*BASE, "--workers", "0"], "workers"),
        ([*BASE, "--set", "nonsense"], "set"),
        ([*BASE, "--set", "sweep.tpp=[1]"], "tpp"),
        # nothing too big, every configuration invalid: as plan search, not an answer
        ([*BASE, "--set", "sweep.ep=[8]"], "every configuration was pruned: serving.ep"),
        # a field an option sets, set again by --set: one of the two was dropped unsaid
        ([*BASE, "--set", "slo={ttft_s_p90: 1.0}"],
         "'slo={ttft_s_p90: 1.0}' sets slo.interactivity_tok_per_s_p90, which"
         " --slo-interactivity sets"),
        ([*BASE, "--set", "demand_users=1000"], "sets demand_users, which --users sets"),
        ([*BASE, "--devices", "h100", "--set", "devices=[h200]"], "which --devices sets"),
        ([*BASE, "--seeds", "1", "--set", "seeds=3"], "sets seeds, which --seeds sets"),
        ([*BASE, "--slo-ttft-p90", "5", "--set", "slo.ttft_s_p90=0.001"],
         "which --slo-ttft-p90 sets"),
        ([*BASE, "--set", "model=kimi-k3"], "sets model, which --model sets"),
        # the scenarios' bound on simulated time, met in the space (it was exit 1 there)
        ([*BASE, "--set", "duration_s=1e10"], "duration_s: 1e+10 exceeds 1e+09: seconds"),
        ([*BASE, "--max-runs", "1"], "--max-runs"),
        ([*BASE, "--seeds", "0"], "seeds"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(argv: list[str], fragment: str) -> None:
    result = runner.invoke(app, argv)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert fragment in lines[0]


def test_a_sizing_answers_first_and_prints_the_deploy_line(tmp_path: Path) -> None:
    out = tmp_path / "size"
    result = runner.invoke(app, [*BASE, *FAST, "--out", str(out)])
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("Buy ")
    assert "H100" in first
    assert "vllm serve meta-llama/Meta-Llama-3.1-8B" in result.stdout
    script = (out / "deploy.sh").read_text()
    words = shlex.split(script.split("vllm serve", 1)[1].split("\n\n")[0].replace("\\\n", " "))
    assert words[0] == "meta-llama/Meta-Llama-3.1-8B"
    assert "--tensor-parallel-size" in words
    # the same answer as JSON, from the cache this time
    again = runner.invoke(app, [*BASE, *FAST, "--out", str(out), "--json"])
    assert again.exit_code == 0, again.output
    data = json.loads(again.stdout)
    # the answer leads the output, wrapped to the terminal
    assert " ".join(result.stdout.split()).startswith(" ".join(data["answer"].split()))
    assert data["ranked"][0]["device"] == "h100"
    assert data["ranked"][0]["units"] * 8 >= data["ranked"][0]["gpus"]
    # what the answer's latencies are worth on that device, in the file and the JSON
    assert "TTFT" in data["stated_error"]["h100"]["latency_note"]
    assert data["stated_error"]["h100"]["latency_note"] in (out / "size.md").read_text()


def test_a_sizing_nothing_fits_still_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "size"
    argv = ["size", "--model", "kimi-k3", "--users", "100", "--slo-interactivity", "30",
            "--devices", "h100", "--quick", "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert "h100 does not fit: needs at least" in result.stdout
    wrote = result.stderr.strip().splitlines()[-1]
    assert wrote == f"wrote {out}/size.md, deploy.sh, report.html"
    assert (out / "report.html").is_file()  # (it said so before it wrote one)
    assert "weights exceed" in (out / "pruned.csv").read_text()


def test_a_repeated_sweep_value_is_said_once(tmp_path: Path) -> None:
    """`plan search` says a repeated sweep value ran once; `plan size` said nothing, and its
    pruned.csv held the note once per default sweep of the device."""
    out = tmp_path / "size"
    argv = [*BASE, *FAST, "--set", "sweep.tp=[1,1]", "--out", str(out)]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    note = "sweep.tp repeats 1: its configurations run once (the repeat is dropped)"
    assert result.stderr.count(f"note: {note}") == 1, result.stderr
    assert (out / "pruned.csv").read_text().count(note) == 1
    data = json.loads(runner.invoke(app, [*argv, "--json"]).stdout)
    assert data["repeat_notes"] == [note]
