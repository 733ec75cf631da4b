"""Measurement tables read for a fit: shape CSVs (``simulator.cost.predict``) with a
``latency_us`` column, their rows grouped by op class (``calibrate fit``, ``plan fit``,
``plan validate ops``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from simulator.cost.fit import MeasuredOps
from simulator.cost.latency_file import MAX_SECONDS
from simulator.cost.predict import OpRows, op_rows
from simulator.cost.shape_csv import cell, numeric_column, read_table
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import SpecError, check_text_file

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class MeasurementTable:
    file: Path
    table: pd.DataFrame


def load_measurements(paths: Sequence[str | Path]) -> list[MeasurementTable]:
    """Read measurement CSVs (checked when their rows are priced)."""
    tables = []
    for p in paths:
        check_text_file(p)  # a regular UTF-8 file (a FIFO would block the reader)
        table = read_table(p)
        if "latency_us" not in table.columns:
            raise SpecError(p, "column latency_us", "missing (the measured median, in us)")
        tables.append(MeasurementTable(Path(p), table))
    return tables


# a measured median outside these is a unit mix-up (seconds or ns written as us), not a
# kernel: a shape table refuses a latency over 1,000 s (latency_file.MAX_SECONDS), and no GPU
# or CPU kernel finishes in under a nanosecond
MIN_LATENCY_US = 1e-3
MAX_LATENCY_US = MAX_SECONDS * 1e6


def measured_latency_us(t: MeasurementTable, rows: NDArray[np.intp], what: str) -> NDArray[Any]:
    """``latency_us`` of ``rows`` of ``t``: a number, within [MIN_LATENCY_US, MAX_LATENCY_US]."""
    us = numeric_column(t.table, "latency_us", rows, t.file, what, positive=True)
    bounds = ((us < MIN_LATENCY_US, f"under {MIN_LATENCY_US:g} us (1 ns)"),
              (us > MAX_LATENCY_US, f"over {MAX_LATENCY_US:g} us (1,000 s)"))  # fmt: skip
    for bad, reason in bounds:
        if bad.any():
            i = int(np.argmax(bad))
            raw = t.table["latency_us"].iloc[int(rows[i])]
            raise SpecError(
                t.file, cell(int(rows[i]), "latency_us"), f"{raw} is {reason}: a unit mix-up?"
            )
    return us


def measured_by_class(
    tables: Sequence[MeasurementTable], profile: HardwareProfile
) -> dict[str, tuple[MeasuredOps, list[Path]]]:
    """All measured rows grouped by op class (in OP order), with the files they came from."""
    from simulator.cost.predict import OP_COLUMNS

    parts: dict[str, list[tuple[MeasuredOps, Path]]] = {}
    for t in tables:
        all_rows = op_rows(t.table, profile, t.file)
        for cls in OP_COLUMNS:
            idx = np.flatnonzero(all_rows.op == cls)
            if idx.size == 0:
                continue
            us = measured_latency_us(t, idx, f"op {cls}")
            m = MeasuredOps(cls, all_rows.select(all_rows.op == cls), us * 1e-6)
            parts.setdefault(cls, []).append((m, t.file))
    out: dict[str, tuple[MeasuredOps, list[Path]]] = {}
    for cls in OP_COLUMNS:
        if cls not in parts:
            continue
        ms = [m for m, _ in parts[cls]]
        r = [m.rows for m in ms]
        merged = MeasuredOps(
            cls,
            OpRows(
                np.concatenate([x.op for x in r]),
                np.concatenate([x.flops for x in r]),
                np.concatenate([x.bytes for x in r]),
                np.concatenate([x.kernels for x in r]),
                np.concatenate([x.peak_flops_per_s for x in r]),
                np.concatenate([x.world_size for x in r]),
                np.concatenate([x.gemm_shape for x in r]),
            ),
            np.concatenate([m.seconds for m in ms]),
        )
        out[cls] = (merged, [f for _, f in parts[cls]])
    return out
