"""Block ids of an agentic trace as maximal inclusive runs ``(first, last)``: a 100k-token
prompt is a handful of runs, not 1,600 ids, and two prompts agree up to their first
differing run (``common_blocks``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.workload.source import MAX_HASH_ID

Runs = tuple[tuple[int, int], ...]  # maximal inclusive runs of ids (``maximal_runs``)


def maximal_runs(runs: list[tuple[int, int]]) -> Runs:
    """The same ids in the fewest runs: a run that starts right after the previous one's end
    joins it. Two prompts' ids then agree exactly up to their first differing run."""
    out: list[tuple[int, int]] = []
    for a, b in runs:
        if out and a == out[-1][1] + 1:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return tuple(out)


def hash_id_runs(ids: Any, ranges: bool, where: str) -> Runs:
    """Validated hash ids as maximal inclusive runs (plain lists compressed too)."""
    if not isinstance(ids, list):
        raise ValueError(f"{where}.hash_ids: expected a list")
    if not ranges:
        try:
            arr = np.asarray(ids) if ids else np.zeros(0, dtype=np.int64)
        except OverflowError:  # an int past 2^64
            arr = np.zeros(0, dtype=object)
        if (
            arr.ndim != 1
            or arr.dtype.kind not in "iu"
            or (arr.size and (arr.min() < 0 or arr.max() > MAX_HASH_ID))
        ):
            bad = next((x for x in ids if not _hash_id(x)), None)
            raise ValueError(
                f"{where}.hash_ids: bad element {bad!r} (integers in [0, 2^63 - 1] only)"
            )
        arr = arr.astype(np.int64)
        cut = np.flatnonzero(np.diff(arr) != 1) + 1  # run boundaries
        starts = np.concatenate([[0], cut])
        ends = np.concatenate([cut, [arr.size]]) - 1
        return tuple(zip(arr[starts].tolist(), arr[ends].tolist(), strict=True)) if arr.size else ()
    pairs: list[tuple[int, int]] = []
    for x in ids:
        if _hash_id(x):
            pairs.append((x, x))
        elif isinstance(x, list) and len(x) == 2 and all(map(_hash_id, x)) and x[0] <= x[1]:
            pairs.append((x[0], x[1]))
        else:
            raise ValueError(
                f"{where}.hash_ids: bad element {x!r} (an id or an [first, last] run of ids,"
                " integers in [0, 2^63 - 1])"
            )
    return maximal_runs(pairs)


def _hash_id(x: Any) -> bool:
    """A block id: an integer that fits the int64 arrays the ids are kept in."""
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_HASH_ID


def common_blocks(a: Runs, b: Runs) -> int:
    """Leading ids two maximal run lists expand to in common: the runs before the first that
    differs, and of that one, if both start there, the shorter's length."""
    n = 0
    for (a0, a1), (b0, b1) in zip(a, b, strict=False):  # up to the shorter
        if a0 != b0:
            break
        if a1 != b1:
            return n + min(a1, b1) - a0 + 1
        n += a1 - a0 + 1
    return n


def expand_runs(runs: Runs, start: int = 0, stop: int | None = None) -> NDArray[np.int64]:
    """The ids of ``runs`` (``a, a+1, ..., b, ...``), from number ``start`` to ``stop``,
    without making those before ``start``."""
    parts: list[NDArray[np.int64]] = []
    if stop is None:
        stop = sum(b - a + 1 for a, b in runs)
    left = stop - start
    seen = 0
    for a, b in runs:
        if left <= 0:
            break
        length = b - a + 1
        if seen + length > start:
            lo = a + max(start - seen, 0)
            hi = min(b + 1, lo + left)
            parts.append(np.arange(lo, hi, dtype=np.int64))
            left -= hi - lo
        seen += length
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
