"""``ServingConfig.moe_kernel``: the measured MoE rows of one named kernel, from any collection."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator import catalog
from simulator.cost.latency import LatencyModels
from simulator.cost.step import StepCostModel
from simulator.measured.package import TableFile
from simulator.measured.tables import Frames, moe_kernel, moe_kernels
from simulator.specs import ServingConfig
from simulator.specs.loading import SpecError


@pytest.mark.parametrize(
    ("source", "kernel"),
    [
        ("vllm_fused_moe", "triton"),  # vLLM 0.19-0.22 collections
        ("vllm_fp8moe_triton_tritonexperts", "triton"),
        ("vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic", "triton"),
        ("vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu", "marlin"),
        ("vllm_marlin_int4_moe", "marlin"),
        ("vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic", "flashinfer_trtllm"),
        ("vllm_flashinfer_trtllm_moe_fp4", "flashinfer_trtllm"),
        ("vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts", "flashinfer_cutlass"),
        ("vllm_mxfp4_moe", None),  # whichever MXFP4 backend 0.19's oracle picked: unknown
        ("vllm_xpu_moe", None),
    ],
)
def test_kernel_families_of_kernel_sources(source: str, kernel: str | None) -> None:
    assert moe_kernel(source) == kernel


def _table(path: Path, version: str, rows: list[tuple[str, int, float]]) -> TableFile:
    """A MoE table of one shape: (kernel_source, num_tokens, latency ms) rows."""
    df = pd.DataFrame(
        {
            "kernel_source": [r[0] for r in rows],
            "moe_dtype": "fp8_block",
            "distribution": "power_law_1.2",
            "num_tokens": [r[1] for r in rows],
            "hidden_size": 3072,
            "inter_size": 1536,
            "topk": 8,
            "num_experts": 256,
            "moe_tp_size": 2,
            "moe_ep_size": 1,
            "latency": [r[2] for r in rows],
        }
    )
    file = path / version / "moe_perf.parquet"
    file.parent.mkdir(parents=True)
    df.to_parquet(file)
    return TableFile("moe", file, f"x/moe/vllm/{version}/moe_perf.parquet", version)


def test_a_kernel_timed_by_two_collections_keeps_the_newest_rows(tmp_path: Path) -> None:
    old = _table(
        tmp_path,
        "0.19.0",
        [("vllm_fused_moe", 8, 0.2), ("vllm_fused_moe", 64, 0.4), ("vllm_mxfp4_moe", 8, 9.0)],
    )
    new = _table(
        tmp_path,
        "0.24.0",
        [
            ("vllm_fp8moe_triton_tritonexperts", 8, 0.1),
            ("vllm_fp8moe_triton_tritonexperts", 64, 0.3),
            ("vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic", 8, 0.05),
        ],
    )
    out = Frames()
    moe_kernels([old, new], out)
    f = out.frames["moe_kernel"]
    by = {(k, int(t)): s for k, t, s in zip(f.kernel, f.num_tokens, f.seconds, strict=True)}
    # Triton at this family comes from 0.24.0 only; the unnamed 0.19 kernel is left out
    assert by == {
        ("triton", 8): pytest.approx(0.1e-3),
        ("triton", 64): pytest.approx(0.3e-3),
        ("flashinfer_trtllm", 8): pytest.approx(0.05e-3),
    }
    assert [tf.backend_version for tf in out.files["moe_kernel"]] == ["0.24.0"]
    # an older collection is read where it is the only one timing a family
    out = Frames()
    moe_kernels([old], out)
    assert set(out.frames["moe_kernel"].kernel) == {"triton"}


def _moe_ms(kernel: str, tokens: int) -> float:
    profile = catalog.hardware_profile("h200")
    serving = ServingConfig(tp=1, moe_kernel=kernel)
    m = StepCostModel(
        catalog.model_card("gpt-oss-120b"), profile, serving, LatencyModels.for_device(profile)
    )
    cost = m.step(np.array([tokens]), np.array([0]), detail=True)
    return next(x.seconds for x in cost.lines if x.name == "moe.routed_experts") * 1e3


def test_a_named_kernel_prices_its_own_rows(fixture_tables: Path) -> None:
    # gpt-oss on H200: the fixture times OAI Triton MXFP4 at gpt-oss's shape and Marlin MXFP4
    # only at another model's; "triton" is the same rows as auto, "marlin" is its own
    for tokens in (64, 4096):
        assert _moe_ms("triton", tokens) == pytest.approx(_moe_ms("auto", tokens))
    assert _moe_ms("marlin", 4096) > 1.5 * _moe_ms("auto", 4096)


def test_a_kernel_without_rows_for_the_format_is_a_spec_error(fixture_tables: Path) -> None:
    with pytest.raises(SpecError) as exc:
        _moe_ms("flashinfer_trtllm", 64)
    assert exc.value.field == "moe_kernel"
    assert "no measured flashinfer_trtllm MoE rows for mxfp4" in exc.value.reason
    assert "kernels timed for mxfp4: marlin, triton" in exc.value.reason


def test_a_bad_kernel_name_is_one_line_exit_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from simulator.cli import app

    serving = tmp_path / "serving.yaml"
    serving.write_text("tp: 1\nmoe_kernel: cutlass\n")
    args = ["step", "--model", "gpt-oss-120b", "--device", "h200", "--serving", str(serving)]
    result = CliRunner().invoke(app, [*args, "--decode", "4"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "moe_kernel" in lines[0]


def test_plan_step_names_the_kernel(tmp_path: Path, fixture_tables: Path) -> None:
    import json

    from typer.testing import CliRunner

    from simulator.cli import app

    serving = tmp_path / "serving.yaml"
    serving.write_text("tp: 1\nmoe_kernel: marlin\n")
    args = ["step", "--model", "gpt-oss-120b", "--device", "h200", "--serving", str(serving)]
    result = CliRunner().invoke(app, [*args, "--prefill", "4096"])
    assert result.exit_code == 0, result.output
    assert "(MoE kernel: marlin)" in result.stdout
    result = CliRunner().invoke(app, [*args, "--prefill", "4096", "--json"])
    assert json.loads(result.stdout)["moe_kernel"] == "marlin"
