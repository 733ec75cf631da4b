"""Hardware profiles (one accelerator, SI units, a source for every number) and cost models."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
)

from simulator.specs import limits
from simulator.specs.frozen import Spec
from simulator.specs.limits import at_least, at_most
from simulator.specs.precision import ComputeDtype

_UNITS = "a unit mix-up? (bounds: simulator/specs/limits.py)"
# the system folders of aiconfigurator-core 0.12.0's systems/data/ (measured_tables names one;
# a folder a pinned data copy lacks falls back to the transfer, as docs/measured.md says)
MEASURED_SYSTEMS = (
    "a100_pcie", "a100_sxm", "a30", "b200_sxm", "b300_sxm", "b60", "gb200", "gb300",
    "h100_pcie", "h100_sxm", "h200_sxm", "l4", "l40s", "rtx_pro_6000_server",
)  # fmt: skip
Flops = Annotated[
    PositiveFloat,
    at_most(limits.MAX_PEAK_FLOPS_PER_S, _UNITS),
    at_least(limits.MIN_PEAK_FLOPS_PER_S, _UNITS),
]
MemoryBytes = Annotated[PositiveFloat, at_most(limits.MAX_MEMORY_BYTES, _UNITS)]
LinkBandwidth = Annotated[
    PositiveFloat,
    at_most(limits.MAX_LINK_BW_BYTES_PER_S, _UNITS),
    at_least(limits.MIN_LINK_BW_BYTES_PER_S, _UNITS),
]
Efficiency = Annotated[float, Field(gt=0, le=1), at_least(limits.MIN_EFFICIENCY, _UNITS)]
Seconds = Annotated[float, Field(ge=0), at_most(limits.MAX_LATENCY_S, _UNITS)]

# unified: CPU and GPU share one memory (Apple silicon); the "host link" is that memory
LinkKind = Literal["nvlink", "xgmi", "pcie", "nvlink_c2c", "ethernet", "infiniband", "unified"]
Vendor = Literal["nvidia", "amd", "intel", "apple"]
# The serving runtime whose behaviour a profile's roofline efficiencies describe: vLLM (the
# default: the engine simulates its scheduler, the public tables time its kernels), MLX
# (mlx-lm on Apple silicon) or llama.cpp (llama-server). The public measured tables are vLLM
# kernels on NVIDIA GPUs: a profile of another runtime runs on its own roofline priors.
Runtime = Literal["vllm", "mlx", "llama.cpp"]


class PeakFlops(Spec):
    """Dense (no sparsity) peak FLOP/s per compute dtype; None where the chip lacks the format."""

    bf16: Flops
    fp8: Flops | None = None
    fp4: Flops | None = None

    def for_dtype(self, dtype: ComputeDtype) -> float:
        """Peak for ``dtype``; a chip without tensor cores for it runs the weights as
        weight-only (vLLM's Marlin / Triton W4A16 and W8A16 kernels dequantize to BF16 in the
        kernel), so the math runs at the BF16 rate, not at the next narrower format's."""
        value: float | None = getattr(self, dtype)
        return value if value is not None else self.bf16


class Link(Spec):
    kind: LinkKind
    bw_bytes_per_s: LinkBandwidth  # per GPU, per direction
    latency_s: Seconds


class ScaleUpLink(Link):
    # GPUs reachable over this link (8 in an HGX box, 72 in NVL72)
    domain_size: Annotated[PositiveInt, at_most(limits.MAX_DOMAIN_GPUS, _UNITS)]
    # GPUs of one host (one operating system, one vLLM node) inside the domain: 4 on an NVL72
    # compute tray; None: one host holds the whole domain (an HGX or OAM box). No step price
    # reads it: it decides whether a deployment's `vllm serve` spans hosts (--nnodes)
    gpus_per_host: PositiveInt | None = None

    @field_validator("gpus_per_host")
    @classmethod
    def _hosts_tile_the_domain(cls, per_host: int | None, info: ValidationInfo) -> int | None:
        domain = info.data.get("domain_size")
        if per_host is not None and domain is not None and domain % per_host:
            raise ValueError(f"{per_host} does not divide domain_size {domain}")
        return per_host

    @property
    def host_gpus(self) -> int:
        """GPUs one host holds (the whole domain unless ``gpus_per_host`` says less)."""
        return self.gpus_per_host or self.domain_size


class RooflinePriors(Spec):
    """Named efficiencies and fixed costs of the roofline prior (used until calibrated).

    Latency of an op = max(flops / (peak * compute_eff), bytes / (bw * memory_efficiency))
    + kernel_launch_s. Each value is an assumption or a measurement; `sources.roofline` says which.
    """

    gemm_compute_efficiency: Efficiency
    attention_compute_efficiency: Efficiency
    memory_efficiency: Efficiency
    link_efficiency: Efficiency  # collectives: achieved / peak link bandwidth
    kernel_launch_s: Seconds
    # The host costs below have no default: a profile that left one out would be priced with
    # no host work at all (TTFT and small-batch steps optimistic, silently), so each must be
    # stated, with its source in ``sources.roofline`` (0 where it truly is none).
    # CPU work of one engine step (scheduler + input preparation), overlapped with the GPU by
    # async scheduling: a step takes max(GPU, base + per request x requests scheduled)
    cpu_step_overhead_s: Seconds
    cpu_step_per_request_s: Seconds
    # from the end of a step to the client holding its tokens (device-to-host copy, output
    # processing, detokenisation and streaming; async scheduling runs the next step meanwhile)
    output_delay_s: Seconds
    # the API server's host work per prompt token before a request reaches the engine
    # (tokenizing the prompt text, priming the incremental detokenizer with the prompt),
    # served in arrival order by the deployment's API servers (serving.api_server_count)
    frontend_s_per_prompt_token: Seconds


