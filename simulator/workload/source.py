"""A workload source: a lazy stream of sessions, plus how bad records are handled."""

from __future__ import annotations

import codecs
import gzip
import io
import json
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from simulator.specs import limits
from simulator.specs.loading import (
    TRACE_LIMIT,
    SpecError,
    check_file,
    os_reason,
    size_text,
    utf8_error,
)
from simulator.workload.request import Session

MAX_REASONS = 5
# trace text: UTF-8, a leading byte-order mark (as Excel and Windows tools write) dropped
TEXT = "utf-8-sig"
# a block id of a trace: the ids are kept in int64 arrays
MAX_HASH_ID = 2**63 - 1


def shown_int(value: int) -> str:
    """``12,345``, or ``~1e400`` for an integer too long to read (no float: 10^400 overflows)."""
    return f"{value:,}" if value < 10**15 else f"~1e{len(str(value)) - 1}"


def check_tokens(value: int, field: str) -> int:
    """A trace request's prompt or output tokens, at most the generators' bound."""
    if value > limits.MAX_GENERATED_TOKENS:
        raise ValueError(
            f"{field}: {shown_int(value)} tokens exceeds {limits.MAX_GENERATED_TOKENS:,} (10x"
            " the longest context of any model card)"
        )
    return value


@dataclass(slots=True)
class BadRecords:
    """Malformed records: raise the first (default), or with ``skip`` count and keep going."""

    skip: bool = False
    count: int = 0
    reasons: list[str] = field(default_factory=list)

    def handle(self, err: SpecError) -> None:
        if not self.skip:
            raise err
        self.count += 1
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(str(err))


@dataclass(slots=True)
class Source:
    """Where sessions come from: a trace reader or a generator.

    ``open()`` starts a fresh pass over the sessions (a source can be read more than once).
    ``timed``: sessions carry real start times (open-loop replay is meaningful).
    ``has_sessions``: turns and think times are meaningful (not one request per session).
    ``has_prefix``: requests carry block ids (else reuse is not reported).
    """

    label: str
    kind: str
    block_tokens: int
    open: Callable[[], Iterator[Session]]
    timed: bool
    has_sessions: bool
    has_prefix: bool
    bad: BadRecords = field(default_factory=BadRecords)


# an integrity pass (gzip stream whole, every byte UTF-8) per file version, in this process
_CHECKED: dict[tuple[str, int, int], None] = {}
CHUNK = 1 << 20


def check_trace_file(path: Path) -> None:
    """Refuse a trace file that is not a regular file within :data:`TRACE_LIMIT`, whose gzip
    stream is truncated or corrupt, or whose text is not UTF-8, before a replay reads it.

    The file is read through once (gzip: decompressed with zlib, every member checked up to
    its CRC and length trailer), about a second per GiB, and remembered by (path, size,
    mtime): a replay that would meet the fault after hours of simulation fails at once."""
    st = check_file(path, TRACE_LIMIT, "a trace file")
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    if key in _CHECKED:
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines_before = 0

    def text(data: bytes, final: bool = False) -> None:
        nonlocal lines_before
        pending = decoder.getstate()[0]
        try:
            decoder.decode(data, final)
        except UnicodeDecodeError as exc:
            raise utf8_error(path, exc, pending + data, lines_before) from None
        lines_before += data.count(b"\n")

    try:
        with path.open("rb") as fh:
            if path.suffix == ".gz":
                _gunzip_through(path, fh, text)
            else:
                while chunk := fh.read(CHUNK):
                    text(chunk)
    except OSError as exc:
        raise SpecError(path, "(file)", os_reason(exc)) from None
    text(b"", final=True)
    _CHECKED[key] = None


