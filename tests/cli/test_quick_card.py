"""`plan memory --params ...`: the quick card's estimate by hand (the issue's 74B-total / 9B-active
int2 model with a vision tower on a 24 GB GPU), its labels, and its bad inputs: one
``error: <file>: <flag or field>: <reason>`` line, exit code 2, never a traceback."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from simulator import catalog
from simulator.cli import app
from simulator.memory import activation_reserve_bytes
from simulator.specs import ServingConfig

runner = CliRunner()
GIB = 2**30


def plan(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def gpu(tmp_path: Path, gb: float, name: str) -> str:
    """A GPU of ``gb`` GB (the H100 profile with its memory changed), by path."""
    data = catalog.hardware_profile("h100").model_dump(mode="json")
    data.update(name=name, memory_bytes=gb * 1e9, usable_memory_bytes=gb * 1e9 * 0.98)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


ISSUE = ["--params", "74e9", "--active-params", "9e9", "--precision", "int2_g64",
         "--vision-params", "1.7e9"]  # fmt: skip


def quick(*args: str) -> Any:
    code, stdout, stderr = plan("memory", *args, "--json")
    assert code == 0, stderr
    return json.loads(stdout)


def test_the_issue_example_does_not_fit_on_24_gb(tmp_path: Path) -> None:
    e = quick(*ISSUE, "--device", gpu(tmp_path, 24, "gpu24"))
    assert e["estimate"] is True
    text = 74e9 * (2 + 18 / 64) / 8  # 21.10 GB: int2 + an fp16 scale and a 2-bit zero per 64
    vision = 1.7e9 * 2  # bf16
    assert e["bits_per_element"] == 2.28125
    assert e["text_weight_bytes_per_gpu"] == pytest.approx(text)
    assert e["vision_weight_bytes_per_gpu"] == pytest.approx(vision)
    assert e["weight_bytes_per_gpu"] == pytest.approx(24.5015625e9)
    assert e["budget_bytes_per_gpu"] == pytest.approx(0.92 * 24e9 * 0.98)  # 21.64 GB
    assert e["fits"] is False
    assert "exceed the budget" in e["fits_reason"]
    assert e["fewest_gpus_model_alone"] == 2
    assert e["fits_on"] == "2x gpu24"
    assert e["active_weight_bytes_per_token"] == pytest.approx(9e9 * 2.28125 / 8)
    assert e["kv_bytes_per_token_per_gpu"] is None  # no --layers: not guessed
    assert "--layers" in e["kv_unknown_reason"]
    assert e["given"]["--precision"] == "int2_g64"


def test_the_text_activation_reserve_is_the_largest_of_the_shipped_cards(tmp_path: Path) -> None:
    path = gpu(tmp_path, 24, "gpu24")
    e = quick(*ISSUE, "--device", path, "--tp", "2")
    device = catalog.hardware_profile(path)
    serving = ServingConfig(tp=2)
    text_only = [
        catalog.model_card(n).model_copy(update={"vision": None}) for n in catalog.model_names()
    ]
    expected = max(activation_reserve_bytes(card, serving, device) for card in text_only)
    assert e["activation_reserve_bytes_per_gpu"] == pytest.approx(expected)
    assert e["text_weight_bytes_per_gpu"] == pytest.approx(74e9 * 2.28125 / 8 / 2)
    # at TP 2 it fits (the model alone: no --layers), and agrees with the fewest GPUs
    assert e["fits"] is True
    assert e["fits_reason"].startswith("model alone fits; sequences not checked")
    assert e["fewest_gpus_model_alone"] == 2


def test_with_layers_and_heads_the_kv_cache_and_sessions_are_estimated(tmp_path: Path) -> None:
    e = quick(*ISSUE, "--device", gpu(tmp_path, 32, "gpu32"), "--layers", "48",
              "--kv-heads", "8", "--head-dim", "128", "--context", "4096")  # fmt: skip
    per_token = 2 * 48 * 8 * 128 * 2  # K and V, 48 layers, 8 heads x 128, bf16: 196,608 B
    assert e["kv_bytes_per_token_per_gpu"] == per_token
    kv = 0.92 * 32e9 * 0.98 - 24.5015625e9 - e["activation_reserve_bytes_per_gpu"] - 1.5 * GIB
    assert e["kv_cache_bytes_per_gpu"] == pytest.approx(kv)
    blocks = math.floor(kv / (16 * per_token))
    assert e["max_seqs_at_context"] == blocks // (4096 // 16)
    assert e["fits"] is (e["max_seqs_at_context"] >= 1)
    assert any("GQA" in note for note in e["assumed"])


# (extra flags, KV bytes per token by hand)
KV = [
    (["--layers", "48", "--kv-heads", "8", "--head-dim", "128", "--tp", "2"], 2 * 48 * 4 * 128 * 2),
    (["--layers", "48", "--kv-heads", "4", "--head-dim", "128", "--tp", "8"], 2 * 48 * 1 * 128 * 2),
    (["--layers", "48", "--kv-heads", "8", "--head-dim", "128", "--kv-cache-dtype", "fp8"],
     2 * 48 * 8 * 128 * 1),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "per_token"), KV)
def test_kv_bytes_per_token(extra: list[str], per_token: float) -> None:
    e = quick("--params", "74e9", "--precision", "int2_g64", "--device", "h200", *extra)
    assert e["kv_bytes_per_token_per_gpu"] == per_token


def test_hidden_alone_gives_a_labelled_rule_of_thumb() -> None:
    e = quick("--params", "74e9", "--precision", "int2_g64", "--device", "h200",
              "--layers", "48", "--hidden", "4096")  # fmt: skip
    ratio = max(
        c.gqa.num_kv_heads * c.gqa.head_dim / c.hidden_size
        for c in map(catalog.model_card, catalog.model_names())
        if c.gqa is not None and c.mla is None
    )
    assert e["kv_bytes_per_token_per_gpu"] == pytest.approx(2 * 48 * 4096 * ratio * 2)
    assert any("rule of thumb" in note for note in e["assumed"])


def test_the_table_says_estimate_and_what_was_assumed(tmp_path: Path) -> None:
    code, stdout, _ = plan("memory", *ISSUE, "--device", gpu(tmp_path, 24, "gpu24"),
                           "--device", gpu(tmp_path, 32, "gpu32"))  # fmt: skip
    assert code == 0
    assert "ESTIMATE from headline numbers" in stdout
    assert "given: --params 74e9, --active-params 9e9, --precision int2_g64" in stdout
    assert "assumed: weights: all 74e9 params at int2_g64 (2.281 bits" in stdout
    assert "not estimated: KV cache per token unknown" in stdout
    assert "fits or not (estimate" in stdout
    assert "fits on: 1x gpu32" in stdout


MEM = ["memory", "--device", "h100"]
Q = [*MEM, "--params", "74e9", "--precision", "int2_g64"]


def _card(tmp: Path, **vision: Any) -> str:
    data = catalog.model_card("llama-3.1-8b").model_dump(mode="json", exclude_none=True)
    data["vision"] = {"encoder_params": 6e8, "activation_bytes_per_image": 1e9,
                      "max_tokens_per_image": 1024, "source": "test", **vision}  # fmt: skip
    path = tmp / "card.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _serving(tmp: Path, text: str) -> str:
    path = tmp / "serving.yaml"
    path.write_text(text)
    return str(path)


# (id, arguments, the file or flag named, fragments of the one line)
CORPUS: list[tuple[str, Callable[[Path], list[str]], str, list[str]]] = [
    ("params-negative", lambda t: [*MEM, "--params=-1", "--precision", "int2_g64"],
     "(arguments)", ["--params", "must be > 0, got -1"]),
    ("params-nan", lambda t: [*MEM, "--params", "nan", "--precision", "int2_g64"],
     "(arguments)", ["--params", "finite"]),
    ("params-1e20", lambda t: [*MEM, "--params", "1e20", "--precision", "int2_g64"],
     "(arguments)", ["--params", "unit mix-up"]),
    # "1e+04 is beyond 1e+04 (a unit mix-up?)": the value and the bound printed the same
    ("layers-10001", lambda t: [*Q, "--layers", "10001", "--hidden", "8192"], "(arguments)",
     ["--layers", "10,001 exceeds 10,000"]),
    ("precision-unknown", lambda t: [*MEM, "--params", "74e9", "--precision", "int1_g64"],
     "(arguments)", ["--precision", "unknown weight format 'int1_g64'", "int2_g64"]),
    ("precision-missing", lambda t: [*MEM, "--params", "74e9"], "(arguments)",
     ["--precision", "needs the weight format"]),
    ("active-beyond-total", lambda t: [*Q, "--active-params", "8e10"], "(arguments)",
     ["--active-params", "80e9 exceeds --params 74e9"]),
    # half a parameter held 1 byte of weights and "fit": a count given in billions
    ("params-below-a-million", lambda t: ["memory", "--params", "0.5", "--precision", "bf16",
                                          "--device", "h100"], "(arguments)",
     ["--params", "below 1e+06", "74e9"]),
    ("active-zero", lambda t: [*Q, "--active-params", "0"], "(arguments)",
     ["--active-params", "> 0"]),
    ("vision-negative", lambda t: [*Q, "--vision-params=-5"], "(arguments)",
     ["--vision-params", ">= 0"]),
    ("vision-precision-unknown", lambda t: [*Q, "--vision-params", "1e9",
                                            "--vision-precision", "fp5"], "(arguments)",
     ["--vision-precision", "unknown weight format"]),
    ("vision-activation-alone", lambda t: [*Q, "--vision-activation-bytes-per-image", "1e9"],
     "(arguments)", ["--vision-activation-bytes-per-image", "without --vision-params"]),
    # an active count of 9 (meant 9e9) priced every step's weights at 9 parameters
    ("active-below-a-million", lambda t: [*Q, "--active-params", "9"], "(arguments)",
     ["--active-params", "9 is below 1e+06"]),
    ("vision-below-a-million", lambda t: [*Q, "--vision-params", "1.7"], "(arguments)",
     ["--vision-params", "1.7 is below 1e+06"]),
    # the precision of a vision tower that is not there was accepted and ignored
    ("vision-precision-alone", lambda t: [*Q, "--vision-precision", "fp8"], "(arguments)",
     ["--vision-precision", "without --vision-params"]),
    # the estimate splits by TP alone: --dp 4 gave the same answer as without it
    ("dp-with-a-quick-card", lambda t: [*Q, "--dp", "4"], "(arguments)",
     ["serving.dp", "no attention layout for data-parallel ranks"]),
    ("layers-zero", lambda t: [*Q, "--layers", "0"], "(arguments)", ["--layers", "> 0"]),
    ("kv-heads-negative", lambda t: [*Q, "--layers", "4", "--kv-heads=-8"], "(arguments)",
     ["--kv-heads", "> 0"]),
    ("model-and-params", lambda t: [*Q, "--model", "llama-3.1-8b"], "(arguments)",
     ["--params", "not both"]),
    ("neither", lambda t: MEM, "(arguments)", ["--model", "--params for a quick card"]),
    ("quick-flag-with-card", lambda t: [*MEM, "--model", "llama-3.1-8b", "--layers", "4"],
     "(arguments)", ["--layers", "quick-card option"]),
    ("quick-mla-kv-dtype", lambda t: [*Q, "--kv-cache-dtype", "fp8_ds_mla"], "(arguments)",
     ["serving.kv_cache_dtype", "MLA"]),
    ("quick-dcp", lambda t: [*Q, "--tp", "2", "--dcp", "2"], "(arguments)",
     ["serving.dcp", "quick card"]),
    ("quick-kv-memory",
     lambda t: [*Q, "--serving", _serving(t, "kv_cache_memory_bytes: 1.0e+10\n")],
     "serving.yaml", ["serving.kv_cache_memory_bytes", "quick card"]),
    ("quick-weight-override", lambda t: [*Q, "--serving",
                                         _serving(t, "weight_precision: {attention: bf16}\n")],
     "serving.yaml", ["serving.weight_precision", "--precision"]),
    ("quick-tp-beyond-domain", lambda t: [*Q, "--tp", "16"], "(arguments)",
     ["serving.tp", "scale-up domain"]),
    ("card-vision-negative", lambda t: ["memory", "--model", _card(t, encoder_params=-1),
                                        "--device", "h100"], "card.yaml",
     ["vision.encoder_params", "greater than 0"]),
    ("card-vision-unknown-field", lambda t: ["memory", "--model", _card(t, image_tokens=9),
                                             "--device", "h100"], "card.yaml",
     ["vision.image_tokens", "unknown field"]),
    ("card-vision-replicated", lambda t: ["memory", "--model", _card(t, replicated_params=7e8),
                                          "--device", "h100"], "card.yaml",
     ["vision", "replicated_params"]),
    ("card-vision-tp-mode", lambda t: ["memory", "--model", _card(t, tp_mode="rows"),
                                       "--device", "h100"], "card.yaml", ["vision.tp_mode"]),
]  # fmt: skip


@pytest.mark.parametrize(("build", "file", "needles"), [c[1:] for c in CORPUS],
                         ids=[c[0] for c in CORPUS])  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(
    build: Callable[[Path], list[str]], file: str, needles: list[str], tmp_path: Path
) -> None:
    code, stdout, stderr = plan(*build(tmp_path))
    assert code == 2, (stdout[-2000:], stderr[-2000:])
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), lines[0]
    assert file in lines[0].split(": ")[1], lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in stdout + stderr


def test_an_estimate_past_max_model_len_does_not_fit() -> None:
    """As a card's plan memory: a context beyond --max-model-len is refused by vLLM, so the
    quick card does not fit (it said "model alone fits")."""
    args = ["memory", "--params", "8e9", "--precision", "bf16", "--device", "h100", "--json"]
    code, stdout, _ = plan(*args)
    assert code == 0
    assert json.loads(stdout)["fits"] is True
    code, stdout, _ = plan(*args, "--max-model-len", "100")
    assert code == 0
    data = json.loads(stdout)
    assert data["fits"] is False
    assert "exceeds max_model_len 100" in data["fits_reason"]
