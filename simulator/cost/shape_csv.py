"""Reading a shape CSV (``plan ops predict``, ``plan fit``) and checking its cells: every cell
read as text, then checked per column (present, a number, >= 0 or > 0, an integer where it
counts) and across columns (what a kernel of that shape needs); a bad one is a
:class:`SpecError` naming its row and column. ``predict.py`` turns the checked rows into work."""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import lzma
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from simulator.cost import ops
from simulator.specs import limits
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import SpecError

if TYPE_CHECKING:
    import pandas as pd

Array = NDArray[np.float64]

# Columns that count something (tokens, heads, experts, ranks, matrix dimensions): integers.
# ``bytes`` (per rank), ``elements`` (per rank, after a TP split) and ``bytes_per_elem``
# (0.5 for FP4) may be fractional.
INTEGER_COLUMNS = frozenset(
    {"m", "n", "k", "num_tokens", "hidden", "inter", "num_experts", "topk", "ep", "tp",
     "batch", "ctx_len", "seq_len", "prefix_len", "num_heads", "num_kv_heads", "head_dim",
     "world_size", "n_reps"}
)  # fmt: skip
# GPUs a collective over the host link (a card without a scale-up fabric) spans: the cards
# of one server (8 in the PCIe servers the profiles assume, e.g. d270's host_dram note)
PCIE_SERVER_CARDS = 8


