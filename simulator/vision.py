"""Memory of a card's vision tower (``vision:``): its weights on each GPU and the activation
reserve of the images vLLM encodes in its memory-profiling run.

What vLLM does (the rules followed here):

- the tower is loaded whatever the traffic (text-only runs included), so its weights always
  count; under ``--mm-encoder-tp-mode weights`` (the default, ``vllm/config/multimodal.py``)
  each encoder layer is split across the TP ranks like the language model (the card's
  ``replicated_params`` stay whole on every rank); under ``data`` every rank holds the whole
  tower and encodes its share of the images;
- ``profile_run`` (``vllm/v1/worker/gpu_model_runner.py``) encodes a dummy batch of
  ``max_items_per_batch`` largest images before the text forward and keeps their embeddings
  in the encoder cache, so the peak it measures (taken out of the KV cache budget) includes
  them. ``MultiModalBudget.get_max_items`` (``vllm/v1/worker/utils.py``): the encoder
  budget is ``max(max_num_batched_tokens, max_tokens_per_item)`` tokens
  (``compute_mm_encoder_budget``), so ``max(1, min(budget // max_tokens_per_item,
  max_num_seqs x max(1, max_model_len // max_tokens_per_item)))`` images; a
  ``--limit-mm-per-prompt`` below that would lower it and is not modelled (the count here is
  the larger one).

Assumption: the vision reserve is added to the text model's activation estimate (vLLM
measures one peak of a run that encodes first and then runs the text forward with the
embeddings cached, so the sum is the conservative side). The step cost does not price the
encoder: a simulated run is text-only traffic, whose steps never run the tower.
"""

from __future__ import annotations

import math

from simulator.specs.model import ModelCard
from simulator.specs.precision import weight_bytes
from simulator.specs.serving import ServingConfig

VISION_GROUP = "vision"  # the weight group's name in reports


def vision_params_per_gpu(card: ModelCard, serving: ServingConfig) -> tuple[float, float]:
    """(params on one GPU, of which every rank holds whole) of the card's vision tower."""
    v = card.vision
    if v is None:
        return 0.0, 0.0
    if v.tp_mode == "data" or serving.tp == 1:
        return v.params, v.params
    sharded = (v.params - v.replicated_params) / serving.tp
    return sharded + v.replicated_params, v.replicated_params


def vision_weight_bytes_per_gpu(card: ModelCard, serving: ServingConfig) -> float:
    if card.vision is None:
        return 0.0
    params, _ = vision_params_per_gpu(card, serving)
    return weight_bytes(params, card.vision.precision)


def images_profiled(
    card: ModelCard, serving: ServingConfig, max_num_batched_tokens: int, max_num_seqs: int
) -> int:
    """Images vLLM's profiling run encodes at once on one GPU (0 without a vision tower)."""
    v = card.vision
    if v is None:
        return 0
    per_image = v.max_tokens_per_image
    budget = max(max_num_batched_tokens, per_image)
    max_model_len = serving.max_model_len or card.max_context_tokens
    per_prompt = max(1, max_model_len // per_image)
    images = max(1, min(budget // per_image, max_num_seqs * per_prompt))
    if v.tp_mode == "data":  # the batch of images is split across the TP ranks
        images = math.ceil(images / serving.tp)
    return images


def vision_activation_reserve_bytes(
    card: ModelCard, serving: ServingConfig, max_num_batched_tokens: int, max_num_seqs: int
) -> float:
    """Activation reserve of the vision tower on one GPU: images profiled x bytes per image."""
    v = card.vision
    if v is None:
        return 0.0
    images = images_profiled(card, serving, max_num_batched_tokens, max_num_seqs)
    return images * v.activation_bytes_per_image
