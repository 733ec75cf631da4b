"""The answer every `plan memory` ends with: fits / does not fit at the asked TP, and on what
(the fewest GPUs of each device that hold the model alone, and ``fits_on`` over them), for
card reports and quick-card estimates alike."""

from collections.abc import Callable
from typing import Any

from rich.table import Table

from simulator.cli.base import console, gib
from simulator.specs import SpecError
from simulator.specs.hardware import HardwareProfile


def fit_table(reports: list[Any]) -> Table:
    """Fits / does not fit, and on what: per report, the verdict at its TP and the fewest GPUs
    of that device that hold the model alone (card reports and quick-card estimates alike)."""
    r0 = reports[0]
    what = "estimate, " if getattr(r0, "estimate", False) else ""
    t = Table(title=f"{r0.model}: fits or not ({what}{r0.num_seqs} x {r0.context_tokens:,} tokens)")
    for col in ("device", "GiB", "GPUs", "fits", "why", "fewest GPUs (model alone)"):
        t.add_column(col, justify="right" if col in ("GiB", "GPUs") else "left")
    for r in reports:
        fewest = r.fewest_gpus_model_alone
        label = r.device if getattr(r, "dcp", 1) == 1 else f"{r.device} dcp {r.dcp}"
        why = r.fits_reason
        if r.fits and why == "fits" and r.max_seqs_at_context is not None:
            why = f"holds {r.max_seqs_at_context:,} sequences of {r.context_tokens:,} tokens"
        t.add_row(
            label,
            gib(r.usable_memory_bytes),
            str(r.tp),
            "yes" if r.fits else "NO",
            why,
            f"{fewest}x {r.device}" if fewest is not None else "none up to TP 512",
        )
    return t


def plan_each(
    devices: list[HardwareProfile],
    every: bool,
    source: str,
    plan: Callable[[HardwareProfile], Any],
) -> tuple[list[Any], list[str]]:
    """``plan`` of each device. A device the serving knobs do not suit (a TP wider than its
    scale-up domain, say) is bad input when the user named it, and is left out with a line
    saying why when every device of the catalog is planned (unless none is left)."""
    done: list[Any] = []
    missed: list[str] = []
    first: SpecError | None = None
    for dev in devices:
        try:
            done.append(plan(dev))
        except SpecError as exc:
            err = SpecError(source, exc.field, exc.reason)
            if not every:
                raise err from None
            first = first or err
            missed.append(f"{dev.name}: {exc.field}: {exc.reason}")
    if first is not None and not done:
        raise first
    return done, missed


def print_fit_table(reports: list[Any], over: str, skipped: list[str] | None = None) -> None:
    con = console()
    con.print(fit_table(reports))
    for line in skipped or []:
        con.print(f"not planned on {line}")
    r0 = reports[0]
    con.print(
        f"fits on: {r0.fits_on} (the model alone, over {over}: the smallest that holds it on one"
        " GPU, else the fewest GPUs of the largest whose scale-up domain holds it)"
    )
