"""What a page reads from what its user typed: folder names and the CSVs of a ``plan search``
output folder, checked so that a mistake is one line naming the field or the file and the
reason (a ``SpecError``, shown by the page's error line), not an "internal problem".

Before these checks a folder name of 5,000 characters, a NUL byte or an existing file given
as the run cache, and a ``runs.csv`` cut short, not UTF-8, missing a column or holding a word
where a number belongs each ended in the page's bug line (OSError, ValueError,
FileExistsError, ParserError, KeyError, ...).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.output_files import check_parents, reason_text, stat_output
from simulator.specs.loading import SpecError

# the columns each page reads of plan search's tables, and what each must hold
RUNS_COLUMNS = {
    "config_id": "name",
    "device": "name",
    "concurrency": "count",
    "slo_met": "flag",
    "throughput_tok_per_s_per_gpu": "value",
}
BEST_COLUMNS = {"config_id": "name", "device": "name", "concurrency": "count",
                "tokens_per_usd": "number"}  # fmt: skip
WHAT = {
    "name": "a name (empty)",
    "flag": "True or False",
    "count": "a whole number of at least 1",
    "value": "a finite number of at least 0",
    "number": "a finite number of at least 0, or empty",
}


def _shown(text: str) -> str:
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"


def folder_name(source: str, field: str, text: str) -> Path:
    """``text`` as a folder path, refused where the OS cannot look it up (a NUL byte, a name
    past the file system's limit, a parent that cannot be read); it need not exist."""
    if "\x00" in text:
        raise SpecError(source, field, "a folder name cannot hold a NUL byte")
    path = Path(text).expanduser()
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as exc:
        raise SpecError(source, field, f"{_shown(text)}: {reason_text(exc)}") from None
    return path


def cache_folder(source: str, text: str) -> Path:
    """The run cache a page writes into: a folder, or a path where one can be made."""
    if not text.strip():
        raise SpecError(source, "run cache", "give a folder for the runs")
    path = folder_name(source, "run cache", text)
    try:
        found = stat_output(path, "run cache")
        if found is None:
            check_parents(path, "run cache")
        elif not stat.S_ISDIR(found.st_mode):
            raise SpecError(path, "run cache", "exists and is not a folder: give a folder path")
    except SpecError as exc:
        raise SpecError(source, "run cache", f"{_shown(text)}: {exc.reason}") from None
    return path


def read_table(file: Path, columns: dict[str, str]) -> pd.DataFrame:
    """One CSV of a plan search output folder (empty or absent: an empty table), with the
    ``columns`` a page reads present and holding what they must."""
    try:
        table = pd.read_csv(file)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return pd.DataFrame()
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        why = reason_text(exc) if isinstance(exc, OSError) else str(exc).strip().split("\n")[0]
        raise SpecError(file, "(file)", f"not a table plan search writes: {why}") from None
    if table.empty:
        return table
    if not isinstance(table.index, pd.RangeIndex):  # pandas took a column as the index
        raise SpecError(file, "(file)", "a row has more cells than the header")
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise SpecError(
            file, "(columns)",
            f"missing {', '.join(missing)}: not a table plan search writes",
        )  # fmt: skip
    for column, kind in columns.items():
        bad = _bad(table[column], kind)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            value = table[column].iloc[row]
            plain = value.item() if isinstance(value, np.generic) else value
            text = "empty" if pd.isna(value) else repr(plain)
            raise SpecError(file, f"row {row + 2}, column {column}", f"{text} is not {WHAT[kind]}")
    return table


def _bad(values: pd.Series, kind: str) -> pd.Series:
    if kind == "name":
        return values.isna() | (values.astype(str).str.strip() == "")
    if kind == "flag":
        return ~values.map(lambda v: isinstance(v, bool | np.bool_))
    numbers = pd.Series(pd.to_numeric(values, errors="coerce"), index=values.index)
    unread = numbers.isna() & values.notna()  # a word where a number belongs
    wrong: pd.Series = unread | numbers.isin([np.inf, -np.inf]) | (numbers < 0)
    if kind == "number":
        return wrong
    wrong = wrong | numbers.isna()
    if kind == "count":
        wrong = wrong | (numbers < 1) | (numbers % 1 != 0)
    return wrong
