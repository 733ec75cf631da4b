"""A search space expanded: every (device, knob combination) a runnable candidate with its
scenarios, one per concurrency, or pruned with the reason (``simulator.planner.space`` holds
the space itself). Configuration ids are unique: when two configurations read alike
(acceptance 0.5 and 0.9 both print ``eagle2``), each gets a short hash of its knob values."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from simulator import catalog
from simulator.deployment import check_deployment, check_device
from simulator.memory import plan_memory
from simulator.planner.space import KNOBS, LATER_KNOB_DEFAULTS, SERVING_KNOBS, SearchSpace
from simulator.specs.loading import SpecError, first_error
from simulator.specs.pools import Disaggregation
from simulator.specs.scenario import Scenario
from simulator.specs.serving import ServingConfig

_MISSING = object()


@dataclass(frozen=True)
class Candidate:
    """One configuration (device + serving knobs) and its scenarios, one per concurrency."""

    config_id: str
    device: str
    knobs: dict[str, Any]
    scenarios: tuple[Scenario, ...]


@dataclass(frozen=True)
class Pruned:
    device: str
    knobs: dict[str, Any]
    reason: str


def knob_label(knobs: dict[str, Any]) -> str:
    parts = [f"tp{knobs['tp']}", f"dcp{knobs['dcp']}"]
    if knobs["dp"] > 1:
        parts.append(f"dp{knobs['dp']}")
    if knobs["ep"] > 1:
        parts.append(f"ep{knobs['ep']}")
    if knobs["cpu_offload_bytes"]:
        parts.append(f"offload{knobs['cpu_offload_bytes'] / 2**30:g}GiB")
    if knobs["max_num_seqs"]:
        parts.append(f"seqs{knobs['max_num_seqs']}")
    if knobs["max_num_batched_tokens"]:
        parts.append(f"mbt{knobs['max_num_batched_tokens']}")
    spec = knobs["speculative"]
    if spec:
        parts.append(f"{spec['method']}{spec['num_speculative_tokens']}")
    if knobs.get("eplb_redundant_experts"):
        parts.append(f"eplb{knobs['eplb_redundant_experts']}")
    if knobs.get("moe_load_imbalance", 1.0) != 1.0:
        parts.append(f"imb{knobs['moe_load_imbalance']:g}")
    backend = knobs.get("all2all_backend", "generic")
    if backend != "generic":
        parts.append({"deepep_high_throughput": "deepep-ht"}.get(backend, "deepep-ll"))
    if knobs.get("latent_moe_projection", "replicated") != "replicated":
        parts.append("latent-split")
    d = knobs.get("disaggregation")
    if d:
        parts.append(disaggregation_text(d).lower().replace(" ", "-").replace("send-back", "sb"))
    return "-".join(parts)


def disaggregation_text(value: dict[str, Any] | None) -> str:
    """A disaggregation knob as runs.csv shows it: ``aggregated``, ``1P1D send-back`` ..."""
    if not value:
        return "aggregated"
    text = Disaggregation.model_validate(value).label
    default = Disaggregation()
    if value.get("link_bw_bytes_per_s", default.link_bw_bytes_per_s) != (
        default.link_bw_bytes_per_s
    ):
        text += f" {value['link_bw_bytes_per_s'] / 1e9:g}GB/s"
    return text


def _shown(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_none=True)
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value


def knob_values(space: SearchSpace, source: str = "(search)") -> dict[str, list[Any]]:
    """The values each knob takes: the sweep's where it lists the knob, else the base
    serving's where it sets it, else the sweep's default. A knob the base sets and the sweep
    lists with other values is an error (which one was meant?)."""
    base, sweep = space.serving, space.sweep
    values: dict[str, list[Any]] = {}
    for knob in KNOBS:
        swept = list(getattr(sweep, knob))
        if knob in SERVING_KNOBS and knob in base.model_fields_set:
            given = getattr(base, knob)
            if knob not in sweep.model_fields_set:
                swept = [given]
            elif swept != [given]:
                raise SpecError(
                    source,
                    f"sweep.{knob}",
                    f"sweeps {_shown(swept)} but serving.{knob} is {_shown(given)}: give {knob}"
                    " in one place (serving holds what is not swept)",
                )
        values[knob] = swept
    return values


def _knob_hash(knobs: dict[str, Any]) -> str:
    """Six hex digits of the canonical knob values (float repr keeps 1e9 != 1.0000001e9)."""
    shown = {k: v for k, v in knobs.items() if LATER_KNOB_DEFAULTS.get(k, _MISSING) != v}
    text = json.dumps(shown, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def unique_ids(labels: list[str], knobs: list[dict[str, Any]]) -> list[str]:
    """``labels`` made unique: every label shared by several configurations gets a short hash
    of its knob values (all of them, so an id does not depend on the order of the sweep)."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    ids = [
        f"{label}-{_knob_hash(k)}" if counts[label] > 1 else label
        for label, k in zip(labels, knobs, strict=True)
    ]
    seen: dict[str, int] = {}
    out = []
    for i in ids:  # equal hashes (not seen in practice): number them
        seen[i] = seen.get(i, 0) + 1
        out.append(i if seen[i] == 1 else f"{i}-{seen[i]}")
    return out


