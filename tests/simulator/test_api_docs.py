"""docs/python-api.md runs as written: its Python blocks, in order, in one namespace; and the
package exposes the four functions lazily (``import simulator`` loads none of the engine)."""

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).parents[2] / "docs" / "python-api.md"


def test_the_documented_example_runs(capsys) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 4
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "tok/s/GPU" in printed
    assert "Buy " in printed
    assert "vllm serve meta-llama/Meta-Llama-3.1-8B" in printed


def test_import_is_light_and_names_resolve() -> None:
    code = (
        "import sys, simulator\n"
        "assert 'simulator.simulation' not in sys.modules\n"
        "assert 'pandas' not in sys.modules\n"
        "from simulator import simulate, search, size, plan_memory\n"
        "import inspect\n"
        "assert all(inspect.signature(f).return_annotation is not inspect.Signature.empty\n"
        "           for f in (simulate, search, size, plan_memory))\n"
        "assert all(f.__doc__ for f in (simulate, search, size, plan_memory))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_search_from_a_path_writes_its_report(tmp_path: Path) -> None:
    from simulator import search

    space = Path(__file__).parents[1] / "app" / "tiny_search.yaml"
    found, best = search(space, out=tmp_path / "out")
    assert len(found.runs) == 8  # 2 devices x DCP 1/2 x 2 loads, grid
    assert set(best.device) <= {"h100", "h200"}
    assert list(best["rank"]) == list(range(1, len(best) + 1))
    assert (tmp_path / "out" / "report.html").is_file()
    assert (tmp_path / "out" / "cache").is_dir()


def test_a_wrong_argument_type_says_what_is_expected() -> None:
    import pytest

    from simulator import simulate

    with pytest.raises(TypeError, match="a Scenario, a YAML path or a dict"):
        simulate(42)  # type: ignore[arg-type]


def test_a_failed_search_leaves_no_stage_behind(tmp_path: Path) -> None:
    import pytest
    import yaml

    from simulator import search
    from simulator.specs import SpecError

    space = yaml.safe_load((Path(__file__).parents[1] / "app" / "tiny_search.yaml").read_text())
    unrunnable = {**space, "devices": ["d270"], "sweep": {"tp": [8], "dcp": [1]}}
    with pytest.raises(SpecError, match="every configuration was pruned"):
        search(unrunnable, out=tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary folder, no marker
