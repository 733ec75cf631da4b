"""Request-level traces (Mooncake JSONL, Azure LLM inference CSV) and format detection.

Each record is one request, a session of one turn that starts at the record's timestamp.
- Mooncake (FAST'25): ``{timestamp (ms), input_length, output_length, hash_ids}``, one id per
  512-token block of the prompt, the partial tail block included (``ceil(input/512)`` ids);
  ids are global prefix-block hashes. The tail id is dropped (only full blocks can be cached)
  and the ids are chained.
- Azure 2023 (Splitwise): CSV ``TIMESTAMP, ContextTokens, GeneratedTokens``; no prefix identity.
Timestamps must not go backwards (a record that does is a bad record).
"""

from __future__ import annotations

import csv
import json
import math
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from simulator.specs import limits
from simulator.specs.loading import SpecError, check_dir, loads_unique, stat_path
from simulator.workload.request import (
    EMPTY_IDS,
    Session,
    Turn,
    chain,
    content_keys,
    scope_key,
)
from simulator.workload.source import (
    MAX_HASH_ID,
    BadRecords,
    check_tokens,
    check_trace_file,
    json_line_error,
    lines,
    open_text,
    shown_int,
)

MOONCAKE_BLOCK_TOKENS = 512
TIME_WHY = "simulator/specs/limits.py: 32 years, past any recording"
FORMATS = ("agentic", "mooncake", "azure")


def _one(turn: Turn, start_s: float, key: str) -> Session:
    return Session(key, start_s, iter((turn,)))


def _int_field(rec: dict[str, Any], key: str, minimum: int) -> int:
    if key not in rec:
        raise ValueError(f"missing field {key!r}")
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{key}: expected an integer, got {v!r}")
    if v < minimum:
        raise ValueError(f"{key}: must be >= {minimum}, got {v}")
    return v


def _check_time(seconds: float, field: str) -> float:
    """A record's time (from the trace's start): at most 10^9 s, as every trace time."""
    if seconds > limits.MAX_TRACE_TIME_S:
        raise ValueError(
            f"{field}: {seconds:g} s exceeds {limits.MAX_TRACE_TIME_S:g} s ({TIME_WHY})"
        )
    return seconds