def expand(space: SearchSpace, source: str = "(search)") -> tuple[list[Candidate], list[Pruned]]:
    """Every (device, knob combination) as a runnable candidate or a pruned one with a reason
    (repeated sweep values come back among the pruned, noted as repeats)."""
    try:
        card = catalog.model_card(space.model)
    except SpecError as exc:  # the space's field, not the command line's
        if exc.file != "(arguments)":
            raise
        raise SpecError(source, "model", exc.reason) from None
    limit = space.serving.max_model_len
    if limit is not None and limit > card.max_context_tokens:
        raise SpecError(
            source,
            "serving.max_model_len",
            f"{limit:,} exceeds the {card.max_context_tokens:,}-token context of {card.name}"
            " (its max_context_tokens)",
        )
    values = knob_values(space, source)
    valid: list[tuple[str, dict[str, Any], ServingConfig]] = []
    pruned: list[Pruned] = []
    for device_name in space.devices:
        try:
            device = catalog.hardware_profile(device_name)
        except SpecError as exc:  # an unknown name is the space's; a bad profile file its own
            if exc.file != "(arguments)":
                raise
            raise SpecError(source, "devices", exc.reason) from None
        for combo in itertools.product(*(values[k] for k in KNOBS)):
            knobs = dict(zip(KNOBS, combo, strict=True))
            for k in ("speculative", "disaggregation"):
                knobs[k] = knobs[k].model_dump() if knobs[k] is not None else None
            data = {
                **space.serving.model_dump(exclude_unset=True),
                **{k: knobs[k] for k in SERVING_KNOBS},
            }
            disagg = knobs["disaggregation"]
            serving_valid = False  # which spec a validation error is of (for its field name)
            try:
                serving = ServingConfig.model_validate(data)
                serving_valid = True
                check_deployment(card, serving)
                check_device(serving, device)
                if disagg is not None:  # the scenario's own cross-checks (dp, offload)
                    Scenario.model_validate(
                        {"name": "check", "model": space.model, "device": device_name,
                         "serving": serving, "workload": space.workload,
                         "disaggregation": disagg}
                    )  # fmt: skip
            except ValidationError as exc:
                err = first_error(exc, source, "" if serving_valid else "serving")
                pruned.append(Pruned(device_name, knobs, f"{err.field}: {err.reason}"))
                continue
            except SpecError as exc:
                pruned.append(Pruned(device_name, knobs, f"{exc.field}: {exc.reason}"))
                continue
            memory = plan_memory(card, device, serving, context_tokens=1)
            if memory.num_blocks <= memory.blocks_per_seq:
                pruned.append(Pruned(device_name, knobs, memory.fits_reason))
                continue
            valid.append((device_name, knobs, serving))
        pruned += _repeat_notes(space, values, device_name)
    labels = [f"{device}-{knob_label(knobs)}" for device, knobs, _ in valid]
    ids = unique_ids(labels, [knobs for _, knobs, _ in valid])
    candidates: list[Candidate] = []
    for config_id, (device_name, knobs, serving) in zip(ids, valid, strict=True):
        scenarios = tuple(
            Scenario(
                name=f"{config_id}-c{users}",
                model=space.model,
                device=device_name,
                serving=serving,
                workload=space.workload.model_copy(update={"concurrency": users}),
                slo=space.slo,
                cost_model=space.cost_model,
                seed=space.seed,
                duration_s=space.duration_s,
                warmup_s=space.warmup_s,
                disaggregation=knobs["disaggregation"],
            )
            for users in space.concurrency
        )
        candidates.append(Candidate(config_id, device_name, knobs, scenarios))
    return candidates, pruned


def _repeat_notes(space: SearchSpace, values: dict[str, list[Any]], device: str) -> list[Pruned]:
    """One note per repeated sweep value: its configurations ran once."""
    notes = []
    for knob, repeats in space.sweep._repeated.items():
        for value in repeats:
            knobs = {k: v[0] for k, v in values.items()} | {knob: value}
            for k in ("speculative", "disaggregation"):
                knobs[k] = knobs[k].model_dump() if knobs[k] is not None else None
            notes.append(
                Pruned(
                    device,
                    knobs,
                    f"sweep.{knob} repeats {_shown(value)}: its configurations run once"
                    " (the repeat is dropped)",
                )
            )
    return notes


def pruned_groups(pruned: list[Pruned]) -> list[tuple[str, list[str]]]:
    """The pruned configurations by reason, most frequent first: (reason, their names)."""
    by_reason: dict[str, list[str]] = {}
    for p in pruned:
        try:
            name = f"{p.device}-{knob_label(p.knobs)}"
        except (KeyError, TypeError, ValueError):  # knobs that did not validate
            name = p.device
        by_reason.setdefault(p.reason, []).append(name)
    return sorted(by_reason.items(), key=lambda kv: -len(kv[1]))


def all_pruned_reason(pruned: list[Pruned]) -> str:
    """``every configuration was pruned: <reason> (<configurations>); ...``: the distinct
    reasons, most frequent first, each with the configurations it pruned (a few named)."""
    real = [p for p in pruned if " repeats " not in p.reason] or pruned
    groups = pruned_groups(real)
    parts = []
    for reason, names in groups[:3]:
        shown = ", ".join(names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")
        parts.append(f"{reason} ({shown})")
    more = len(groups) - 3
    tail = f"; and {more} other reason{'s' if more > 1 else ''}" if more > 0 else ""
    return f"every configuration was pruned: {'; '.join(parts)}{tail}"
