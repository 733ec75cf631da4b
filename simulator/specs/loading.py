"""Read input files into specs; every failure becomes one SpecError naming file, field and reason.

The one file layer every reader goes through (specs, tables, traces):

- a path must name a regular, readable file: a directory, a FIFO, a device (``/dev/zero``),
  a socket, a dangling symlink or a symlink loop is refused by its name, from ``stat`` alone,
  before anything opens it (opening a FIFO would block until a writer comes);
- a file is at most a size limit for its kind (:data:`YAML_LIMIT`, :data:`JSON_LIMIT`,
  :data:`TABLE_LIMIT`, :data:`TRACE_LIMIT`): a wrong file (a trace passed as a scenario, a
  disk image) is refused at once instead of being parsed for minutes;
- text is UTF-8 (a leading byte-order mark is dropped); the first byte that is not names its
  line;
- a YAML mapping that repeats a key is an error (PyYAML keeps the last one silently), and so
  is a JSON object read with :func:`read_json`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

MIB = 1 << 20
GIB = 1 << 30
# YAML specs: the largest shipped one is 6 KB and a generated search space a few hundred KB;
# PyYAML's pure-Python loader takes about 30 s per MiB on a busy 2-core machine, so 16 MiB is
# already minutes of parsing: anything larger is the wrong file.
YAML_LIMIT = 16 * MIB
# JSON specs (latency_models.json with shape tables, Hugging Face config.json): the largest
# shipped one is 53 KB; json parses 64 MiB in about a second, in about 1 GiB of memory.
JSON_LIMIT = 64 * MIB
# CSV tables read whole by pandas (op shapes, measurements, validation points): MB in practice.
TABLE_LIMIT = 256 * MIB
# One trace file (compressed size on disk): public request traces are tens of MB to a few
# hundred MB uncompressed; an agentic .json file is parsed whole (about 10x its size in memory).
TRACE_LIMIT = 2 * GIB


# control characters (a newline, a NUL byte) as escapes, so that an error stays one line
_CONTROL_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(32), 127) if c != 9} | {
    10: "\\n",
    13: "\\r",
}


class SpecError(ValueError):
    """Bad input. ``str()`` is the one line the CLI prints before exiting with code 2.

    ``args`` are ``(file, field, reason)``, so that the error can be rebuilt from them: SimPy
    re-raises a failed process's exception as ``type(e)(*e.args)``, and a worker process
    pickles it (``__reduce__``) to hand it to the parent."""

    # the other errors found with this one (every error of a failed validation after the
    # first): the CLI prints each as its own ``error:`` line after this one's
    more: tuple[SpecError, ...] = ()

    def __init__(self, file: str | Path, field: str, reason: str) -> None:
        self.file = str(file)
        self.field = field
        self.reason = reason
        super().__init__(self.file, field, reason)

    def __str__(self) -> str:
        # one line whatever the input held: a newline or NUL byte from a value is escaped
        return f"{self.file}: {self.field}: {self.reason}".translate(_CONTROL_ESCAPES)

    def errors(self) -> list[SpecError]:
        """This error and the others found with it, in order."""
        return [self, *self.more]

    def remapped(self, one: Callable[[SpecError], SpecError]) -> SpecError:
        """This error and those found with it, each passed through ``one`` (to rename its
        file or field), as one error again: the first, the rest in its ``more``."""
        errors = [one(e) for e in self.errors()]
        errors[0].more = tuple(errors[1:])
        return errors[0]

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.file, self.field, self.reason), self.__dict__.copy())


def _spec_error(err: Any, file: str | Path, prefix: str) -> SpecError:
    loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-after"))
    field = ".".join(p for p in (prefix, loc) if p) or "(top level)"
    reason = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        reason = "unknown field"
    elif err["type"] in ("dict_type", "model_type", "model_attributes_type"):
        reason = f"must be a mapping (key: value), got {_shown(err.get('input'))}"
    return SpecError(file, field, reason)


def _shown(value: Any) -> str:
    """A wrong input as the error line shows it, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def first_error(exc: ValidationError, file: str | Path, prefix: str = "") -> SpecError:
    """The first pydantic error as a SpecError; every other one (repeats dropped) in its
    ``more``, which the CLI prints after it, one ``error:`` line each."""
    errors: list[SpecError] = []
    for err in exc.errors():
        spec_error = _spec_error(err, file, prefix)
        if all(str(e) != str(spec_error) for e in errors):
            errors.append(spec_error)
    first = errors[0]
    first.more = tuple(errors[1:])
    return first


