"""Weight precisions from a config.json's dtype and ``quantization_config`` (fp8, mxfp4,
compressed-tensors; ModelOpt is ``modelopt_quant.py``), per module group of the card."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from simulator.importers.config_view import ConfigView
from simulator.specs.model import ModuleGroup
from simulator.specs.precision import WeightPrecision

_DTYPES: dict[str, WeightPrecision] = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def base_dtype(text: ConfigView, top: ConfigView) -> WeightPrecision:
    for cfg in (text, top):
        for key in ("torch_dtype", "dtype"):
            if cfg.has(key):
                dtype = cfg.get(key)
                if not isinstance(dtype, str) or dtype not in _DTYPES:
                    raise cfg.error(key, f"unsupported dtype {dtype!r}")
                return _DTYPES[dtype]
    return "bf16"


def _names(q: ConfigView, key: str) -> list[str]:
    """A list of module names or patterns (absent: none). A string is refused, not read as
    its characters: ``"abc"`` matched every module holding an a, b or c."""
    return q.str_list(key) if q.has(key) else []


def _hf_pattern_matches(pattern: str, module: str) -> bool:
    """transformers ``modules_to_not_convert``: a substring or a regex matched at the start."""
    if pattern in module:
        return True
    try:
        return re.match(pattern, module) is not None
    except re.error:
        return False


def _ct_ignored(pattern: str, module: str) -> bool:
    """compressed-tensors ``ignore``: ``re:<regex>`` (re.match) or an exact module name."""
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module) is not None
    return module == pattern or module.endswith("." + pattern)


def _ct_precision(q: ConfigView, group: Mapping[str, Any], name: str) -> WeightPrecision:
    """Weight precision of one compressed-tensors config group."""
    fmt = str(group.get("format") or q.get("format", ""))
    weights = group.get("weights") or {}
    bits = weights.get("num_bits")
    if "mxfp4" in fmt:
        return "mxfp4"
    if "nvfp4" in fmt:
        return "nvfp4"
    if fmt == "float-quantized" and bits == 8:
        return "fp8_block" if weights.get("strategy") == "block" else "fp8"
    if bits == 4 and weights.get("type") == "int" and weights.get("group_size") == 128:
        return "int4_g128"
    if bits == 4 and weights.get("type") == "int" and weights.get("group_size") == 32:
        return "int4_g32"
    raise q.error(
        f"config_groups.{name}",
        f"unsupported compressed-tensors weights (format {fmt!r}, {weights.get('type')}"
        f" {bits}-bit, group {weights.get('group_size')})",
    )


def precisions(
    modules: Mapping[ModuleGroup, str | None],
    groups: list[ModuleGroup],
    owner: ConfigView,
    quant: Any,
    base: WeightPrecision,
    notes: list[str],
) -> dict[ModuleGroup, WeightPrecision]:
    out: dict[ModuleGroup, WeightPrecision] = dict.fromkeys(groups, base)
    if quant is None:
        notes.append(f"no quantization_config: all weights {base} (config dtype)")
        return out
    q = owner.sub("quantization_config")
    method = q.get("quant_method")
    linear = {g: modules[g] for g in groups if modules.get(g) is not None}

    if method == "fp8":
        fmt: WeightPrecision = "fp8_block" if q.has("weight_block_size") else "fp8"
        if q.has("weight_block_size"):
            block = q.int_list("weight_block_size")
            if len(block) != 2 or min(block) < 1:
                raise q.error("weight_block_size", f"expected [rows, columns] >= 1, got {block}")
        skip = _names(q, "modules_to_not_convert")
        for g, module in linear.items():
            if g != "lm_head" and not any(_hf_pattern_matches(p, module or "") for p in skip):
                out[g] = fmt
        notes.append(
            f"quantization_config fp8 {q.get('weight_block_size', '')}: every nn.Linear is {fmt};"
            f" embedding, lm_head and the router (a plain parameter, not nn.Linear) stay {base}"
        )
    elif method == "mxfp4":
        skip = _names(q, "modules_to_not_convert")
        module = modules.get("routed_experts")
        if "routed_experts" in out and not any(_hf_pattern_matches(p, module or "") for p in skip):
            out["routed_experts"] = "mxfp4"
        notes.append(
            f"quantization_config mxfp4: the routed experts are mxfp4; attention, router,"
            f" embedding and lm_head stay {base} (modules_to_not_convert)"
        )
    elif method == "compressed-tensors":
        ignore = _names(q, "ignore")
        config_groups = q.sub("config_groups")
        for cg_name, cg in config_groups.data.items():
            if not isinstance(cg, dict):
                raise config_groups.error(cg_name, "expected a mapping")
            targets = [str(t) for t in cg.get("targets") or []]
            precision = _ct_precision(q, cg, cg_name)
            for g, module in linear.items():
                if module is None or any(_ct_ignored(p, module) for p in ignore):
                    continue
                if "Linear" in targets or any(_ct_ignored(t, module) for t in targets):
                    out[g] = precision
        quantized = sorted(g for g in out if out[g] != base)
        kept = sorted(g for g in out if out[g] == base)
        notes.append(
            f"quantization_config compressed-tensors ({q.get('format', '?')}): quantized"
            f" {', '.join(quantized) or 'nothing'}; kept {base} by `ignore` or as non-Linear:"
            f" {', '.join(kept)}"
        )
    else:
        raise q.error("quant_method", f"unsupported quant_method {method!r}")
    return out
