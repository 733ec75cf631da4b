"""Small workload fixtures the tests build themselves (WEKA traces, Mooncake and Azure rows)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def weka_request(
    t: float, prompt: int, out: int, ids: list[Any], think: float = 0.0, api: float = 1.0
) -> dict[str, Any]:
    return {
        "t": t,
        "type": "n",
        "model": "m",
        "in": prompt,
        "out": out,
        "hash_ids": ids,
        "think_time": think,
        "api_time": api,
    }


def weka_trace(trace_id: str = "trace_a", ranges: bool = True) -> dict[str, Any]:
    """A 3-turn parent with two parallel sub-agents after turn 0 (64-token blocks).

    Parent turn 0 (t=0, 10 s) spawns agent_1 (runs 10.5..20.5) and agent_2 (10.5..30.5); the
    parent's turn 1 comes at t=35 (5 s after the last sub-agent), turn 2 at t=40.
    """
    r = (lambda a, b: [[a, b]]) if ranges else (lambda a, b: list(range(a, b + 1)))
    sub1 = {
        "type": "subagent",
        "agent_id": "agent_1",
        "t": 20.5,
        "duration_ms": 10_000,
        "requests": [
            weka_request(0.0, 640, 5, r(100, 109), api=2.0),
            weka_request(6.0, 704, 5, r(100, 110), think=4.0, api=2.0),
        ],
    }
    sub2 = {
        "type": "subagent",
        "agent_id": "agent_2",
        "t": 30.5,
        "duration_ms": 20_000,
        "requests": [weka_request(0.0, 200, 7, r(200, 202), api=5.0)],
    }
    return {
        "id": trace_id,
        "block_size": 64,
        "hash_id_scope": "local",
        **({"hash_ids_encoding": "ranges"} if ranges else {}),
        "requests": [
            weka_request(0.0, 1000, 10, r(1, 15), api=10.0),
            sub1,
            sub2,
            weka_request(35.0, 1100, 20, [*r(1, 15), 16, 17], think=25.0, api=3.0),
            weka_request(
                40.0, 1300, 30, r(1, 17) + ([[18, 20]] if ranges else [18, 19, 20]), think=2.0
            ),
        ],
    }


def write_jsonl(path: Path, records: list[Any]) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in records)
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


@pytest.fixture
def make_weka_trace() -> Callable[..., dict[str, Any]]:
    return weka_trace


@pytest.fixture
def write_records() -> Callable[[Path, list[Any]], Path]:
    return write_jsonl


@pytest.fixture
def weka_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "traces.jsonl", [weka_trace("trace_a"), weka_trace("trace_b")])


@pytest.fixture
def mooncake_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "mooncake.jsonl", mooncake_rows())


@pytest.fixture
def azure_file(tmp_path: Path) -> Path:
    path = tmp_path / "azure.csv"
    path.write_text(AZURE_CSV)
    return path


def mooncake_rows() -> list[dict[str, Any]]:
    return [
        {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
        {"timestamp": 500, "input_length": 1600, "output_length": 6, "hash_ids": [0, 1, 3, 4]},
        {"timestamp": 1500, "input_length": 1024, "output_length": 7, "hash_ids": [0, 9]},
    ]


AZURE_CSV = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,1000,1
"""
