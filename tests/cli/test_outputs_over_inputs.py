"""An output path that names one of the command's inputs (or lies inside the --out folder
the command replaces whole) is refused before the work, one line and exit 2, and the input is
left as it was; options that contradict each other (--out with --json, PLAN_MEASURED=off with
--tables) are refused, not one of them ignored; a cache folder that could not be made is not
said to keep anything, and PLAN_CACHE_DIR expands ~ as PLAN_HOME does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.userdata import cache_root

runner = CliRunner()
SHAPES = "op,dtype,m,n,k\ngemm,bf16,16,4096,4096\n"
MEASURED = "".join(
    ["op,dtype,m,n,k,latency_us\n"]
    + [f"gemm,bf16,{m},4096,4096,{5 + m / 10:.1f}\n" for m in (1, 4, 16, 64, 256, 1024)]
)


def _file(t: Path, name: str, text: str) -> Path:
    p = t / name
    p.write_text(text)
    return p


CASES: list[tuple[str, Callable[[Path], tuple[list[str], Path | None]], str]] = [
    ("predict-out-is-the-input",
     lambda t: (["ops", "predict", "--device", "h100", "--input", str(_file(t, "s.csv", SHAPES)),
                 "--out", str(t / "s.csv")], t / "s.csv"),
     "--out: is the input"),
    ("predict-out-is-a-link-to-the-input",
     lambda t: (["ops", "predict", "--device", "h100", "--input", str(_file(t, "s.csv", SHAPES)),
                 "--out", str(_link(t / "l.csv", t / "s.csv"))], t / "s.csv"),
     "--out: is the input"),
    ("predict-out-and-json",
     lambda t: (["ops", "predict", "--device", "h100", "--input", str(_file(t, "s.csv", SHAPES)),
                 "--out", str(t / "p.csv"), "--json"], None),
     "(arguments): json: --json prints the rows; --out writes them to a file: give one"),
    ("fit-out-is-the-measurements",
     lambda t: (["fit", "--device", "h100", "--measurements", str(_file(t, "m.csv", MEASURED)),
                 "--out", str(t / "m.csv")], t / "m.csv"),
     "m.csv: --out: is the input"),
    ("silicon-markdown-is-the-data",
     lambda t: (["validate", "silicon", "--data", str(_file(t, "d.csv", "a,b\n1,2\n")),
                 "--markdown", str(t / "d.csv")], t / "d.csv"),
     "d.csv: --markdown: is the input"),
    ("silicon-markdown-inside-out",
     lambda t: (["validate", "silicon", "--out", str(t / "vs"), "--markdown",
                 str(t / "vs" / "points.csv")], None),
     "--markdown: is inside the --out folder"),
    ("inferencemax-markdown-is-the-data",
     lambda t: (["validate", "inferencemax", "--data", str(_file(t, "im.csv", "a,b\n1,2\n")),
                 "--markdown", str(t / "im.csv")], t / "im.csv"),
     "im.csv: --markdown: is the input"),
    # a file option ending in '/' names a folder: Path dropped the slash and wrote a file there
    ("fit-out-ends-in-a-slash",
     lambda t: (["fit", "--device", "h100", "--measurements", str(_file(t, "m.csv", MEASURED)),
                 "--out", f"{t}/newdir/"], None),
     "out: Invalid value for '--out': '" ),
    ("predict-out-ends-in-a-slash",
     lambda t: (["ops", "predict", "--device", "h100", "--input", str(_file(t, "s.csv", SHAPES)),
                 "--out", f"{t}/p/"], None),
     "ends in '/', a folder: give a file path"),
    ("silicon-markdown-ends-in-a-slash",
     lambda t: (["validate", "silicon", "--markdown", f"{t}/doc/"], None),
     "ends in '/', a folder: give a file path"),
]  # fmt: skip


def _link(link: Path, target: Path) -> Path:
    link.symlink_to(target)
    return link


@pytest.mark.parametrize(("name", "make", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_an_output_over_an_input_is_refused_and_the_input_kept(
    tmp_path: Path,
    name: str,
    make: Callable[[Path], tuple[list[str], Path | None]],
    fragment: str,
) -> None:
    argv, kept = make(tmp_path)
    before = kept.read_bytes() if kept is not None else None
    result = runner.invoke(app, argv)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert fragment in lines[0]
    if kept is not None:
        assert kept.read_bytes() == before
    assert not (tmp_path / "newdir").exists()


@pytest.mark.parametrize("value", ["off", "offf"])
def test_tables_scored_with_the_tables_switched_off_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("PLAN_MEASURED", value)
    result = runner.invoke(app, ["validate", "ops", "--tables", "--device", "h100"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: (environment): PLAN_MEASURED: ")


def test_plan_cache_dir_expands_the_home_tilde(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PLAN_CACHE_DIR", "~/c")
    assert cache_root() == tmp_path / "c"


def test_a_cache_that_could_not_be_made_is_not_said_to_keep_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_data: Path
) -> None:
    blocker = _file(tmp_path, "afile", "x")
    monkeypatch.setenv("PLAN_CACHE_DIR", str(blocker))
    result = runner.invoke(app, ["validate", "silicon", "--limit", "1"])
    assert result.exit_code == 0, result.output
    assert "kept in" not in result.stderr
    monkeypatch.setenv("PLAN_CACHE_DIR", str(tmp_path / "cache"))
    result = runner.invoke(app, ["validate", "silicon", "--limit", "1"])
    assert result.exit_code == 0, result.output
    assert f"per-point results kept in {tmp_path / 'cache' / 'validate'}" in result.stderr
