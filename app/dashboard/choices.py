"""Only valid combinations: the TP and DCP sizes, offload sizes and devices the core accepts
for a model, found with the core's own checks (``deployment.check_deployment``,
``deployment.check_device``, ``memory.plan_memory`` and ``memory.fits_on``, the rules
``planner.expand.expand`` prunes with), never re-implemented here.

A choice kept in ``st.session_state`` that the new options do not hold (DCP 8 after TP went
to 4) is replaced by the nearest valid one before its widget is drawn, so a control never
shows a value the page would refuse.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st
from pydantic import ValidationError

from simulator import catalog
from simulator.deployment import check_deployment, check_device
from simulator.memory import fits_on, plan_memory
from simulator.specs import HardwareProfile, ServingConfig, SpecError

TP_SIZES = [1, 2, 4, 8, 16]
DCP_SIZES = [1, 2, 4, 8]
OFFLOAD_GIB = [0, 128, 256, 512, 1024, 2048, 4096]  # host KV tier per replica


def domain(device: HardwareProfile) -> int:
    """GPUs of the device's scale-up domain (the most one TP group may span)."""
    return device.scale_up.domain_size if device.scale_up is not None else 1


def refusal(model: str, serving: ServingConfig, device: str | None = None) -> str | None:
    """Why the core refuses ``serving`` for ``model`` (on ``device``), or None."""
    try:
        check_deployment(catalog.model_card(model), serving)
        if device is not None:
            check_device(serving, catalog.hardware_profile(device))
    except SpecError as exc:
        return exc.reason
    return None


def _serving(**knobs: Any) -> ServingConfig | None:
    try:
        return ServingConfig(**knobs)
    except ValidationError:
        return None


@functools.cache
def model_tp_sizes(model: str) -> tuple[int, ...]:
    """TP sizes the model's attention, KV and linear-attention heads allow."""
    return tuple(tp for tp in TP_SIZES if refusal(model, ServingConfig(tp=tp)) is None)


@functools.cache
def device_tp_sizes(model: str, device: str) -> tuple[int, ...]:
    """TP sizes the model's heads and the device's scale-up domain allow."""
    return tuple(
        tp for tp in model_tp_sizes(model) if refusal(model, ServingConfig(tp=tp), device) is None
    )


@functools.cache
def fitting_tp_sizes(model: str, device: str) -> tuple[int, ...]:
    """The TP sizes of ``device_tp_sizes`` at which the weights and reserves leave a block pool
    for at least one sequence (``expand``'s pruning rule)."""
    card, profile = catalog.model_card(model), catalog.hardware_profile(device)
    fitting = []
    for tp in device_tp_sizes(model, device):
        memory = plan_memory(card, profile, ServingConfig(tp=tp), context_tokens=1)
        if memory.num_blocks > memory.blocks_per_seq:
            fitting.append(tp)
    return tuple(fitting)


@functools.cache
def dcp_sizes(model: str, tp: int) -> tuple[int, ...]:
    """DCP sizes for ``tp``: divisors of it that the model's KV heads allow (GQA: at most
    tp // num_kv_heads; none beyond 1 without full-attention layers)."""
    sizes = []
    for dcp in DCP_SIZES:
        serving = _serving(tp=tp, dcp=dcp)
        if serving is not None and refusal(model, serving) is None:
            sizes.append(dcp)
    return tuple(sizes) or (1,)


@functools.cache
def kv_dtypes(model: str, options: tuple[str, ...]) -> tuple[str, ...]:
    """The KV cache dtypes of ``options`` the model takes (the ``*_ds_mla`` ones need MLA)."""
    kept = tuple(k for k in options if refusal(model, ServingConfig(kv_cache_dtype=k)) is None)
    return kept or options[:1]


def offload_gib(device: HardwareProfile, tp: int) -> list[int]:
    """Host KV tier sizes per replica that the host DRAM behind ``tp`` GPUs holds."""
    host = device.host_dram_bytes_per_gpu * tp
    return [g for g in OFFLOAD_GIB if g * 2**30 <= host]


@dataclass(frozen=True)
class Fit:
    device: str
    tp_sizes: tuple[int, ...]  # TP sizes at which the model fits on the device
    needs: str  # fits_on for the device alone: "16x h200"
    domain: int

    @property
    def fits(self) -> bool:
        return bool(self.tp_sizes)

    @property
    def gpus_needed(self) -> str:
        return self.needs.split("x ", 1)[0]

    @property
    def reason(self) -> str:
        """Why the model does not fit (empty when it does)."""
        if self.fits:
            return ""
        if self.gpus_needed.isdigit() and int(self.gpus_needed) <= self.domain:
            return (
                f"at every TP its scale-up domain of {self.domain} GPUs allows, the weights and"
                " reserves leave no KV cache for one sequence"
            )
        return (
            f"its weights need {self.needs}, more than the {self.domain} GPUs of one"
            " scale-up domain"
        )


@functools.cache
def fit(model: str, device: str) -> Fit:
    profile = catalog.hardware_profile(device)
    needs = fits_on(catalog.model_card(model), ServingConfig(), [profile])
    return Fit(device, fitting_tp_sizes(model, device), needs, domain(profile))


def device_label(model: str) -> Callable[[str], str]:
    """A format_func for device choices: the name, its display name and, when the model does
    not fit at any TP within its scale-up domain, ``(does not fit: needs N GPUs)``."""

    def label(name: str) -> str:
        text = f"{name} ({catalog.hardware_profile(name).display_name})"
        f = fit(model, name)
        return text if f.fits else f"{text} (does not fit: needs {f.gpus_needed} GPUs)"

    return label


def refuse_unfit(source: str, model: str, devices: Sequence[str]) -> None:
    """One SpecError line for the first chosen device the model does not fit on."""
    for device in devices:
        f = fit(model, device)
        if not f.fits:
            raise SpecError(source, "device", f"{model} does not fit on {device}: {f.reason}")


def keep_valid(key: str, options: Sequence[int], preferred: int) -> None:
    """Before a single-choice widget keyed ``key`` is drawn: a kept value that ``options``
    does not hold (or none kept yet) becomes the option nearest to it (to ``preferred``; of
    two equally near, the smaller). The widget is then created without a default of its own."""
    state = st.session_state
    current = state.get(key)
    if current in options:
        return
    target = preferred if current is None else current
    state[key] = min(options, key=lambda o: (abs(o - target), o))


def keep_valid_many(key: str, options: Sequence[int], preferred: Sequence[int]) -> None:
    """``keep_valid`` for a multiselect: kept values no longer offered are dropped (all of
    them dropped: the preferred ones offered, else the first option). A choice the user
    emptied stays empty (the page says to pick one)."""
    state = st.session_state
    kept = state.get(key)
    fallback = [v for v in preferred if v in options] or list(options[:1])
    if kept is None:
        state[key] = fallback
        return
    current = [v for v in kept if v in options]
    if current != list(kept):
        state[key] = current or fallback
