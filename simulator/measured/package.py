"""Where the public silicon-measured op tables are, and which of them the planner reads.

The tables ship in the ``aiconfigurator-core`` package (Apache-2.0; the ``measured`` extra)
as parquet files under ``aiconfigurator_core/systems/data/<system>/<op>/<backend>/<version>/``.
The planner reads them as data only: it never imports the package (its estimators are not
used), it only locates the package's folder. For each op folder it reads the vLLM backend at
its newest version (``comm/nccl`` for NCCL collectives, which are not backend-specific).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from packaging.version import InvalidVersion, Version

PACKAGE = "aiconfigurator-core"
MODULE = "aiconfigurator_core"
TESTED_VERSION = "0.12.0"
# Point the planner at another copy of the data folder (``<...>/systems/data``): tests use it
# for the committed fixture, and a user can pin a downloaded release.
ENV_DATA_DIR = "PLAN_MEASURED_DATA"
ENV_SWITCH = "PLAN_MEASURED"
# (op folder, backend folder, parquet file) of every table the planner reads
TABLE_FILES: dict[str, tuple[str, str, str]] = {
    "gemm": ("gemm", "vllm", "gemm_perf.parquet"),
    "moe": ("moe", "vllm", "moe_perf.parquet"),
    "context_attention": ("attention", "vllm", "context_attention_perf.parquet"),
    "generation_attention": ("attention", "vllm", "generation_attention_perf.parquet"),
    "mla_context_module": ("mla", "vllm", "mla_context_module_perf.parquet"),
    "mla_generation_module": ("mla", "vllm", "mla_generation_module_perf.parquet"),
    "mla_bmm": ("mla_bmm", "vllm", "mla_bmm_perf.parquet"),
    "kda": ("kda", "vllm", "kda_perf.parquet"),
    "gdn": ("linear_attention", "vllm", "gdn_perf.parquet"),
    "custom_allreduce": ("comm", "vllm", "custom_allreduce_perf.parquet"),
    "nccl": ("comm", "nccl", "nccl_perf.parquet"),
    "moe_a2a": ("comm", "vllm", "moe_a2a_perf.parquet"),  # DeepEP dispatch / combine
}


@dataclass(frozen=True)
class TableFile:
    """One parquet table the planner read, with what it takes to reproduce the read."""

    name: str  # key of TABLE_FILES
    path: Path
    relative: str  # <system>/<op>/<backend>/<version>/<file>
    backend_version: str

    def sha256(self) -> str:
        return _sha256(self.path)


@dataclass(frozen=True)
class DataSource:
    """The package's data folder (or an override) and its version."""

    root: Path  # .../systems/data
    package_version: str  # "0.12.0", or "override" for a PLAN_MEASURED_DATA folder

    def tables(self, system: str) -> dict[str, TableFile]:
        """The newest version of every table the system has, by TABLE_FILES name."""
        out: dict[str, TableFile] = {}
        for name in TABLE_FILES:
            versions = self.history(system, name)
            if versions:
                out[name] = versions[-1]
        return out

    def history(self, system: str, name: str) -> list[TableFile]:
        """Every version of one table the system has, oldest first (the MoE reader keeps
        kernels that only older collections timed: vLLM 0.19's Triton ``fused_moe``)."""
        op, backend, file = TABLE_FILES[name]
        folder = self.root / system / op / backend
        if not folder.is_dir():
            return []
        versions = sorted(
            (v for v in folder.iterdir() if (v / file).is_file()),
            key=lambda v: _version_key(v.name),
        )
        return [
            TableFile(name, v / file, f"{system}/{op}/{backend}/{v.name}/{file}", v.name)
            for v in versions
        ]


def _version_key(name: str) -> tuple[int, Version | str]:
    try:
        return (1, Version(name))
    except InvalidVersion:
        return (0, name)


@cache
def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@cache
def data_source() -> DataSource | None:
    """Where the tables are: ``$PLAN_MEASURED_DATA``, else the installed package, else None."""
    override = os.environ.get(ENV_DATA_DIR)
    if override:
        return DataSource(_override_folder(override), "override")
    try:
        spec = importlib.util.find_spec(MODULE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"
    if not root.is_dir():
        return None
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return DataSource(root, version)


def _override_folder(text: str) -> Path:
    """``$PLAN_MEASURED_DATA``: a folder of system folders as the package ships them (a
    missing or foreign folder ran on the priors without a word about the variable)."""
    from simulator.specs.hardware import MEASURED_SYSTEMS
    from simulator.specs.loading import SpecError, check_dir

    path = Path(text)
    check_dir(path, ENV_DATA_DIR)
    try:
        names = {child.name for child in path.iterdir() if child.is_dir()}
    except OSError as exc:
        raise SpecError(path, ENV_DATA_DIR, exc.strerror or str(exc)) from None
    if not names & set(MEASURED_SYSTEMS):
        raise SpecError(
            path, ENV_DATA_DIR,
            "holds no system folder of the measured tables (aiconfigurator-core's"
            f" systems/data: {', '.join(MEASURED_SYSTEMS[:4])}, ...): unset it to read the"
            " installed package",
        )  # fmt: skip
    return path


def switched_off() -> bool:
    """``PLAN_MEASURED=off``: run on the profiles' priors even with the tables installed;
    unset, empty or on: the tables. Any other value is refused (a typo ``offf`` meant on)."""
    value = os.environ.get(ENV_SWITCH, "").strip().lower()
    if value in ("off", "0", "no", "false"):
        return True
    if value in ("", "on", "1", "yes", "true"):
        return False
    from simulator.specs.loading import SpecError

    raise SpecError(
        "(environment)", ENV_SWITCH,
        f"{os.environ[ENV_SWITCH]!r} is neither off (the profiles' priors) nor on (the measured"
        " tables)",
    )  # fmt: skip


def tables_available() -> bool:
    """Whether runs read the measured tables (installed and not switched off)."""
    return data_source() is not None and not switched_off()


def unavailable_note() -> str:
    """The one line a run prints when the tables are not used."""
    if switched_off():
        return f"measured op tables switched off ({ENV_SWITCH}=off); roofline priors"
    return (
        f"measured op tables not installed ({PACKAGE}=={TESTED_VERSION}: "
        "pip install '.[measured]'); every device runs on roofline priors"
    )
