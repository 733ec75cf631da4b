"""`calibrate`: measure kernels on a GPU, fit the device's latency models, report.

    calibrate run --device-name NAME          measure (full sweep), fit and report, in one go
    calibrate measure --device-name NAME [--smoke] [--budget-s S]
    calibrate fit NAME
    calibrate report NAME

``measure`` needs a GPU (CUDA or ROCm through torch) and exits 2 without one; ``fit`` and
``report`` need neither torch nor a GPU. Exit codes as ``plan``: 2 for bad input.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from hardware_profiles import PROFILES_DIR
from simulator import catalog
from simulator.cli.base import command, console, file_path, make_typer
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import SpecError, load

if TYPE_CHECKING:
    from kernels_calibration.harness import RunResult
    from kernels_calibration.shapes import Job

app = make_typer("Calibrate a device: time the kernels a hybrid model runs, fit latency models.")

SMOKE_BUDGET_S = 110.0
FULL_BUDGET_S = 450.0
SMOKE_MODELS = ("kimi-k3",)

DeviceOpt = Annotated[
    str, typer.Option("--device-name", help="Profile name: hardware_profiles/<NAME>/.")
]
ProfilesOpt = Annotated[
    Path | None,
    typer.Option(
        help="Folder holding <NAME>/profile.yaml, where measurements and fits are written"
        " (default: profiles/ of the user data folder, $PLAN_HOME or"
        " ~/.local/share/hybrid-capacity-planner, never the installed package; a built-in"
        " device's profile.yaml is copied there on first use)."
    ),
]
SmokeOpt = Annotated[
    bool, typer.Option("--smoke", help="A small grid (one model, two points per op), ~2 min.")
]
BudgetOpt = Annotated[
    float | None,
    typer.Option(
        "--budget-s",
        help=f"Stop starting new jobs after this many seconds (default {SMOKE_BUDGET_S:.0f}"
        f" with --smoke, else {FULL_BUDGET_S:.0f}); rerun to continue.",
    ),
]
ModelOpt = Annotated[
    list[str] | None,
    typer.Option("--model", help="Model cards whose shapes to measure (repeatable; default all)."),
]
TpOpt = Annotated[
    list[int] | None,
    typer.Option("--tp", help="Tensor-parallel sizes of the per-GPU shapes (default 1 and 8)."),
]


def _device_dir(name: str, profiles_dir: Path | None) -> Path:
    """``profiles_dir/NAME``; by default the user's data folder's, seeded with the built-in
    profile of NAME (so that measurements, the fit and ``calibrated: true`` go there, not
    into the installed package)."""
    if not name or "/" in name or name.startswith(".") or len(name.encode()) > NAME_MAX:
        shown = name if len(name) <= 40 else f"{name[:40]}... ({len(name.encode())} bytes)"
        raise SpecError("(arguments)", "device-name", f"{shown!r} is not a folder name")
    if profiles_dir is not None:
        return profiles_dir / name
    from simulator.userdata import user_device_dir

    device_dir = user_device_dir(name)
    builtin = PROFILES_DIR / name / "profile.yaml"
    if not _exists(device_dir / "profile.yaml") and builtin.is_file():
        try:
            device_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(builtin, device_dir / "profile.yaml")
        except OSError as exc:
            raise SpecError(device_dir, "(folder)", f"cannot create: {exc.strerror}") from None
    return device_dir


NAME_MAX = 255  # bytes of one file name on Linux and macOS file systems


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; a path the OS cannot look up (a name too long) does not."""
    try:
        return path.exists()
    except OSError:
        return False


def _profile(device_dir: Path) -> HardwareProfile:
    path = device_dir / "profile.yaml"
    if not _exists(path):
        raise SpecError(
            path, "(file)",
            "no such profile: create it first (copy the nearest one, e.g. `mkdir -p"
            f" {device_dir} && cp hardware_profiles/h200/profile.yaml {device_dir}/`, and edit"
            " its name, numbers and sources)",
        )  # fmt: skip
    profile = load(HardwareProfile, path)
    if profile.name != device_dir.name:
        raise SpecError(
            path, "name", f"{profile.name!r} differs from its folder {device_dir.name!r}"
        )
    return profile


def _torch_device(allow_cpu: bool) -> Any:
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as exc:
        raise SpecError(
            "(environment)", exc.name or "torch",
            "not installed: install the calibrate extra (pip install -e '.[calibrate]'; on a GPU"
            " machine with the CUDA or ROCm build of torch)",
        ) from None  # fmt: skip
    if torch.cuda.is_available():
        if os.environ.get("TRITON_INTERPRET") == "1":
            raise SpecError(
                "(environment)", "TRITON_INTERPRET",
                "is 1: the kernels would run in the interpreter, unset it to time them",
            )  # fmt: skip
        return torch.device("cuda", torch.cuda.current_device())
    if allow_cpu:
        return torch.device("cpu")
    raise SpecError(
        "(environment)", "device",
        f"no GPU: torch {torch.__version__} sees no CUDA or ROCm device. `calibrate measure`"
        " times the kernels on the GPU it runs on; `calibrate fit` and `report` work anywhere",
    )  # fmt: skip


