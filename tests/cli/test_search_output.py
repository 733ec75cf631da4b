"""`plan search` on the console: the ranked best configuration per device as a table, the
pruned configurations by reason with counts (no Python dict reprs, no raw Markdown); the
``--json`` answer as before."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from simulator.cli import app

runner = CliRunner()

SPACE: dict[str, Any] = {
    "name": "console",
    "model": "llama-3.1-8b",
    "devices": ["h100", "h200"],
    "sweep": {"tp": [1, 3], "max_num_seqs": [8, 16, 16]},  # tp 3 pruned; 16 a repeat
    "concurrency": [1, 2],
    "workload": {"kind": "random", "input_tokens": 256, "output_tokens": 8,
                 "num_requests": 4, "concurrency": 1},
    "slo": {},
    "duration_s": 30.0,
    "warmup_s": 0.0,
    "seeds": 1,
    "search": "grid",
    "demand_users": 100,
}  # fmt: skip


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, str]:
    """The --json answer, then the console output of the same search (from its cache) in an
    80-column terminal."""
    tmp = tmp_path_factory.mktemp("search")
    f = tmp / "space.yaml"
    f.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    args = ["search", str(f), "--out", str(tmp / "o")]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    answer = json.loads(result.stdout)
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    return answer, result.stdout, result.stderr


def cells(text: str) -> list[list[str]]:
    """The rows of the tables in ``text``: their cells, stripped."""
    rows = []
    for line in text.splitlines():
        if "│" in line or "┃" in line:
            parts = [c.strip() for c in re.split(r"[│┃]", line)]
            rows.append(parts[1:] if parts[0] == "" else parts)  # the table's left edge
    return rows


def test_no_dict_reprs_and_no_markdown(searched: tuple[dict[str, Any], str, str]) -> None:
    _, stdout, stderr = searched
    assert stdout.startswith("plan search: ")
    for text in (stdout, stderr):
        assert "{'" not in text
        assert "'tp':" not in text
    assert "|---" not in stdout
    assert "# Capacity report" not in stdout
    assert "…" not in stdout
    assert max(len(line) for line in stdout.splitlines()[1:]) <= 80


def test_the_best_table_ranks_every_device_with_its_fleet(
    searched: tuple[dict[str, Any], str, str],
) -> None:
    answer, stdout, _ = searched
    best = answer["best"]
    assert {b["device"] for b in best} == {"h100", "h200"}
    rows = cells(stdout)
    for b in best:
        mine = [r for r in rows if b["device"] in r and str(b["rank"]) in r]
        assert mine, (b["device"], stdout)
        found = {c for r in mine for c in r}
        assert b["config_id"] in found, b["config_id"]
        assert f"{b['throughput_tok_per_s_per_gpu']:,.0f}" in found
        assert f"{b['interactivity_p90']:,.1f}" in found
        assert f"{b['gpus']:,d}" in found
        # bought by the unit plan size counts (8-GPU nodes here; NVL72 racks elsewhere)
        assert f"{b['units']:,d} {b['unit']}{'' if b['units'] == 1 else 's'}" in found
    assert "Fleet for 100 concurrent users" in stdout or "fleet for 100" in stdout


def test_pruned_configurations_are_grouped_by_reason_with_counts(
    searched: tuple[dict[str, Any], str, str],
) -> None:
    answer, stdout, _ = searched
    reasons = Counter(p["reason"] for p in answer["pruned"])
    assert len(reasons) >= 2  # tp 3 does not divide the heads; the repeated max_num_seqs
    text = stdout.split("Not run, pruned or repeated", 1)[1]
    assert f"{sum(reasons.values())} configurations" in text.splitlines()[0]
    flat = " ".join(" ".join(text.split()).split("│"))
    for reason, n in reasons.items():
        words = reason.split()[:4]  # the reason wraps in its column: its first words
        assert all(w in flat for w in words), (reason, text)
        row = [r for r in cells(text) if r and r[0] == str(n) and words[0] in " ".join(r)]
        assert row, (reason, n, text)


def test_the_json_answer_keeps_its_keys(searched: tuple[dict[str, Any], str, str]) -> None:
    answer, _, _ = searched
    assert set(answer) == {"best", "runs", "simulations", "planned", "search", "seeds",
                           "refused_note", "pruned", "files"}  # fmt: skip
    assert answer["refused_note"] is None  # every request of these points fits
    assert answer["runs"] == 2 * 2 * 2  # two devices x two tp1 configurations x two loads
