"""Shared fixtures: where ../shared/data is, the calibration fixture, hypothesis profiles."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=200)
settings.load_profile("ci")


@pytest.fixture(autouse=True, scope="session")
def _user_data_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test (and the commands it starts) sees an empty user data folder, never the
    developer's ~/.local/share/hybrid-capacity-planner: its profiles would shadow the built-in
    ones, and tests must not write there."""
    old = os.environ.get("PLAN_HOME")
    os.environ["PLAN_HOME"] = str(tmp_path_factory.mktemp("plan-home"))
    yield
    if old is None:
        os.environ.pop("PLAN_HOME", None)
    else:
        os.environ["PLAN_HOME"] = old


@pytest.fixture(autouse=True)
def _no_terminal_width() -> Iterator[None]:
    """Captured output is as wide as the CLI makes it when piped (160 columns), not what the
    environment says: pytest-xdist workers inherit COLUMNS=80 from their launcher, which
    would wrap every table of a test run in parallel. Tests of narrow output set COLUMNS
    themselves."""
    old = os.environ.pop("COLUMNS", None)
    yield
    if old is not None:
        os.environ["COLUMNS"] = old


SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (clone the project beside ../shared)")
    return SHARED_DATA


CALIBRATION_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "calibration" / "cpu-2core"


@pytest.fixture
def calibration_profiles(tmp_path: Path) -> Path:
    """A profiles folder holding a copy of the measured CPU fixture (``cpu-2core``: its
    profile, uncalibrated, and its measurements), so tests may fit and write into it."""
    dest = tmp_path / "profiles" / "cpu-2core"
    dest.mkdir(parents=True)
    shutil.copy(CALIBRATION_FIXTURE / "profile.yaml", dest / "profile.yaml")
    shutil.copytree(CALIBRATION_FIXTURE / "measurements", dest / "measurements")
    return dest.parent


MEASURED_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "measured"


def _reset_measured() -> None:
    from simulator.measured import device, errors

    device.reset()
    errors.load_errors.cache_clear()


@pytest.fixture
def no_tables(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run on the profiles' priors even where the measured tables are installed."""
    monkeypatch.setenv("PLAN_MEASURED", "off")
    _reset_measured()
    yield
    _reset_measured()


@pytest.fixture
def fixture_tables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The committed cut of the public tables (tests/fixtures/measured, h200_sxm only) in
    place of the installed package, with a private build cache."""
    monkeypatch.setenv("PLAN_MEASURED_DATA", str(MEASURED_FIXTURE))
    monkeypatch.setenv("PLAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PLAN_MEASURED", raising=False)
    _reset_measured()
    yield MEASURED_FIXTURE
    _reset_measured()


HANG_S = 60  # a command that blocks (a FIFO opened) fails instead of hanging the suite


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Fail a test (or a table row) that blocks past HANG_S instead of hanging the suite."""

    def alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"no answer within {HANG_S} s (an input that hangs: a FIFO opened?)")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