def _mooncake_turn(rec: Any, scope: int) -> tuple[float, Turn]:
    if not isinstance(rec, dict):
        raise ValueError(f"expected an object, got {type(rec).__name__}")
    ts_ms = _int_field(rec, "timestamp", 0)
    if ts_ms > 1000 * limits.MAX_TRACE_TIME_S:
        raise ValueError(
            f"timestamp: {shown_int(ts_ms)} ms exceeds {1000 * limits.MAX_TRACE_TIME_S:g} ms"
            f" ({TIME_WHY})"
        )
    prompt = check_tokens(_int_field(rec, "input_length", 1), "input_length")
    output = check_tokens(_int_field(rec, "output_length", 0), "output_length")
    ids = rec.get("hash_ids")
    if not isinstance(ids, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_HASH_ID for x in ids
    ):
        raise ValueError("hash_ids: expected a list of integers in [0, 2^63 - 1]")
    full = prompt // MOONCAKE_BLOCK_TOKENS
    if len(ids) not in (full, -(-prompt // MOONCAKE_BLOCK_TOKENS)):
        raise ValueError(
            f"hash_ids: {len(ids)} ids for {prompt} tokens, expected "
            f"{-(-prompt // MOONCAKE_BLOCK_TOKENS)} (one per {MOONCAKE_BLOCK_TOKENS}-token block)"
        )
    keys = content_keys(scope, np.asarray(ids[:full], dtype=np.int64))
    turn = Turn(prompt, output, chain(keys), MOONCAKE_BLOCK_TOKENS, 0.0, 0.0)
    return ts_ms / 1000.0, turn


def read_mooncake(path: Path, bad: BadRecords) -> Iterator[Session]:
    """One single-turn session per JSONL record, at ``timestamp / 1000`` seconds."""
    scope = scope_key("mooncake", path.name)
    last = 0.0
    for lineno, text in lines(path):
        try:
            start, turn = _mooncake_turn(loads_unique(text), scope)
            if start < last:
                raise ValueError(f"timestamp goes backwards ({start * 1000:.0f} ms after "
                                 f"{last * 1000:.0f} ms)")  # fmt: skip
        except json.JSONDecodeError as exc:
            bad.handle(SpecError(path, f"line {lineno}", json_line_error(text, exc)))
            continue
        except ValueError as exc:
            bad.handle(SpecError(path, f"line {lineno}", str(exc)))
            continue
        last = start
        yield _one(turn, start, str(lineno))


def _timestamp_s(text: str) -> tuple[float, bool]:
    """``2023-11-16 18:15:46.6805900`` (100 ns digits) -> POSIX seconds, read as UTC where the
    text names no zone (never the machine's: a DST change would move the gaps); or plain
    seconds. With whether it was a date and time (a column must not mix the two)."""
    text = text.strip()
    try:
        if not text.isascii() or "_" in text:  # float() reads other scripts' digits and 1_000
            raise ValueError
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):  # float() reads nan / inf: no replay reaches them
            raise ValueError(f"TIMESTAMP: must be a finite number, got {text!r}")
        return value, False
    main, _, frac = text.partition(".")
    try:
        when = datetime.fromisoformat(main)
    except ValueError:
        raise ValueError(f"TIMESTAMP: cannot parse {text!r}") from None
    if frac and not (frac.isascii() and frac.isdigit()):
        raise ValueError(f"TIMESTAMP: cannot parse {text!r}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp() + (float(f"0.{frac}") if frac else 0.0), True


AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def read_azure(path: Path, bad: BadRecords) -> Iterator[Session]:
    """One single-turn session per CSV row, times relative to the first row."""
    with open_text(path) as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != list(AZURE_COLUMNS):
            raise SpecError(path, "line 1", f"expected the header {','.join(AZURE_COLUMNS)}")
        t0: float | None = None
        dated: bool | None = None  # the first row's kind of timestamp
        last = 0.0
        for row in reader:
            lineno = reader.line_num
            if not row or not any(c.strip() for c in row):
                continue
            try:
                if len(row) < 3:
                    raise ValueError(f"expected 3 columns, got {len(row)}")
                ts, is_date = _timestamp_s(row[0])
                if dated is not None and is_date != dated:
                    kinds = ("seconds", "a date and time")
                    raise ValueError(
                        f"TIMESTAMP: {row[0].strip()!r} is {kinds[is_date]}, the first row's"
                        f" is {kinds[dated]}: one column, one kind of timestamp"
                    )
                prompt, output = (
                    _csv_int(row[1], "ContextTokens", 1),
                    _csv_int(row[2], "GeneratedTokens", 0),
                )
                t0 = ts if t0 is None else t0
                dated = is_date
                start = _check_time(ts - t0, "TIMESTAMP (from the first row)")
                if start < last:
                    raise ValueError("TIMESTAMP goes backwards")
            except ValueError as exc:
                bad.handle(SpecError(path, f"line {lineno}", str(exc)))
                continue
            last = start
            yield _one(Turn(prompt, output, EMPTY_IDS, 1, 0.0, 0.0), start, str(lineno))


def _csv_int(text: str, column: str, minimum: int) -> int:
    """A token count cell: ASCII digits (``int()`` also reads ``1_000`` and other scripts'
    digits), at most the generators' bound."""
    cell = text.strip()
    digits = cell[1:] if cell[:1] in "+-" else cell
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"{column}: expected an integer, got {cell!r}")
    v = int(cell)
    if v < minimum:
        raise ValueError(f"{column}: must be >= {minimum}, got {v}")
    return check_tokens(v, column)


def check_trace(path: str | Path, format: str | None = None) -> None:
    """Everything a replay of ``path`` will read, checked before it starts: a trace file, or
    every trace file of a directory of agentic traces, is a regular file within the size
    limit, with an intact gzip stream and UTF-8 text (see :func:`check_trace_file`)."""
    from simulator.workload.agentic import _files

    p = Path(path)
    try:
        st = stat_path(p)
    except SpecError as exc:  # a trace may be a folder of traces
        if exc.reason != "no such file":
            raise
        raise SpecError(p, exc.field, "no such file or directory") from None
    if stat.S_ISDIR(st.st_mode):
        if format not in (None, "agentic"):
            raise SpecError(
                p, "(file)", f"a trace of format {format} is one file, not a folder (only agentic"
                " traces come as a folder of trace files)",
            )  # fmt: skip
        check_dir(p, "(file)")
        for f in _files(p):
            check_trace_file(f)
    else:
        check_trace_file(p)


def detect_format(path: Path) -> str:
    """agentic | mooncake | azure from the file's first bytes; SpecError when it cannot tell."""
    if path.is_dir():
        return "agentic"
    with open_text(path) as fh:
        try:
            head = fh.read(20_000)
        except (UnicodeDecodeError, OSError, EOFError) as exc:
            raise SpecError(path, "(format)", f"unreadable: {exc}") from None
    text = head.lstrip()
    if not text:
        raise SpecError(path, "(format)", "empty file: cannot detect the format")
    if [c.strip() for c in text.splitlines()[0].split(",")[:3]] == list(AZURE_COLUMNS):
        return "azure"
    if text.startswith(("{", "[")):
        if '"input_length"' in head and '"timestamp"' in head:
            return "mooncake"
        if '"requests"' in head:
            return "agentic"
    raise SpecError(
        path,
        "(format)",
        "cannot detect the trace format; give --format agentic|mooncake|azure",
    )
