"""Where a model fits: the fewest GPUs of a device that hold it under TP, and ``fits_on`` over
the devices a user names (else the whole catalog).

"Holds the model alone" is the memory test of ``plan_memory``'s ``fits`` without the
sequences: the weights (vision tower included) and the activation and runtime reserves leave
KV cache memory (``kv_cache_bytes_per_gpu > 0``), or, with ``kv_cache_memory_bytes`` set,
weights + that pool + the runtime reserve are within the usable memory. So a device on which
``plan memory`` says ``fits`` at TP t holds the model alone at TP t, and ``fits_on`` never
names more GPUs of it than that (the TP sizes tried are the powers of two up to 512 and the
serving's own ``tp``). The scale-up domain is not applied: this is what the memory needs.
"""

from __future__ import annotations

from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import SpecError
from simulator.specs.model import ModelCard
from simulator.specs.serving import ServingConfig

MAX_TP_TRIED = 512
POWERS_OF_TWO: tuple[int, ...] = tuple(1 << i for i in range(10))  # 1 .. 512


def holds_model_alone(card: ModelCard, serving: ServingConfig, device: HardwareProfile) -> bool:
    """Whether one GPU of ``device`` holds its share of ``card`` under ``serving``, with KV
    cache memory left (the test ``fits`` applies before it counts sequences)."""
    from simulator.weights import weights_per_gpu

    weights = sum(g.bytes_per_gpu for g in weights_per_gpu(card, serving))
    return _holds(card, serving, device, weights)


def _holds(
    card: ModelCard, serving: ServingConfig, device: HardwareProfile, weights: float
) -> bool:
    from simulator.memory import activation_reserve_bytes

    budget = serving.gpu_memory_utilization * device.usable_memory_bytes
    if serving.kv_cache_memory_bytes is not None:
        pool = serving.kv_cache_memory_bytes
        return weights <= budget and (
            weights + pool + serving.runtime_reserve_bytes <= device.usable_memory_bytes
        )
    reserve = activation_reserve_bytes(card, serving, device) + serving.runtime_reserve_bytes
    return weights + reserve < budget


def _trial(serving: ServingConfig, tp: int) -> ServingConfig:
    """``serving`` on one TP group of ``tp`` GPUs (experts spread over it when EP is on)."""
    return serving.model_copy(
        update={"tp": tp, "dp": 1, "ep": tp if serving.ep > 1 else 1, "dcp": 1}
    )


class _Probe:
    """The answers for one card and serving over several devices: the weights per GPU at a
    TP size do not depend on the device, so each TP is priced (and checked) once."""

    def __init__(self, card: ModelCard, serving: ServingConfig) -> None:
        self.card, self.serving = card, serving
        self._trials: dict[int, ServingConfig | None] = {}
        self._weights: dict[int, float] = {}

    def trial(self, tp: int) -> ServingConfig | None:
        """The deployment at ``tp``, or None when tp does not divide the heads / experts."""
        from simulator.deployment import check_deployment

        if tp not in self._trials:
            trial = _trial(self.serving, tp)
            valid = True
            if tp > 1:
                try:
                    check_deployment(self.card, trial)
                except SpecError:
                    valid = False
            self._trials[tp] = trial if valid else None
        return self._trials[tp]

    def holds(self, tp: int, device: HardwareProfile) -> bool:
        from simulator.weights import weights_per_gpu

        trial = self.trial(tp)
        if trial is None:
            return False
        if tp not in self._weights:
            self._weights[tp] = sum(g.bytes_per_gpu for g in weights_per_gpu(self.card, trial))
        return _holds(self.card, trial, device, self._weights[tp])

    def fewest(self, device: HardwareProfile) -> int | None:
        candidates: list[int] = sorted({*POWERS_OF_TWO, self.serving.tp})
        return next(
            (tp for tp in candidates if tp <= MAX_TP_TRIED and self.holds(tp, device)), None
        )

    def fits_on(self, devices: list[HardwareProfile]) -> str:
        if not devices:
            raise ValueError("fits_on needs at least one device")
        ordered = sorted(devices, key=lambda d: (d.usable_memory_bytes, d.name))
        for device in ordered:
            if self.holds(1, device):
                return f"1x {device.name}"

        # the largest device whose scale-up domain holds the model, else the largest
        def domain(d: HardwareProfile) -> int:
            return d.scale_up.domain_size if d.scale_up is not None else 1

        fewest = {id(d): self.fewest(d) for d in ordered}
        within = [d for d in ordered if (f := fewest[id(d)]) is not None and f <= domain(d)]
        largest = (within or ordered)[-1]
        n = fewest[id(largest)]
        return (
            f"{n}x {largest.name}" if n is not None else f"more than {MAX_TP_TRIED}x {largest.name}"
        )


def fewest_gpus(card: ModelCard, serving: ServingConfig, device: HardwareProfile) -> int | None:
    """The smallest TP size (powers of two up to 512, and ``serving.tp``) whose GPUs of
    ``device`` hold the model alone; None when 512 do not."""
    return _Probe(card, serving).fewest(device)


def fits_on(card: ModelCard, serving: ServingConfig, devices: list[HardwareProfile]) -> str:
    """The smallest of ``devices`` (by usable memory) that holds the model alone on one GPU
    (``1x h200``), else the fewest GPUs of the largest whose scale-up domain (the
    profile's NVLink / PCIe domain; one device without one: a D270, a Mac) holds it under TP
    (``8x mi355x``)."""
    return _Probe(card, serving).fits_on(devices)


def fit_answers(
    card: ModelCard,
    serving: ServingConfig,
    device: HardwareProfile,
    devices: list[HardwareProfile],
) -> tuple[str, int | None]:
    """(``fits_on`` over ``devices``, the fewest GPUs of ``device``), sharing their work."""
    probe = _Probe(card, serving)
    return probe.fits_on(devices), probe.fewest(device)
