"""What a dashboard user types or points a page at, refused in one line (``dashboard.checks``):
a search output folder whose CSVs are not what ``plan search`` writes, and folder names the
OS cannot take. Each case ended in the page's "internal problem (...)" line before.
Table-driven: (id, change, the file or field named, fragment)."""

from __future__ import annotations

import csv
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from dashboard import checks  # app/ is on sys.path (conftest)
from streamlit.testing.v1 import AppTest

from simulator.specs import SpecError

PAGE = "app_pages/search_results.py"


def edited(column: str | None = None, value: str = "", drop: str | None = None,
           raw: bytes | None = None) -> Callable[[Path], None]:  # fmt: skip
    """A change to a copy of runs.csv: a column's every cell set, a column dropped, or the
    file replaced by ``raw`` bytes."""

    def change(file: Path) -> None:
        if raw is not None:
            file.write_bytes(raw)
            return
        with file.open(newline="") as fh:
            rows = list(csv.reader(fh))
        header, body = rows[0], rows[1:]
        if column is not None:
            i = header.index(column)
            for row in body:
                row[i] = value
        if drop is not None:
            i = header.index(drop)
            for row in [header, *body]:
                row.pop(i)
        with file.open("w", newline="") as fh:
            csv.writer(fh).writerows([header, *body])

    return change


CASES = [
    ("cut-inside-a-quote", edited(raw=b'config_id,device\n"h100'), "(file)",
     "not a table plan search writes: Error tokenizing data"),
    ("not-utf-8", edited(raw=b"\xff\xfe\xfa\n"), "(file)", "codec can't decode"),
    ("row-longer-than-header", edited(raw=b"config_id,device\na,h100,9\n"), "(file)",
     "more cells than the header"),
    ("no-device-column", edited(drop="device"), "(columns)", "missing device"),
    ("no-throughput-column", edited(drop="throughput_tok_per_s_per_gpu"), "(columns)",
     "missing throughput_tok_per_s_per_gpu"),
    ("concurrency-word", edited("concurrency", "abc"), "row 2, column concurrency",
     "'abc' is not a whole number"),
    ("concurrency-inf", edited("concurrency", "inf"), "row 2, column concurrency",
     "inf is not a whole number"),
    ("concurrency-negative", edited("concurrency", "-5"), "row 2, column concurrency",
     "-5 is not a whole number of at least 1"),
    ("device-empty", edited("device", ""), "row 2, column device", "empty is not a name"),
    ("throughput-nan", edited("throughput_tok_per_s_per_gpu", "nan"),
     "row 2, column throughput_tok_per_s_per_gpu", "empty is not a finite number"),
    ("slo-met-maybe", edited("slo_met", "maybe"), "row 2, column slo_met",
     "'maybe' is not True or False"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "field", "fragment"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_a_runs_table_not_from_plan_search_is_one_line(
    tiny_search: tuple[Path, Path], tmp_path: Path, change, field, fragment
) -> None:
    folder = tmp_path / "out"
    shutil.copytree(tiny_search[0], folder, ignore=shutil.ignore_patterns("cache"))
    change(folder / "runs.csv")
    with pytest.raises(SpecError) as caught:
        checks.read_table(folder / "runs.csv", checks.RUNS_COLUMNS)
    assert caught.value.field == field, str(caught.value)
    assert fragment in caught.value.reason, str(caught.value)
    assert "np." not in str(caught.value)


def test_the_table_plan_search_wrote_reads(tiny_search: tuple[Path, Path]) -> None:
    table = checks.read_table(tiny_search[0] / "runs.csv", checks.RUNS_COLUMNS)
    assert len(table) == 8
    best = checks.read_table(tiny_search[0] / "best.csv", checks.BEST_COLUMNS)
    assert not best.empty


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "give a folder for the runs"),
        ("a\x00b", "cannot hold a NUL byte"),
        ("x" * 5000, "(5,000 characters): file name too long"),
        ("/etc/hostname", "exists and is not a folder"),
        ("/etc/hostname/runs", "is a file, not a folder"),
    ],
)
def test_a_run_cache_that_cannot_be_a_folder_is_one_line(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as caught:
        checks.cache_folder("compare", text)
    assert (caught.value.file, caught.value.field) == ("compare", "run cache")
    assert fragment in caught.value.reason, str(caught.value)


def test_a_new_run_cache_folder_is_fine(tmp_path: Path) -> None:
    assert checks.cache_folder("compare", str(tmp_path / "new" / "cache")).name == "cache"


def test_the_page_shows_the_line_not_an_internal_problem(
    app: Callable[..., AppTest], tiny_search: tuple[Path, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "out"
    shutil.copytree(tiny_search[0], folder, ignore=shutil.ignore_patterns("cache"))
    edited("concurrency", "abc")(folder / "runs.csv")
    at = app(PAGE)
    for value, fragment in ((str(folder), "'abc' is not a whole number"),
                            ("x" * 5000, "file name too long")):  # fmt: skip
        at.text_input(key="search_folder").set_value(value).run()
        assert not at.exception
        errors = [e.value for e in at.error]
        assert len(errors) == 1, errors
        assert fragment in errors[0]
        assert "internal problem" not in errors[0]
