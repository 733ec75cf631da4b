"""Fixtures of the dashboard tests: the entrypoint, an AppTest factory, a tiny search output."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app" / "main.py"
# the pages import their shared modules (app/dashboard) as streamlit run does: from app/
sys.path.insert(0, str(APP.parent))

TINY_SEARCH = Path(__file__).with_name("tiny_search.yaml")


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str | None], AppTest]:
    """``app(page)``: the dashboard run once from its entrypoint (the What-if page opens
    first), then switched to ``page`` (``app_pages/<name>.py``) when given. Runs of the
    Compare and Sizing pages are kept under this test's tmp_path (their run cache)."""
    monkeypatch.setenv("PLAN_DASHBOARD_CACHE", str(tmp_path / "runs"))
    monkeypatch.chdir(ROOT)  # the pages resolve relative paths (out/, ...) from here

    def open_page(page: str | None = None) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=60).run()
        if page is not None:
            at.switch_page(page).run()
        return at

    return open_page


@pytest.fixture(scope="session")
def tiny_search(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(output folder, search space YAML) of `plan search tiny_search.yaml`."""
    from simulator.cli import app as plan

    out = tmp_path_factory.mktemp("tiny-search") / "out"
    result = CliRunner().invoke(plan, ["search", str(TINY_SEARCH), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, TINY_SEARCH
