"""Latency models: roofline priors from the hardware profile, or models fitted to measurements.

Compute ops:  t = smoothmax(F / (peak x e_c), B / (bw x e_m); p) + kernels x launch
  prior:  e_c, e_m, launch from ``profile.roofline``, p = inf (a hard max)
  fitted: e_c, e_m, launch, p fitted per op class (``hardware_profiles/<dev>/latency_models.json``)
Collectives (alpha-beta, per link):
  prior:  allreduce = min(ring 2(n-1) a + 2(n-1)/n S/bw, one-shot a + (n-1) S/bw)
          allgather / reducescatter = (n-1) a + (n-1) S/bw  (S = one rank's shard)
          alltoall = a + (n-1)/n S/bw  (S = bytes one rank sends)
  fitted: t = alpha_n + beta_n S per world size n.

Every fitted model carries the range of its training data; queries outside are still answered
and counted in ``LatencyModels.extrapolations``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from simulator.cost.latency_file import (
    FittedModel,
    LatencyModelFile,
    RooflineParams,
    ShapeTable,
    load_latency_models,
)
from simulator.cost.ops import COLLECTIVE_CLASSES
from simulator.specs.hardware import HardwareProfile

if TYPE_CHECKING:
    from simulator.measured.device import DeviceTables

Array = NDArray[np.float64]


def smooth_max(a: Array, b: Array, p: float) -> Array:
    if np.isinf(p):
        return np.maximum(a, b)
    hi = np.maximum(np.maximum(a, b), 1e-30)
    out: Array = hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)
    return out


def roofline_seconds(
    params: RooflineParams,
    flops: Array,
    bytes_moved: Array,
    peak_flops_per_s: Array,
    bw_bytes_per_s: float,
    kernels: Array,
) -> Array:
    compute = flops / (peak_flops_per_s * params.compute_efficiency)
    memory = bytes_moved / (bw_bytes_per_s * params.memory_efficiency)
    return smooth_max(compute, memory, params.sharpness) + kernels * params.launch_s


def collective_prior_seconds(
    op_class: str, bytes_per_rank: Array, world: Array, bw_bytes_per_s: float, alpha_s: float
) -> Array:
    n = np.asarray(world, dtype=np.float64)
    s = np.asarray(bytes_per_rank, dtype=np.float64)
    if op_class == "allreduce":
        ring = 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * s / bw_bytes_per_s
        one_shot = alpha_s + (n - 1) * s / bw_bytes_per_s
        t = np.minimum(ring, one_shot)
    elif op_class in ("allgather", "reducescatter"):
        t = (n - 1) * alpha_s + (n - 1) * s / bw_bytes_per_s
    elif op_class == "alltoall":
        t = alpha_s + (n - 1) / n * s / bw_bytes_per_s
    else:
        raise ValueError(f"not a collective: {op_class}")
    return np.where(n > 1, t, 0.0)


class LatencyModels:
    """Answers 'how long does this op take on this device'.

    Preference: this device's own calibration (``calibrate``; a profile marked
    ``calibrated``), then the public measured tables (``tables``: measured on this device, or
    transferred from the measured devices), then other fitted models (e.g. the H100 fit to
    Vidur's profiles), then the roofline priors of the profile."""

    def __init__(
        self,
        profile: HardwareProfile,
        fitted: LatencyModelFile | None = None,
        tables: DeviceTables | None = None,
    ) -> None:
        self.profile = profile
        self.tables = tables
        self.fitted: dict[str, FittedModel] = {
            m.op_class: m for m in (fitted.models if fitted else [])
        }
        # op classes the device's own calibration answers ahead of the public tables
        self.calibrated = frozenset(self.fitted) if profile.calibrated else frozenset()
        # op class -> shape key -> (log m, log(measured / roofline fit)) at the measured m
        self._tables: dict[str, dict[tuple[int, int, int], tuple[Array, Array]]] = {}
        for cls, model in self.fitted.items():
            if model.shape_tables and model.roofline is not None:
                self._tables[cls] = {
                    _shape_key(t.n, t.k, t.weight_bytes_per_elem): _log_ratio(
                        t, model.roofline, profile.memory_bw_bytes_per_s
                    )
                    for t in model.shape_tables
                }
        self.extrapolations: Counter[str] = Counter()
        self.queries: Counter[str] = Counter()
        # GPU seconds priced so far by where they came from (StepOps fills it)
        self.seconds_by_source: defaultdict[str, float] = defaultdict(float)
        self._param_cache: dict[str, tuple[float, float, float, float]] = {}
        self._param_arrays: dict[tuple[str, ...], Array] = {}
        r = profile.roofline
        launch = r.kernel_launch_s
        self._priors: dict[str, RooflineParams] = {}
        for cls, eff in (
            ("gemm", r.gemm_compute_efficiency),
            ("moe", r.gemm_compute_efficiency),
            ("mla_decode", r.attention_compute_efficiency),
            ("mla_prefill", r.attention_compute_efficiency),
            ("attn_decode", r.attention_compute_efficiency),
            ("attn_prefill", r.attention_compute_efficiency),
            ("kda_prefill", r.attention_compute_efficiency),
            ("kda_decode", r.attention_compute_efficiency),
            ("mamba2_prefill", r.attention_compute_efficiency),
            ("mamba2_decode", r.attention_compute_efficiency),
            ("elementwise", r.attention_compute_efficiency),
        ):
            self._priors[cls] = RooflineParams(
                compute_efficiency=eff, memory_efficiency=r.memory_efficiency, launch_s=launch
            )

    @classmethod
    def for_device(
        cls, profile: HardwareProfile, use_fitted: bool = True, use_tables: bool = True
    ) -> LatencyModels:
        """Priors, the device's fitted ``latency_models.json`` when there is one (the user's
        data folder's first, then ``hardware_profiles/<name>/``), and the public measured
        tables when the ``measured`` extra is installed."""
        from simulator.measured.device import tables_for
        from simulator.userdata import latency_models_file

        path = latency_models_file(profile.name) if use_fitted else None
        fitted = load_latency_models(path, profile.name) if path is not None else None
        tables = tables_for(profile) if use_fitted and use_tables else None
        return cls(profile, fitted, tables)

    def source(self, op_class: str) -> str:
        """Where the class's latencies come from: calibrated / measured / fitted / prior."""
        if op_class in self.calibrated:
            return "calibrated"
        if self.tables is not None and op_class in self.tables.classes():
            return "measured" if self.tables.measured else "fitted"
        return "fitted" if op_class in self.fitted else "prior"

    def has_tables(self, op_class: str) -> bool:
        return op_class in self._tables

    def table_ratio(self, op_class: str, shapes: Array) -> Array:
        """Measured/fitted ratio for rows whose (n, k, weight format) was measured and whose m
        lies in the measured span; 1 elsewhere. ``shapes``: rows x (m, n, k, weight bytes)."""
        out = np.ones(len(shapes))
        tables = self._tables.get(op_class)
        if not tables:
            return out
        for i, row in enumerate(shapes):
            if not np.isfinite(row[0]):
                continue
            found = tables.get(_shape_key(row[1], row[2], row[3]))
            if found is not None:
                log_m, log_ratio = found
                x = np.log(row[0])
                if log_m[0] <= x <= log_m[-1]:
                    out[i] = np.exp(np.interp(x, log_m, log_ratio))
        return out

    def prior_params(self, op_class: str) -> RooflineParams:
        return self._priors[op_class]

    def _params(self, op_class: str) -> tuple[float, float, float, float]:
        cached = self._param_cache.get(op_class)
        if cached is None:
            model = self.fitted.get(op_class)
            p = model.roofline if model is not None and model.roofline is not None else None
            p = p or self._priors[op_class]
            cached = (p.compute_efficiency, p.memory_efficiency, p.launch_s, p.sharpness)
            self._param_cache[op_class] = cached
        return cached

    def compute_seconds_mixed(
        self,
        op_classes: list[str],
        flops: Array,
        bytes_moved: Array,
        peak_flops_per_s: Array,
        kernels: Array,
        shapes: Array | None = None,
    ) -> Array:
        """Like ``compute_seconds`` for ops of different classes in one vectorised pass
        (``shapes``: rows x (m, n, k, weight bytes), NaN for rows that are not plain GEMMs)."""
        key = tuple(op_classes)
        params = self._param_arrays.get(key)
        if params is None:
            params = np.array([self._params(c) for c in op_classes])
            self._param_arrays[key] = params
        for cls in self.fitted.keys() & set(op_classes):
            sel = np.array([c == cls for c in op_classes])
            self._count(cls, self.fitted[cls], flops[sel], bytes_moved[sel])
        if not self.fitted:
            self.queries.update(op_classes)
        else:
            for cls in set(op_classes) - self.fitted.keys():
                self.queries[cls] += op_classes.count(cls)
        compute = flops / (peak_flops_per_s * params[:, 0])
        memory = bytes_moved / (self.profile.memory_bw_bytes_per_s * params[:, 1])
        sharp = params[:, 3]
        hard = np.isinf(sharp)
        both = np.maximum(compute, memory)
        if not hard.all():
            p = np.where(hard, 1.0, sharp)
            hi = np.maximum(both, 1e-30)
            soft = hi * ((compute / hi) ** p + (memory / hi) ** p) ** (1.0 / p)
            both = np.where(hard, both, soft)
        out: Array = both + kernels * params[:, 2]
        if shapes is not None and "gemm" in self._tables:
            out = out * self.table_ratio("gemm", shapes)
        return out

    def compute_seconds_one(
        self, op_class: str, flops: float, bytes_moved: float, peak_flops_per_s: float,
        kernels: float,
    ) -> float:  # fmt: skip
        """``compute_seconds_mixed`` of one row (no shape table) in scalar arithmetic: the same
        operations in the same order, so the same float, without numpy's per-call cost (a
        template's few context lines are priced this way every step)."""
        ce, me, launch, sharp = self._params(op_class)
        model = self.fitted.get(op_class)
        self.queries[op_class] += 1
        if model is not None:
            lo, hi = model.bytes_range
            out = bytes_moved < lo * 0.999 or bytes_moved > hi * 1.001
            if model.flops_range is not None:
                flo, fhi = model.flops_range
                out = out or flops < flo * 0.999 or flops > fhi * 1.001
            if out:
                self.extrapolations[op_class] += 1
        compute = flops / (peak_flops_per_s * ce)
        memory = bytes_moved / (self.profile.memory_bw_bytes_per_s * me)
        both = compute if compute >= memory else memory
        if sharp != np.inf:
            top = both if both > 1e-30 else 1e-30
            both = top * ((compute / top) ** sharp + (memory / top) ** sharp) ** (1.0 / sharp)
        return both + kernels * launch

    def compute_seconds(
        self,
        op_class: str,
        flops: Array,
        bytes_moved: Array,
        peak_flops_per_s: Array,
        kernels: Array,
        prior: bool = False,
        shapes: Array | None = None,
    ) -> Array:
        """Latency of ops of one class; ``shapes`` (rows x (m, n, k, weight bytes)) lets
        measured shape tables correct the GEMMs they cover."""
        model = None if prior else self.fitted.get(op_class)
        if model is not None and model.roofline is not None:
            self._count(op_class, model, flops, bytes_moved)
            params = model.roofline
        else:
            self.queries[op_class] += int(np.size(flops))
            params = self._priors[op_class]
        bw = self.profile.memory_bw_bytes_per_s
        t = roofline_seconds(params, flops, bytes_moved, peak_flops_per_s, bw, kernels)
        if model is not None and shapes is not None and op_class in self._tables:
            t = t * self.table_ratio(op_class, shapes)
        return t

    def collective_seconds_mixed(
        self, op_classes: list[str], bytes_per_rank: list[float], world: list[float]
    ) -> list[float]:
        """``collective_seconds`` for a handful of collectives of mixed kinds (scalar path:
        a step has only a few, where numpy's per-call overhead would dominate)."""
        link = self.profile.scale_up or self.profile.host_link
        bw = link.bw_bytes_per_s * self.profile.roofline.link_efficiency
        a = link.latency_s
        out = []
        for cls, s, n in zip(op_classes, bytes_per_rank, world, strict=True):
            self.queries[cls] += 1
            model = self.fitted.get(cls)
            ab = model.alpha_beta.get(int(n)) if model is not None and model.alpha_beta else None
            if ab is not None:
                lo, hi = model.bytes_range if model is not None else (0.0, np.inf)
                if not lo * 0.999 <= s <= hi * 1.001:
                    self.extrapolations[cls] += 1
                out.append(ab.alpha_s + ab.beta_s_per_byte * s)
                continue
            if model is not None and n > 1:
                self.extrapolations[cls] += 1  # a world size the fit never saw
            if n <= 1:
                t = 0.0
            elif cls == "allreduce":
                t = min(2 * (n - 1) * a + 2 * (n - 1) / n * s / bw, a + (n - 1) * s / bw)
            elif cls == "alltoall":
                t = a + (n - 1) / n * s / bw
            else:  # allgather, reducescatter
                t = (n - 1) * a + (n - 1) * s / bw
            out.append(t)
        return out

    def collective_seconds(
        self, op_class: str, bytes_per_rank: Array, world: Array, prior: bool = False
    ) -> Array:
        model = None if prior else self.fitted.get(op_class)
        s = np.asarray(bytes_per_rank, dtype=np.float64)
        n = np.asarray(world, dtype=np.float64)
        prior_t = self._collective_prior(op_class, s, n)
        if model is None or model.alpha_beta is None:
            self.queries[op_class] += int(np.size(s))
            return prior_t
        self._count(op_class, model, None, s)
        t = prior_t.copy() if isinstance(prior_t, np.ndarray) else np.asarray(prior_t)
        t = np.broadcast_to(t, np.broadcast(s, n).shape).copy()
        s_b, n_b = np.broadcast_arrays(s, n)
        for world_size, ab in model.alpha_beta.items():
            sel = n_b == world_size
            t[sel] = ab.alpha_s + ab.beta_s_per_byte * s_b[sel]
        unfitted = (n_b > 1) & ~np.isin(n_b, list(model.alpha_beta))
        self.extrapolations[op_class] += int(np.count_nonzero(unfitted))
        return t

    def _collective_prior(self, op_class: str, s: Array, n: Array) -> Array:
        link = self.profile.scale_up
        if link is None:  # a PCIe card: collectives cross the host link
            bw, alpha = self.profile.host_link.bw_bytes_per_s, self.profile.host_link.latency_s
        else:
            bw, alpha = link.bw_bytes_per_s, link.latency_s
        bw *= self.profile.roofline.link_efficiency
        return collective_prior_seconds(op_class, s, n, bw, alpha)

    def _count(
        self, op_class: str, model: FittedModel, flops: Array | None, bytes_moved: Array
    ) -> None:
        b = np.asarray(bytes_moved)
        self.queries[op_class] += int(b.size)
        lo, hi = model.bytes_range
        outside = (b < lo * 0.999) | (b > hi * 1.001)
        if flops is not None and model.flops_range is not None:
            f = np.asarray(flops)
            flo, fhi = model.flops_range
            outside = outside | (f < flo * 0.999) | (f > fhi * 1.001)
        self.extrapolations[op_class] += int(np.count_nonzero(outside))


def _shape_key(n: float, k: float, weight_bytes_per_elem: float) -> tuple[int, int, int]:
    # widths to 0.01 B: a GEMM measured at per-tensor FP8 (1 B) answers block-scaled FP8
    # queries (1.0002 B: the scales are 0.02 % of the bytes); MXFP4 and NVFP4 stay apart
    return round(n), round(k), round(weight_bytes_per_elem * 100)


def _log_ratio(table: ShapeTable, fit: RooflineParams, bw: float) -> tuple[Array, Array]:
    m = np.asarray(table.m)
    flops = 2.0 * m * table.n * table.k
    moved = (m * table.k + m * table.n) * 2.0 + table.n * table.k * table.weight_bytes_per_elem
    peak = np.full(m.size, table.peak_flops_per_s)
    fitted = roofline_seconds(fit, flops, moved, peak, bw, np.ones(m.size))
    return np.log(m), np.log(np.asarray(table.seconds) / fitted)


def is_collective(op_class: str) -> bool:
    return op_class in COLLECTIVE_CLASSES
