"""`plan fit --vidur DIR` and `plan validate ops --vidur DIR` over a folder whose CSVs are
broken: each mistake is one ``error: <file>: <field>: <reason>`` line and exit 2, never a
traceback, a hang on a FIFO or a page of RuntimeWarnings; a folder without GEMM rows is
refused, not fitted on all-reduce alone.

The folder is synthetic (the two file names and columns of Vidur's profiling tables, with
made-up latencies); the first case shows it fits as it is, so each broken copy fails for its
one mistake."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from simulator.cost.vidur import ALL_REDUCE_FILE, MLP_FILE
from tests.cli.test_bad_files import plan

OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
MLP_HEADER = ["num_tokens", "num_tensor_parallel_workers",
              *(f"time_stats.{op}.median" for op in OPS)]  # fmt: skip
AR_HEADER = ["size", "num_workers", "time_stats.all_reduce.median"]


def mlp_rows() -> list[list[str]]:
    return [[str(t), str(tp), *(f"{0.01 + 1e-5 * t * (i + 1) / tp:.6f}" for i in range(4))]
            for t in (1, 4, 16, 64, 256, 1024) for tp in (1, 2, 4, 8)]  # fmt: skip


def ar_rows() -> list[list[str]]:
    return [[str(2**b), str(w), f"{0.005 + 2**b / 1e8 * w:.6f}"]
            for b in range(10, 26, 3) for w in (2, 4, 8)]  # fmt: skip


def csv_text(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(",".join(r) for r in [header, *rows]) + "\n"


def folder(t: Path, mlp: str | bytes | None = None, ar: str | None = None) -> Path:
    d = t / "vidur"
    d.mkdir()
    data = csv_text(MLP_HEADER, mlp_rows()) if mlp is None else mlp
    (d / MLP_FILE).write_bytes(data if isinstance(data, bytes) else data.encode())
    (d / ALL_REDUCE_FILE).write_text(csv_text(AR_HEADER, ar_rows()) if ar is None else ar)
    return d


def with_cell(header: list[str], rows: list[list[str]], column: str, value: str) -> str:
    rows[2][header.index(column)] = value
    return csv_text(header, rows)


def without(header: list[str], rows: list[list[str]], column: str) -> str:
    k = header.index(column)
    return csv_text(header[:k] + header[k + 1 :], [r[:k] + r[k + 1 :] for r in rows])


def mlp_is(make: Callable[[Path], None]) -> Callable[[Path], Path]:
    def build(t: Path) -> Path:
        d = folder(t)
        (d / MLP_FILE).unlink()
        make(d / MLP_FILE)
        return d

    return build


CASES: list[tuple[str, Callable[[Path], Path], list[str]]] = [
    ("mlp-empty", lambda t: folder(t, mlp=""), [f"{MLP_FILE}: (file): empty file"]),
    ("mlp-header-only", lambda t: folder(t, mlp=",".join(MLP_HEADER) + "\n"),
     [f"{MLP_FILE}: (file): no rows under the header"]),
    ("mlp-not-utf8", lambda t: folder(t, mlp=b"num_tokens\n\xff\xfe\n"),
     [f"{MLP_FILE}: line 2: not UTF-8"]),
    ("mlp-is-a-folder", mlp_is(lambda p: p.mkdir()), [f"{MLP_FILE}: (file): is a directory"]),
    ("mlp-is-a-fifo", mlp_is(lambda p: os.mkfifo(p)), [f"{MLP_FILE}: (file): is a FIFO"]),
    ("mlp-dangling-link", mlp_is(lambda p: p.symlink_to(p.parent / "gone.csv")),
     [f"{MLP_FILE}: (file):"]),
    ("mlp-no-tokens-column", lambda t: folder(t, mlp=without(MLP_HEADER, mlp_rows(), "num_tokens")),
     [f"{MLP_FILE}: row 1, column num_tokens: missing for Vidur's profiling table"]),
    ("mlp-word-in-a-time",
     lambda t: folder(t, mlp=with_cell(MLP_HEADER, mlp_rows(), MLP_HEADER[3], "abc")),
     [f"{MLP_FILE}: row 3, column {MLP_HEADER[3]}: not a finite number: 'abc'"]),
    ("mlp-tp-zero",
     lambda t: folder(t, mlp=with_cell(MLP_HEADER, mlp_rows(), MLP_HEADER[1], "0")),
     [f"{MLP_FILE}: row 3, column num_tensor_parallel_workers: must be > 0, got 0"]),
    ("ar-empty", lambda t: folder(t, ar=""), [f"{ALL_REDUCE_FILE}: (file): empty file"]),
    ("ar-no-size-column", lambda t: folder(t, ar=without(AR_HEADER, ar_rows(), "size")),
     [f"{ALL_REDUCE_FILE}: row 1, column size: missing"]),
    ("ar-word-in-a-size", lambda t: folder(t, ar=with_cell(AR_HEADER, ar_rows(), "size", "big")),
     [f"{ALL_REDUCE_FILE}: row 3, column size: not a finite number: 'big'"]),
]  # fmt: skip


def test_the_synthetic_folder_fits(tmp_path: Path) -> None:
    d = folder(tmp_path)
    code, _, err = plan("fit", "--device", "h100", "--vidur", str(d), "--out",
                        str(tmp_path / "lm.json"))  # fmt: skip
    assert code == 0, err
    assert (tmp_path / "lm.json").is_file()


@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("command", ["fit", "validate-ops"])
@pytest.mark.parametrize(("name", "build", "fragments"), CASES, ids=[c[0] for c in CASES])
def test_a_broken_vidur_folder_is_one_line_and_exit_2(
    tmp_path: Path, command: str, name: str, build: Callable[[Path], Path], fragments: list[str]
) -> None:
    d = build(tmp_path)
    fit = ["fit", "--device", "h100", "--vidur", str(d), "--out", str(tmp_path / "lm.json")]
    validate = ["validate", "ops", "--device", "h100", "--vidur", str(d)]
    argv = fit if command == "fit" else validate
    code, _, err = plan(*argv)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0]