# ------------------------------------------------------------------------------ the file layer


def size_text(n: float) -> str:
    """``16 MiB``, ``2 GiB``, ``1.5 KiB``, ``10 bytes``."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "an unknown kind of file"


def os_reason(exc: OSError) -> str:
    """The reason of an OSError in words (a symlink loop said so)."""
    if exc.errno == errno.ELOOP:
        return "symlink loop (too many levels of symbolic links)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


def stat_path(path: str | Path, field: str = "(file)") -> os.stat_result:
    """``os.stat`` of ``path`` (symlinks followed); a missing path, a dangling symlink, a
    symlink loop or a parent that is not a folder is a SpecError on ``field``."""
    p = Path(path)
    try:
        return os.stat(p)
    except FileNotFoundError:
        if os.path.islink(p):
            raise SpecError(p, field, f"dangling symlink (to {os.readlink(p)})") from None
        raise SpecError(p, field, "no such file") from None
    except NotADirectoryError:
        raise SpecError(p, field, "no such file (a parent is not a folder)") from None
    except OSError as exc:
        raise SpecError(p, field, os_reason(exc)) from None
    except ValueError:  # os.stat's "embedded null byte"
        raise SpecError(p, field, "a NUL byte in the path") from None


def check_file(path: str | Path, limit: int = JSON_LIMIT, what: str = "file") -> os.stat_result:
    """Refuse anything but a regular readable file of at most ``limit`` bytes, without opening
    it (``stat`` only: a FIFO is never opened). ``what`` names the kind in the size message."""
    p = Path(path)
    st = stat_path(p)
    if stat.S_ISDIR(st.st_mode):
        raise SpecError(p, "(file)", "is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise SpecError(p, "(file)", f"is {_kind(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise SpecError(
            p, "(file)",
            f"{size_text(st.st_size)}, over the {size_text(limit)} limit of {what}"
            " (is it the right file?)",
        )  # fmt: skip
    if not os.access(p, os.R_OK):
        raise SpecError(p, "(file)", "permission denied")
    return st


def check_dir(path: str | Path, field: str = "(folder)") -> os.stat_result:
    """Refuse anything but an existing readable directory."""
    p = Path(path)
    try:
        st = stat_path(p, field)
    except SpecError as exc:
        raise SpecError(p, field, exc.reason.replace("no such file", "no such folder")) from None
    if not stat.S_ISDIR(st.st_mode):
        kind = "a file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
        raise SpecError(p, field, f"not a folder ({kind})")
    if not os.access(p, os.R_OK | os.X_OK):
        raise SpecError(p, field, "permission denied")
    return st


def read_bytes(path: str | Path, limit: int = JSON_LIMIT, what: str = "file") -> bytes:
    """A file's bytes, through :func:`check_file`."""
    p = Path(path)
    check_file(p, limit, what)
    try:
        with p.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise SpecError(p, "(file)", os_reason(exc)) from None
    if len(data) > limit:  # grew since the stat
        raise SpecError(p, "(file)", f"over the {size_text(limit)} limit of {what}")
    return data


def utf8_error(path: str | Path, exc: UnicodeDecodeError, data: bytes, line0: int = 0) -> SpecError:
    """The SpecError of a UnicodeDecodeError over ``data`` (whose first line is ``line0 + 1``)."""
    line = line0 + data.count(b"\n", 0, exc.start) + 1
    column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
    bad = data[exc.start : exc.start + 1].hex() or "end"
    return SpecError(
        path, f"line {line}", f"not UTF-8 text (byte 0x{bad} at column {column}): save it as UTF-8"
    )


def decode_utf8(data: bytes, path: str | Path) -> str:
    """``data`` as UTF-8 (a leading byte-order mark dropped); a bad byte names its line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise utf8_error(path, exc, data) from None
    return text.removeprefix("\ufeff")


def check_text_file(path: str | Path, limit: int = TABLE_LIMIT, what: str = "a table") -> None:
    """A regular file of at most ``limit`` bytes whose every byte is UTF-8 (read through once:
    for the inputs a command hands to a reader that does not check them itself)."""
    decode_utf8(read_bytes(path, limit, what), path)


def read_text(path: str | Path, limit: int = JSON_LIMIT, what: str = "a JSON spec") -> str:
    """A file's text: a regular file, at most ``limit`` bytes, UTF-8; else a SpecError."""
    return decode_utf8(read_bytes(path, limit, what), path)