def _gunzip_through(path: Path, fh: IO[bytes], text: Callable[[bytes], None]) -> None:
    """Decompress every gzip member of ``fh`` to its CRC/length trailer, handing the output
    to ``text`` (zero padding after the last member is allowed, as gzip allows it)."""
    read = members = 0
    inflate = zlib.decompressobj(wbits=31)
    fed = False  # the current member has had input
    while chunk := fh.read(CHUNK):
        read += len(chunk)
        while chunk:
            if not fed and not chunk.strip(b"\0") and members:
                break  # padding
            fed = True
            if members == 0 and read == len(chunk) and not chunk.startswith(b"\x1f\x8b"):
                raise SpecError(
                    path, "(gzip)", "not a gzip file (it does not start with the gzip magic"
                    " bytes): compress it, or drop the .gz suffix",
                )  # fmt: skip
            try:
                text(inflate.decompress(chunk))
            except zlib.error as exc:
                raise SpecError(
                    path, "(gzip)", f"corrupt gzip data ({exc}); re-download or re-compress it"
                ) from None
            if not inflate.eof:
                break
            members += 1
            chunk = inflate.unused_data
            inflate = zlib.decompressobj(wbits=31)
            fed = False
    if members == 0 and not fed:
        raise SpecError(path, "(gzip)", "empty file: not a gzip stream")
    if fed:
        raise SpecError(
            path, "(gzip)",
            f"truncated: the gzip stream ends after {size_text(read)} without its trailer"
            " (an interrupted download or copy?); re-download or re-compress it",
        )  # fmt: skip


class _CheckedText(io.TextIOBase):
    """A text stream whose read errors (bad gzip data, non-UTF-8 bytes, I/O) are SpecErrors
    naming the file and line, wherever the reader (csv, json, a line loop) meets them."""

    def __init__(self, raw: IO[str], path: Path) -> None:
        super().__init__()
        self._raw = raw
        self._path = path
        self.lineno = 0

    def _error(self, exc: BaseException) -> SpecError:
        where = f"line {self.lineno + 1}"
        if isinstance(exc, UnicodeDecodeError):
            return SpecError(self._path, where, f"not UTF-8 text ({exc.reason}): save it as UTF-8")
        if isinstance(exc, EOFError | zlib.error | gzip.BadGzipFile):
            return SpecError(self._path, "(gzip)", f"truncated or corrupt gzip stream ({exc})")
        assert isinstance(exc, OSError)
        return SpecError(self._path, where, f"unreadable: {os_reason(exc)}")

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> str:
        try:
            data = self._raw.read(-1 if size is None else size)
        except (UnicodeDecodeError, EOFError, zlib.error, OSError) as exc:
            raise self._error(exc) from None
        self.lineno += data.count("\n")
        return data

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        try:
            line = self._raw.readline(-1 if size is None else size)
        except (UnicodeDecodeError, EOFError, zlib.error, OSError) as exc:
            raise self._error(exc) from None
        if line.endswith("\n"):
            self.lineno += 1
        return line

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_text(path: Path) -> IO[str]:
    """Open a trace file as text, transparently gunzipping ``*.gz``, after
    :func:`check_trace_file` (a FIFO, a device or a truncated gzip file is a SpecError
    before anything reads it); a later read error is a SpecError too."""
    check_trace_file(path)
    try:
        if path.suffix == ".gz":
            raw: IO[str] = io.TextIOWrapper(gzip.open(path, "rb"), encoding=TEXT)  # noqa: SIM115
        else:
            raw = path.open(encoding=TEXT)
    except OSError as exc:
        raise SpecError(path, "(file)", os_reason(exc)) from None
    return _CheckedText(raw, path)  # type: ignore[return-value]


def lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of the non-blank lines; decoding errors are SpecErrors."""
    with open_text(path) as fh:
        for lineno, text in enumerate(fh, start=1):
            if text.strip():
                yield lineno, text


def json_line_error(text: str, exc: json.JSONDecodeError) -> str:
    """Why a line of a JSONL trace is not JSON; a line that opens an object or a list alone
    is most likely a pretty-printed file, which the reader takes one line at a time."""
    why = f"invalid JSON: {exc.msg}"
    if text.strip() in ("{", "["):
        why += (
            " (a .jsonl trace is one JSON object per line; a pretty-printed, multi-line JSON"
            " trace needs the .json suffix)"
        )
    return why
