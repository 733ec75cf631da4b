"""Read YAML into specs; every failure becomes one SpecError naming file, field and reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class SpecError(ValueError):
    """Bad input. ``str()`` is the one line the CLI prints before exiting with code 2."""

    def __init__(self, file: str | Path, field: str, reason: str) -> None:
        self.file = str(file)
        self.field = field
        self.reason = reason
        super().__init__(f"{self.file}: {field}: {reason}")


def first_error(exc: ValidationError, file: str | Path, prefix: str = "") -> SpecError:
    """The first pydantic error as a SpecError (with the count of the others)."""
    errors = exc.errors()
    err = errors[0]
    loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-after"))
    field = ".".join(p for p in (prefix, loc) if p) or "(top level)"
    reason = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        reason = "unknown field"
    if len(errors) > 1:
        reason += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return SpecError(file, field, reason)


def read_text(path: str | Path) -> str:
    """A file's text; a missing or unreadable file is a SpecError on ``(file)``."""
    p = Path(path)
    try:
        return p.read_text()
    except FileNotFoundError:
        raise SpecError(p, "(file)", "no such file") from None
    except OSError as exc:
        raise SpecError(p, "(file)", exc.strerror or str(exc)) from None


def read_yaml(path: str | Path) -> Any:
    p = Path(path)
    text = read_text(p)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(yaml)"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(p, where, f"invalid YAML: {problem}") from None


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
