"""Find the built-in model cards, hardware profiles and cost models by name, or load a path."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from hardware_profiles import PROFILES_DIR
from simulator.specs import CostModel, CostModelCatalog, HardwareProfile, ModelCard, SpecError, load

MODEL_CARDS_DIR = Path(__file__).resolve().parent / "model_cards"
COST_MODELS_FILE = PROFILES_DIR / "cost_models.yaml"


def model_names() -> list[str]:
    return sorted(p.stem for p in MODEL_CARDS_DIR.glob("*.yaml"))


def device_names() -> list[str]:
    return sorted(p.parent.name for p in PROFILES_DIR.glob("*/profile.yaml"))


def _is_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml")) or "/" in ref


@cache
def model_card(ref: str) -> ModelCard:
    """A built-in card by name (``kimi-k3``) or a card YAML by path."""
    if _is_path(ref):
        return load(ModelCard, ref)
    path = MODEL_CARDS_DIR / f"{ref}.yaml"
    if not path.exists():
        raise SpecError(
            "(arguments)", "model", f"unknown model {ref!r}; known: {', '.join(model_names())}"
        )
    return load(ModelCard, path)


@cache
def hardware_profile(ref: str) -> HardwareProfile:
    """A built-in profile by name (``mi355x``) or a profile YAML by path."""
    if _is_path(ref):
        return load(HardwareProfile, ref)
    path = PROFILES_DIR / ref / "profile.yaml"
    if not path.exists():
        raise SpecError(
            "(arguments)", "device", f"unknown device {ref!r}; known: {', '.join(device_names())}"
        )
    profile = load(HardwareProfile, path)
    if profile.name != ref:
        raise SpecError(path, "name", f"{profile.name!r} differs from its folder name {ref!r}")
    return profile


@cache
def cost_models() -> dict[str, CostModel]:
    catalog = load(CostModelCatalog, COST_MODELS_FILE)
    return {cm.name: cm for cm in catalog.cost_models}


def cost_model(name: str) -> CostModel:
    models = cost_models()
    if name not in models:
        raise SpecError(
            "(arguments)", "cost_model", f"unknown cost model {name!r}; known: {', '.join(models)}"
        )
    return models[name]
