"""InferenceMAX validation core: row mapping, skips, bad input, APE arithmetic, a tiny real run."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from simulator.specs import SpecError
from simulator.validation import (
    DEFAULT_DATA,
    REQUIRED_COLUMNS,
    SKIP_DISAGG,
    SKIP_TRT,
    aggregate,
    load_points,
    median_tpot_s,
    overall,
    render_markdown,
    run_points,
    scenario_for,
    select,
    validate,
    weight_overrides,
    write_points_csv,
)

HEADER = [*REQUIRED_COLUMNS, "tpPerMw"]


def row(
    model: str = "Llama 3.3 70B Instruct",
    sequence: str = "1K/1K",
    hw: str = "h100",
    precision: str = "fp8",
    tp: object = 8,
    conc: object = 4,
    intvty: object = 113.366,
    e2e: object = 8.216,
    tput: object = 109.521,
) -> dict[str, object]:
    return {
        "model": model, "sequence": sequence, "hwKey": hw, "precision": precision, "tp": tp,
        "conc": conc, "interactivity_tok_s_user": intvty, "e2e_latency_s": e2e,
        "tput_per_gpu": tput, "tpPerMw": 1.0,
    }  # fmt: skip


def write(path: Path, rows: list[dict[str, object]], header: list[str] = HEADER) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


# ----------------------------------------------------------------------------- mapping


@pytest.mark.parametrize(
    ("card", "precision", "device", "expected"),
    [
        ("deepseek-v3", "fp8", "h200", {}),
        ("deepseek-v3", "fp8", "mi300x", {}),
        ("deepseek-v3", "fp4", "b200",
         {"routed_experts": "nvfp4", "shared_experts": "nvfp4", "dense_mlp": "nvfp4"}),
        ("deepseek-v3", "fp4", "mi355x",
         {"routed_experts": "mxfp4", "shared_experts": "mxfp4", "dense_mlp": "mxfp4"}),
        ("gpt-oss-120b", "fp4", "h100", {}),
        ("gpt-oss-120b", "fp8", "h100", None),
        ("llama-3.3-70b", "fp8", "mi325x", {"attention": "fp8", "dense_mlp": "fp8"}),
        ("llama-3.3-70b", "fp4", "b200", {"attention": "nvfp4", "dense_mlp": "nvfp4"}),
        ("llama-3.3-70b", "fp4", "mi355x", {"attention": "mxfp4", "dense_mlp": "mxfp4"}),
        ("llama-3.3-70b", "bf16", "h100", {}),
        ("llama-3.3-70b", "int8", "h100", None),
    ],
)  # fmt: skip
def test_weight_overrides(
    card: str, precision: str, device: str, expected: dict[str, str] | None
) -> None:
    assert weight_overrides(card, precision, device) == expected


def test_rows_map_or_are_skipped_with_a_reason(tmp_path: Path) -> None:
    rows = [
        row(),  # 1: Llama fp8 H100
        row(hw="h200_trt"),
        row(hw="b200_trt", model="gpt-oss 120B", precision="fp4"),
        row(hw="gb200", model="DeepSeek R1 0528", precision="fp4", tp=36),
        row(hw="gb200_mtp", model="DeepSeek R1 0528", precision="fp4", tp=12),
        row(model="Qwen3 235B"),  # unknown model: skipped, counted
        row(hw="tpu_v6"),  # unknown device
        row(model="gpt-oss 120B", precision="fp8"),  # no precision mapping
        row(model="DeepSeek R1 0528", hw="mi355x", precision="fp4", sequence="8K/1K", conc=64),
        row(model="gpt-oss 120B", hw="b200", precision="fp4", tp=1, sequence="1K/8K"),
    ]
    loaded = load_points(write(tmp_path / "d.csv", rows))
    assert loaded.rows == 10
    assert [p.row for p in loaded.points] == [1, 9, 10]
    assert loaded.skipped == {
        SKIP_TRT: 2,
        SKIP_DISAGG: 2,
        "unknown model 'Qwen3 235B'": 1,
        "no device profile for hwKey 'tpu_v6'": 1,
        "no precision mapping for gpt-oss-120b 'fp8'": 1,
    }
    llama, ds, oss = loaded.points
    assert (llama.card, llama.device, llama.engine, llama.tp, llama.conc) == (
        "llama-3.3-70b", "h100", "vllm", 8, 4,
    )  # fmt: skip
    assert (llama.isl, llama.osl) == (1024, 1024)
    assert dict(llama.weight_precision) == {"attention": "fp8", "dense_mlp": "fp8"}
    assert (ds.card, ds.device, ds.engine, ds.isl, ds.osl) == (
        "deepseek-v3", "mi355x", "sglang", 8192, 1024,
    )  # fmt: skip
    assert dict(ds.weight_precision)["routed_experts"] == "mxfp4"
    assert (oss.isl, oss.osl, oss.weight_precision) == (1024, 8192, ())

    sc = scenario_for(llama, requests_per_conc=10, seed=3)
    w = sc.workload
    assert w.kind == "random"
    assert (w.input_tokens, w.output_tokens, w.range_ratio) == (1024, 1024, 0.8)
    assert (w.num_requests, w.concurrency, w.request_rate_per_s) == (40, 4, None)
    s = sc.serving
    assert (s.tp, s.ep, s.dp, s.enable_prefix_caching, s.kv_cache_dtype) == (
        8, 1, 1, False, "auto",
    )  # fmt: skip
    assert (sc.warmup_s, sc.duration_s, sc.seed) == (0.0, None, 3)
    # Llama on H100: its launch scripts' config file was not read (silicon_serve.py): defaults
    assert (s.max_num_batched_tokens, s.max_num_seqs, s.gpu_memory_utilization) == (
        None, None, 0.92,
    )  # fmt: skip
    oss_serving = scenario_for(oss).serving  # gpt-oss on B200: the script's config.yaml
    assert (oss_serving.max_num_batched_tokens, oss_serving.max_num_seqs) == (8192, 512)
    assert (oss_serving.kv_cache_dtype, oss_serving.gpu_memory_utilization) == ("auto", 0.9)
    assert scenario_for(ds).serving.max_num_batched_tokens is None  # SGLang on AMD: no script


def test_script_knobs_only_where_a_script_window_names_the_system(tmp_path: Path) -> None:
    rows = [row(hw="h200"), row(hw="mi355x"), row(model="gpt-oss 120B", hw="mi300x",
            precision="fp4", tp=1)]  # fmt: skip
    h200, mi355x, mi300x = load_points(write(tmp_path / "d.csv", rows)).points
    assert scenario_for(h200).serving.max_num_batched_tokens == 8192  # 70b_fp8_h200_slurm.sh
    for amd in (mi355x, mi300x):  # the AMD scripts were not read: the planner's defaults
        serving = scenario_for(amd).serving
        assert (serving.max_num_batched_tokens, serving.max_num_seqs) == (None, None)
        assert (serving.kv_cache_dtype, serving.gpu_memory_utilization) == ("auto", 0.92)


@pytest.mark.parametrize(
    ("rows", "header", "where"),
    [
        ([row()], [c for c in HEADER if c != "tput_per_gpu"], "column tput_per_gpu"),
        ([row(), row(conc="four")], HEADER, "row 2, column conc"),
        ([row(tp=0)], HEADER, "row 1, column tp"),
        ([row(tput="nan")], HEADER, "row 1, column tput_per_gpu"),
        ([row(intvty="")], HEADER, "row 1, column interactivity_tok_s_user"),
        ([row(sequence="2K/2K")], HEADER, "row 1, column sequence"),
    ],
)
def test_bad_rows_name_file_row_and_column(
    tmp_path: Path, rows: list[dict[str, object]], header: list[str], where: str
) -> None:
    path = write(tmp_path / "bad.csv", rows, header)
    with pytest.raises(SpecError) as exc:
        load_points(path)
    assert str(exc.value).startswith(f"{path}: {where}: ")


def test_missing_or_empty_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_points(tmp_path / "absent.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(SpecError, match="empty file"):
        load_points(tmp_path / "empty.csv")


def test_select_filters_and_subsamples(tmp_path: Path) -> None:
    concs = [4, 8, 16, 32, 64]
    rows = [row(conc=c) for c in concs] + [row(model="gpt-oss 120B", precision="fp4", hw="h200")]
    points = load_points(write(tmp_path / "d.csv", rows)).points
    assert [p.conc for p in select(points, limit_per_curve=3) if p.card == "llama-3.3-70b"] == [
        4, 16, 64,
    ]  # fmt: skip
    assert [p.conc for p in select(points, limit_per_curve=1)] == [4, 4]
    assert len(select(points, limit_per_curve=9)) == 6
    assert {p.card for p in select(points, models=["gpt-oss-120b"])} == {"gpt-oss-120b"}
    assert {p.device for p in select(points, devices=["h100"])} == {"h100"}
    with pytest.raises(SpecError, match="models: unknown"):
        select(points, models=["llama-2"])
    with pytest.raises(SpecError, match="devices: unknown"):
        select(points, devices=["a100"])
    with pytest.raises(SpecError, match="limit_per_curve"):
        select(points, limit_per_curve=0)


def test_median_tpot() -> None:
    # TPOTs (1.1 - 0.1) / 10 = 0.1, (2.2 - 0.2) / 10 = 0.2, (4.4 - 0.4) / 9 = 0.44: median 0.2
    assert median_tpot_s([1.1, 2.2, 4.4], [0.1, 0.2, 0.4], [11, 11, 10]) == pytest.approx(0.2)
    # one-token requests have no TPOT
    assert median_tpot_s([1.0, 3.0], [0.5, 1.0], [1, 5]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="more than one output token"):
        median_tpot_s([1.0], [0.5], [1])


# ----------------------------------------------------------------------------- a real run


def test_tiny_run_errors_are_the_hand_computed_ones(tmp_path: Path) -> None:
    rows = [
        row(conc=4, tput=100.0, intvty=100.0),
        row(conc=8, tput=200.0, intvty=80.0),
    ]
    points = load_points(write(tmp_path / "d.csv", rows)).points
    results = run_points(points, requests_per_conc=2, seed=0)
    assert [r.status for r in results] == ["ok", "ok"]
    assert [r.num_requests for r in results] == [8, 16]
    errs_t, errs_i = [], []
    for r, (tput, intvty) in zip(results, [(100.0, 100.0), (200.0, 80.0)], strict=True):
        assert r.sim_tput_per_gpu is not None
        assert r.sim_interactivity is not None
        assert r.sim_tput_per_gpu > 0
        assert r.sim_interactivity > 0
        assert r.err_tput_pct == pytest.approx((r.sim_tput_per_gpu - tput) / tput * 100)
        assert r.err_interactivity_pct == pytest.approx(
            (r.sim_interactivity - intvty) / intvty * 100
        )
        errs_t.append((r.sim_tput_per_gpu - tput) / tput * 100)
        errs_i.append((r.sim_interactivity - intvty) / intvty * 100)
    (group,) = aggregate(results)
    assert (group.model, group.device, group.sequence, group.engine, group.points) == (
        "llama-3.3-70b", "h100", "1K/1K", "vllm", 2,
    )  # fmt: skip
    # median of two = their mean
    assert group.median_ape_tput_pct == pytest.approx((abs(errs_t[0]) + abs(errs_t[1])) / 2)
    assert group.median_ape_interactivity_pct == pytest.approx(
        (abs(errs_i[0]) + abs(errs_i[1])) / 2
    )
    assert group.bias_tput_pct == pytest.approx((errs_t[0] + errs_t[1]) / 2)
    totals = overall(results)
    assert totals["all"].median_ape_tput_pct == group.median_ape_tput_pct
    assert totals["vllm"].points == 2
    # deterministic, and the same with two worker processes
    again = run_points(points, requests_per_conc=2, seed=0, workers=2)
    assert [r.sim_tput_per_gpu for r in again] == [r.sim_tput_per_gpu for r in results]
    assert [r.sim_interactivity for r in again] == [r.sim_interactivity for r in results]

    write_points_csv(results, tmp_path / "out" / "points.csv")
    with (tmp_path / "out" / "points.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert [int(t["conc"]) for t in table] == [4, 8]
    assert float(table[0]["err_tput_pct"]) == pytest.approx(errs_t[0])


def test_report_and_markdown(tmp_path: Path) -> None:
    rows = [row(conc=4), row(hw="h200_trt")]
    seen: list[tuple[int, int]] = []
    report = validate(
        write(tmp_path / "d.csv", rows),
        requests_per_conc=1,
        progress=lambda done, total, _r: seen.append((done, total)),
    )
    assert seen == [(1, 1)]
    assert report.rows == 2
    assert report.skipped == {SKIP_TRT: 1}
    doc = render_markdown(report, "plan validate inferencemax", "2025-01-01", 1.0)
    assert "plan validate inferencemax" in doc
    assert f"- 1 row: {SKIP_TRT}" in doc
    assert "| llama-3.3-70b | h100 | 1K/1K | vllm | 1 |" in doc
    assert "What was tuned" in doc
    data = report.to_json()
    assert data["simulated"] == 1
    assert data["groups"][0]["points"] == 1


def test_not_simulated_points_are_reported(tmp_path: Path) -> None:
    # DeepSeek-V3 at fp8 does not fit on one H100
    pts = load_points(
        write(tmp_path / "d.csv", [row(model="DeepSeek R1 0528", tp=1, conc=4)])
    ).points
    (r,) = run_points(pts, requests_per_conc=1)
    assert r.status.startswith("not simulated: ")
    assert not r.ok
    assert r.err_tput_pct is None
    (g,) = aggregate([r])
    assert (g.points, g.not_simulated, g.median_ape_tput_pct) == (0, 1, None)


def test_real_dashboard_maps(shared_data: Path) -> None:
    path = shared_data / "inferencemax" / DEFAULT_DATA.name
    loaded = load_points(path)
    assert loaded.rows == 1393
    assert loaded.skipped == {SKIP_TRT: 407, SKIP_DISAGG: 65}
    assert len(loaded.points) == 921
    assert {p.device for p in loaded.points} == {"b200", "h100", "h200", "mi300x", "mi325x",
                                                 "mi355x"}  # fmt: skip
    assert {p.card for p in loaded.points} == {"deepseek-v3", "llama-3.3-70b", "gpt-oss-120b"}


def test_default_data_is_the_shared_dashboard(shared_data: Path) -> None:
    assert shared_data / "inferencemax" / "inferencemax_v1_dashboard_20251025.csv" == DEFAULT_DATA
    assert DEFAULT_DATA.exists()
