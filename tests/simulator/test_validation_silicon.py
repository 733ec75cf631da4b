"""The silicon validation (aiconfigurator-core's measured vLLM points): row mapping, reading,
selection, errors and the document, on hand-made rows; the real file where installed."""

from __future__ import annotations

import csv
import fnmatch
import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from simulator.specs import SpecError
from simulator.validation import silicon as s
from simulator.validation import silicon_report as sr
from simulator.validation import silicon_sim as sim
from simulator.validation.silicon_document import render_markdown
from simulator.validation.silicon_rows import SKIP_ID_LAYOUT, SKIP_REPEATED, SKIP_TWO_LAYOUTS

BASE: dict[str, str] = {
    "id": "x",
    "silicon_data_source": "source_file=a.csv; silicon_concurrency=8",
    "backend": "vllm",
    "backend_version": "0.12.0",
    "model_path": "meta-llama/Llama-3.1-70B",
    "system": "h100_sxm",
    "precision": "fp8",
    "mode": "agg",
    "isl": "1024",
    "osl": "128",
    "gemm_quant_mode": "fp8",
    "moe_quant_mode": "fp8",
    "batch_size": "8.0",
    "tp_size": "2.0",
    "pp_size": "1.0",
    "attention_dp_size": "",
    "moe_tp_size": "2.0",
    "moe_ep_size": "1.0",
    "silicon_ttft_ms": "100.0",
    "silicon_tpot_ms": "10.0",
}
COLUMNS = list(BASE)
MINIMAX = {"model_path": "MiniMaxAI/MiniMax-M2.5", "system": "b200_sxm"}
MINIMAX_FP4 = MINIMAX | {"precision": "fp4", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"}
KIMI_INT4 = {
    "model_path": "moonshotai/Kimi-K2.5",
    "system": "h200_sxm",
    "precision": "int4",
    "gemm_quant_mode": "int4_wo",
    "moe_quant_mode": "int4_wo",
}
LINEAR_FP8 = (("attention", "fp8"), ("dense_mlp", "fp8"))

# changes to BASE -> (card, device, (tp, dp, ep), concurrency, weight_precision, router)
# fmt: off
MAPPED: list[tuple[dict[str, str], tuple[Any, ...]]] = [
    ({}, ("llama-3.3-70b", "h100", (2, 1, 1), 8, LINEAR_FP8, "session_affinity")),
    (
        {"model_path": "nvidia/Llama-3.1-8B-Instruct-FP8", "system": "h200_sxm", "tp_size": "1"},
        ("llama-3.1-8b", "h200", (1, 1, 1), 8, LINEAR_FP8, "session_affinity"),
    ),
    (
        # empty precision: the bf16 checkpoint; a dense model's moe columns are ignored
        {"model_path": "Qwen/Qwen3-32B", "precision": "", "gemm_quant_mode": "",
         "moe_quant_mode": "", "moe_tp_size": "0", "moe_ep_size": "0"},
        ("qwen3-32b", "h100", (2, 1, 1), 8, (), "session_affinity"),
    ),
    (
        {"model_path": "Qwen/Qwen3-235B-A22B-FP8", "system": "h200_sxm", "moe_tp_size": "1",
         "moe_ep_size": "2"},
        ("qwen3-235b-a22b-fp8", "h200", (2, 1, 2), 8, (), "session_affinity"),
    ),
    (
        MINIMAX_FP4 | {"batch_size": "16", "attention_dp_size": "2.0", "moe_tp_size": "1",
                       "moe_ep_size": "4", "silicon_data_source": "silicon_concurrency=32"},
        ("minimax-m2.5", "b200", (2, 2, 4), 32,
         (("attention", "bf16"), ("routed_experts", "nvfp4")), "least_loaded"),
    ),
    (
        MINIMAX | {"tp_size": "4", "moe_tp_size": "4"},
        ("minimax-m2.5", "b200", (4, 1, 1), 8, (), "session_affinity"),
    ),
    (
        KIMI_INT4 | {"tp_size": "8", "moe_tp_size": "8"},
        ("kimi-k2.5", "h200", (8, 1, 1), 8, (), "session_affinity"),
    ),
    (
        {"model_path": "moonshotai/Kimi-K2.5", "system": "b200_sxm", "precision": "fp4",
         "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "tp_size": "4",
         "attention_dp_size": "4", "batch_size": "2", "moe_tp_size": "1", "moe_ep_size": "16"},
        ("kimi-k2.5", "b200", (4, 4, 16), 8,
         (("dense_mlp", "nvfp4"), ("routed_experts", "nvfp4"), ("shared_experts", "nvfp4")),
         "least_loaded"),
    ),
    (
        {"model_path": "openai/gpt-oss-120b", "precision": "fp4", "gemm_quant_mode": "nvfp4",
         "moe_quant_mode": "nvfp4", "silicon_data_source": "no concurrency recorded"},
        ("gpt-oss-120b", "h100", (2, 1, 1), 8, (), "session_affinity"),
    ),
]
# fmt: on

# changes to BASE -> a substring of the skip reason
# fmt: off
SKIPPED: list[tuple[dict[str, str], str]] = [
    ({"backend": "trtllm"}, "backend 'trtllm': not vLLM"),
    ({"mode": "disagg", "batch_size": ""}, "mode disagg"),
    ({"model_path": "acme/Unknown-1B"}, "no model card for model_path 'acme/Unknown-1B'"),
    ({"system": "a100_sxm"}, "no hardware profile for system 'a100_sxm'"),
    ({"precision": "bf16", "gemm_quant_mode": "", "moe_quant_mode": ""}, "no precision mapping"),
    (MINIMAX_FP4 | {"system": "h200_sxm"}, "no FP4 tensor cores"),
    ({"pp_size": "2"}, "pipeline parallelism is not modelled"),
    (
        {"model_path": "Qwen/Qwen3-235B-A22B-FP8", "system": "h200_sxm", "tp_size": "1"},
        "moe_tp_size x moe_ep_size (2 x 1) differs from tp_size x attention_dp_size (1 x 1)",
    ),
    (MINIMAX | {"tp_size": "4", "moe_tp_size": "2", "moe_ep_size": "2"}, "split both ways"),
    (
        MINIMAX | {"attention_dp_size": "2", "moe_tp_size": "4", "moe_ep_size": "1",
                   "batch_size": "4"},
        "TP-sharded experts",
    ),
    ({"silicon_data_source": "silicon_concurrency=16"}, "recorded silicon_concurrency differs"),
    ({"osl": "1"}, "no TPOT"),
]
# fmt: on


def record(changes: dict[str, str]) -> dict[str, str | None]:
    return dict(BASE | changes)


def write(path: Path, records: list[dict[str, str]], columns: list[str] = COLUMNS) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in records:
            w.writerow(BASE | r)
    return path


@pytest.mark.parametrize(("changes", "expected"), MAPPED)
def test_rows_map_to_card_device_and_serving(
    changes: dict[str, str], expected: tuple[Any, ...]
) -> None:
    point = s.map_row(Path("f.csv"), 1, record(changes), s.devices_by_system())
    assert isinstance(point, s.SiliconPoint), point
    card, device, layout, conc, precision, router = expected
    assert (point.card, point.device, (point.tp, point.dp, point.ep)) == (card, device, layout)
    assert (point.conc, point.weight_precision, point.router) == (conc, precision, router)
    scenario = sim.scenario_of(point)
    assert (scenario.serving.tp, scenario.serving.dp, scenario.serving.ep) == layout
    assert scenario.serving.weight_precision == dict(precision)
    assert not scenario.serving.enable_prefix_caching
    assert scenario.router == router
    workload = scenario.workload
    assert workload.kind == "random"
    assert (workload.concurrency, workload.num_requests) == (conc, 10 * conc)
    assert (workload.input_tokens, workload.output_tokens, workload.range_ratio) == (
        point.isl, point.osl, 0.8,
    )  # fmt: skip
    assert scenario.duration_s is None
    assert scenario.warmup_s == 0


@pytest.mark.parametrize(("changes", "reason"), SKIPPED)
def test_rows_that_cannot_be_expressed_are_skipped_with_a_reason(
    changes: dict[str, str], reason: str
) -> None:
    mapped = s.map_row(Path("f.csv"), 1, record(changes), s.devices_by_system())
    assert isinstance(mapped, str)
    assert reason in mapped


def test_systems_map_through_the_profiles_measured_tables() -> None:
    devices = s.devices_by_system()
    for system, device in {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200",
                           "b300_sxm": "b300", "gb200": "gb200"}.items():  # fmt: skip
        assert devices[system] == device


def test_load_counts_skips_and_keeps_file_rows(tmp_path: Path) -> None:
    rows = [{}, {"backend": "sglang"}, {"mode": "disagg"}, {"silicon_ttft_ms": "104.5"}, {}]
    loaded = s.load_silicon(write(tmp_path / "s.csv", rows))
    assert loaded.rows == 5
    assert [p.row for p in loaded.points] == [1, 4]  # row 5 is row 1's run listed again
    assert loaded.skipped == Counter(
        {"backend 'sglang': not vLLM": 1, s.SKIP_DISAGG: 1, SKIP_REPEATED: 1}
    )


@pytest.mark.parametrize(
    ("changes", "field", "reason"),
    [
        ({"batch_size": "many"}, "row 1, column batch_size", "'many' is not a number"),
        ({"tp_size": "2.5"}, "row 1, column tp_size", "'2.5' is not an integer"),
        ({"tp_size": ""}, "row 1, column tp_size", "empty cell"),
        ({"silicon_ttft_ms": "-3"}, "row 1, column silicon_ttft_ms", "must be positive"),
        ({"silicon_tpot_ms": "nan"}, "row 1, column silicon_tpot_ms", "must be positive"),
        # a RandomPromptWorkload ValidationError of 4 lines, exit 1, at simulation time
        ({"isl": "10000001"}, "row 1, column isl", "10000001 exceeds 1e+07"),
        ({"osl": "1e12"}, "row 1, column osl", "1e12 exceeds 1e+07"),
        ({"silicon_ttft_ms": "1e300"}, "row 1, column silicon_ttft_ms", "1e300 exceeds 1e+12"),
        # ... and 1e-300 ms printed an error of 10^300 %
        ({"silicon_tpot_ms": "1e-300"}, "row 1, column silicon_tpot_ms", "1e-300 is below 0.001"),
    ],
)
def test_bad_cells_name_file_row_and_column(
    tmp_path: Path, changes: dict[str, str], field: str, reason: str
) -> None:
    data = write(tmp_path / "s.csv", [changes])
    with pytest.raises(SpecError) as info:
        s.load_silicon(data)
    assert (info.value.file, info.value.field) == (str(data), field)
    assert reason in info.value.reason


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="missing from the header") as info:
        s.load_silicon(write(tmp_path / "a.csv", [{}], [c for c in COLUMNS if c != "mode"]))
    assert info.value.field == "column mode"
    with pytest.raises(SpecError, match="is a directory"):
        s.load_silicon(tmp_path)
    with pytest.raises(SpecError, match="no such file"):
        s.load_silicon(tmp_path / "absent.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(SpecError, match="empty file"):
        s.load_silicon(tmp_path / "empty.csv")


def test_no_package_and_no_data_is_a_spec_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.measured.package as package

    monkeypatch.setattr(package, "data_source", lambda: None)
    with pytest.raises(SpecError, match="aiconfigurator-core is not installed") as info:
        sr.validate(None)
    assert info.value.field == "data"


def test_select_filters_and_spreads(tmp_path: Path) -> None:
    rows = [{"batch_size": str(b), "silicon_data_source": ""} for b in range(1, 8)]
    rows.append({"model_path": "nvidia/Llama-3.1-8B-Instruct-FP8", "system": "h200_sxm"})
    points = s.load_silicon(write(tmp_path / "s.csv", rows)).points
    assert [p.row for p in s.select(points, limit=3)] == [1, 5, 8]
    assert [p.row for p in s.select(points, ["llama-3.1-8b"])] == [8]
    assert [p.row for p in s.select(points, limit=1)] == [1]
    with pytest.raises(SpecError, match="unknown"):
        s.select(points, ["nope"])
    with pytest.raises(SpecError, match=">= 1"):
        s.select(points, limit=0)


def _result(point: s.SiliconPoint, ttft: float, tpot: float) -> sim.SiliconResult:
    return sim.SiliconResult(point, 10 * point.conc, "ok", 10, ttft, tpot, ttft * 2, tpot)


def test_errors_and_document(tmp_path: Path) -> None:
    # the two layouts are two measurements (another OSL): one measurement under two layouts
    # would be an untrusted layout (silicon_rows.py)
    rows = [{}, {"tp_size": "4", "moe_tp_size": "4", "osl": "1000"},
            {"system": "h200_sxm"}]  # fmt: skip
    points = s.load_silicon(write(tmp_path / "s.csv", rows)).points
    results = [
        _result(points[0], 50.0, 12.0),  # -50 %, +20 %
        _result(points[1], 150.0, 9.0),  # +50 %, -10 %
        sim.SiliconResult(points[2], 80, "not simulated: weights do not fit"),
    ]
    assert results[0].err_ttft_pct == pytest.approx(-50.0)
    assert results[1].err_tpot_pct == pytest.approx(-10.0)
    report = sr.SiliconReport(tmp_path / "s.csv", 3, Counter({"backend 'sglang': not vLLM": 2}),
                              0, 10, 0, None, [], results)  # fmt: skip
    overall = report.overall
    assert (overall.points, overall.not_simulated) == (2, 1)
    assert overall.median_ape_ttft_pct == pytest.approx(50.0)
    assert overall.bias_ttft_pct == pytest.approx(0.0)
    assert overall.median_ape_tpot_pct == pytest.approx(15.0)
    assert overall.bias_tpot_pct == pytest.approx(5.0)
    (h100, h200) = sr.by_system(results)
    assert (h100.system, h100.points, h200.system, h200.not_simulated) == ("h100", 2, "h200", 1)
    doc = render_markdown(report, "plan validate silicon --data s.csv", "today", 60.0)
    assert "This is a validation set" in doc
    assert "plan validate silicon --data s.csv" in doc
    assert "- 2 rows: backend 'sglang': not vLLM" in doc
    assert "- 1 point: not simulated: weights do not fit" in doc
    assert "| llama-3.3-70b | h100 | 2 | 50.0 | 15.0 | +0.0 | +5.0 |" in doc
    assert "are **means** over the requests" in doc
    assert "| 2 | h100 | 1 | 50.0 | 20.0 | -50.0 | +20.0 |" in doc  # by system and TP
    assert "| 4 | h100 | 1 | 50.0 | 10.0 | +50.0 | -10.0 |" in doc
    # every launch-script flag is listed, with the points it applied to (none here)
    assert "| `openai/gpt-oss-120b` | `h200_sxm` | fp4 | 2026-01-02 to now | `marlin` |" in doc
    assert "VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0" in doc
    json.dumps(report.to_json())


# --- the real file (aiconfigurator-core installed) -------------------------------------------


def _installed() -> Path:
    try:
        return s.default_data()
    except SpecError as exc:
        pytest.skip(f"no silicon_sample.csv: {exc}")


def test_real_file_maps_every_vllm_aggregated_row_or_gives_a_reason() -> None:
    loaded = s.load_silicon(_installed())
    vllm_agg = len(loaded.points) + sum(
        n for reason, n in loaded.skipped.items()
        if not reason.startswith("backend") and reason != s.SKIP_DISAGG
    )  # fmt: skip
    assert vllm_agg == 1328
    assert loaded.skipped[s.SKIP_DISAGG] == 17
    assert not [r for r in loaded.skipped if "no precision mapping" in r or "no model" in r]
    assert {p.card for p in loaded.points} == set(s.MODELS.values())
    # the 0.12.0 file's rows whose id names TP4 EP4 and whose columns give 16 GPUs, and the
    # rows repeating their measurements under the 16-GPU layout (silicon_rows.py)
    assert loaded.skipped[SKIP_ID_LAYOUT] == 40
    assert loaded.skipped[SKIP_TWO_LAYOUTS] == 15
    # MiniMax-M2.5 rows with attention_dp_size 2 or 4 under scripts that start tp_size GPUs
    assert loaded.skipped[s.SKIP_SCRIPT_WORLD] == 42
    assert all(p.dp == 1 for p in loaded.points if p.card == "minimax-m2.5")
    # whole sweeps listed twice (ids ..._121 and ..._1346): each run counted once
    assert loaded.skipped[SKIP_REPEATED] == 205
    assert len(loaded.points) > 1000


def test_nvfp4_mappings_follow_the_checkpoints_ignore_lists() -> None:
    configs = _installed().parent.parent / "model_configs"
    cases = {
        "nvidia--MiniMax-M2.5-NVFP4_config.json": (
            "minimax-m2.5",
            {"attention": "model.layers.5.self_attn.q_proj",
             "router": "model.layers.5.block_sparse_moe.gate",
             "routed_experts": "model.layers.5.block_sparse_moe.experts.0.w1"},
        ),
        "nvidia--Kimi-K2.5-NVFP4_config.json": (
            "kimi-k2.5",
            {"attention": "language_model.model.layers.5.self_attn.q_a_proj",
             "dense_mlp": "language_model.model.layers.0.mlp.gate_proj",
             "shared_experts": "language_model.model.layers.5.mlp.shared_experts.gate_proj",
             "routed_experts": "language_model.model.layers.5.mlp.experts.0.gate_proj"},
        ),
    }  # fmt: skip
    for file, (card, modules) in cases.items():
        quant = json.loads((configs / file).read_text())["quantization_config"]
        ignored = {
            g for g, m in modules.items() if any(fnmatch.fnmatch(m, p) for p in quant["ignore"])
        }
        mapping = s.PRECISIONS[(card, "fp4", "nvfp4", "nvfp4")]
        nvfp4 = {g for g, v in mapping.overrides.items() if v == "nvfp4"}
        assert nvfp4 == set(modules) - ignored - {"router"}, file
        assert "attention" in ignored


GPTOSS_H200 = {
    "model_path": "openai/gpt-oss-120b", "system": "h200_sxm", "precision": "fp4",
    "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "tp_size": "1", "moe_tp_size": "1",
}  # fmt: skip


def _measured(date: str | None) -> dict[str, str]:
    when = f"; measured={date}T00:00:00.000Z" if date else ""
    return {"silicon_data_source": f"source_file=a.csv; silicon_concurrency=8{when}"}


# (row changes, the MoE kernel its launch script forced, the EP size it ran): by model,
# system, precision, date
MINIMAX_H200_TP8 = MINIMAX | {"system": "h200_sxm", "tp_size": "8", "moe_tp_size": "8"}
# fmt: off
FLAGGED: list[tuple[dict[str, str], str, int]] = [
    (GPTOSS_H200 | _measured("2026-03-27"), "marlin", 1),  # VLLM_MXFP4_USE_MARLIN=1
    (GPTOSS_H200 | _measured("2026-01-02"), "marlin", 1),  # the first revision with the flag
    (GPTOSS_H200 | _measured("2025-12-05"), "auto", 1),  # before it
    (GPTOSS_H200 | _measured(None), "auto", 1),  # no date: no flag
    (GPTOSS_H200 | {"system": "h100_sxm"} | _measured("2026-03-27"), "marlin", 1),
    (GPTOSS_H200 | {"system": "b200_sxm"} | _measured("2026-03-27"), "auto", 1),
    # VLLM_USE_FLASHINFER_MOE_FP8=0 era, and `[ "$EP_SIZE" -ge 1 ]`: EP over the TP2 GPUs
    (MINIMAX | _measured("2026-03-11"), "triton", 2),
    (MINIMAX | _measured("2026-04-03"), "auto", 1),  # both removed that day (image v0.19.0)
    (MINIMAX_FP4 | _measured("2026-03-11"), "auto", 1),  # another script
    (_measured("2026-03-11"), "auto", 1),  # Llama: no MoE flag
    (MINIMAX_H200_TP8 | _measured("2026-03-01"), "auto", 1),  # before `-ge 1` (2026-03-13)
    (MINIMAX_H200_TP8 | _measured("2026-03-13"), "auto", 8),  # `-ge 1`: EP8
    (MINIMAX_H200_TP8 | _measured("2026-03-28"), "auto", 8),
    (MINIMAX_H200_TP8 | _measured("2026-05-26"), "auto", 1),  # `-gt 1` from that day
]
# fmt: on


@pytest.mark.parametrize(("changes", "kernel", "ep"), FLAGGED)
def test_launch_script_flags_pick_the_moe_kernel_and_ep(
    changes: dict[str, str], kernel: str, ep: int
) -> None:
    point = s.map_row(Path("f.csv"), 1, record(changes), s.devices_by_system())
    assert isinstance(point, s.SiliconPoint), point
    assert point.moe_kernel == kernel
    serving = sim.scenario_of(point).serving
    assert serving.moe_kernel == kernel
    assert (serving.ep, serving.dp) == (ep, 1)
    assert point.ep == 1  # the CSV's layout stays the point's


# (row changes, the ServingConfig knobs its launch script set): by model, system, precision,
# date; None = the planner's default
KIMI_FP4_B200 = {
    "model_path": "moonshotai/Kimi-K2.5", "system": "b200_sxm", "precision": "fp4",
    "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "tp_size": "4", "moe_tp_size": "4",
}  # fmt: skip
KNOBS = ("max_num_batched_tokens", "max_num_seqs", "kv_cache_dtype", "block_size_tokens",
         "gpu_memory_utilization")  # fmt: skip
DEFAULT_KNOBS = (None, None, "auto", 16, 0.92)
# fmt: off
SERVED: list[tuple[dict[str, str], tuple[object, ...]]] = [
    # MiniMax-M2.5 FP8 on B200: block 32 and 0.95 first; the ISL x 2 recipe from 2026-04-03
    (MINIMAX | _measured("2026-03-11"), (None, None, "auto", 32, 0.95)),
    (MINIMAX | _measured("2026-04-02"), (None, None, "auto", 32, 0.95)),
    (MINIMAX | _measured("2026-04-03"), (2048, None, "fp8", 32, 0.90)),  # the day it landed
    (MINIMAX | {"isl": "8192"} | _measured("2026-04-22"), (16384, None, "fp8", 32, 0.90)),
    (MINIMAX | _measured("2026-03-10"), DEFAULT_KNOBS),  # before the script existed
    (MINIMAX | _measured(None), DEFAULT_KNOBS),  # no date
    # the FP4 script (no --block-size) from 2026-04-08; 2026-04-03 was a branch's run
    (MINIMAX_FP4 | _measured("2026-04-08"), (2048, None, "fp8", 16, 0.90)),
    (MINIMAX_FP4 | _measured("2026-04-03"), DEFAULT_KNOBS),
    # Kimi-K2.5 FP4 on B200: --max-num-seqs $CONC always, the recipe from 2026-04-20
    (KIMI_FP4_B200 | _measured("2026-03-27"), (None, 8, "auto", 16, 0.90)),
    (KIMI_FP4_B200 | _measured("2026-04-20"), (2048, 8, "fp8", 16, 0.90)),
    # the YAML configs of gpt-oss and Llama: 8192 tokens; FP8 KV on B200 from 2025-12-05
    (GPTOSS_H200 | _measured("2025-11-02"), (8192, 8, "auto", 16, 0.9)),
    (GPTOSS_H200 | {"system": "b200_sxm"} | _measured("2025-11-02"), (8192, 512, "auto", 16, 0.9)),
    (GPTOSS_H200 | {"system": "b200_sxm"} | _measured("2026-02-25"), (8192, 512, "fp8", 16, 0.9)),
    (_measured("2025-10-29") | {"system": "h200_sxm"}, (8192, 8, "fp8", 16, 0.9)),
    (_measured("2025-10-29"), DEFAULT_KNOBS),  # Llama on H100: its config file was not read
]
# fmt: on


@pytest.mark.parametrize(("changes", "knobs"), SERVED)
def test_launch_script_engine_knobs_reach_the_scenario(
    changes: dict[str, str], knobs: tuple[object, ...]
) -> None:
    point = s.map_row(Path("f.csv"), 1, record(changes), s.devices_by_system())
    assert isinstance(point, s.SiliconPoint), point
    serving = sim.scenario_of(point).serving
    assert tuple(getattr(serving, k) for k in KNOBS) == knobs


def test_serve_flag_windows_do_not_overlap() -> None:
    from simulator.validation.silicon_serve import SERVE_FLAGS

    by_group: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for f in SERVE_FLAGS:
        assert f.until is None or f.since < f.until, f
        key = (f.model_path, f.system, f.precision)
        by_group.setdefault(key, []).append((f.since, f.until or "9999"))
    for key, windows in by_group.items():
        windows.sort()
        for (_, end), (start, _) in itertools.pairwise(windows):
            assert end <= start, key


def test_serve_flags_text_names_what_it_sets() -> None:
    from simulator.validation.silicon_serve import SERVE_FLAGS

    for f in SERVE_FLAGS:
        text, knobs = f.text(), f.settings(1024, 8)
        assert "--max-num-batched-tokens" in text or "max_num_batched_tokens" not in knobs
        assert "--kv-cache-dtype" in text or "kv_cache_dtype" not in knobs
        assert "--block-size" in text or "block_size_tokens" not in knobs
        assert ("--max-num-seqs" in text) == ("max_num_seqs" in knobs)


def test_rows_wider_than_their_launch_script_are_skipped(tmp_path: Path) -> None:
    dp2 = MINIMAX_FP4 | {"batch_size": "16", "attention_dp_size": "2.0", "moe_tp_size": "1",
                         "moe_ep_size": "4"}  # fmt: skip
    when = {"silicon_data_source": "silicon_concurrency=32; measured=2026-04-22T00:00:00.000Z"}
    rows = [
        dp2 | when,
        dp2 | {"silicon_data_source": "silicon_concurrency=32", "silicon_ttft_ms": "104.5"},
        MINIMAX_FP4,
    ]
    loaded = s.load_silicon(write(tmp_path / "s.csv", rows))
    assert loaded.skipped[s.SKIP_SCRIPT_WORLD] == 1  # the dated one: its script starts TP GPUs
    assert [(p.row, p.dp) for p in loaded.points] == [(2, 2), (3, 1)]  # no date: no script


# (row changes, the experts' split the scenario runs): the Kimi-K2.5 scripts never pass
# --enable-expert-parallel, whatever their config's `ep:` label (the CSV's moe_ep_size)
KIMI_EP4 = KIMI_FP4_B200 | {"moe_tp_size": "1", "moe_ep_size": "4"}
SHARDED: list[tuple[dict[str, str], int]] = [
    (KIMI_EP4 | _measured("2026-03-11"), 1),  # a revision covers it: TP-sharded experts
    (KIMI_EP4 | _measured(None), 4),  # no date, no revision: the CSV's layout
    (KIMI_FP4_B200 | _measured("2026-03-11"), 1),  # EP 1 in the CSV too
    (MINIMAX | {"moe_tp_size": "1", "moe_ep_size": "2"} | _measured("2026-04-22"), 2),  # -gt 1
]


@pytest.mark.parametrize(("changes", "ep"), SHARDED)
def test_scripts_without_expert_parallel_shard_the_experts(
    changes: dict[str, str], ep: int
) -> None:
    point = s.map_row(Path("f.csv"), 1, record(changes), s.devices_by_system())
    assert isinstance(point, s.SiliconPoint), point
    assert sim.scenario_of(point).serving.ep == ep


@pytest.mark.parametrize(
    ("changes", "models", "reason"),
    [
        ({"system": "no_such_system"}, (), "no point to simulate (1 rows, 1 skipped)"),
        ({}, ("qwen3-32b",), "the --models filter leaves none of its 1 points"),
    ],
)
def test_a_validation_left_with_no_point_is_refused(
    tmp_path: Path, changes: dict[str, str], models: tuple[str, ...], reason: str
) -> None:
    """A table of 0 points with exit 0 was the answer (validate inferencemax refused it)."""
    data = write(tmp_path / "s.csv", [changes])
    with pytest.raises(SpecError) as info:
        sr.validate(data, models)
    assert (info.value.field, info.value.reason) == ("(points)", reason)
