"""One output file written whole (``plan fit --out``, ``plan ops predict --out``, ``plan
models import --out``, ``--markdown``): checked before the work, written to a temporary file
beside it and renamed over it; and the path checks output folders share
(:mod:`simulator.outputs`)."""

from __future__ import annotations

import contextlib
import math
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from simulator.specs.loading import SpecError, os_reason


def reason_text(exc: OSError) -> str:
    """An OS error's reason as an error line ends: lower case."""
    return os_reason(exc).lower()


def _nearest_existing(p: Path) -> Path:
    q = p
    while not os.path.lexists(q) and q.parent != q:
        q = q.parent
    return q


def check_parents(path: Path, option: str) -> None:
    """Every existing ancestor of ``path`` is a folder (``out.txt/sub`` is refused)."""
    q = _nearest_existing(path.parent) if not os.path.lexists(path) else path.parent
    try:
        st = os.stat(q)
    except OSError as exc:
        raise SpecError(path, option, f"cannot reach {q}: {reason_text(exc)}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise SpecError(path, option, f"{q} is a file, not a folder")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def finite(data: Any) -> Any:
    """NaN and +-inf -> None, recursively (JSON has neither), numpy scalars as Python's
    (``.item()``: a float32 NaN is no ``float``)."""
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite(v) for v in data]
    if hasattr(data, "item") and hasattr(data, "dtype") and getattr(data, "ndim", 1) == 0:
        data = data.item()
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data


def stat_output(p: Path, option: str) -> os.stat_result | None:
    """``os.stat`` of an output path, None where nothing is there yet; a dangling symlink, a
    parent that is a file or an unreadable path is a SpecError."""
    try:
        return os.stat(p)
    except FileNotFoundError:
        if os.path.islink(p):
            raise SpecError(p, option, "dangling symlink") from None
        return None
    except NotADirectoryError:
        check_parents(p, option)
        raise SpecError(p, option, "a parent is a file, not a folder") from None
    except OSError as exc:
        raise SpecError(p, option, reason_text(exc)) from None


def check_output_file(
    path: str | Path, option: str = "--out", inputs: Iterable[str | Path | None] = ()
) -> Path:
    """Before the work: ``path`` can be written as a file (not a folder, its parent a folder
    that exists or can be created and is writable) and is none of the command's ``inputs``
    (which it would overwrite). Creates the parent."""
    p = Path(path)
    for given in inputs:
        if given is not None and _same_file(p, Path(given)):
            raise SpecError(
                p, option, f"is the input {given} too: it would be overwritten (give another file)"
            )
    st = stat_output(p, option)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise SpecError(p, option, "is a folder: give a file path")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise SpecError(p, option, "exists and is not a regular file")
    check_parents(p, option)
    parent = Path(os.path.realpath(p)).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".probe", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise SpecError(p, option, f"cannot write there: {reason_text(exc)}") from None
    return p


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file (through symlinks and hard links)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # one of them does not exist (yet)
        return False


def write_whole(path: Path, data: str | bytes) -> None:
    """``path`` replaced whole by ``data`` (mode: the old file's, or the umask's)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_file(path: str | Path, data: str | bytes, option: str = "--out") -> Path:
    """Write ``data`` to ``path`` whole: a temporary file beside it, renamed over it."""
    p = Path(path)
    target = Path(os.path.realpath(p))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_whole(target, data)
    except OSError as exc:
        raise SpecError(p, option, f"cannot write: {reason_text(exc)}") from None
    return p
