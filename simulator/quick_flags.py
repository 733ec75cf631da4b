"""A quick card from the command line's headline numbers (``plan memory --params 74e9
--precision int2_g64 ...``), every flag checked: the card ``simulator.quick_card`` estimates
memory from (its docstring says what is assumed)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.specs import limits
from simulator.specs.loading import SpecError
from simulator.specs.precision import WEIGHT_FORMATS, WeightPrecision
from simulator.specs.vision import MAX_ACTIVATION_BYTES_PER_IMAGE, MAX_PARAMS

ARGS = "(arguments)"
# fewer parameters than this is a count given in billions or millions (74, not 74e9):
# --params 0.5 held 1 byte of weights and "fit"
MIN_PARAMS = 1e6
MAX_WIDTH = 1_000_000  # hidden size, KV heads, head dim: far beyond any model


@dataclass(frozen=True)
class QuickCard:
    """What the user gave (checked): the headline numbers of a release."""

    params: float
    precision: WeightPrecision
    active_params: float | None = None
    vision_params: float = 0.0
    vision_precision: WeightPrecision = "bf16"
    vision_activation_bytes_per_image: float | None = None
    layers: int | None = None
    hidden_size: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None


def count_text(n: float) -> str:
    """A parameter count as given on a command line: ``74e9``, ``1.7e9``, ``350e6``."""
    for scale, suffix in ((1e9, "e9"), (1e6, "e6")):
        if n >= scale:
            return f"{n / scale:.4g}{suffix}"
    return f"{n:.4g}"


def _number(flag: str, value: float | None, upper: float, zero_ok: bool = False) -> None:
    if value is None:
        return
    if not math.isfinite(value):
        raise SpecError(ARGS, flag, f"must be a finite number, got {value}")
    if value < 0 or (value == 0 and not zero_ok):
        raise SpecError(ARGS, flag, f"must be {'>= 0' if zero_ok else '> 0'}, got {value:g}")
    if value > upper:
        hint = " (a unit mix-up?)" if flag.endswith("params") else ""  # bytes for a count
        raise SpecError(ARGS, flag, f"{value:,g} exceeds {upper:,g}{hint}")


def _precision(flag: str, value: str) -> WeightPrecision:
    if value not in WEIGHT_FORMATS:
        raise SpecError(
            ARGS, flag, f"unknown weight format {value!r}; known: {', '.join(WEIGHT_FORMATS)}"
        )
    return value  # narrowed to a WeightPrecision by the test above


def quick_card(
    params: float,
    precision: str | None,
    active_params: float | None = None,
    vision_params: float | None = None,
    vision_precision: str | None = None,
    vision_activation_bytes_per_image: float | None = None,
    layers: int | None = None,
    hidden_size: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
) -> QuickCard:
    """The quick card of these flags, or a SpecError naming the flag and the reason."""
    _number("--params", params, MAX_PARAMS)
    if precision is None:
        raise SpecError(ARGS, "--precision", "a quick card (--params) needs the weight format")
    _number("--active-params", active_params, MAX_PARAMS)
    if active_params is not None and active_params > params:
        raise SpecError(
            ARGS,
            "--active-params",
            f"{count_text(active_params)} exceeds --params {count_text(params)}",
        )
    _number("--vision-params", vision_params, MAX_PARAMS, zero_ok=True)
    for flag, count in (("--params", params), ("--active-params", active_params),
                        ("--vision-params", vision_params)):  # fmt: skip
        if count and count < MIN_PARAMS:  # 74 meant 74e9 (a vision tower of 0 is none)
            raise SpecError(
                ARGS, flag, f"{count:g} is below {MIN_PARAMS:.0e}: give the count itself (74e9)"
            )
    _number(
        "--vision-activation-bytes-per-image",
        vision_activation_bytes_per_image,
        MAX_ACTIVATION_BYTES_PER_IMAGE,
        zero_ok=True,
    )
    for flag, value in (("--vision-activation-bytes-per-image", vision_activation_bytes_per_image),
                        ("--vision-precision", vision_precision)):  # fmt: skip
        if not vision_params and value:
            raise SpecError(ARGS, flag, "given without --vision-params")
    _number("--layers", layers, limits.MAX_LAYERS)
    for flag, value in (("--hidden", hidden_size), ("--kv-heads", kv_heads)):
        _number(flag, value, MAX_WIDTH)
    _number("--head-dim", head_dim, MAX_WIDTH)
    return QuickCard(
        params=params,
        precision=_precision("--precision", precision),
        active_params=active_params,
        vision_params=vision_params or 0.0,
        vision_precision=_precision("--vision-precision", vision_precision or "bf16"),
        vision_activation_bytes_per_image=vision_activation_bytes_per_image,
        layers=layers,
        hidden_size=hidden_size,
        kv_heads=kv_heads,
        head_dim=head_dim,
    )
