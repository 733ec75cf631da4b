"""The user's data folder: fitted latency models and calibrations live there, never in the
installed package.

:func:`plan_home` is the user's data folder (``$PLAN_HOME``, else
``$XDG_DATA_HOME/hybrid-capacity-planner``, else ``~/.local/share/hybrid-capacity-planner``):
``plan fit`` and ``calibrate`` write fitted models to ``profiles/<device>/`` there by default,
never into the installed package; :func:`latency_models_file` finds a device's fitted models
there first, then in the package.
"""

from __future__ import annotations

import os
from pathlib import Path

from simulator.specs.loading import SpecError

ENV_HOME = "PLAN_HOME"
APP_DIR = "hybrid-capacity-planner"


def plan_home() -> Path:
    """The user's data folder: ``$PLAN_HOME``, else ``$XDG_DATA_HOME/hybrid-capacity-planner``,
    else ``~/.local/share/hybrid-capacity-planner``."""
    home = os.environ.get(ENV_HOME)
    if home:
        return expanded(home, ENV_HOME)
    xdg = os.environ.get("XDG_DATA_HOME")
    base = expanded(xdg, "XDG_DATA_HOME") if xdg else Path.home() / ".local" / "share"
    return base / APP_DIR


def cache_root() -> Path:
    """Where rebuildable results are kept: ``$PLAN_CACHE_DIR`` (``~`` expanded), else
    ``~/.cache/hybrid-capacity-planner``."""
    root = os.environ.get("PLAN_CACHE_DIR")
    return expanded(root, "PLAN_CACHE_DIR") if root else Path.home() / ".cache" / APP_DIR


def expanded(value: str, variable: str) -> Path:
    """``value`` with a leading ``~`` / ``~user`` expanded; a user the system does not know
    is a SpecError on the variable (Python raises RuntimeError)."""
    try:
        return Path(value).expanduser()
    except RuntimeError:
        raise SpecError(
            "(environment)", variable, f"{value!r}: cannot expand '~' (no such user)"
        ) from None


def user_profiles_dir() -> Path:
    """``<plan_home>/profiles``: fitted latency models and calibrations of the user."""
    return plan_home() / "profiles"


def user_device_dir(name: str) -> Path:
    return user_profiles_dir() / name


def latency_models_file(name: str) -> Path | None:
    """The fitted latency models of device ``name``: the user's
    (``<plan_home>/profiles/<name>/latency_models.json``) first, then the package's
    (``hardware_profiles/<name>/latency_models.json``); None when neither exists."""
    from hardware_profiles import PROFILES_DIR

    for p in (user_device_dir(name) / "latency_models.json",
              PROFILES_DIR / name / "latency_models.json"):  # fmt: skip
        if p.is_file():
            return p
    return None