SOURCED_FIELDS = (
    "peak_flops_per_s",
    "memory_bytes",
    "usable_memory_bytes",
    "os_reserve_bytes",
    "memory_bw_bytes_per_s",
    "scale_up",
    "host_link",
    "scale_out",
    "host_dram_bytes_per_gpu",
    "power_w",
    "roofline",
)


class HardwareProfile(Spec):
    name: str = Field(min_length=1)  # short id, equals the folder name
    display_name: str
    vendor: Vendor
    form_factor: str
    runtime: Runtime = "vllm"
    status: Literal["shipping", "announced"] = "shipping"
    calibrated: bool = False  # true once latency_models.json comes from measurements on it
    # system folder of the public silicon-measured op tables (aiconfigurator-core) taken on
    # this device, e.g. h200_sxm; None: no public tables (latencies transferred or priors)
    measured_tables: str | None = None
    peak_flops_per_s: PeakFlops
    memory_bytes: MemoryBytes  # nominal (datasheet) device memory
    usable_memory_bytes: MemoryBytes  # what the runtime reports as total (vLLM's base)
    # unified memory (Apple silicon): the part of memory_bytes the OS keeps from the GPU (macOS
    # caps GPU-wired memory, sysctl iogpu.wired_limit_mb); None: dedicated device memory
    os_reserve_bytes: MemoryBytes | None = None
    memory_bw_bytes_per_s: Annotated[
        PositiveFloat,
        at_most(limits.MAX_MEMORY_BW_BYTES_PER_S, _UNITS),
        at_least(limits.MIN_MEMORY_BW_BYTES_PER_S, _UNITS),
    ]
    scale_up: ScaleUpLink | None  # None: PCIe card without a GPU-to-GPU fabric
    host_link: Link
    # the NIC(s) one GPU reaches other scale-up domains through (RDMA: InfiniBand / RoCE),
    # per GPU per direction; None: not given (disaggregation then uses its scenario link)
    scale_out: Link | None = None
    host_dram_bytes_per_gpu: Annotated[
        PositiveFloat, at_most(limits.MAX_HOST_DRAM_BYTES_PER_GPU, _UNITS)
    ]
    power_w: Annotated[PositiveFloat, at_most(limits.MAX_POWER_W, _UNITS)]
    roofline: RooflinePriors
    sources: dict[str, str]  # field name -> where its number comes from

    @field_validator("measured_tables")
    @classmethod
    def _known_system(cls, system: str | None) -> str | None:
        if system is not None and system not in MEASURED_SYSTEMS:
            raise ValueError(
                f"unknown system {system!r}: not a folder of aiconfigurator-core's"
                f" systems/data; known: {', '.join(MEASURED_SYSTEMS)}"
            )
        return system

    @field_validator("sources")
    @classmethod
    def _every_number_sourced(cls, sources: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        present = [f for f in SOURCED_FIELDS if info.data.get(f) is not None]
        missing = [f for f in present if not sources.get(f, "").strip()]
        if missing:
            raise ValueError(f"no source given for {missing}")
        unknown = sorted(set(sources) - set(SOURCED_FIELDS))
        if unknown:
            raise ValueError(f"names fields that are not sourced numbers: {unknown}")
        return sources

    @field_validator("usable_memory_bytes")
    @classmethod
    def _usable_within_nominal(cls, usable: float, info: ValidationInfo) -> float:
        # GiB-sized stacks sold as "GB" may expose up to 7.4 % more bytes than the label
        nominal = info.data.get("memory_bytes")
        if nominal is not None and usable > nominal * 1.08:
            raise ValueError(
                f"exceeds memory_bytes {nominal:.4g} by more than 8 % (GiB/GB mix-up?)"
            )
        return usable

    @field_validator("os_reserve_bytes")
    @classmethod
    def _reserve_leaves_memory(cls, reserve: float | None, info: ValidationInfo) -> float | None:
        nominal, usable = info.data.get("memory_bytes"), info.data.get("usable_memory_bytes")
        if reserve is None or nominal is None:
            return reserve
        if reserve >= nominal:
            raise ValueError(
                f"{reserve:.4g} B is not below memory_bytes {nominal:.4g} B: the OS would keep"
                " all of the unified memory, none is left for the model"
            )
        if usable is not None and usable > (nominal - reserve) * 1.001:
            raise ValueError(
                f"memory_bytes - os_reserve_bytes = {nominal - reserve:.4g} B is below"
                f" usable_memory_bytes {usable:.4g} B: the GPU cannot use memory the OS keeps"
            )
        return reserve


class CostModel(Spec):
    """A named price list: USD per GPU-hour by device (kept as data, never as constants)."""

    name: str = Field(min_length=1)
    description: str
    source: str
    usd_per_gpu_hour: dict[str, PositiveFloat]
    all_in_power_kw_per_gpu: dict[str, PositiveFloat] = Field(default_factory=dict)

    def price(self, device: str) -> float:
        if device not in self.usd_per_gpu_hour:
            raise KeyError(
                f"cost model {self.name!r} has no price for {device!r}"
                f" (it prices {sorted(self.usd_per_gpu_hour)})"
            )
        return self.usd_per_gpu_hour[device]


class CostModelCatalog(Spec):
    cost_models: list[CostModel]
