"""Mooncake and Azure readers, and format detection."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from simulator.specs.loading import SpecError
from simulator.workload import trace_source
from simulator.workload.request import Turn
from simulator.workload.traces import detect_format


def turns(path: Path, **kw: Any) -> list[tuple[float, Turn]]:
    out = []
    for s in trace_source(path, **kw).open():
        (t,) = list(s.items)
        assert isinstance(t, Turn)
        out.append((s.start_s, t))
    return out


def test_mooncake_times_full_blocks_and_shared_prefixes(mooncake_file: Path) -> None:
    rows = turns(mooncake_file)
    assert [start for start, _ in rows] == [0.0, 0.5, 1.5]
    a, b, c = (t for _, t in rows)
    assert a.block_tokens == 512
    assert [len(t.block_hashes) for t in (a, b, c)] == [2, 3, 2]  # partial tail ids dropped
    assert (a.block_hashes[:2] == b.block_hashes[:2]).all()
    assert a.block_hashes[0] == c.block_hashes[0]
    assert a.block_hashes[1] != c.block_hashes[1]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{oops", "invalid JSON"),
        (json.dumps({"timestamp": 9, "output_length": 1, "hash_ids": []}), "'input_length'"),
        (
            json.dumps({"timestamp": 9, "input_length": -5, "output_length": 1, "hash_ids": []}),
            "input_length: must be >= 1",
        ),
        (
            json.dumps(
                {"timestamp": 9, "input_length": 600, "output_length": 1, "hash_ids": [1, 2, 3]}
            ),
            "3 ids for 600 tokens, expected 2",
        ),
        (
            json.dumps({"timestamp": 1, "input_length": 60, "output_length": 1, "hash_ids": [1]}),
            "timestamp goes backwards",
        ),
        (
            json.dumps({"timestamp": 9, "input_length": 60, "output_length": 1, "hash_ids": "x"}),
            "hash_ids: expected a list",
        ),
    ],
)
def test_mooncake_bad_records(
    tmp_path: Path,
    write_records: Callable[[Path, list[Any]], Path],
    line: str,
    reason: str,
) -> None:
    path = write_records(
        tmp_path / "m.jsonl",
        [{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [3]}],
    )
    path.write_text(path.read_text() + line + "\n")
    with pytest.raises(SpecError) as err:
        turns(path, format="mooncake")
    assert (err.value.field, reason in err.value.reason) == ("line 2", True), err.value
    src = trace_source(path, format="mooncake", skip_bad=True)
    assert len(list(src.open())) == 1
    assert src.bad.count == 1


def test_azure_rows(azure_file: Path) -> None:
    rows = turns(azure_file)
    assert [round(s, 6) for s, _ in rows] == [0.0, 4.314579, 4.31941]
    assert [(t.prompt_tokens, t.output_tokens) for _, t in rows] == [
        (374, 44),
        (396, 109),
        (1000, 1),
    ]
    assert all(len(t.block_hashes) == 0 for _, t in rows)
    assert not trace_source(azure_file).has_prefix


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("2023-11-16 18:16:00.0,abc,3", "ContextTokens: expected an integer"),
        ("2023-11-16 18:16:00.0,10,-1", "GeneratedTokens: must be >= 0"),
        ("yesterday,10,1", "TIMESTAMP: cannot parse"),
        ("2023-11-16 18:10:00.0,10,1", "TIMESTAMP goes backwards"),
        ("2023-11-16 18:16:00.0,10", "expected 3 columns"),
    ],
)
def test_azure_bad_rows(azure_file: Path, row: str, reason: str) -> None:
    azure_file.write_text(azure_file.read_text() + row + "\n")
    with pytest.raises(SpecError, match=reason) as err:
        turns(azure_file)
    assert err.value.field == "line 5"
    src = trace_source(azure_file, skip_bad=True)
    assert len(list(src.open())) == 3
    assert src.bad.count == 1


def test_azure_needs_its_header(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    assert turns(path, format="azure") == []
    path.write_text("time,in,out\n1,2,3\n")
    with pytest.raises(SpecError, match="expected the header"):
        turns(path, format="azure")


def test_detect_format(
    weka_file: Path, mooncake_file: Path, azure_file: Path, tmp_path: Path
) -> None:
    assert detect_format(weka_file) == "agentic"
    assert detect_format(tmp_path) == "agentic"  # a directory of traces
    assert detect_format(mooncake_file) == "mooncake"
    assert detect_format(azure_file) == "azure"
    odd = tmp_path / "odd.txt"
    odd.write_text("hello\n")
    with pytest.raises(SpecError, match="cannot detect the trace format"):
        detect_format(odd)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(SpecError, match="empty file"):
        detect_format(tmp_path / "empty.jsonl")


def test_unknown_format_and_missing_file(mooncake_file: Path, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="unknown trace format 'parquet'"):
        trace_source(mooncake_file, format="parquet")
    with pytest.raises(SpecError, match="no such file"):
        trace_source(tmp_path / "nope.jsonl")


def test_limit_reads_only_the_first_sessions(mooncake_file: Path) -> None:
    assert len(turns(mooncake_file, limit=2)) == 2


def test_azure_dates_are_utc_whatever_the_machine_zone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A naive date and time was read in the machine's zone: across New York's DST change
    (2023-11-05 02:00 local) a one-second gap became 3,601 s."""
    import time

    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-05 01:59:59.0000000,100,10\n2023-11-05 02:00:00.5000000,100,10\n"
    )
    starts = []
    for zone in ("UTC", "America/New_York"):
        monkeypatch.setenv("TZ", zone)
        time.tzset()
        starts.append([start for start, _ in turns(path)])
    monkeypatch.delenv("TZ")
    time.tzset()
    assert starts == [[0.0, 1.5], [0.0, 1.5]]


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,200,20\n"),
        ("m.jsonl", "".join(json.dumps({"timestamp": ms, "input_length": 600, "output_length": 5,
                                        "hash_ids": [1, 2]}) + "\n" for ms in (0, 1000))),
    ],
)  # fmt: skip
def test_a_byte_order_mark_is_read_as_nothing(tmp_path: Path, name: str, body: str) -> None:
    """Excel and Windows tools write a UTF-8 byte-order mark: the format went undetected,
    and the header or the first line's JSON was refused."""
    plain, marked = tmp_path / name, tmp_path / f"bom-{name}"
    plain.write_text(body)
    marked.write_bytes(b"\xef\xbb\xbf" + body.encode())
    assert detect_format(marked) == detect_format(plain)
    assert [(s, t.prompt_tokens) for s, t in turns(marked)] == [
        (s, t.prompt_tokens) for s, t in turns(plain)
    ]


def test_a_pretty_printed_jsonl_trace_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps({"id": "a", "requests": []}, indent=2))
    with pytest.raises(SpecError) as info:
        list(trace_source(path, format="agentic").open())
    assert info.value.field == "line 1"
    assert "one JSON object per line" in info.value.reason
    assert "the .json suffix" in info.value.reason


def test_a_folder_is_a_trace_of_agentic_traces_only(tmp_path: Path) -> None:
    from simulator.workload.traces import check_trace

    with pytest.raises(SpecError) as info:
        check_trace(tmp_path, "azure")
    assert "a trace of format azure is one file, not a folder" in info.value.reason