class _Progress:
    """A progress line on a terminal; a plain line every 15 s otherwise (CI, logs)."""

    def __init__(self, total: int, budget_s: float) -> None:
        self.total, self.budget_s = total, budget_s
        self.start = self.last = time.monotonic()
        self.tty = sys.stderr.isatty()

    def __call__(self, r: RunResult, job: Job | None) -> None:
        now = time.monotonic()
        done = r.measured + r.failed
        if job is not None and not self.tty and now - self.last < 15:
            return
        self.last = now
        what = (
            f"{job.op} {job.kernel} {job.dtype} " + " ".join(f"{k}={v}" for k, v in job.shape)
            if job
            else r.stopped
        )
        line = (
            f"[{now - self.start:5.0f}/{self.budget_s:.0f} s] {done}/{self.total}"
            f" measured {r.measured}, failed {r.failed}: {what}"
        )
        if self.tty:
            sys.stderr.write("\r\033[K" + line[:150] + ("\n" if job is None else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def measure_device(
    device_name: str,
    profiles_dir: Path | None,
    smoke: bool,
    budget_s: float | None,
    models: list[str] | None,
    tps: list[int] | None,
    fresh: bool,
    retry_failed: bool,
    allow_cpu: bool,
) -> RunResult:
    budget = budget_s if budget_s is not None else SMOKE_BUDGET_S if smoke else FULL_BUDGET_S
    if not math.isfinite(budget) or budget <= 0:
        raise SpecError("(arguments)", "budget-s", f"must be a finite number > 0, got {budget}")
    device_dir = _device_dir(device_name, profiles_dir)
    profile = _profile(device_dir)
    device = _torch_device(allow_cpu)  # before the modules that import torch: a clear line
    from kernels_calibration import bench, collectives, harness, shapes, timing

    names = models or (list(SMOKE_MODELS) if smoke else catalog.model_names())
    cards = [catalog.model_card(n) for n in names]
    tp_list = tps or ([8] if smoke else [1, 8])
    if any(t < 1 for t in tp_list):
        raise SpecError("(arguments)", "tp", f"must be >= 1, got {tp_list}")
    impls = frozenset({"torch"}) if device.type == "cpu" else frozenset({"torch", "triton"})
    plan = shapes.plan_jobs(cards, tp_list, profile, shapes.SMOKE if smoke else shapes.FULL, impls)
    jobs = harness.interleave(plan.jobs)
    world_sizes: list[int] = []
    if device.type == "cuda":
        import torch

        n = torch.cuda.device_count()
        world_sizes = [w for w in (2, 4, 8) if w <= n]
    sizes = collectives.SMOKE_BYTES if smoke else collectives.FULL_BYTES
    coll_jobs = collectives.jobs(world_sizes, sizes, collectives.ALL_OPS)
    out = device_dir / "measurements"
    if _exists(out) and not out.is_dir():
        raise SpecError(out, "(folder)", "is a file, not a folder (the measurements go there)")
    if fresh and out.exists():
        for f in out.iterdir():
            if f.suffix in (".csv", ".yaml"):
                f.unlink()
    for line in plan.not_measured:
        typer.echo(f"not measured: {line}", err=True)
    typer.echo(
        f"{len(jobs)} kernel jobs + {len(coll_jobs)} collective jobs for {device_name} on"
        f" {device} ({'smoke' if smoke else 'full'}, budget {budget:.0f} s) -> {out}",
        err=True,
    )
    warm, rep = (10.0, 30.0) if smoke else (10.0, 50.0)
    bencher = timing.gpu_bench(warm, rep) if device.type == "cuda" else timing.wall_bench(warm, rep)
    env = harness.environment(device)
    t0 = time.monotonic()
    result = harness.run_jobs(
        jobs, out, lambda j: bench.build(j, device), bencher, device_name=device_name, env=env,
        mode="smoke" if smoke else "full", budget_s=budget, retry_failed=retry_failed,
        progress=_Progress(len(jobs), budget),
    )  # fmt: skip
    left = budget - (time.monotonic() - t0)
    if coll_jobs and result.stopped == "complete" and left > 0:
        result = _collectives(coll_jobs, out, world_sizes, left, result)
    return result


def _collectives(
    jobs: list[Job], out: Path, world_sizes: list[int], left_s: float, result: RunResult
) -> RunResult:
    from kernels_calibration import collectives, harness

    store = harness.Store(out)
    for world in world_sizes:
        todo = [j for j in jobs if j.dims()["world_size"] == world and j.key not in store.done]
        if not todo:
            continue
        start = time.monotonic()
        if left_s <= 0:
            result.stopped = "budget"
            break
        typer.echo(f"collectives over {world} GPUs: {len(todo)} jobs", err=True)
        stats = collectives.measure(world, [(j.op, j.dims()["bytes"]) for j in todo])
        for j in todo:
            store.add(j, stats[(j.op, j.dims()["bytes"])])
            result.measured += 1
        store.flush()
        left_s -= time.monotonic() - start
    return result


@command(app, "measure")
def measure(
    device_name: DeviceOpt,
    smoke: SmokeOpt = False,
    budget_s: BudgetOpt = None,
    model: ModelOpt = None,
    tp: TpOpt = None,
    profiles_dir: ProfilesOpt = None,
    fresh: Annotated[bool, typer.Option(help="Delete this device's measurements first.")] = False,
    retry_failed: Annotated[bool, typer.Option(help="Retry jobs listed in failures.csv.")] = False,
    allow_cpu: Annotated[
        bool,
        typer.Option(
            help="Without a GPU, time the torch ops (GEMM, RMSNorm) on this CPU: for testing"
            " the pipeline; the numbers describe the CPU."
        ),
    ] = False,
) -> None:
    """Time the kernels on this machine's GPU into NAME/measurements/ of --profiles-dir."""
    r = measure_device(device_name, profiles_dir, smoke, budget_s, model, tp, fresh,
                       retry_failed, allow_cpu)  # fmt: skip
    _print_run(r)


def _print_run(r: RunResult) -> None:
    how = {"complete": "complete", "budget": "stopped at the budget: rerun to continue",
           "interrupted": "interrupted: rerun to continue"}[r.stopped]  # fmt: skip
    typer.echo(
        f"measured {r.measured} (already there {r.skipped_done}, failed {r.failed}) in"
        f" {r.elapsed_s:.0f} s: {how}",
        err=True,
    )


def fit_device(name: str, profiles_dir: Path | None, folds: int) -> Path:
    from simulator import calibration
    from simulator.specs.limits import check_fold_count

    check_fold_count(folds)
    device_dir = _device_dir(name, profiles_dir)
    profile = _profile(device_dir)
    doc, summaries, skipped = calibration.fit_device(device_dir, profile, folds)
    path = calibration.write_fit(device_dir, doc)
    t = Table(title=f"{profile.name}: latency models fitted on measurements (APE %)")
    cols = ("op class", "fitted on", "rows", "prior median", "prior max",
            "fitted median (training)", f"held-out median ({folds}-fold)",
            "held-out max")  # fmt: skip
    for col in cols:
        t.add_column(col, justify="left" if col in ("op class", "fitted on") else "right")

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    for s in summaries:
        t.add_row(s.op_class, s.impl, str(s.rows), pct(s.prior_median_ape),
                  pct(s.prior_max_ape), pct(s.fitted_median_ape), pct(s.heldout_median_ape),
                  pct(s.heldout_max_ape))  # fmt: skip
    console().print(t)
    for line in skipped:
        typer.echo(f"not fitted: {line}", err=True)
    typer.echo(f"wrote {path}; {device_dir / 'profile.yaml'} now reads calibrated: true", err=True)
    return path


@command(app, "fit")
def fit(
    name: Annotated[str, typer.Argument(help="Device profile name.")],
    profiles_dir: ProfilesOpt = None,
    folds: Annotated[int, typer.Option(help="k of the k-fold held-out error.")] = 5,
) -> None:
    """Fit one latency model per measured op class into NAME/latency_models.json."""
    fit_device(name, profiles_dir, folds)


def report_device(name: str, profiles_dir: Path | None, out: Path | None) -> Path:
    from simulator.calibration import measurement_files, report_html
    from simulator.output_files import check_output_file, write_file

    path = out or Path("out") / f"calibration-{name}.html"
    device_dir = _device_dir(name, profiles_dir)
    # a folder, a parent that is a file, a file the report reads: before the work
    reads = [*measurement_files(device_dir), device_dir / "measurements" / "meta.yaml",
             device_dir / "latency_models.json", device_dir / "profile.yaml"]  # fmt: skip
    check_output_file(path, "--out", inputs=reads)
    profile = _profile(device_dir)
    write_file(path, report_html(device_dir, profile), "--out")
    typer.echo(f"wrote {path}", err=True)
    return path


@command(app, "report")
def report(
    name: Annotated[str, typer.Argument(help="Device profile name.")],
    profiles_dir: ProfilesOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(help="HTML file (default out/calibration-NAME.html).", parser=file_path),
    ] = None,
) -> None:
    """HTML page: measured vs prior vs fitted latency per op class, held-out errors."""
    report_device(name, profiles_dir, out)


@command(app, "run")
def run(
    device_name: DeviceOpt,
    smoke: SmokeOpt = False,
    budget_s: BudgetOpt = None,
    model: ModelOpt = None,
    tp: TpOpt = None,
    profiles_dir: ProfilesOpt = None,
    allow_cpu: Annotated[bool, typer.Option(help="As for `measure`.")] = False,
) -> None:
    """Measure, fit and report: calibrate a device in one command."""
    r = measure_device(device_name, profiles_dir, smoke, budget_s, model, tp, False, False,
                       allow_cpu)  # fmt: skip
    _print_run(r)
    fit_device(device_name, profiles_dir, 5)
    report_device(device_name, profiles_dir, None)


def main() -> None:
    app()
