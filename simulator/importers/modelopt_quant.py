"""NVIDIA ModelOpt quantization (``nvidia/*-NVFP4`` checkpoints) for ``simulator.model_import``.

ModelOpt checkpoints (``nvidia/*-NVFP4``) describe their quantization either in a
``hf_quant_config.json`` next to ``config.json`` (``{"producer", "quantization": {...}}``, what
vLLM's ModelOpt configs read; ``attach_sidecar`` turns it into a ``quant_method: modelopt``
quantization_config) or inline as such a quantization_config. ``quant_algo`` is one format for
every ``nn.Linear`` not matched by ``exclude_modules`` / ``ignore`` (fnmatch patterns, as
ModelOpt writes them), or ``MIXED_PRECISION`` with a ``quantized_layers`` table of module
prefixes and their ``quant_algo``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from simulator.importers.config_view import ConfigView
from simulator.specs.loading import SpecError, parse_json, read_text
from simulator.specs.model import LINEAR_KINDS, ModelCard, ModuleGroup
from simulator.specs.precision import WeightPrecision

# ModelOpt quant_algo -> weight format (NVFP4: e2m1 in groups of 16 with e4m3 scales)
ALGO_PRECISION: dict[str, WeightPrecision] = {"NVFP4": "nvfp4", "FP8": "fp8"}
_LAYER = re.compile(r"layers\.\d+\.")


def sidecar_path(config_path: Path) -> Path | None:
    """The hf_quant_config.json of ``config_path``: ``<stem>_hf_quant_config.json`` beside an
    aiconfigurator-core style ``<org>--<model>_config.json``, else ``hf_quant_config.json`` in
    the same folder (a checkpoint folder); None when there is none."""
    name = config_path.name
    candidates = []
    if name.endswith("_config.json"):
        stem = name.removesuffix("_config.json")
        candidates.append(config_path.with_name(f"{stem}_hf_quant_config.json"))
    candidates.append(config_path.with_name("hf_quant_config.json"))
    return next((p for p in candidates if p != config_path and p.is_file()), None)


def attach_sidecar(config_path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its sidecar's ``quantization`` as a ``quant_method: modelopt``
    quantization_config, when the config has none of its own and a sidecar exists."""
    if data.get("quantization_config") is not None:
        return data
    path = sidecar_path(config_path)
    if path is None:
        return data
    sidecar = parse_json(read_text(path), path)
    quant = sidecar.get("quantization") if isinstance(sidecar, dict) else None
    if not isinstance(quant, dict):
        raise SpecError(path, "quantization", "missing: expected a mapping of ModelOpt settings")
    return {**data, "quantization_config": {"quant_method": "modelopt", **quant}}


def _group_layers(card: ModelCard, group: ModuleGroup) -> list[int]:
    """0-based layers holding ``group``'s weights (empty: not a per-layer group)."""
    kinds, moe, free = card.layer_kinds, card.moe_layer_mask, card.mlp_free_mask
    if group == "attention":
        return [i for i, k in enumerate(kinds) if k not in LINEAR_KINDS and k != "none"]
    if group == "linear_attention":
        return [i for i, k in enumerate(kinds) if k in LINEAR_KINDS]
    if group == "dense_mlp":
        return [i for i in range(len(kinds)) if not moe[i] and not free[i]]
    if group in ("router", "routed_experts", "shared_experts", "moe_latent"):
        return [i for i in range(len(kinds)) if moe[i]]
    return []


def _module_names(card: ModelCard, group: ModuleGroup, module: str) -> list[str]:
    """``module`` with its layer index replaced by each layer of ``group`` (as is without one)."""
    layers = _group_layers(card, group)
    if not layers or not _LAYER.search(module):
        return [module]
    return [_LAYER.sub(f"layers.{i}.", module, count=1) for i in layers]


def _excluded(patterns: list[str], module: str) -> bool:
    return any(module == p or fnmatchcase(module, p) for p in patterns)


def _mixed_algo(table: Mapping[str, Any], module: str) -> str | None:
    """quant_algo of the ``quantized_layers`` entry that is ``module`` or a prefix of it."""
    for key, entry in table.items():
        if (module == key or module.startswith(key + ".")) and isinstance(entry, dict):
            algo = entry.get("quant_algo")
            return None if algo is None else str(algo)
    return None


def read_modelopt(
    card: ModelCard,
    groups: list[ModuleGroup],
    q: ConfigView,
    modules: Mapping[ModuleGroup, str | None],
    base: WeightPrecision,
    notes: list[str],
) -> dict[ModuleGroup, WeightPrecision]:
    """Weight precision of each module group under a ModelOpt quantization_config ``q``.

    Every layer of a group is looked up (its representative module name with that layer's
    index); a group whose layers disagree takes the format most of them have, and a note
    names the others (a card has one precision per group)."""
    algo = q.get("quant_algo")
    patterns = [str(p) for p in (q.get("exclude_modules") or q.get("ignore") or [])]
    table = q.get("quantized_layers") or {}
    if algo == "MIXED_PRECISION" and not isinstance(table, dict):
        raise q.error("quantized_layers", f"expected a mapping, got {type(table).__name__}")
    if algo != "MIXED_PRECISION" and algo not in ALGO_PRECISION:
        raise q.error(
            "quant_algo",
            f"unsupported ModelOpt quant_algo {algo!r}; supported: MIXED_PRECISION,"
            f" {', '.join(ALGO_PRECISION)}",
        )

    def one(module: str) -> WeightPrecision:
        if _excluded(patterns, module):
            return base
        layer_algo = algo if algo != "MIXED_PRECISION" else _mixed_algo(table, module)
        if layer_algo is None:
            return base
        if layer_algo not in ALGO_PRECISION:
            raise q.error("quantized_layers", f"unsupported quant_algo {layer_algo!r} of {module}")
        return ALGO_PRECISION[layer_algo]

    out: dict[ModuleGroup, WeightPrecision] = dict.fromkeys(groups, base)
    for group in groups:
        # not an nn.Linear, or the lm_head (vLLM's ModelOpt methods quantize LinearBase and
        # FusedMoE layers; ParallelLMHead is a VocabParallelEmbedding): left alone
        module = None if group == "lm_head" else modules.get(group)
        if module is None:
            continue
        found = Counter(one(name) for name in _module_names(card, group, module))
        out[group] = found.most_common(1)[0][0]
        if len(found) > 1:
            notes.append(
                f"ModelOpt: {group} layers are {dict(found)} by layer count; the card takes"
                f" {out[group]} for all of them"
            )
    quantized = sorted(g for g in out if out[g] != base)
    notes.append(
        f"quantization_config modelopt ({algo}): quantized {', '.join(quantized) or 'nothing'};"
        f" kept {base} by exclude_modules/ignore or as non-Linear:"
        f" {', '.join(sorted(g for g in out if out[g] == base))}; kv_cache_quant_algo"
        f" {q.get('kv_cache_quant_algo')} is a serving choice (kv_cache_dtype), not on the card"
    )
    return out