def read_table(path: str | Path) -> pd.DataFrame:
    """A CSV read as strings (empty cells stay ''), so that every cell is checked by us."""
    import pandas as pd

    p = Path(path)
    try:
        with _open_text(p) as fh:  # read once: the row check and pandas parse the same text
            text = fh.read()
        _check_row_lengths(p, text)
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True)
    except FileNotFoundError:
        raise SpecError(p, "(file)", "no such file") from None
    except pd.errors.EmptyDataError:
        raise SpecError(p, "(file)", "empty file") from None
    except (pd.errors.ParserError, UnicodeDecodeError, csv.Error, EOFError, OSError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise SpecError(p, "(file)", f"not a readable CSV: {first}") from None
    df.columns = [str(c).strip() for c in df.columns]
    stripped: pd.DataFrame = df.apply(lambda col: col.str.strip())
    return stripped


def _open_text(p: Path) -> IO[str]:
    """``p`` as text, decompressed by its suffix as pandas infers it."""
    if p.suffix == ".gz":
        return gzip.open(p, "rt", newline="", encoding="utf-8")
    if p.suffix == ".bz2":
        return bz2.open(p, "rt", newline="", encoding="utf-8")
    if p.suffix == ".xz":
        return lzma.open(p, "rt", newline="", encoding="utf-8")
    return p.open(newline="", encoding="utf-8")


def _check_row_lengths(p: Path, text: str) -> None:
    """The header of ``p`` (read as ``text``) names each column once, and no row has more
    cells than it: pandas would rename a repeated ``k`` to ``k.1`` and read a longer row's
    first cell as a row label, shifting every cell one column (``op`` would read the dtype)."""
    rows = csv.reader(io.StringIO(text, newline=""), skipinitialspace=True)
    header = [c.strip() for c in next(rows, [])]
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:
        raise SpecError(p, f"column {repeated[0]}", "appears more than once in the header")
    for k, row in enumerate(rows):
        if len(row) > len(header):
            raise SpecError(
                p, f"row {k + 1}", f"{len(row)} cells where the header has {len(header)}"
            )


def cell(row: int, column: str) -> str:
    return f"row {row + 1}, column {column}"


def numeric_column(
    df: pd.DataFrame,
    column: str,
    rows: NDArray[np.intp],
    file: str | Path,
    what: str,
    default: float | None = None,
    positive: bool = False,
) -> Array:
    """Values of ``column`` at positional ``rows``, checked: present, a number, >= 0 (> 0)."""
    import pandas as pd

    if column not in df.columns:
        if default is not None:
            return np.full(rows.size, default)
        raise SpecError(file, cell(int(rows[0]), column), f"missing for {what}")
    raw = df[column].to_numpy(dtype=object)[rows]
    empty = np.array([s == "" for s in raw], dtype=bool)
    if empty.any() and default is None:
        raise SpecError(file, cell(int(rows[np.argmax(empty)]), column), f"missing for {what}")
    values = pd.to_numeric(pd.Series(raw, dtype=object).where(~empty, None), errors="coerce")
    vals: Array = values.to_numpy(dtype=np.float64)
    bad = ~empty & ~np.isfinite(vals)
    if bad.any():
        i = int(np.argmax(bad))
        raise SpecError(file, cell(int(rows[i]), column), f"not a finite number: {str(raw[i])!r}")
    vals = np.where(empty, default if default is not None else np.nan, vals)
    low = vals <= 0 if positive else vals < 0
    if low.any():
        i = int(np.argmax(low))
        bound = "> 0" if positive else ">= 0"
        raise SpecError(file, cell(int(rows[i]), column), f"must be {bound}, got {raw[i]}")
    high = vals > limits.MAX_SHAPE_VALUE
    if high.any():
        i = int(np.argmax(high))
        raise SpecError(
            file, cell(int(rows[i]), column),
            f"{raw[i]} exceeds {limits.MAX_SHAPE_VALUE:g}: a unit mix-up?"
            " (simulator/specs/limits.py)",
        )  # fmt: skip
    if column in INTEGER_COLUMNS:
        fraction = vals != np.round(vals)
        if fraction.any():
            i = int(np.argmax(fraction))
            raise SpecError(
                file, cell(int(rows[i]), column), f"must be an integer (a count), got {raw[i]}"
            )
    return vals


def check_shapes(cls: str, c: dict[str, Array], rows: NDArray[np.intp], file: str | Path) -> None:
    """Cross-column checks of one op class's rows: what a kernel of that shape needs."""

    def first(bad: NDArray[np.bool_], column: str, reason: Callable[[int], str]) -> None:
        if bad.any():
            i = int(np.argmax(bad))
            raise SpecError(file, cell(int(rows[i]), column), reason(i))

    if cls == "moe":
        e, topk, ep = c["num_experts"], c["topk"], c["ep"]
        first(topk > e, "topk", lambda i: f"{int_text(topk[i])} exceeds num_experts"
              f" {int_text(e[i])} (each token picks topk distinct experts)")  # fmt: skip
        first(ep > e, "ep", lambda i: f"{int_text(ep[i])} exceeds num_experts {int_text(e[i])}"
              " (every EP rank holds at least one expert)")  # fmt: skip
    if cls in ops.COLLECTIVE_CLASSES:
        w = c["world_size"]
        first(w < 2, "world_size", lambda i: f"{int_text(w[i])}: a collective spans at least"
              " 2 GPUs (one GPU exchanges nothing)")  # fmt: skip
    if cls in ("attn_decode", "attn_prefill"):
        h, kv = c["num_heads"], c["num_kv_heads"]
        first(h % kv != 0, "num_heads", lambda i: f"{int_text(h[i])} is not a multiple of"
              f" num_kv_heads {int_text(kv[i])} (grouped-query attention)")  # fmt: skip


def check_world_sizes(
    op: NDArray[np.str_], world: Array, profile: HardwareProfile, file: str | Path
) -> None:
    """Collectives priced on ``profile`` span at most its scale-up domain: the alpha-beta
    models are those of the scale-up link (NVLink, xGMI), a bigger world crosses the
    scale-out network, which no model here prices. A card without a fabric (PCIe only) is
    priced over its host link, among the cards of one server (``PCIE_SERVER_CARDS``)."""
    if profile.scale_up is not None:
        domain, what = profile.scale_up.domain_size, "the scale-up domain"
    else:
        domain, what = PCIE_SERVER_CARDS, "the cards of one PCIe server"
    bad = np.isin(op, list(ops.COLLECTIVE_CLASSES)) & (world > domain)
    if bad.any():
        i = int(np.argmax(bad))
        raise SpecError(
            file,
            cell(i, "world_size"),
            f"{int_text(world[i])} exceeds {what} of {profile.name} ({domain} GPUs): beyond it a"
            " collective crosses the scale-out network, which the planner does not price",
        )


def int_text(x: float) -> str:
    return f"{int(x)}" if float(x).is_integer() else f"{x:g}"


def string_column(
    df: pd.DataFrame,
    column: str,
    rows: NDArray[np.intp],
    file: str | Path,
    what: str,
    allowed: tuple[str, ...],
    default: str | None = None,
) -> NDArray[np.str_]:
    if column not in df.columns:
        if default is not None:
            return np.full(rows.size, default)
        raise SpecError(file, cell(int(rows[0]), column), f"missing for {what}")
    raw = df[column].to_numpy(dtype=object)[rows].astype(str)
    if default is not None:
        raw = np.where(raw == "", default, raw)
    empty = raw == ""
    if empty.any():
        raise SpecError(file, cell(int(rows[np.argmax(empty)]), column), f"missing for {what}")
    bad = ~np.isin(raw, allowed)
    if bad.any():
        i = int(np.argmax(bad))
        raise SpecError(
            file,
            cell(int(rows[i]), column),
            f"unknown {column} {str(raw[i])!r} for {what}; known: {', '.join(allowed)}",
        )
    return raw
