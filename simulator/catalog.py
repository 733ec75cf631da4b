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
    """Built-in devices and those in the user's data folder (``calibrate`` puts them there)."""
    from simulator.userdata import user_profiles_dir

    folders = (PROFILES_DIR, user_profiles_dir())
    return sorted({p.parent.name for d in folders for p in d.glob("*/profile.yaml")})


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
    """A profile by name (``mi355x``: the user's data folder's ``profiles/<name>/`` first,
    where ``calibrate`` writes, then the built-in one) or a profile YAML by path."""
    from simulator.userdata import user_device_dir

    if _is_path(ref):
        return load(HardwareProfile, ref)
    path = user_device_dir(ref) / "profile.yaml"
    if not path.is_file():
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
