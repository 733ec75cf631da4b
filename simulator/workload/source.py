"""A workload source: a lazy stream of sessions, plus how bad records are handled."""

from __future__ import annotations

import gzip
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from simulator.specs.loading import SpecError
from simulator.workload.request import Session

MAX_REASONS = 5


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


def open_text(path: Path) -> IO[str]:
    """Open a text file, transparently gunzipping ``*.gz``; a missing file is a SpecError."""
    try:
        if path.suffix == ".gz":
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
        return path.open(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(path, "(file)", "no such file") from None
    except OSError as exc:
        raise SpecError(path, "(file)", exc.strerror or str(exc)) from None


def lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of the non-blank lines; decoding errors are SpecErrors."""
    with open_text(path) as fh:
        lineno = 0
        try:
            for lineno, text in enumerate(fh, start=1):
                if text.strip():
                    yield lineno, text
        except (UnicodeDecodeError, OSError, EOFError) as exc:
            raise SpecError(path, f"line {lineno + 1}", f"unreadable: {exc}") from None
