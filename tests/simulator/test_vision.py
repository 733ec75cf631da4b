"""A card's vision block: its weights on each GPU under vLLM's --mm-encoder-tp-mode, the
images vLLM's profiling run encodes, and what plan_memory takes out of the KV cache for them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator import catalog
from simulator.memory import activation_reserve_bytes, plan_memory
from simulator.specs import ModelCard, ServingConfig, SpecError, load
from simulator.vision import images_profiled, vision_params_per_gpu
from simulator.weights import weights_per_gpu

VISION: dict[str, Any] = {
    "encoder_params": 6.0e8,
    "projector_params": 5.0e7,
    "replicated_params": 1.0e7,
    "activation_bytes_per_image": 1.5e9,
    "max_tokens_per_image": 1024,
    "source": "test numbers",
}


def card_with(**vision: Any) -> ModelCard:
    base = catalog.model_card("qwen3-32b").model_dump()
    return ModelCard.model_validate({**base, "name": "vl-test", "vision": {**VISION, **vision}})


# (tp, tp_mode, precision, params on one GPU by hand, bytes per param)
PLACEMENT = [
    (1, "weights", "bf16", 6.5e8, 2.0),
    (4, "weights", "bf16", (6.5e8 - 1e7) / 4 + 1e7, 2.0),  # 1.7e8
    (4, "data", "bf16", 6.5e8, 2.0),  # the whole tower on every rank
    (2, "weights", "fp8", (6.5e8 - 1e7) / 2 + 1e7, 1.0),  # 3.3e8
]


@pytest.mark.parametrize(("tp", "mode", "precision", "params", "per_param"), PLACEMENT)
def test_vision_weights_per_gpu(
    tp: int, mode: str, precision: str, params: float, per_param: float
) -> None:
    card = card_with(tp_mode=mode, precision=precision)
    serving = ServingConfig(tp=tp)
    assert vision_params_per_gpu(card, serving)[0] == pytest.approx(params)
    rows = {g.group: g for g in weights_per_gpu(card, serving)}
    assert rows["vision"].bytes_per_gpu == pytest.approx(params * per_param)
    assert rows["vision"].precision == precision
    text = catalog.model_card("qwen3-32b")
    assert set(rows) - {g.group for g in weights_per_gpu(text, serving)} == {"vision"}


# (max_tokens_per_image, tp_mode, tp, serving knobs, images by hand); H100 defaults: 8192
# batched tokens, 1024 sequences
IMAGES = [
    (1024, "weights", 1, {}, 8),  # 8192 // 1024
    (16384, "weights", 1, {}, 1),  # the budget grows to one whole image
    (3000, "weights", 1, {}, 2),  # 8192 // 3000
    (1024, "data", 4, {}, 2),  # 8 images split over 4 ranks
    (1024, "weights", 1, {"max_num_batched_tokens": 2048}, 2),
    (1024, "weights", 1, {"max_model_len": 1024, "max_num_seqs": 2}, 2),  # 2 seqs x 1 image
]


@pytest.mark.parametrize(("per_image", "mode", "tp", "knobs", "images"), IMAGES)
def test_images_of_vllms_profiling_run(
    per_image: int, mode: str, tp: int, knobs: dict[str, int], images: int
) -> None:
    card = card_with(max_tokens_per_image=per_image, tp_mode=mode)
    device = catalog.hardware_profile("h100")
    serving = ServingConfig(tp=tp, **knobs)  # type: ignore[arg-type]
    tokens = knobs.get("max_num_batched_tokens", 8192)
    seqs = knobs.get("max_num_seqs", 1024)
    assert images_profiled(card, serving, tokens, seqs) == images
    r = plan_memory(card, device, serving, context_tokens=1000)
    assert r.vision_images_profiled == images
    assert r.vision_activation_reserve_bytes_per_gpu == images * 1.5e9


def test_plan_memory_takes_the_tower_out_of_the_kv_cache() -> None:
    device = catalog.hardware_profile("h100")
    serving = ServingConfig(tp=2)
    text = plan_memory(catalog.model_card("qwen3-32b"), device, serving, 8192)
    vl = plan_memory(card_with(), device, serving, 8192)
    weights = (6.5e8 - 1e7) / 2 * 2 + 1e7 * 2  # bf16, sharded part halved
    reserve = 8 * 1.5e9  # 8192 // 1024 images of 1.5 GB
    assert vl.vision_weight_bytes_per_gpu == pytest.approx(weights)
    assert vl.weight_bytes_per_gpu == pytest.approx(text.weight_bytes_per_gpu + weights)
    assert vl.activation_reserve_bytes_per_gpu == pytest.approx(
        text.activation_reserve_bytes_per_gpu + reserve
    )
    assert vl.kv_cache_bytes_per_gpu == pytest.approx(
        text.kv_cache_bytes_per_gpu - weights - reserve
    )
    assert vl.max_seqs_at_context < text.max_seqs_at_context
    row = next(g for g in vl.weight_groups if g.group == "vision")
    assert row.placement == "mixed"  # sharded blocks, the replicated patch embedding
    assert activation_reserve_bytes(card_with(), serving, device) == pytest.approx(
        activation_reserve_bytes(catalog.model_card("qwen3-32b"), serving, device) + reserve
    )


def test_a_tower_too_big_does_not_fit_and_says_why() -> None:
    device = catalog.hardware_profile("h100")
    card = card_with(activation_bytes_per_image=6e9)  # 8 images x 6 GB: no KV cache left
    r = plan_memory(card, device, ServingConfig(tp=2), 8192)
    assert not r.fits
    assert r.fits_reason == "no memory left for the KV cache after weights and reserves"
    assert (r.fewest_gpus_model_alone or 0) > 2
    assert math.isclose(r.vision_activation_reserve_bytes_per_gpu, 48e9)


# (vision fields changed, field named in the error, fragment of the reason)
BAD = [
    ({"encoder_params": -1}, "vision.encoder_params", "greater than 0"),
    ({"encoder_params": 1e15}, "vision.encoder_params", "less than or equal"),
    ({"activation_bytes_per_image": float("inf")}, "vision.activation_bytes_per_image", "finite"),
    ({"max_tokens_per_image": 0}, "vision.max_tokens_per_image", "greater than 0"),
    ({"replicated_params": 1e9}, "vision", "replicated_params 1e+09 exceeds"),
    ({"tp_mode": "both"}, "vision.tp_mode", "'weights' or 'data'"),
    ({"precision": "int1_g64"}, "vision.precision", "int2_g64"),
    ({"encoder_parms": 1e8}, "vision.encoder_parms", "unknown field"),
    ({"source": ""}, "vision.source", "at least 1 character"),
]


@pytest.mark.parametrize(("change", "field", "reason"), BAD)
def test_bad_vision_field_names_file_field_and_reason(
    change: dict[str, Any], field: str, reason: str, tmp_path: Path
) -> None:
    data = catalog.model_card("qwen3-32b").model_dump(mode="json", exclude_none=True)
    data["vision"] = {**VISION, **change}
    path = tmp_path / "card.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as err:
        load(ModelCard, path)
    assert err.value.file == str(path)
    assert err.value.field == field
    assert reason in err.value.reason
