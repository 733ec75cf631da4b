"""All measured kinds of one device, measured on it or transferred from measured devices.

``tables_for(profile)`` is what the step model uses:

* a profile with ``measured_tables: <system>`` reads that system's vLLM tables;
* any other profile (MI355X, MI300X, a user's device) gets *transferred* tables: for each
  measured NVIDIA device, its measured latency times the ratio of two rooflines that share
  that device's fitted efficiencies and fixed costs, one priced with the target's spec sheet
  and one with the source's; the log-mean over the source devices is the answer. The
  leave-one-device-out check (``plan validate ops --leave-device-out``) measures this rule.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.measured.errors import new_vendor_classes
from simulator.measured.grid import Family
from simulator.measured.kinds import KIND_CLASS, KINDS
from simulator.measured.lookup import COLLECTIVES, TRANSFERRED, Curve, KindModel
from simulator.measured.package import DataSource, TableFile, data_source, switched_off
from simulator.measured.tables import Frames, read_frames
from simulator.measured.work import MLA_HIDDEN, MLA_Q_LORA, Device
from simulator.specs.hardware import HardwareProfile

Array = NDArray[np.float64]
MLA_CORE_FLOOR = 0.05  # the attention core is at least this share of its module's time
# built tables kept per device in the cache (code, package and data versions each make one)
KEEP_BUILT = 3
_KEY = re.compile(r"[0-9a-f]{24}")


@dataclass
class DeviceTables:
    """The kinds one device answers from tables, with the provenance of every table."""

    device: Device
    models: dict[str, Any]  # kind -> KindModel | TransferredModel
    basis: str  # "measured: h200_sxm" or "transferred from h100, h200, ..."
    files: list[TableFile] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    package_version: str = ""
    measured: bool = True
    _curves: dict[tuple[Any, ...], Curve | None] = field(default_factory=dict)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_curves"] = {}  # bound curves are per process (and cheap to bind again)
        return state

    def curve(
        self, kind: str, family: dict[str, Any], fixed: dict[str, float], free: Sequence[str]
    ) -> Curve | None:
        """A bound curve of ``kind`` (cached), or None when no table covers the kind."""
        model = self.models.get(kind)
        if model is None:
            return None
        fam = model.family(**family)
        key = (kind, fam, tuple(sorted(fixed.items())), tuple(free))
        if key not in self._curves:
            self._curves[key] = Curve(model, fam, fixed, free)
        return self._curves[key]

    def reset_counts(self) -> None:
        """Zero the query counts of the bound curves (each run reports its own)."""
        for curve in self._curves.values():
            if curve is not None:
                curve.queries = curve.outside = 0

    def classes(self) -> frozenset[str]:
        """The step model's op classes these tables answer."""
        return frozenset(KIND_CLASS[k] for k in self.models if k in KIND_CLASS)

    def provenance(self) -> dict[str, Any]:
        return {
            "basis": self.basis,
            "package": "aiconfigurator-core",
            "package_version": self.package_version,
            "tables": [
                {"table": f.relative, "backend_version": f.backend_version, "sha256": f.sha256()}
                for f in self.files
            ],
            "dropped": list(self.dropped),
        }


class TransferredModel:
    """A kind on an unmeasured device, answered from one measured device's model: its
    latency times the ratio of its fitted baseline priced on the target's spec sheet to the
    same baseline on its own."""

    def __init__(self, kind: str, source: KindModel, target: Device) -> None:
        self.kind, self.spec, self.device = kind, KINDS[kind], target
        self.source = source
        self.baseline = source.baseline.on(target)

    def log_seconds(self, family: Family, points: Array) -> tuple[Array, NDArray[np.int8]]:
        fdict = dict(zip(self.spec.family, family, strict=True))
        value, _ = self.source.log_seconds(family, points)
        here = self.baseline.log_seconds(fdict, points)
        there = self.source.baseline.log_seconds(fdict, points)
        return value + here - there, np.full(len(points), TRANSFERRED, np.int8)

    def family(self, **values: Any) -> Family:
        return self.source.family(**values)

    def axis_values(self, family: Family) -> list[Array]:
        return self.source.axis_values(family)

    def nearest(self, family: Family) -> Family | None:
        return self.source.nearest(family)


_TINY = 1e-12


def spec_distance(kind: str, a: Device, b: Device) -> float:
    """Log distance of two spec sheets in what prices ``kind``: compute peak and memory
    bandwidth for kernels, link bandwidth and latency for collectives."""
    if kind in COLLECTIVES:
        pairs = [(a.link_bw, b.link_bw), (a.link_latency_s, b.link_latency_s)]
    else:
        pairs = [(a.bf16_peak, b.bf16_peak), (a.memory_bw, b.memory_bw)]
    # a zero (a profile may give a link no latency) is read as a tiny value, not log 0
    return sum(abs(float(np.log(max(x, _TINY) / max(y, _TINY)))) for x, y in pairs)


