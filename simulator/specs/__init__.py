"""Validated, frozen specs: model cards, hardware profiles, serving configs, scenarios."""

from simulator.specs.hardware import CostModel, CostModelCatalog, HardwareProfile
from simulator.specs.loading import SpecError, load
from simulator.specs.model import ModelCard
from simulator.specs.scenario import Scenario
from simulator.specs.serving import ServingConfig, SpeculativeConfig

__all__ = [
    "CostModel",
    "CostModelCatalog",
    "HardwareProfile",
    "ModelCard",
    "Scenario",
    "ServingConfig",
    "SpecError",
    "SpeculativeConfig",
    "load",
]
