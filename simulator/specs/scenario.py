"""A scenario: which model on which hardware, deployed how, under what traffic and SLO."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt

from simulator.specs.frozen import Frozen
from simulator.specs.serving import ServingConfig


class RandomPromptWorkload(Frozen):
    """InferenceX-style random prompts: lengths uniform in [x(1-r), x], no prefix reuse."""

    kind: Literal["random"] = "random"
    input_tokens: PositiveInt
    output_tokens: PositiveInt
    range_ratio: float = Field(default=0.8, ge=0, le=1)
    num_requests: PositiveInt
    request_rate_per_s: PositiveFloat | None = None  # None: closed loop
    concurrency: PositiveInt | None = None


class TraceWorkload(Frozen):
    """A trace file read from disk (format by `format`)."""

    kind: Literal["trace"] = "trace"
    path: str
    format: Literal["agentic", "mooncake", "azure"]
    time_scale: PositiveFloat = 1.0
    concurrency: PositiveInt | None = None  # closed loop with this many users


WorkloadSpec = Annotated[RandomPromptWorkload | TraceWorkload, Field(discriminator="kind")]


class SLO(Frozen):
    interactivity_tok_per_s_p90: PositiveFloat | None = None  # 1 / P90 ITL
    ttft_s_p90: PositiveFloat | None = None


class Scenario(Frozen):
    name: str = Field(min_length=1)
    model: str  # a model card name or a path to a card YAML
    device: str  # a hardware profile name or a path to a profile YAML
    serving: ServingConfig = ServingConfig()
    workload: WorkloadSpec
    slo: SLO = SLO()
    cost_model: str = "semianalysis_tco_neocloud"
    seed: int = 0
    duration_s: PositiveFloat | None = None
    warmup_s: float = Field(default=0.0, ge=0)
