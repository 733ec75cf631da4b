"""`plan run` / `plan search` with prefill/decode disaggregation: output, files, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from simulator.cli import app

runner = CliRunner()

SCENARIO = """
name: tiny-pd
model: llama-3.3-70b
device: h100
serving: {tp: 8}
workload: {kind: agentic, sessions: 4, concurrency: 2}
duration_s: 600.0
disaggregation: {prefill_replicas: 1, decode_replicas: 1, send_back: true}
slo: {interactivity_tok_per_s_p90: 5.0}
cost_model: semianalysis_tco_neocloud
"""


def plan(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_run_reports_pools_transfers_and_pins(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
    out = tmp_path / "out"
    code, stdout, stderr = plan("run", str(f), "--json", "--out", str(out))
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["gpus"] == 16
    assert data["disaggregation"] == "1P1D send-back"
    assert (data["prefill_gpus"], data["decode_gpus"]) == (8, 8)
    # throughput per GPU is over all 16 GPUs; per pool over each pool's 8
    requests = pd.read_csv(out / "requests.csv")
    done = requests[(requests.status == "finished") & (requests.finish_s <= 600.0)]
    window = data["window_s"]
    assert data["prefill_input_tok_per_s_per_gpu"] == pytest.approx(
        done.prompt_tokens.sum() / window / 8
    )
    assert data["throughput_tok_per_s_per_gpu"] == pytest.approx(
        (done.prompt_tokens.sum() + done.output_tokens.sum()) / window / 16
    )
    assert data["send_back_pulls"] == (done.send_back == "pull").sum() > 0
    assert data["prefix_hit_rate"] == pytest.approx(
        data["gpu_hit_rate"] + data["cpu_hit_rate"] + data["remote_hit_rate"]
    )
    assert (
        done.gpu_hit_tokens + done.cpu_hit_tokens + done.remote_hit_tokens
        + done.computed_prompt_tokens == done.prompt_tokens
    ).all()  # fmt: skip
    transfers = pd.read_csv(out / "transfers.csv")
    assert set(transfers.kind) <= {"kv", "send_back"}
    assert (transfers.landed_s > transfers.start_s).all()
    pins = pd.read_csv(out / "pins.csv")
    assert set(pins.outcome) <= {"pulled", "declined", "expired", "replaced"}
    steps = pd.read_csv(out / "steps.csv")
    assert set(steps.pool) == {"prefill", "decode"}
    code, stdout, _ = plan("run", str(f))
    assert code == 0
    assert "decode KV use mean / peak (pinned by send-back)" in stdout
    assert "1P1D send-back" in stdout


BAD = [
    ("dp-conflict", SCENARIO.replace("serving: {tp: 8}", "serving: {tp: 8, dp: 2}"),
     "disaggregation", "dp"),
    ("zero-replicas", SCENARIO.replace("prefill_replicas: 1", "prefill_replicas: 0"),
     "disaggregation.prefill_replicas", "greater than 0"),
    ("unknown-field", SCENARIO.replace("send_back: true", "send_back: true, sendback: 1"),
     "disaggregation.sendback", "unknown field"),
    ("negative-link", SCENARIO.replace("send_back: true", "link_bw_bytes_per_s: -5.0e+10"),
     "disaggregation.link_bw_bytes_per_s", "greater than 0"),
    ("not-a-bool", SCENARIO.replace("send_back: true", "send_back: maybe"),
     "disaggregation.send_back", "boolean"),
    ("ttl-zero", SCENARIO.replace("serving: {tp: 8}",
                                  "serving: {tp: 8, decoder_kv_blocks_ttl_s: 0}"),
     "serving.decoder_kv_blocks_ttl_s", "greater than 0"),
    ("threshold-negative", SCENARIO.replace(
        "serving: {tp: 8}", "serving: {tp: 8, kv_recompute_threshold_tokens: -1}"),
     "serving.kv_recompute_threshold_tokens", "greater than or equal to 0"),
    ("offload-without-prefill-cache", SCENARIO.replace(
        "serving: {tp: 8}", "serving: {tp: 8, cpu_offload_bytes: 1.0e+11}"),
     "disaggregation", "prefill_prefix_caching"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "field", "reason"), [c[1:] for c in BAD],
                         ids=[c[0] for c in BAD])  # fmt: skip
def test_bad_disaggregation_is_one_line_and_exit_2(
    tmp_path: Path, text: str, field: str, reason: str
) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(text)
    code, stdout, stderr = plan("run", str(f))
    assert code == 2, (stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert str(f) in lines[0]
    assert f": {field}: " in lines[0], lines[0]
    assert reason in lines[0], lines[0]
    assert "Traceback" not in stdout + stderr


def test_search_with_a_bad_split_is_one_line(tmp_path: Path) -> None:
    space = {
        "name": "s", "model": "llama-3.3-70b", "devices": ["h100"],
        "sweep": {"tp": [8], "disaggregation": [None, {"prefill_replicas": 1, "colour": 2}]},
        "concurrency": [2], "slo": {"interactivity_tok_per_s_p90": 5.0},
        "workload": {"kind": "chat", "sessions": 2, "concurrency": 1},
    }  # fmt: skip
    f = tmp_path / "space.yaml"
    f.write_text(yaml.safe_dump(space))
    code, _, stderr = plan("search", str(f), "--out", str(tmp_path / "o"))
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1
    assert "sweep.disaggregation.1.colour" in stderr


def test_schemas_show_the_new_fields() -> None:
    code, stdout, _ = plan("profiles", "schema", "scenario")
    assert code == 0
    schema = json.loads(stdout)
    assert "disaggregation" in schema["properties"]
    code, stdout, _ = plan("profiles", "schema", "serving-config")
    props = json.loads(stdout)["properties"]
    assert props["decoder_kv_blocks_ttl_s"]["default"] == 480.0
    assert props["kv_recompute_threshold_tokens"]["default"] == 64