_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_digest(path: str | Path) -> str:
    """sha256 of a file's content, read once per (real path, size, mtime) in this process; of
    a folder: of its files' names and digests (not recursive). A path that cannot be read
    digests as what it is (the reader reports it), never raises."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    if stat.S_ISDIR(st.st_mode):
        try:
            entries = sorted(e for e in p.iterdir() if e.is_file())
        except OSError as exc:
            return f"unreadable:{exc.errno}"
        text = "".join(f"{e.name}:{file_digest(e)};" for e in entries)
        return hashlib.sha256(text.encode()).hexdigest()
    if not stat.S_ISREG(st.st_mode):
        return f"special:{stat.S_IFMT(st.st_mode)}"
    key = (os.path.realpath(p), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        try:
            with p.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
        except OSError as exc:
            return f"unreadable:{exc.errno}"
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


class _DuplicateKeyError(Exception):
    def __init__(self, key: Any, line: int, first: int) -> None:
        super().__init__(key, line, first)
        self.key, self.line, self.first = key, line, first


# libyaml's parser when PyYAML was built with it (~10x faster than the pure-Python one: the
# profiles a run reads took a third of a second), the same safe constructor either way
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UniqueKeyLoader(_SafeLoader):  # type: ignore[misc]
    """``yaml.SafeLoader`` that refuses a mapping repeating a key (merge keys ``<<`` may still
    be overridden, as YAML defines)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # unhashable: the constructor says so
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise _DuplicateKeyError(key, line, first)
                seen[key] = line
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def parse_yaml(text: str, file: str | Path) -> Any:
    """YAML text (of ``file``, for messages) with duplicate keys refused."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)
    except _DuplicateKeyError as dup:
        raise SpecError(
            file, f"line {dup.line}",
            f"duplicate key {dup.key!r} (first at line {dup.first}): YAML would keep only the"
            " last; give it once",
        ) from None  # fmt: skip
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(yaml)"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(file, where, f"invalid YAML: {problem}") from None
    except ValueError as exc:  # a value the constructors cannot make (Python's int limit)
        problem = (
            "an integer of more than 4,300 digits (no spec number is that long)"
            if "integer string conversion" in str(exc)
            else str(exc).splitlines()[0]
        )
        raise SpecError(file, "(yaml)", f"invalid YAML value: {problem}") from None


def read_yaml(path: str | Path) -> Any:
    p = Path(path)
    return parse_yaml(read_text(p, YAML_LIMIT, "a YAML spec"), p)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) < len(pairs):  # the rare case pays for finding which key
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r} in one object: give it once")
            seen.add(key)
    return out


def loads_unique(text: str) -> Any:
    """``json.loads`` with a key given twice refused (``json`` keeps the last value without a
    word: a trace's ``"out": 10, "out": 2000`` replayed 2,000 tokens) and nesting past
    Python's recursion limit too: each a ValueError (``JSONDecodeError`` for bad syntax).
    About 20 % slower than ``json.loads`` alone (0.22 vs 0.18 s on the 710 WEKA sessions)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply") from None


def parse_json(text: str, file: str | Path) -> Any:
    """JSON text as :func:`loads_unique` reads it; a mistake is one SpecError."""
    try:
        return loads_unique(text)
    except json.JSONDecodeError as exc:
        raise SpecError(file, f"line {exc.lineno}", f"invalid JSON: {exc.msg}") from None
    except ValueError as exc:
        raise SpecError(file, "(json)", str(exc)) from None


def read_json(path: str | Path, limit: int = JSON_LIMIT) -> Any:
    """A JSON file through the file layer, duplicate keys refused."""
    p = Path(path)
    return parse_json(read_text(p, limit), p)


def parse(cls: type[M], data: Any, file: str | Path, prefix: str = "") -> M:
    if not isinstance(data, dict):
        raise SpecError(
            file, prefix or "(top level)", f"expected a mapping, got {type(data).__name__}"
        )
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise first_error(exc, file, prefix) from None


def load(cls: type[M], path: str | Path) -> M:
    """Load and validate one YAML file as ``cls``."""
    return parse(cls, read_yaml(path), path)
