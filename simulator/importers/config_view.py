"""A config.json mapping for the family readers (``simulator/model_import.py`` and
``simulator/importers/``): accessors that name the missing or bad key in the SpecError."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.specs import limits
from simulator.specs.loading import SpecError

# keys with a bound of their own (simulator/specs/limits.py)
_MAXIMA = {"num_hidden_layers": (limits.MAX_LAYERS, "layers of one model")}


class ConfigView:
    """A config.json mapping whose accessors name the missing or bad key in the SpecError."""

    def __init__(self, data: Mapping[str, Any], source: str, prefix: str = "") -> None:
        self.data = data
        self.source = source
        self.prefix = prefix

    def field(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def error(self, key: str, reason: str) -> SpecError:
        return SpecError(self.source, self.field(key), reason)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def require(self, key: str) -> Any:
        if key not in self.data:
            raise self.error(key, f"missing required key {key!r}")
        if self.data[key] is None:
            raise self.error(key, "is null")
        return self.data[key]

    def integer(self, key: str, default: int | None = None, minimum: int | None = None) -> int:
        """``key`` as an integer of at least ``minimum``, and at most the bound of its key
        (``num_hidden_layers``: ``limits.MAX_LAYERS``) or else ``limits.MAX_CONFIG_INT``."""
        if default is not None and self.data.get(key) is None:
            return default
        value = self.require(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {value}")
        bound, why = _MAXIMA.get(key, (limits.MAX_CONFIG_INT, "no real model comes near"))
        if value > bound:
            shown = f"{value:,}" if value < 10**15 else f"a {len(str(value))}-digit number"
            raise self.error(key, f"must be at most {bound:,} ({why}), got {shown}")
        return value

    def first_int(self, *keys: str) -> int:
        """The first of several alias keys that is present (e.g. n_routed_experts / num_experts)."""
        for key in keys:
            if self.has(key):
                return self.integer(key)
        raise self.error(keys[0], f"missing required key {keys[0]!r} (or {', '.join(keys[1:])})")

    def optional_int(self, key: str) -> int | None:
        return self.integer(key) if self.has(key) else None

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.require(key)
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.error(key, f"expected a list of integers, got {value!r}")
        return list(value)

    def str_list(self, key: str) -> list[str]:
        value = self.require(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"expected a list of strings, got {value!r}")
        return list(value)

    def sub(self, key: str) -> ConfigView:
        value = self.require(key)
        if not isinstance(value, dict):
            raise self.error(key, f"expected a mapping, got {type(value).__name__}")
        return ConfigView(value, self.source, f"{self.field(key)}.")
