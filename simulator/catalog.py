"""Find the built-in model cards, hardware profiles and cost models by name, or load a path."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from hardware_profiles import PROFILES_DIR
from simulator.specs import CostModel, CostModelCatalog, HardwareProfile, ModelCard, SpecError, load

MODEL_CARDS_DIR = Path(__file__).resolve().parent / "model_cards"
COST_MODELS_FILE = PROFILES_DIR / "cost_models.yaml"

# Names users type for a model that ships as another card: the same config.json but for
# metadata, so the same weights, KV cache and op shapes (checked against the configs in
# ../shared/data/model_configs/hf). A card file of the alias's own name wins over the alias.
CARD_ALIASES: dict[str, str] = {
    # deepseek-ai--DeepSeek-R1_config.json = DeepSeek-V3's but for transformers_version
    "deepseek-r1": "deepseek-v3",
    # the llama-3.3-70b card is imported from meta-llama--Meta-Llama-3.1-70B_config.json
    "llama-3.1-70b": "llama-3.3-70b",
    # the kimi-k2 card is imported from moonshotai--Kimi-K2-Instruct_config.json
    "kimi-k2-instruct": "kimi-k2",
}


def model_names() -> list[str]:
    return sorted(p.stem for p in MODEL_CARDS_DIR.glob("*.yaml"))


def model_aliases(name: str) -> list[str]:
    """The aliases that resolve to the built-in card ``name``."""
    return sorted(a for a, card in CARD_ALIASES.items() if card == name)


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a file; a name the OS cannot even look up (too long, a NUL byte)
    is not one, so it reads as an unknown name (exit 2), not an internal error."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def resolve_model(ref: str) -> str:
    """The built-in card name ``ref`` stands for: itself, or the card of an alias (either
    case-insensitive: ``DeepSeek-R1`` is ``deepseek-v3``); an unknown name comes back as is."""
    key = ref.lower()
    if _is_file(MODEL_CARDS_DIR / f"{key}.yaml"):
        return key
    return CARD_ALIASES.get(key, ref)


def device_names() -> list[str]:
    """Built-in devices and those in the user's data folder (``calibrate`` puts them there)."""
    from simulator.userdata import user_profiles_dir

    found = set()
    for folder in (PROFILES_DIR, user_profiles_dir()):
        try:  # (a user folder whose name the OS cannot look up holds no profile)
            found |= {p.parent.name for p in folder.glob("*/profile.yaml") if _is_file(p)}
        except OSError:
            continue
    return sorted(found)


def _is_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml")) or "/" in ref


@cache
def model_card(ref: str) -> ModelCard:
    """A built-in card by name (``kimi-k3``) or alias (``deepseek-r1``, ``CARD_ALIASES``), or
    a card YAML by path."""
    if _is_path(ref):
        return load(ModelCard, ref)
    path = MODEL_CARDS_DIR / f"{resolve_model(ref)}.yaml"
    if not _is_file(path):
        aliases = ", ".join(f"{a} = {card}" for a, card in sorted(CARD_ALIASES.items()))
        raise SpecError(
            "(arguments)", "model",
            f"unknown model {ref!r}; known: {', '.join(model_names())} (aliases: {aliases})",
        )  # fmt: skip
    return load(ModelCard, path)


@cache
def hardware_profile(ref: str) -> HardwareProfile:
    """A profile by name (``mi355x``: the user's data folder's ``profiles/<name>/`` first,
    where ``calibrate`` writes, then the built-in one) or a profile YAML by path."""
    from simulator.userdata import user_device_dir

    if _is_path(ref):
        return load(HardwareProfile, ref)
    path = user_device_dir(ref) / "profile.yaml"
    if not _is_file(path):
        path = PROFILES_DIR / ref / "profile.yaml"
    if not _is_file(path):
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
