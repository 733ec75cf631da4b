"""Environment variables naming the user's data folder: a `~user` the system does not know is
one line and exit 2; a folder name too long to look up, or a folder named profile.yaml in it,
holds no profile and lists none (the built-in ones still list)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app

runner = CliRunner()


@pytest.mark.parametrize("variable", ["PLAN_HOME", "XDG_DATA_HOME"])
def test_an_unknown_users_tilde_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.delenv("PLAN_HOME", raising=False)
    monkeypatch.setenv(variable, "~no-such-user-here/x")
    result = runner.invoke(app, ["profiles", "list"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: (environment): {variable}: '~no-such-user-here/x': cannot expand '~' (no such"
        " user)"
    ]


@pytest.mark.parametrize("make", ["too-long", "profile-yaml-folder"])
def test_a_user_folder_without_profiles_lists_the_built_in_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: str
) -> None:
    home = tmp_path / ("x" * 300 if make == "too-long" else "home")
    if make == "profile-yaml-folder":
        (home / "profiles" / "zz" / "profile.yaml").mkdir(parents=True)
    monkeypatch.setenv("PLAN_HOME", str(home))
    result = runner.invoke(app, ["profiles", "list", "--json"])
    assert result.exit_code == 0, result.output
    assert "h100" in result.stdout
    assert "zz" not in result.stdout
