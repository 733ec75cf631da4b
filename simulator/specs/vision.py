"""The optional vision block of a model card: encoder (ViT) + projector weights, their precision,
the activation memory of encoding one image, and how vLLM places the tower under TP.

vLLM loads the vision tower of a multimodal checkpoint for every deployment (text-only
traffic included, unless the language model is served alone) and encodes a dummy batch of
the largest images in its memory-profiling run, so both the weights and an activation
reserve come out of the KV cache budget (``simulator/vision.py`` counts them).

Placement follows ``--mm-encoder-tp-mode`` (``vllm/config/multimodal.py``,
``MultiModalConfig.mm_encoder_tp_mode``: ``"weights"`` by default): ``weights`` splits each
encoder layer's weights across the TP ranks like the language model's; ``data`` keeps the
whole tower on every rank and splits the batch of images across the ranks instead, and is
honoured only for models that declare ``supports_encoder_tp_data`` (vLLM falls back to
``weights`` otherwise, ``vllm/config/model.py``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from simulator.specs.frozen import Spec
from simulator.specs.precision import WeightPrecision

# Largest parameter count a card or a quick card may give (100 T: ~50x the largest open model):
# a GB-for-B or a bytes-for-params mix-up is caught, no real model is.
MAX_PARAMS = 1e14
# Activation memory of encoding one image: 1 TB is beyond any device (the largest holds 0.3 TB).
MAX_ACTIVATION_BYTES_PER_IMAGE = 1e12

VisionTpMode = Literal["weights", "data"]


class VisionConfig(Spec):
    """Vision encoder + multimodal projector of a card (``vision:``)."""

    encoder_params: float = Field(gt=0, le=MAX_PARAMS)  # the ViT, patch embedding included
    projector_params: float = Field(default=0.0, ge=0, le=MAX_PARAMS)  # merger / mm_projector
    precision: WeightPrecision = "bf16"  # quantization configs usually leave the tower unquantized
    # parts every TP rank keeps whole under tp_mode "weights" (patch embedding, position
    # embeddings, norms; a tower built from plain Linear layers: all of it)
    replicated_params: float = Field(default=0.0, ge=0, le=MAX_PARAMS)
    # peak activation memory of encoding ONE image of the largest size the processor makes,
    # on one GPU, the output embeddings included (from a profile, a vLLM log or an estimate)
    activation_bytes_per_image: float = Field(ge=0, le=MAX_ACTIVATION_BYTES_PER_IMAGE)
    # language-model tokens of one largest image (vLLM's max_tokens_per_mm_item): sets how
    # many images vLLM's profiling run encodes at once
    max_tokens_per_image: PositiveInt
    tp_mode: VisionTpMode = "weights"  # vLLM --mm-encoder-tp-mode (default "weights")
    source: str = Field(min_length=1)  # where the numbers come from

    @property
    def params(self) -> float:
        return self.encoder_params + self.projector_params

    @model_validator(mode="after")
    def _replicated_within_total(self) -> VisionConfig:
        if self.replicated_params > self.params:
            raise ValueError(
                f"replicated_params {self.replicated_params:.4g} exceeds encoder_params +"
                f" projector_params ({self.params:.4g})"
            )
        return self
