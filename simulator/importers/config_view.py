"""What a family reader may ask of a config.json mapping (``simulator.model_import._Config``).

A structural type, so that reader modules need not import ``simulator.model_import`` (which
imports them to register them).
"""

from __future__ import annotations

from typing import Any, Protocol

from simulator.specs.loading import SpecError


class ConfigView(Protocol):
    """A config.json mapping whose accessors name the missing or bad key in the SpecError."""

    source: str
    prefix: str

    def field(self, key: str) -> str: ...

    def error(self, key: str, reason: str) -> SpecError: ...

    def has(self, key: str) -> bool: ...

    def get(self, key: str, default: Any = None) -> Any: ...

    def require(self, key: str) -> Any: ...

    def integer(self, key: str, default: int | None = None) -> int: ...

    def optional_int(self, key: str) -> int | None: ...

    def boolean(self, key: str, default: bool) -> bool: ...