def nearest_device(kind: str, candidates: dict[str, Device], target: Device) -> str:
    """The rule: learn each kind from the one measured device nearest in spec sheet (ties:
    the first name). Averaging all measured devices was worse in the leave-one-device-out
    check (docs/measured.md): Hopper and Blackwell kernels scale differently."""
    return min(sorted(candidates), key=lambda n: spec_distance(kind, candidates[n], target))


def build_models(frames: Frames, device: Device) -> dict[str, KindModel]:
    """One KindModel per kind with rows, the MLA attention cores derived from the modules."""
    models = {
        kind: KindModel(kind, df, device)
        for kind, df in frames.frames.items()
        if not kind.startswith("mla_")
    }
    for phase in ("decode", "prefill"):
        module = frames.frames.get(f"mla_{phase}_module")
        if module is not None and "gemm" in models and "bmm" in models:
            core = mla_core_frame(module, phase, models)
            models[f"mla_{phase}"] = KindModel(f"mla_{phase}", core, device)
    return models


def mla_projection_seconds(
    heads: Array, tokens: Array, decode: bool, models: dict[str, KindModel]
) -> Array:
    """The module's projections, priced from the bf16 GEMM (and BMM) tables: fused q_a +
    kv_a (7168 -> 1536 + 576), q_b (1536 -> heads x 192), o_proj (heads x 128 -> 7168), and
    for decodes the absorbed W_UK / W_UV batched matmuls."""
    gemm = models["gemm"]
    fam = gemm.family(dtype="bf16")
    shapes = [
        (MLA_Q_LORA + 512 + 64) * np.ones_like(heads),
        heads * 192.0,
        MLA_HIDDEN * np.ones_like(heads),
    ]
    depths = [MLA_HIDDEN * np.ones_like(heads), MLA_Q_LORA * np.ones_like(heads), heads * 128.0]
    total = np.zeros_like(heads)
    for n, k in zip(shapes, depths, strict=True):
        log_t, _ = gemm.log_seconds(fam, np.column_stack([tokens, n, k]))
        total += np.exp(log_t)
    if decode:
        bmm = models["bmm"]
        for which in ("w_uk", "w_uv"):
            log_t, _ = bmm.log_seconds(bmm.family(which=which), np.column_stack([tokens, heads]))
            total += np.exp(log_t)
    return total


def mla_core_frame(module: Any, phase: str, models: dict[str, KindModel]) -> Any:
    """Module rows minus their projections: the attention core (norms and RoPE included)."""
    heads = module["num_heads"].to_numpy(dtype=np.float64)
    batch = module["batch"].to_numpy(dtype=np.float64)
    decode = phase == "decode"
    tokens = batch if decode else batch * module["seq_len"].to_numpy(dtype=np.float64)
    proj = mla_projection_seconds(heads, tokens, decode, models)
    total = module["seconds"].to_numpy(dtype=np.float64)
    core = np.maximum(total - proj, MLA_CORE_FLOOR * total)
    return module.assign(seconds=core)


def _profile_device(name: str) -> tuple[HardwareProfile, str] | None:
    from simulator.catalog import hardware_profile

    p = hardware_profile(name)
    return (p, p.measured_tables) if p.measured_tables else None


@cache
def measured_device_names() -> tuple[str, ...]:
    """Built-in profiles that name a measured system of the installed tables."""
    from simulator.catalog import device_names

    source = data_source()
    if source is None:
        return ()
    out = []
    for name in device_names():
        found = _profile_device(name)
        if found is not None and (source.root / found[1]).is_dir():
            out.append(name)
    return tuple(out)


def load_measured(profile: HardwareProfile, source: DataSource) -> DeviceTables | None:
    """The device's tables, built once and then read back from the on-disk cache."""
    system = profile.measured_tables
    if system is None or not (source.root / system).is_dir():
        return None
    files = source.tables(system)
    moe_history = source.history(system, "moe")
    device = Device.of(profile)
    key = hashlib.sha256(
        "|".join(
            [_code_fingerprint(), source.package_version, repr(device)]
            + [
                f"{f.relative}:{f.path.stat().st_size}:{f.path.stat().st_mtime_ns}"
                for f in [*files.values(), *moe_history]
            ]
        ).encode()
    ).hexdigest()[:24]
    path = cache_dir() / f"{profile.name}-{key}.pickle"
    try:
        with path.open("rb") as fh:
            cached = pickle.load(fh)
        if isinstance(cached, DeviceTables) and cached.device == device:
            _touch(path)
            return cached
    # arbitrary bytes unpickle into any of these ("unsupported pickle protocol" is a
    # ValueError); a cache file that is not this device's tables is rebuilt, never used
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError,
            ValueError, KeyError, IndexError, MemoryError):  # fmt: skip
        pass
    frames = read_frames(files, moe_history)
    models = build_models(frames, device)
    used = sorted({f.relative: f for fs in frames.files.values() for f in fs}.values(), key=str)
    tables = DeviceTables(
        device, models, f"measured: {system}", used, frames.dropped, source.package_version
    )
    _write_whole(path, pickle.dumps(tables, protocol=pickle.HIGHEST_PROTOCOL))
    prune_cache(profile.name)
    return tables


