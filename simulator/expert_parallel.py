"""Expert-parallel placement: which EP deployments a model and a device allow, and the
numbers the memory planner and the step model share (docs/rack-scale.md).

vLLM's rules (``FusedMoEParallelConfig.make``, ``EplbState``): with
``--enable-expert-parallel`` the EP group is every TP x DP rank (``ServingConfig`` checks
``ep in (1, tp*dp)``); each rank holds ``(num_experts + num_redundant_experts) / ep`` whole
physical experts, so that count must divide evenly. An EP group wider than the device's
scale-up domain reaches the other domains over the scale-out NIC, which the profile must
then give (``HardwareProfile.scale_out``).
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.specs.hardware import HardwareProfile
from simulator.specs.model import ModelCard
from simulator.specs.serving import ServingConfig

Fail = Callable[[str, str], None]


def physical_experts(card: ModelCard, serving: ServingConfig) -> int:
    """Physical experts of one MoE layer over the whole EP group (EPLB copies included)."""
    assert card.moe is not None
    return card.moe.num_experts + (serving.eplb_redundant_experts if serving.ep > 1 else 0)


def experts_per_rank(card: ModelCard, serving: ServingConfig) -> float:
    """Whole experts one EP rank holds (ep 1: every expert, TP-sharded)."""
    return physical_experts(card, serving) / serving.ep


def scale_up_domain(device: HardwareProfile) -> int:
    return device.scale_up.domain_size if device.scale_up is not None else 1


def check_card(card: ModelCard, serving: ServingConfig, fail: Fail) -> None:
    """The EP and latent-MoE knobs against the model (``fail(field, reason)`` on the first
    problem)."""
    moe = card.moe
    if serving.ep > 1:
        if moe is None:
            fail("ep", f"{card.name} has no experts to place with expert parallelism")
            return
        total = physical_experts(card, serving)
        if total % serving.ep:
            extra = -total % serving.ep + serving.eplb_redundant_experts
            fail(
                "ep",
                f"ep {serving.ep} does not divide the {moe.num_experts} experts"
                f" + {serving.eplb_redundant_experts} redundant = {total} physical experts of"
                f" {card.name} (each EP rank holds whole experts; eplb_redundant_experts:"
                f" {extra} gives {moe.num_experts + extra} = {serving.ep} x"
                f" {(moe.num_experts + extra) // serving.ep})",
            )
    if serving.latent_moe_projection == "rank_split":
        latent = moe.routed_hidden_size if moe is not None else None
        if latent is None:
            fail(
                "latent_moe_projection",
                f"rank_split needs a latent MoE (moe.routed_hidden_size); {card.name} has none",
            )
        elif latent % serving.tp:
            fail(
                "latent_moe_projection",
                f"rank_split: tp {serving.tp} does not divide the {latent}-wide latent of"
                f" {card.name} (each rank computes latent / tp of the projection)",
            )


def check_device(serving: ServingConfig, device: HardwareProfile, fail: Fail) -> None:
    """An EP group beyond the scale-up domain needs the profile's scale-out NIC."""
    domain = scale_up_domain(device)
    if serving.ep > domain and device.scale_out is None:
        fail(
            "ep",
            f"ep {serving.ep} spans more than the {domain}-GPU scale-up domain of"
            f" {device.name}, whose profile gives no scale_out NIC: the all-to-all between"
            " domains has no link to be priced on (add scale_out to the profile, or keep"
            f" ep <= {domain})",
        )
