"""The key of a cached run: the scenario, the simulator's own code and data, and every file
the run reads from outside the package (``scenario_hash``). Same key, same result; an edit to
anything a run depends on is a new key, while the presentation layer (reports, the CLI, the
deploy lines) is left out so that editing it keeps cached runs valid."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from simulator import catalog
from simulator.specs.loading import SpecError
from simulator.specs.scenario import Scenario

# what prints or packages results without changing them: edits here keep cached runs valid
PRESENTATION = (
    "cli/", "examples/", "api.py", "planner/report.py", "planner/answer.py",
    "planner/report_tables.py", "planner/report_figures.py", "planner/sizing_report.py",
    "planner/deploy.py", "planner/uncertainty.py",  # the error bands stated beside a run
    "validation/document.py", "validation/silicon_document.py",  # the validation pages' text
    "validation/silicon_report.py",  # which points and seeds run: in each scenario's hash
    "validation/silicon_flags.py",  # the MoE kernel of a point: in its scenario's serving
    "validation/silicon_serve.py",  # a point's engine knobs: in its scenario's serving
)  # fmt: skip

# under hardware_profiles: the error bands a report states beside a run (read when the
# report is written, never by a run), rewritten by scripts/model_error.py after a validation
PROFILES_PRESENTATION = ("model_error.json",)


def fingerprinted_files() -> list[tuple[str, Path]]:
    """The files a cached run's key covers: the simulator's source, model cards and hardware
    profiles, less the presentation layer (:data:`PRESENTATION`, :data:`PROFILES_PRESENTATION`)."""
    import simulator
    from hardware_profiles import PROFILES_DIR

    package = Path(simulator.__file__).parent
    files = []
    for root in (package, PROFILES_DIR):
        for f in sorted(root.rglob("*")):
            if f.suffix not in (".py", ".yaml", ".json") or "__pycache__" in f.parts:
                continue
            name = f.relative_to(root).as_posix()
            if root == package and name.startswith(PRESENTATION):
                continue
            if root == PROFILES_DIR and name in PROFILES_PRESENTATION:
                continue
            files.append((name, f))
    return files


@functools.cache
def code_fingerprint() -> str:
    """sha256 of the simulator's own source, model cards and hardware profiles: a cached run
    is reused only by the code and data that produced it (a version string alone would hand
    back results of older code after any edit). The report, the CLI and the deploy lines are
    left out: they do not change a run's result."""
    h = hashlib.sha256()
    for name, f in fingerprinted_files():
        h.update(name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def scenario_hash(scenario: Scenario) -> str:
    """Content hash: the cache key of a run (same scenario, same code, same input files ->
    same result). Besides the code and the scenario it covers the content (sha256, read once
    per file version) of every file the run reads that the package does not hold: a card or
    profile given by path (relative to the current folder, as the catalog reads it), the trace
    (its files, for a folder), the device's fitted models and profile in the user's data
    folder; and which measured tables it reads. An edited profile, card or trace, or
    ``PLAN_MEASURED=off``, is a new key, not an old answer."""
    from simulator.measured.package import data_source, switched_off
    from simulator.specs.loading import file_digest
    from simulator.specs.scenario import TraceWorkload
    from simulator.userdata import user_device_dir

    files: list[tuple[str, Path]] = [
        (role, Path(ref))
        for role, ref in (("model", scenario.model), ("device", scenario.device))
        if catalog._is_path(ref)
    ]
    if isinstance(scenario.workload, TraceWorkload):
        files.append(("trace", Path(scenario.workload.path)))
    try:
        device = catalog.hardware_profile(scenario.device).name
    except SpecError:
        device = scenario.device
    for name in ("profile.yaml", "latency_models.json"):
        files.append((f"user {name}", user_device_dir(device) / name))
    h = hashlib.sha256((code_fingerprint() + scenario.model_dump_json()).encode())
    for role, path in files:
        h.update(f"|{role}:{path}:{file_digest(path)}".encode())
    source = data_source()
    measured = (
        "off" if switched_off() else "none" if source is None
        else f"{source.root}:{source.package_version}"
    )  # fmt: skip
    h.update(f"|measured:{measured}".encode())
    return h.hexdigest()[:16]
