"""`plan examples`: the example scenarios and search spaces ship in the package, list with
their kind and description, copy out without overwriting, and every one is valid."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.cli.examples import EXAMPLES_DIR, description
from simulator.planner.space import SearchSpace
from simulator.specs import Scenario
from simulator.specs.loading import load

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(EXAMPLES_DIR.glob("*.yaml"))


def plan(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_the_examples_are_package_data() -> None:
    assert EXAMPLES_DIR == ROOT / "simulator" / "examples"
    assert len(FILES) >= 4
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["simulator"]
    assert any(EXAMPLES_DIR.joinpath("x.yaml").match(f"simulator/{p}") for p in patterns)
    assert not list(ROOT.glob("scenarios/*.yaml"))  # moved, not copied


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_example_is_a_valid_scenario_or_search_space(path: Path) -> None:
    cls = SearchSpace if path.stem.startswith("search-") else Scenario
    spec = load(cls, path)
    assert spec.name


def test_list_names_every_file_with_its_kind_and_first_sentence() -> None:
    code, stdout, _ = plan("examples", "list", "--json")
    assert code == 0
    listed = json.loads(stdout)
    assert [e["name"] for e in listed] == [p.stem for p in FILES]
    for e, path in zip(listed, FILES, strict=True):
        assert e["kind"] == ("search space" if "devices" in path.read_text() else "scenario")
        comment = []
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                break
            comment.append(line.lstrip("#").strip())
        joined = " ".join(comment)
        text = e["description"]
        assert text, e
        assert joined.startswith(text), (text, joined)
        assert text.endswith((".", "?")), text
        assert joined[len(text) :][:1] in ("", " ")  # a whole sentence, the first
        assert "\n" not in text
        assert "#" not in text
    code, stdout, _ = plan("examples", "list")
    assert code == 0
    for path in FILES:
        assert path.stem in stdout


def test_description_is_the_first_sentence_of_the_leading_comment() -> None:
    text = "# One thing on two\n# lines. Then more.\n# And more.\nname: x\n# not this\n"
    assert description(text) == "One thing on two lines."
    assert description("# A question? An answer.\nname: x\n") == "A question?"
    assert description("name: x\n") == ""


def test_copy_one_then_all_elsewhere(tmp_path: Path) -> None:
    code, _, stderr = plan("examples", "copy", FILES[0].stem, "--to", str(tmp_path / "a"))
    assert code == 0, stderr
    copied = tmp_path / "a" / FILES[0].name
    assert copied.read_bytes() == FILES[0].read_bytes()
    assert f"wrote {copied}" in stderr
    code, _, stderr = plan("examples", "copy", "--all", "--to", str(tmp_path / "b"))
    assert code == 0, stderr
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [p.name for p in FILES]


def test_copy_all_over_one_existing_file_writes_nothing(tmp_path: Path) -> None:
    keep = tmp_path / FILES[-1].name
    keep.write_text("mine\n")
    code, _, stderr = plan("examples", "copy", "--all", "--to", str(tmp_path))
    assert code == 2
    assert stderr.strip().splitlines() == [
        f"error: {keep}: (file): exists; plan examples copy never overwrites: remove it, or"
        " give --to another folder"
    ]
    assert keep.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [keep.name]


def test_a_copied_example_runs_where_it_was_copied(tmp_path: Path) -> None:
    scenario = next(p for p in FILES if not p.stem.startswith("search-") and "1p1d" not in p.stem)
    code, _, stderr = plan("examples", "copy", scenario.stem, "--to", str(tmp_path))
    assert code == 0, stderr
    code, stdout, stderr = plan(
        "run", str(tmp_path / scenario.name), "--set", "duration_s=120", "--set",
        "warmup_s=0", "--set", "workload.sessions=4", "--set", "workload.concurrency=2",
        "--json",
    )  # fmt: skip
    assert code == 0, stderr
    assert json.loads(stdout)["scenario"] == scenario.stem


def test_no_reference_to_the_old_scenarios_folder_is_left() -> None:
    """Makefile, docs, tests, benchmarks and the dashboard name simulator/examples/ (the
    README is rewritten apart)."""
    stale = []
    for folder in ("tests", "docs", "benchmarks", "app", "simulator"):
        for p in (ROOT / folder).rglob("*"):
            text = p.read_text(errors="replace") if p.suffix in (".py", ".md", ".yaml") else ""
            if p != Path(__file__) and re.search(r"(?<![\w/])scenarios/", text):
                stale.append(str(p.relative_to(ROOT)))
    makefile = (ROOT / "Makefile").read_text()
    if re.search(r"(?<![\w/])scenarios/", makefile):
        stale.append("Makefile")
    assert not stale, stale
    for path in re.findall(r"simulator/examples/[\w.-]+\.yaml", makefile):
        assert (ROOT / path).is_file(), path
