"""The base classes of every spec: immutable, unknown fields are errors, and (for what a user
writes) numbers are finite numbers and booleans are booleans."""

from __future__ import annotations

import math
import types
from functools import cache
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError


class Frozen(BaseModel):
    """Frozen pydantic model, extra fields forbidden: a typo in YAML is an error, not a no-op."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


# What a field holds, as far as the checks below care: a number, a boolean, a list or a dict
# of them; None for anything else (strings, literals, nested specs: those check themselves).
Kind = tuple[Any, ...] | None


def _kind(tp: Any) -> Kind:
    origin = get_origin(tp)
    if origin is Annotated:
        return _kind(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        kinds = {_kind(a) for a in get_args(tp) if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    if origin in (list, tuple, set, frozenset):
        args = get_args(tp)
        inner = _kind(args[0]) if args else None
        return None if inner is None else ("items", inner)
    if origin is dict:
        inner = _kind(get_args(tp)[1])
        return None if inner is None else ("values", inner)
    if tp is bool:
        return ("bool",)
    if tp in (int, float):
        return ("number",)
    return None


@cache
def _field_kind(cls: type[BaseModel], name: str) -> Kind:
    field = cls.model_fields.get(name)
    return None if field is None else _kind(field.annotation)


def _problem(kind: Kind, value: Any) -> str | None:
    """Why ``value`` is not what a field of ``kind`` takes (None: let pydantic judge it)."""
    if kind is None or value is None:
        return None
    if kind[0] == "number":
        if isinstance(value, bool):
            return f"expected a number, got the boolean {str(value).lower()}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value}"
    elif kind[0] == "bool" and not isinstance(value, bool) and type(value).__name__ != "bool_":
        return f"expected a boolean (true or false), got {value!r}"  # (bool_: numpy's)
    return None


def _problems(kind: Kind, value: Any, loc: tuple[str | int, ...]) -> list[InitErrorDetails]:
    if kind is None:
        return []
    if kind[0] == "items":
        if not isinstance(value, list | tuple):
            return []
        return [e for i, v in enumerate(value) for e in _problems(kind[1], v, (*loc, i))]
    if kind[0] == "values":
        if not isinstance(value, dict):
            return []
        return [e for k, v in value.items() for e in _problems(kind[1], v, (*loc, str(k)))]
    why = _problem(kind, value)
    if why is None:
        return []
    return [
        InitErrorDetails(
            type=PydanticCustomError("value_error", "{why}", {"why": why}), loc=loc, input=value
        )
    ]


class Spec(Frozen):
    """A spec a user writes (a card, a profile, a serving config, a scenario, a search space).

    Every number is finite (``.inf`` and ``.nan`` are refused: a ``> 0`` bound lets ``.inf``
    through), a boolean is never taken for a number (``tp: true`` is not ``tp: 1``), and a
    number never for a boolean (``enable_prefix_caching: 1``). Fields that may be infinite
    would have to say so; none does.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_default=True, allow_inf_nan=False
    )

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        errors = [
            e
            for name, value in data.items()
            if isinstance(name, str)
            for e in _problems(_field_kind(cls, name), value, (name,))
        ]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return data
