"""Capacity planner for hybrid-attention LLM serving (importable core; CPU only).

``from simulator import simulate, search, size, plan_memory``: the ``plan`` commands as
functions (:mod:`simulator.api`; docs/python-api.md). They are loaded on first use, so that
``import simulator`` stays light.
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["__version__", "plan_memory", "search", "simulate", "size"]

if TYPE_CHECKING:
    from simulator.api import plan_memory, search, simulate, size


def __getattr__(name: str) -> Any:
    if name in ("simulate", "search", "size", "plan_memory"):
        from simulator import api

        return getattr(api, name)
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")
