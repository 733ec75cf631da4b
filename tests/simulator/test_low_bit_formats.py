"""2- and 3-bit group formats: their bytes by hand (GPTQ layout: b-bit weights, one fp16 scale
and one b-bit zero point per group), and their path through the step cost (read at the packed
size, computed at the BF16 peak like the int4 formats)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simulator import catalog
from simulator.cli import app
from simulator.cost.latency import LatencyModels
from simulator.cost.step import StepCostModel
from simulator.specs import ServingConfig
from simulator.specs.precision import COMPUTE_DTYPE_OF, WEIGHT_FORMATS, weight_bytes

# (format, bits of one element, group size, bits per element by hand)
LOW_BIT = [
    ("int3_g128", 3, 128, 3 + (16 + 3) / 128),  # 3.1484375
    ("int3_g64", 3, 64, 3 + (16 + 3) / 64),  # 3.296875
    ("int2_g128", 2, 128, 2 + (16 + 2) / 128),  # 2.140625
    ("int2_g64", 2, 64, 2 + (16 + 2) / 64),  # 2.28125
    ("int2_g32", 2, 32, 2 + (16 + 2) / 32),  # 2.5625
]


@pytest.mark.parametrize(("name", "bits", "group", "by_hand"), LOW_BIT)
def test_bits_per_element_include_scale_and_zero_point(
    name: str, bits: int, group: int, by_hand: float
) -> None:
    fmt = WEIGHT_FORMATS[name]
    assert (fmt.element_bits, fmt.group_size, fmt.scale_bits, fmt.zero_bits) == (
        bits, group, 16, bits,
    )  # fmt: skip
    assert fmt.bits_per_element == by_hand
    assert "GPTQ" in fmt.source
    # one group of a 4096-wide row: 4096 values + 4096/group scales (2 B) and zero points
    row = 4096 * bits / 8 + 4096 / group * (2 + bits / 8)
    assert weight_bytes(4096, name) == pytest.approx(row)


def test_the_issue_example_is_21_1_gb_of_int2_g64() -> None:
    # 74e9 params x (2 + 18/64) bits / 8 = 21.1015625e9 bytes
    assert weight_bytes(74e9, "int2_g64") == pytest.approx(21.1015625e9)


def test_existing_formats_keep_their_size() -> None:
    sizes = {k: WEIGHT_FORMATS[k].bits_per_element for k in ("mxfp4", "nvfp4", "int4_g128")}
    assert sizes == {"mxfp4": 4.25, "nvfp4": 4.5, "int4_g128": 4.125}


def test_every_format_has_a_compute_dtype() -> None:
    assert set(COMPUTE_DTYPE_OF) == set(WEIGHT_FORMATS)
    for name, *_ in LOW_BIT:
        assert COMPUTE_DTYPE_OF[name] == "bf16"


@pytest.mark.parametrize("name", [r[0] for r in LOW_BIT])
def test_step_cost_reads_packed_bytes_at_the_bf16_peak(name: str) -> None:
    card = catalog.model_card("qwen3-235b-a22b-fp8")
    device = catalog.hardware_profile("h100")
    serving = ServingConfig(tp=4, weight_precision={"routed_experts": name})
    model = StepCostModel(card, device, serving)
    assert model.group_weight_bytes["routed_experts"] == WEIGHT_FORMATS[name].bits_per_element / 8
    assert model.group_peak["routed_experts"] == device.peak_flops_per_s.bf16


def test_fewer_bits_make_a_memory_bound_decode_step_faster() -> None:
    card = catalog.model_card("qwen3-235b-a22b-fp8")
    device = catalog.hardware_profile("h100")
    times = []
    for name in ("bf16", "int4_g128", "int3_g64", "int2_g64"):
        serving = ServingConfig(tp=4, weight_precision={"routed_experts": name})
        model = StepCostModel(card, device, serving, LatencyModels(device))  # roofline priors
        times.append(model.step_seconds(np.full(64, 1), np.full(64, 4000)))
    assert times == sorted(times, reverse=True)
    assert len(set(times)) == 4


def test_ops_predict_takes_the_new_formats(tmp_path: Path) -> None:
    csv = tmp_path / "ops.csv"
    csv.write_text("op,dtype,m,n,k\n" + "".join(f"gemm,{r[0]},64,4096,4096\n" for r in LOW_BIT))
    result = CliRunner().invoke(app, ["ops", "predict", "--device", "h100", "--input", str(csv)])
    assert result.exit_code == 0, result.stderr
    for name, *_ in LOW_BIT:
        assert name in result.stdout
