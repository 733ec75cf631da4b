"""The file layer (simulator.specs.loading, the trace checks) and output folders
(simulator.outputs) as units: what each guarantees, without the CLI."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import stat
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from simulator import outputs
from simulator.output_files import check_output_file, write_file
from simulator.outputs import MANIFEST, MARKER, OutputFolder
from simulator.specs.loading import (
    SpecError,
    check_file,
    file_digest,
    parse_json,
    parse_yaml,
    read_text,
    read_yaml,
)
from simulator.workload.source import check_trace_file, open_text

# ------------------------------------------------------------------------------ SpecError


def test_spec_error_survives_pickle_and_simpy_style_rebuild() -> None:
    err = SpecError("trace.jsonl", "line 3", "missing field 'input_length'")
    for copy in (pickle.loads(pickle.dumps(err)), type(err)(*err.args)):
        assert isinstance(copy, SpecError)
        assert (copy.file, copy.field, copy.reason) == (err.file, err.field, err.reason)
        assert str(copy) == "trace.jsonl: line 3: missing field 'input_length'"


def test_scheduler_stall_error_needs_nothing_more() -> None:
    """The engine's other error takes its message as its one argument: it pickles and SimPy
    rebuilds it as it is."""
    from simulator.replica import SchedulerStallError

    err = SchedulerStallError("cache full, nothing to preempt")
    for copy in (pickle.loads(pickle.dumps(err)), type(err)(*err.args)):
        assert type(copy) is SchedulerStallError
        assert str(copy) == str(err)


def test_spec_error_from_a_simpy_process_keeps_its_place() -> None:
    import simpy

    env = simpy.Environment()

    def proc() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(1)
        raise SpecError("t.csv", "line 7", "TIMESTAMP goes backwards")

    env.process(proc())
    with pytest.raises(SpecError) as info:
        env.run()
    assert str(info.value) == "t.csv: line 7: TIMESTAMP goes backwards"


def test_spec_error_from_a_worker_process_keeps_its_place() -> None:
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1) as pool:
        future = pool.submit(read_yaml, "/no/such/file.yaml")
        with pytest.raises(SpecError) as info:
            future.result()
    assert str(info.value) == "/no/such/file.yaml: (file): no such file"


# ------------------------------------------------------------------------------ the file layer


def _loop(p: Path) -> None:
    os.symlink(p.with_name("b"), p)
    os.symlink(p, p.with_name("b"))


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p.mkdir(), "is a directory, not a file"),
        (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a regular file"),
        (_loop, "symlink loop (too many levels of symbolic links)"),
        (lambda p: os.symlink(p.with_name("nowhere"), p), "dangling symlink"),
        (lambda p: None, "no such file"),
        (lambda p: p.write_text("x" * 11), "11 bytes, over the 10 bytes limit of file"),
    ],
)  # fmt: skip
def test_check_file_refuses_without_opening(tmp_path: Path, make: object, reason: str) -> None:
    p = tmp_path / "f.yaml"
    make(p)  # type: ignore[operator]
    with pytest.raises(SpecError) as info:
        check_file(p, limit=10)
    assert info.value.field == "(file)"
    assert reason in info.value.reason


def test_check_file_refuses_a_device() -> None:
    with pytest.raises(SpecError, match="is a character device, not a regular file"):
        check_file("/dev/zero")


def test_text_is_utf8_and_a_bad_byte_names_its_line(tmp_path: Path) -> None:
    p = tmp_path / "a.yaml"
    p.write_bytes(b"\xef\xbb\xbfa: 1\nb: caf\xe9\n")
    with pytest.raises(SpecError) as info:
        read_text(p)
    assert (info.value.field, info.value.reason) == (
        "line 2", "not UTF-8 text (byte 0xe9 at column 7): save it as UTF-8")  # fmt: skip
    p.write_bytes(b"\xef\xbb\xbfa: caf\xc3\xa9\n")
    assert read_yaml(p) == {"a": "café"}  # a byte-order mark is dropped


def test_yaml_duplicate_keys_are_refused_at_every_depth() -> None:
    assert parse_yaml("a: 1\nb: {c: 2}\n", "f") == {"a": 1, "b": {"c": 2}}
    with pytest.raises(SpecError, match=r"f: line 3: duplicate key 'a' \(first at line 1\)"):
        parse_yaml("a: 1\nb: 2\na: 3\n", "f")
    with pytest.raises(SpecError, match="line 3: duplicate key 'c'"):
        parse_yaml("b:\n  c: 1\n  c: 2\n", "f")
    with pytest.raises(SpecError, match="duplicate key 1"):
        parse_yaml("- {1: a, 1: b}\n", "f")
    # a merge key may be overridden, as YAML defines
    assert parse_yaml("x: &x {a: 1}\ny:\n  <<: *x\n  a: 2\n", "f")["y"] == {"a": 2}


def test_json_duplicate_keys_are_refused() -> None:
    assert parse_json('{"a": {"b": 1}}', "f") == {"a": {"b": 1}}
    with pytest.raises(SpecError, match="f: \\(json\\): duplicate key 'b'"):
        parse_json('{"a": {"b": 1, "b": 2}}', "f")
    # json's other ValueErrors are the same one line (a 5,000-digit integer was exit 1)
    with pytest.raises(SpecError, match="f: \\(json\\): Exceeds the limit \\(4300 digits\\)"):
        parse_json('{"a": ' + "9" * 5000 + "}", "f")
    with pytest.raises(SpecError, match="f: \\(json\\): invalid JSON: nested too deeply"):
        parse_json("[" * 100_000 + "]" * 100_000, "f")


def test_file_digest_follows_the_content(tmp_path: Path) -> None:
    p = tmp_path / "gpu.yaml"
    p.write_text("a: 1\n")
    first = file_digest(p)
    assert file_digest(p) == first
    p.write_text("a: 2\n")
    assert file_digest(p) != first
    assert file_digest(tmp_path / "none").startswith("unreadable:")
    d = file_digest(tmp_path)
    (tmp_path / "x.jsonl").write_text("{}\n")
    assert file_digest(tmp_path) != d


# ------------------------------------------------------------------------------ traces


def _gz(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_gzip_trace_checked_whole_before_reading(tmp_path: Path) -> None:
    text = b"".join(b'{"timestamp": %d}\n' % i for i in range(50_000))
    whole = gzip.compress(text)
    check_trace_file(_gz(tmp_path, "ok.jsonl.gz", whole))
    check_trace_file(_gz(tmp_path, "two.jsonl.gz", whole + whole + b"\0" * 100))  # members, pad
    for cut in (len(whole) - 4, len(whole) // 2, 20):
        with pytest.raises(SpecError, match=r"\(gzip\): truncated"):
            check_trace_file(_gz(tmp_path, f"cut{cut}.jsonl.gz", whole[:cut]))
    corrupt = bytearray(whole)
    corrupt[len(corrupt) // 2] ^= 0xFF
    with pytest.raises(SpecError, match=r"\(gzip\): corrupt gzip data"):
        check_trace_file(_gz(tmp_path, "bad.jsonl.gz", bytes(corrupt)))
    with pytest.raises(SpecError, match=r"\(gzip\): not a gzip file"):
        check_trace_file(_gz(tmp_path, "plain.jsonl.gz", text))
    with pytest.raises(SpecError, match=r"\(gzip\): empty file"):
        check_trace_file(_gz(tmp_path, "empty.jsonl.gz", b""))


def test_trace_utf8_checked_through_gzip_with_its_line(tmp_path: Path) -> None:
    text = b"a\n" * 3_000_000 + b"caf\xe9\n"  # the bad byte beyond the first chunk
    with pytest.raises(SpecError) as info:
        check_trace_file(_gz(tmp_path, "t.jsonl.gz", gzip.compress(text)))
    assert info.value.field == "line 3000001"
    assert "not UTF-8" in info.value.reason


def test_open_text_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    os.mkfifo(p)
    with pytest.raises(SpecError, match="is a FIFO"):
        open_text(p)


# ------------------------------------------------------------------------------ output folders


def test_output_folder_is_swapped_in_whole(tmp_path: Path) -> None:
    out = tmp_path / "o"
    with OutputFolder(out, "test", known=("a.csv", "b.csv")) as stage:
        assert (out / MARKER).exists()  # marked while the command writes
        assert json.loads((out / MARKER).read_text())["pid"] == os.getpid()
        (stage / "a.csv").write_text("1")
        (stage / "b.csv").write_text("1")
        assert not (out / "a.csv").exists()  # nothing visible before the swap
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "a.csv", "b.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~_umask()  # not mkdtemp's 0700
    # a second run writing only a.csv: b.csv (the previous run's) is dropped, not kept stale
    (out / "mine.txt").write_text("user")
    (out / "cache").mkdir()
    (out / "cache" / "k.json").write_text("{}")
    with OutputFolder(out, "test", known=("a.csv", "b.csv")) as stage:
        (stage / "a.csv").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "a.csv", "cache", "mine.txt"]
    assert (out / "a.csv").read_text() == "2"
    assert (out / "cache" / "k.json").exists()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_output_folder_failure_leaves_the_old_one(tmp_path: Path) -> None:
    out = tmp_path / "o"
    with OutputFolder(out, "test") as stage:
        (stage / "a.csv").write_text("old")
    (out / "cache").mkdir()

    def fail_mid_write() -> None:
        with OutputFolder(out, "test") as stage:
            (stage / "a.csv").write_text("new")
            (out / "cache" / "k.json").write_text("{}")  # the cache is written in place
            raise RuntimeError("mid-write")

    with pytest.raises(RuntimeError, match="mid-write"):
        fail_mid_write()
    assert (out / "a.csv").read_text() == "old"
    assert (out / "cache" / "k.json").exists()
    assert not (out / MARKER).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_a_failed_first_run_leaves_no_folder(tmp_path: Path) -> None:
    def fail() -> None:
        with OutputFolder(tmp_path / "new", "test"):
            raise RuntimeError("before anything was written")

    with pytest.raises(RuntimeError, match="before anything"):
        fail()
    assert list(tmp_path.iterdir()) == []


def test_abort_open_aborts_what_a_command_left_open(tmp_path: Path) -> None:
    folder = OutputFolder(tmp_path / "o", "test")
    folder.open()
    outputs.abort_open()
    assert list(tmp_path.iterdir()) == []
    outputs.abort_open()  # nothing open: nothing to do


def test_swap_without_renameat2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outputs, "_exchange", lambda a, b: False)
    out = tmp_path / "o"
    for text in ("1", "2"):
        with OutputFolder(out, "test") as stage:
            (stage / "a.csv").write_text(text)
    assert (out / "a.csv").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_killed_runs_leftovers_are_swept(tmp_path: Path) -> None:
    out = tmp_path / "o"
    dead = tmp_path / ".o.plan-tmp-999999999-abc"
    dead.mkdir()
    (out / "x").mkdir(parents=True)
    (out / MARKER).write_text(json.dumps({"pid": 999999999, "host": "elsewhere"}))
    with pytest.raises(SpecError, match="is writing this folder"):
        OutputFolder(out, "test").open()  # another host's marker: not ours to judge
    import socket

    (out / MARKER).write_text(json.dumps({"pid": 999999999, "host": socket.gethostname()}))
    with OutputFolder(out, "test") as stage:
        (stage / "a").write_text("")
    assert not dead.exists()
    assert not (out / MARKER).exists()


@pytest.mark.parametrize(
    ("setup", "target", "reason"),
    [
        (lambda t: (t / "f").write_text(""), "f", "exists and is not a folder"),
        (lambda t: (t / "f").write_text(""), "f/sub", "is a file, not a folder"),
        (lambda t: None, "/", "is the root or home folder"),
        (lambda t: None, ".", "is the current folder or holds it"),
    ],
)  # fmt: skip
def test_output_folder_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setup: object, target: str, reason: str
) -> None:
    monkeypatch.chdir(tmp_path)
    setup(tmp_path)  # type: ignore[operator]
    with pytest.raises(SpecError) as info:
        OutputFolder(Path(target), "test").open()
    assert info.value.field == "--out"
    assert reason in info.value.reason


def test_output_file_checked_then_written_whole(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="is a folder: give a file path"):
        check_output_file(tmp_path)
    (tmp_path / "f").write_text("")
    with pytest.raises(SpecError, match="is a file, not a folder"):
        check_output_file(tmp_path / "f" / "x.json")
    target = tmp_path / "deep" / "x.json"
    check_output_file(target)
    assert target.parent.is_dir()
    assert not target.exists()
    write_file(target, "{}\n")
    assert target.read_text() == "{}\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["x.json"]
    os.chmod(target, 0o640)
    write_file(target, "{ }\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the old file's mode is kept