def cache_dir() -> Path:
    """Where built tables are kept: ``$PLAN_CACHE_DIR`` or ``~/.cache/hybrid-capacity-planner``."""
    from simulator.userdata import cache_root

    return cache_root() / "measured"


def prune_cache(device: str, keep: int = KEEP_BUILT) -> list[Path]:
    """Delete all but the ``keep`` most recently used built tables of ``device`` (each code,
    package or data version makes its own file, ~5-10 MB); the deleted paths. A file another
    process is reading stays readable to it (POSIX unlink)."""
    try:
        files = [(f.stat().st_mtime_ns, f) for f in cache_dir().glob(f"{device}-*.pickle")]
    except OSError:
        return []
    # only this device's: "h100-<24 hex>", not another device named "h100-nvl-..."
    files = [(t, f) for t, f in files if _KEY.fullmatch(f.stem[len(device) + 1 :])]
    stale = [f for _, f in sorted(files, reverse=True)[keep:]]
    for f in stale:
        with contextlib.suppress(OSError):
            f.unlink()
    return stale


def _touch(path: Path) -> None:
    """Mark a built table as used now (``prune_cache`` keeps the most recently used)."""
    with contextlib.suppress(OSError):
        os.utime(path)


def _write_whole(path: Path, data: bytes) -> None:
    """Write by rename, so that a concurrent reader sees the old file or the new one; a cache
    that cannot be written only costs the next run the build."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError:
        return


@cache
def _code_fingerprint() -> str:
    """The source of everything that shapes a built table (a code change rebuilds it)."""
    here = Path(__file__).resolve().parent
    cost = here.parent / "cost"
    h = hashlib.sha256()
    for f in [
        *sorted(here.glob("*.py")),
        *(cost / n for n in ("ops.py", "fit.py", "latency.py", "latency_file.py")),
    ]:
        h.update(f.read_bytes())
    return h.hexdigest()


_LOADED: dict[str, DeviceTables | None] = {}


def reset() -> None:
    """Forget the located data and the tables built in this process (tests switch the data
    folder with PLAN_MEASURED_DATA)."""
    data_source.cache_clear()
    measured_device_names.cache_clear()
    _LOADED.clear()


def tables_for(profile: HardwareProfile, exclude: tuple[str, ...] = ()) -> DeviceTables | None:
    """The device's measured tables, else tables transferred from the measured devices
    (``exclude``: devices not to learn from, for the leave-one-device-out check). None for a
    profile of another runtime than vLLM (MLX, llama.cpp): the tables time vLLM's kernels."""
    source = data_source()
    if source is None or switched_off() or profile.runtime != "vllm":
        return None
    key = f"{profile.model_dump_json()}|{','.join(exclude)}"
    if key in _LOADED:
        return _LOADED[key]
    result = load_measured(profile, source) if not exclude else None
    if result is None:
        result = _transferred(profile, source, exclude)
    _LOADED[key] = result
    return result


def basis_of(profile: HardwareProfile, tables: DeviceTables | None) -> str:
    """Where the device's table-backed op latencies come from, in words: the tables' basis,
    else why it has none (another runtime than vLLM, tables absent or switched off)."""
    from simulator.measured.package import tables_available, unavailable_note

    if tables is not None:
        return tables.basis
    if profile.runtime != "vllm":
        return (
            f"no tables: runtime {profile.runtime} (the public tables time vLLM's CUDA kernels);"
            " the profile's roofline priors"
        )
    return "no tables: roofline priors" if tables_available() else unavailable_note()


def _transferred(
    profile: HardwareProfile, source: DataSource, exclude: tuple[str, ...]
) -> DeviceTables | None:
    from simulator.catalog import hardware_profile

    names = [n for n in measured_device_names() if n not in exclude and n != profile.name]
    if not names:
        return None
    target = Device.of(profile)
    candidates = {n: Device.of(hardware_profile(n)) for n in names}
    vendors = {hardware_profile(n).vendor for n in names}
    allowed = None if profile.vendor in vendors else new_vendor_classes()
    picks = {group: nearest_device(group, candidates, target) for group in ("gemm", "allreduce")}
    loaded = {n: tables_for(hardware_profile(n)) for n in sorted(set(picks.values()))}
    models: dict[str, Any] = {}
    for name, tables in loaded.items():
        if tables is None:
            continue
        for kind, model in tables.models.items():
            group = "allreduce" if kind in COLLECTIVES else "gemm"
            if allowed is not None and KIND_CLASS.get(kind, kind) not in allowed:
                continue
            if picks[group] == name:
                models[kind] = TransferredModel(kind, model, target)
    files = [f for t in loaded.values() if t is not None for f in t.files]
    basis = "transferred: kernels from {gemm}, collectives from {allreduce}".format(**picks)
    if allowed is not None:
        basis += f" (new vendor: only {', '.join(sorted(allowed))}; the rest on priors)"
    return DeviceTables(target, models, basis, files, [], source.package_version, measured=False)
