"""Bad files, faults and output folders, end to end: every file or folder mistake is one
``error: <file>: <field>: <reason>`` line on stderr and exit code 2 (never a hang, never a
traceback); a rerun after an input file changed computes the new answer; an output folder is
replaced whole or left as it was, and marked while a command writes it.

The corpus (``CASES``) runs every reader and writer of the CLI against the same faults: a
directory, a FIFO, ``/dev/zero``, a symlink loop, a dangling symlink, non-UTF-8 text, a file
over the size limit, duplicate YAML keys, a truncated gzip trace, a bad trace record met by
a simulation or a search worker, an output path that is a file (or under one, or cannot be
created), and an option given twice.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from simulator import catalog
from simulator.cli import app
from simulator.outputs import MANIFEST, MARKER

runner = CliRunner()


def plan(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


# ------------------------------------------------------------------------------ file makers

SCENARIO: dict[str, Any] = {
    "name": "bad-files",
    "model": "llama-3.1-8b",
    "device": "h100",
    "serving": {"tp": 1},
    "workload": {"kind": "random", "input_tokens": 1_000, "output_tokens": 20,
                 "num_requests": 8, "concurrency": 2},
}  # fmt: skip

SPACE: dict[str, Any] = {
    "name": "bad-files",
    "model": "llama-3.1-8b",
    "devices": ["h100"],
    "serving": {"tp": 1},
    "sweep": {"tp": [1]},
    "concurrency": [2],
    "workload": {"kind": "random", "input_tokens": 256, "output_tokens": 8,
                 "num_requests": 6, "concurrency": 1},
    "slo": {},
    "duration_s": 60.0,
    "warmup_s": 0.0,
    "seeds": 1,
    "search": "grid",
}  # fmt: skip

AGENTIC = {
    "id": "a", "block_size": 64, "hash_id_scope": "local",
    "requests": [{"t": 0.0, "type": "n", "model": "m", "in": 100, "out": 5, "hash_ids": [1],
                  "think_time": 0.0, "api_time": 1.0}],
}  # fmt: skip

AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2023-11-16 18:15:{i:02d}.0000000,{100 + i},10\n" for i in range(60)
)

SHAPES = "op,dtype,m,n,k\ngemm,bf16,16,4096,4096\n"
MEASURED = "op,dtype,m,n,k,latency_us\ngemm,bf16,16,4096,4096,12.5\n"
HF_CONFIG = '{"model_type": "llama", "hidden_size": 64}'


def write(t: Path, name: str, data: str | bytes) -> str:
    p = t / name
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        p.write_bytes(data)
    else:
        p.write_text(data)
    return str(p)


def folder(t: Path, name: str) -> str:
    (t / name).mkdir(parents=True)
    return str(t / name)


def fifo(t: Path, name: str = "pipe.yaml") -> str:
    p = t / name
    os.mkfifo(p)
    return str(p)


def loop(t: Path, name: str = "loop.yaml") -> str:
    a, b = t / name, t / f"other-{name}"
    os.symlink(b, a)
    os.symlink(a, b)
    return str(a)


def dangling(t: Path, name: str = "gone.yaml") -> str:
    os.symlink(t / "nowhere.yaml", t / name)
    return str(t / name)


def sparse(t: Path, name: str, size: int) -> str:
    with (t / name).open("wb") as fh:
        fh.truncate(size)
    return str(t / name)


def scenario(t: Path, name: str = "s.yaml", **over: Any) -> str:
    return write(t, name, yaml.safe_dump({**SCENARIO, **over}))


def space(t: Path, name: str = "space.yaml", **over: Any) -> str:
    return write(t, name, yaml.safe_dump({**SPACE, **over}))


def trace(path: str, **over: Any) -> dict[str, Any]:
    return {"kind": "trace", "path": path, **over}


def mooncake(t: Path, name: str = "mc.jsonl", n: int = 12, bad: int | None = None) -> str:
    lines = []
    for i in range(n):
        rec: dict[str, Any] = {"timestamp": i * 50, "input_length": 600, "output_length": 4,
                               "hash_ids": [2 * i, 2 * i + 1]}  # fmt: skip
        if bad is not None and i == bad - 1:
            del rec["input_length"]
        lines.append(json.dumps(rec))
    return write(t, name, "\n".join(lines) + "\n")


def truncated_gz(t: Path, name: str, text: str) -> str:
    data = gzip.compress(text.encode())
    return write(t, name, data[: len(data) * 2 // 3])


def agentic_dir(t: Path, name: str = "traces") -> str:
    """Two agentic traces; the second, in file order, a truncated gzip file."""
    write(t, f"{name}/a.jsonl", json.dumps(AGENTIC) + "\n")
    text = "".join(json.dumps({**AGENTIC, "id": f"b{i}"}) + "\n" for i in range(300))
    truncated_gz(t, f"{name}/b.jsonl.gz", text)
    return str(t / name)


def non_utf8(t: Path, name: str, good: str) -> str:
    """``good`` with a Latin-1 byte in its second line."""
    first, _, rest = good.partition("\n")
    return write(t, name, first.encode() + b"\n# caf\xe9\n" + rest.encode())


def dup_key(t: Path, name: str, data: dict[str, Any], key: str) -> str:
    text = yaml.safe_dump(data, sort_keys=False)
    value = yaml.safe_dump({key: data[key]}, default_flow_style=True).strip()[1:-1]
    return write(t, name, text + value + "\n")


def card(t: Path, name: str = "card.yaml") -> str:
    return write(t, name, (catalog.MODEL_CARDS_DIR / "llama-3.1-8b.yaml").read_text())


def profile(t: Path, name: str = "gpu.yaml") -> str:
    from hardware_profiles import PROFILES_DIR

    return write(t, name, (PROFILES_DIR / "h100" / "profile.yaml").read_text())


def edited_profile(
    t: Path, base: str, unsourced: str = "", no_roofline: str = "", **fields: Any
) -> str:
    """The built-in profile ``base`` with ``fields`` replaced (the source of ``unsourced``
    emptied, the ``roofline`` field ``no_roofline`` left out), as gpu.yaml: a bad value each
    case."""
    from hardware_profiles import PROFILES_DIR

    data = {**yaml.safe_load((PROFILES_DIR / base / "profile.yaml").read_text()), **fields}
    if unsourced:
        data["sources"][unsourced] = ""
    if no_roofline:
        del data["roofline"][no_roofline]
    return write(t, "gpu.yaml", yaml.safe_dump(data, sort_keys=False))


# host costs a profile must state: left out, they would price no host work (silently optimistic)
HOST_COSTS = (
    "cpu_step_overhead_s", "cpu_step_per_request_s", "output_delay_s",
    "frontend_s_per_prompt_token",
)  # fmt: skip
MEM = ["memory", "--model", "llama-3.1-8b", "--device", "h100"]
STEP = ["step", "--model", "llama-3.1-8b", "--device", "h100", "--decode", "2"]
PREDICT = ["ops", "predict", "--device", "h100", "--input"]


def _predict(t: Path) -> list[str]:
    return [*PREDICT, write(t, "ops.csv", SHAPES)]


# ------------------------------------------------------------------------------ the corpus

Case = tuple[str, Callable[[Path], list[str]], list[str]]

CASES: list[Case] = [
    # ---- plan run: the scenario file
    ("run-directory", lambda t: ["run", str(t)], ["(file): is a directory, not a file"]),
    ("run-fifo", lambda t: ["run", fifo(t)], ["pipe.yaml: (file): is a FIFO"]),
    ("run-dev-zero", lambda t: ["run", "/dev/zero"],
     ["/dev/zero: (file): is a character device"]),
    ("run-symlink-loop", lambda t: ["run", loop(t)], ["loop.yaml: (file): symlink loop"]),
    ("run-dangling-symlink", lambda t: ["run", dangling(t)], ["(file): dangling symlink"]),
    ("run-missing", lambda t: ["run", str(t / "nope.yaml")], ["nope.yaml: (file): no such file"]),
    ("run-not-utf8", lambda t: ["run", non_utf8(t, "s.yaml", yaml.safe_dump(SCENARIO))],
     ["s.yaml: line 2: not UTF-8 text (byte 0xe9"]),
    ("run-duplicate-key", lambda t: ["run", dup_key(t, "s.yaml", SCENARIO, "model")],
     ["s.yaml: line ", "duplicate key 'model' (first at line"]),
    ("run-duplicate-nested-key",
     lambda t: ["run", write(t, "s.yaml", yaml.safe_dump(SCENARIO).replace(
         "  tp: 1", "  tp: 1\n  tp: 2"))],
     ["duplicate key 'tp'"]),
    ("run-too-big", lambda t: ["run", sparse(t, "s.yaml", 17 << 20)],
     ["s.yaml: (file): 17 MiB, over the 16 MiB limit of a YAML spec"]),
    # ---- plan run: files the scenario names
    ("run-card-directory", lambda t: ["run", scenario(t, model=folder(t, "cards") + "/")],
     ["cards: (file): is a directory"]),
    ("run-profile-not-utf8",
     lambda t: ["run", scenario(t, device=non_utf8(t, "gpu.yaml", Path(profile(t)).read_text()))],
     ["gpu.yaml: line 2: not UTF-8"]),
    ("run-trace-missing-relative-to-scenario",
     lambda t: ["run", scenario(t, "sub/s.yaml", workload=trace("t.jsonl", concurrency=1))],
     ["sub/t.jsonl: (file): no such file"]),
    ("run-trace-fifo",
     lambda t: ["run", scenario(t, workload=trace(fifo(t, "t.jsonl"), concurrency=1))],
     ["t.jsonl: (file): is a FIFO"]),
    ("run-trace-dev-zero",
     lambda t: ["run", scenario(t, workload=trace("/dev/zero", format="azure", concurrency=1))],
     ["/dev/zero: (file): is a character device"]),
    ("run-azure-gz-truncated",
     lambda t: ["run", scenario(t, workload=trace(truncated_gz(t, "az.csv.gz", AZURE * 20)))],
     ["az.csv.gz: (gzip): truncated"]),
    ("run-not-gzip",
     lambda t: ["run", scenario(t, workload=trace(write(t, "az.csv.gz", AZURE)))],
     ["az.csv.gz: (gzip): not a gzip file"]),
    ("run-agentic-folder-second-file-truncated",
     lambda t: ["run", scenario(t, workload=trace(agentic_dir(t), concurrency=2))],
     ["b.jsonl.gz: (gzip): truncated"]),
    ("run-trace-not-utf8",
     lambda t: ["run", scenario(t, workload=trace(
         non_utf8(t, "mc.jsonl", Path(mooncake(t)).read_text()), concurrency=1))],
     ["mc.jsonl: line 2: not UTF-8"]),
    ("run-bad-trace-record-inside-the-simulation",
     lambda t: ["run", scenario(t, workload=trace(mooncake(t, bad=3), concurrency=1))],
     ["mc.jsonl: line 3: missing field 'input_length'"]),
    # ---- plan run: the output folder, before anything is simulated
    ("run-out-is-a-file",
     lambda t: ["run", scenario(t), "--out", write(t, "o.txt", "x")],
     ["o.txt: --out: exists and is not a folder"]),
    ("run-out-under-a-file",
     lambda t: ["run", scenario(t), "--out", write(t, "o.txt", "x") + "/sub"],
     ["o.txt/sub: --out:", "o.txt is a file, not a folder"]),
    ("run-out-cannot-be-created",
     lambda t: ["run", scenario(t), "--out", "/sys/plan-bad-files-out"],
     ["/sys/plan-bad-files-out: --out: cannot create"]),
    ("run-out-is-the-current-folder", lambda t: ["run", scenario(t), "--out", "."],
     [".: --out: is the current folder or holds it"]),
    ("run-out-given-twice",
     lambda t: ["run", scenario(t), "--out", str(t / "a"), "--out", str(t / "b")],
     ["(arguments): out: --out given 2 times", "would win silently"]),
    ("run-a-search-space", lambda t: ["run", space(t)],
     ["space.yaml: (file): this is a search space (devices, sweep); use plan search",
      "or plan run with a scenario (one device)"]),
    ("run-a-search-space-after-a-set", lambda t: ["run", scenario(t), "--set", "device=null",
                                                  "--set", "devices=[h100]"],
     ["s.yaml: (file): this is a search space"]),
    ("run-format-given-twice",
     lambda t: ["run", scenario(t), "--format", "csv", "--format", "parquet"],
     ["(arguments): format: --format given 2 times"]),
    # ---- plan search
    ("search-a-scenario", lambda t: ["search", scenario(t), "--out", str(t / "o")],
     ["s.yaml: (file): this is a scenario (one device); use plan run",
      "or plan search with a search space (devices, sweep)"]),
    ("search-directory", lambda t: ["search", str(t), "--out", str(t / "o")],
     ["(file): is a directory"]),
    ("search-fifo", lambda t: ["search", fifo(t, "space.yaml"), "--out", str(t / "o")],
     ["space.yaml: (file): is a FIFO"]),
    ("search-duplicate-key",
     lambda t: ["search", dup_key(t, "space.yaml", SPACE, "devices"), "--out", str(t / "o")],
     ["space.yaml: line ", "duplicate key 'devices'"]),
    ("search-not-utf8",
     lambda t: ["search", non_utf8(t, "space.yaml", yaml.safe_dump(SPACE)), "--out",
                str(t / "o")],
     ["space.yaml: line 2: not UTF-8"]),
    ("search-out-is-a-file",
     lambda t: ["search", space(t), "--out", write(t, "o.txt", "x")],
     ["o.txt: --out: exists and is not a folder"]),
    ("search-out-under-a-file",
     lambda t: ["search", space(t), "--out", write(t, "o.txt", "x") + "/r"],
     ["o.txt is a file, not a folder"]),
    ("search-trace-relative-to-the-space-file",
     lambda t: ["search", space(t, "sub/space.yaml", workload=trace(
         Path(truncated_gz(t, "sub/az.csv.gz", AZURE * 20)).name, concurrency=1)),
      "--out", str(t / "o")],
     ["sub/az.csv.gz: (gzip): truncated"]),
    ("search-bad-trace-record-in-a-worker",
     lambda t: ["search", space(t, workload=trace(mooncake(t, bad=2), concurrency=1)),
                "--out", str(t / "o")],
     ["mc.jsonl: line 2: missing field 'input_length'"]),
    ("search-workers-given-twice",
     lambda t: ["search", space(t), "--workers", "1", "--workers", "2"],
     ["workers: --workers given 2 times (the last, '2'"]),
    # ---- plan memory
    ("memory-model-directory",
     lambda t: ["memory", "--model", str(t) + "/", "--device", "h100"],
     ["(file): is a directory"]),
    ("memory-device-fifo", lambda t: ["memory", "--model", "llama-3.1-8b", "--device", fifo(t)],
     ["pipe.yaml: (file): is a FIFO"]),
    ("memory-model-symlink-loop",
     lambda t: ["memory", "--model", loop(t), "--device", "h100"], ["symlink loop"]),
    ("memory-serving-not-utf8",
     lambda t: [*MEM, "--serving", non_utf8(t, "serving.yaml", "tp: 1\ndcp: 1\n")],
     ["serving.yaml: line 2: not UTF-8"]),
    ("memory-serving-duplicate-key",
     lambda t: [*MEM, "--serving", write(t, "serving.yaml", "tp: 1\ndcp: 1\ntp: 2\n")],
     ["serving.yaml: line 3: duplicate key 'tp' (first at line 1)"]),
    ("memory-serving-dev-zero", lambda t: [*MEM, "--serving", "/dev/zero"],
     ["/dev/zero: (file): is a character device"]),
    ("memory-serving-too-big", lambda t: [*MEM, "--serving", sparse(t, "serving.yaml", 20 << 20)],
     ["over the 16 MiB limit"]),
    ("memory-tp-given-twice", lambda t: [*MEM, "--tp", "8", "--tp", "4"],
     ["(arguments): tp: --tp given 2 times (the last, '4'"]),
    # ---- plan step
    ("step-card-duplicate-key",
     lambda t: ["step", "--model", write(t, "card.yaml", Path(card(t)).read_text()
                                         + "name: again\n"),
                "--device", "h100", "--decode", "2"],
     ["card.yaml: line ", "duplicate key 'name'"]),
    ("step-device-not-utf8",
     lambda t: ["step", "--model", "llama-3.1-8b", "--device",
                non_utf8(t, "gpu.yaml", Path(profile(t)).read_text()), "--decode", "2"],
     ["gpu.yaml: line 2: not UTF-8"]),
    ("step-serving-directory", lambda t: [*STEP, "--serving", str(t)], ["is a directory"]),
    ("step-decode-given-twice", lambda t: [*STEP, "--decode", "4"],
     ["decode: --decode given 2 times"]),
    ("step-fused-and-no-fused", lambda t: [*STEP, "--fused", "--no-fused"],
     ["fused: --fused --no-fused given 2 times"]),
    # ---- plan ops predict
    ("predict-input-directory", lambda t: [*PREDICT, str(t)], ["(file): is a directory"]),
    ("predict-input-fifo", lambda t: [*PREDICT, fifo(t, "ops.csv")],
     ["ops.csv: (file): is a FIFO"]),
    ("predict-input-dev-zero", lambda t: [*PREDICT, "/dev/zero"], ["is a character device"]),
    ("predict-input-not-utf8", lambda t: [*PREDICT, non_utf8(t, "ops.csv", SHAPES)],
     ["ops.csv: line 2: not UTF-8"]),
    ("predict-input-too-big", lambda t: [*PREDICT, sparse(t, "ops.csv", 300 << 20)],
     ["ops.csv: (file): 300 MiB, over the 256 MiB limit"]),
    ("predict-out-is-a-folder", lambda t: [*_predict(t), "--out", str(t)],
     ["--out: is a folder: give a file path"]),
    ("predict-output-alias-is-a-folder", lambda t: [*_predict(t), "--output", str(t)],
     ["--out: is a folder: give a file path"]),
    ("predict-out-and-output",
     lambda t: [*_predict(t), "--out", str(t / "a.csv"), "--output", str(t / "b.csv")],
     ["(arguments): out: give --out or --output (its old name), not both"]),
    ("predict-device-given-twice", lambda t: [*_predict(t), "--device", "h200"],
     ["device: --device given 2 times"]),
    # ---- plan fit
    ("fit-measurements-directory",
     lambda t: ["fit", "--device", "h100", "--measurements", str(t)], ["is a directory"]),
    ("fit-measurements-fifo",
     lambda t: ["fit", "--device", "h100", "--measurements", fifo(t, "m.csv")], ["is a FIFO"]),
    ("fit-measurements-not-utf8",
     lambda t: ["fit", "--device", "h100", "--measurements", non_utf8(t, "m.csv", MEASURED)],
     ["m.csv: line 2: not UTF-8"]),
    ("fit-out-is-a-folder",
     lambda t: ["fit", "--device", "h100", "--measurements", write(t, "m.csv", MEASURED),
                "--out", str(t)],
     ["--out: is a folder: give a file path"]),
    ("fit-vidur-is-a-file",
     lambda t: ["fit", "--device", "h100", "--vidur", write(t, "v.csv", MEASURED),
                "--out", str(t / "lm.json")],
     ["v.csv: --vidur: not a folder (a file)"]),
    ("fit-device-given-twice",
     lambda t: ["fit", "--device", "h100", "--device", "h200"], ["device: --device given 2"]),
    # ---- plan validate ops
    ("validate-ops-measurements-fifo",
     lambda t: ["validate", "ops", "--device", "h100", "--measurements", fifo(t, "m.csv")],
     ["m.csv: (file): is a FIFO"]),
    ("validate-ops-vidur-missing",
     lambda t: ["validate", "ops", "--device", "h100", "--vidur", str(t / "vidur")],
     ["vidur: --vidur: no such folder"]),
    ("validate-ops-folds-given-twice",
     lambda t: ["validate", "ops", "--folds", "3", "--folds", "4"], ["folds: --folds given 2"]),
    # ---- plan validate inferencemax
    ("inferencemax-data-directory",
     lambda t: ["validate", "inferencemax", "--data", str(t)], ["(file): is a directory"]),
    ("inferencemax-data-not-utf8",
     lambda t: ["validate", "inferencemax", "--data", non_utf8(t, "im.csv", "a,b\n1,2\n")],
     ["im.csv: line 2: not UTF-8"]),
    ("inferencemax-out-is-a-file",
     lambda t: ["validate", "inferencemax", "--out", write(t, "o.txt", "x")],
     ["o.txt: --out: exists and is not a folder"]),
    ("inferencemax-markdown-is-a-folder",
     lambda t: ["validate", "inferencemax", "--markdown", str(t)],
     ["--markdown: is a folder: give a file path"]),
    ("inferencemax-workers-given-twice",
     lambda t: ["validate", "inferencemax", "--workers", "1", "--workers", "1"],
     ["workers: --workers given 2 times"]),
    # ---- plan validate silicon
    ("silicon-data-fifo", lambda t: ["validate", "silicon", "--data", fifo(t, "s.csv")],
     ["s.csv: (file): is a FIFO"]),
    ("silicon-data-not-utf8",
     lambda t: ["validate", "silicon", "--data", non_utf8(t, "s.csv", "a,b\n1,2\n")],
     ["s.csv: line 2: not UTF-8"]),
    ("silicon-out-is-a-file",
     lambda t: ["validate", "silicon", "--out", write(t, "o.txt", "x")],
     ["o.txt: --out: exists and is not a folder"]),
    ("silicon-markdown-under-a-file",
     lambda t: ["validate", "silicon", "--markdown", write(t, "o.txt", "x") + "/doc.md"],
     ["--markdown:", "o.txt is a file, not a folder"]),
    # ---- plan workload stats
    ("stats-fifo", lambda t: ["workload", "stats", fifo(t, "t.jsonl")], ["is a FIFO"]),
    ("stats-dev-zero", lambda t: ["workload", "stats", "/dev/zero"], ["is a character device"]),
    ("stats-symlink-loop", lambda t: ["workload", "stats", loop(t, "t.jsonl")], ["symlink loop"]),
    ("stats-azure-gz-truncated",
     lambda t: ["workload", "stats", truncated_gz(t, "az.csv.gz", AZURE * 20)],
     ["az.csv.gz: (gzip): truncated"]),
    ("stats-mooncake-gz-truncated",
     lambda t: ["workload", "stats", truncated_gz(t, "mc.jsonl.gz",
                                                  Path(mooncake(t, n=400)).read_text())],
     ["mc.jsonl.gz: (gzip): truncated"]),
    ("stats-agentic-folder-truncated", lambda t: ["workload", "stats", agentic_dir(t)],
     ["b.jsonl.gz: (gzip): truncated"]),
    ("stats-azure-not-utf8", lambda t: ["workload", "stats", non_utf8(t, "az.csv", AZURE)],
     ["az.csv: line 2: not UTF-8"]),
    ("stats-not-gzip", lambda t: ["workload", "stats", write(t, "az.csv.gz", AZURE)],
     ["(gzip): not a gzip file"]),
    ("stats-too-big", lambda t: ["workload", "stats", sparse(t, "t.jsonl", (2 << 30) + 1)],
     ["t.jsonl: (file): 2 GiB, over the 2 GiB limit of a trace file"]),
    ("stats-limit-given-twice",
     lambda t: ["workload", "stats", "chat", "--limit", "1", "--limit", "2"],
     ["limit: --limit given 2 times"]),
    # ---- plan models import
    ("import-directory", lambda t: ["models", "import", str(t)], ["(file): is a directory"]),
    ("import-fifo", lambda t: ["models", "import", fifo(t, "config.json")], ["is a FIFO"]),
    ("import-not-utf8",
     lambda t: ["models", "import", non_utf8(t, "config.json", '{"a": 1,\n"b": 2}')],
     ["config.json: line 2: not UTF-8"]),
    ("import-out-is-a-folder",
     lambda t: ["models", "import", write(t, "config.json", HF_CONFIG), "--out", str(t)],
     ["--out: is a folder: give a file path"]),
    ("import-name-given-twice",
     lambda t: ["models", "import", "c.json", "--name", "a", "--name", "b"],
     ["name: --name given 2 times"]),
    # ---- plan examples copy
    ("examples-copy-over-a-file",
     lambda t: ["examples", "copy", "kimi-k3-mi355x-agentic", "--to",
                str(Path(write(t, "ex/kimi-k3-mi355x-agentic.yaml", "x")).parent)],
     ["kimi-k3-mi355x-agentic.yaml: (file): exists; plan examples copy never overwrites"]),
    ("examples-copy-all-over-one-file",
     lambda t: ["examples", "copy", "--all", "--to",
                str(Path(write(t, "ex/search-kimi-k3-disagg.yaml", "x")).parent)],
     ["search-kimi-k3-disagg.yaml: (file): exists"]),
    ("examples-copy-to-a-file",
     lambda t: ["examples", "copy", "--all", "--to", write(t, "o.txt", "x")],
     ["o.txt: --to: is a file, not a folder"]),
    ("examples-copy-to-empty",  # `--to "$DIR"` with DIR unset wrote into the current folder
     lambda t: ["examples", "copy", "--all", "--to", ""],
     ["(arguments): --to: is empty; give a folder"]),
    ("examples-copy-unknown", lambda t: ["examples", "copy", "nope"],
     ["(arguments): name: unknown example 'nope'; known: kimi-k3-mi355x-1p1d-agentic"]),
    ("examples-copy-name-and-all",
     lambda t: ["examples", "copy", "kimi-k3-mi355x-agentic", "--all"],
     ["(arguments): name: give one example NAME, or --all"]),
    ("examples-copy-nothing", lambda t: ["examples", "copy"],
     ["(arguments): name: give one example NAME, or --all"]),
    # ---- plan profiles show
    ("profiles-show-unknown", lambda t: ["profiles", "show", "no-such-gpu"],
     ["(arguments): name: unknown profile 'no-such-gpu'"]),
    ("profiles-show-path", lambda t: ["profiles", "show", profile(t)], ["unknown profile"]),
    ("profiles-show-json-twice", lambda t: ["profiles", "show", "h100", "--json", "--json"],
     ["json: --json given 2 times; give it once"]),
    # ---- hardware profiles: vendor, runtime, unified memory, single-device profiles
    ("device-vendor-unknown",
     lambda t: [*MEM[:3], "--device", edited_profile(t, "h100", vendor="qualcomm")],
     ["gpu.yaml: vendor: ", "'nvidia'", "'apple'"]),
    ("device-runtime-unknown",
     lambda t: [*MEM[:3], "--device", edited_profile(t, "rtx4090", runtime="tensorrt")],
     ["gpu.yaml: runtime: ", "'vllm'", "'mlx'", "'llama.cpp'"]),
    ("apple-os-reserve-all-memory",
     lambda t: [*MEM[:3], "--device",
                edited_profile(t, "m3-ultra", os_reserve_bytes=5.49755813888e11)],
     ["gpu.yaml: os_reserve_bytes: ", "is not below memory_bytes", "none is left"]),
    ("apple-os-reserve-over-usable",
     lambda t: [*MEM[:3], "--device", edited_profile(t, "m4-max", os_reserve_bytes=5e10)],
     ["gpu.yaml: os_reserve_bytes: ", "is below usable_memory_bytes"]),
    ("apple-os-reserve-unsourced",
     lambda t: [*MEM[:3], "--device", edited_profile(t, "m4-max", unsourced="os_reserve_bytes")],
     ["gpu.yaml: sources: ", "no source given for ['os_reserve_bytes']"]),
    *[
        (f"device-no-{field}",
         lambda t, f=field, b=base: [*STEP[:3], "--decode", "2", "--device",
                                     edited_profile(t, b, no_roofline=f)],
         [f"gpu.yaml: roofline.{field}: Field required"])
        for field, base in zip(HOST_COSTS, ("h100", "mi355x", "b200", "m4-max"), strict=True)
    ],
    ("apple-memory-tp2", lambda t: [*MEM[:3], "--device", "m3-ultra", "--tp", "2"],
     ["(arguments): serving.tp: tp 2 ", "m3-ultra"]),
    ("apple-step-tp2",
     lambda t: ["step", "--model", "llama-3.1-8b", "--device", "m4-max", "--tp", "2",
                "--decode", "2"],
     ["(arguments): serving.tp: tp 2 ", "m4-max"]),
    ("apple-run-tp2", lambda t: ["run", scenario(t, device="m3-ultra", serving={"tp": 2})],
     ["s.yaml: serving.tp: tp 2 ", "m3-ultra"]),
]  # fmt: skip


def test_the_corpus_is_large_and_its_ids_unique() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) >= 50
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(("name", "make", "fragments"), CASES, ids=[c[0] for c in CASES])
def test_bad_file_is_one_line_and_exit_2(
    name: str,
    make: Callable[[Path], list[str]],
    fragments: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_hang: None,
) -> None:
    monkeypatch.chdir(tmp_path)
    args = make(tmp_path)
    code, stdout, stderr = plan(*args)
    lines = stderr.strip().splitlines()
    assert code == 2, f"exit {code}: {stderr}"
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr + stdout
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    leftovers = [p.name for p in tmp_path.rglob(".*plan-tmp-*")]
    assert not leftovers, f"temporary folders left behind: {leftovers}"
    assert not list(tmp_path.rglob(MARKER)), "an in-progress marker left behind"


# ------------------------------------------------------------------------------ before any work


def test_run_checks_the_out_folder_before_simulating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import simulator.simulation

    def no_simulation(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("simulated before the output folder was checked")

    monkeypatch.setattr(simulator.simulation, "simulate", no_simulation)
    bad = write(tmp_path, "o.txt", "x")
    code, _, stderr = plan("run", scenario(tmp_path), "--out", bad)
    assert code == 2, stderr
    assert stderr.strip() == f"error: {bad}: --out: exists and is not a folder: give a folder path"


def test_a_search_trace_path_is_relative_to_the_space_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = tmp_path / "spaces"
    mooncake(sub)
    monkeypatch.chdir(tmp_path)  # no mc.jsonl here: only the space's folder has it
    code, _, stderr = plan(
        "search", space(sub, workload=trace("mc.jsonl", concurrency=1)), "--out", "o", "--json"
    )
    assert code == 0, stderr
    written = yaml.safe_load((tmp_path / "o" / "space.yaml").read_text())
    assert written["workload"]["path"] == str(sub / "mc.jsonl")


def test_card_and_device_paths_are_relative_to_their_spec_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As its trace path: a relative card or profile path in a scenario or a search space
    named a file in the current folder ("no such file", or another file read unsaid)."""
    sub = tmp_path / "specs"
    card(sub, "my-card.yaml")
    profile(sub, "my-gpu.yaml")
    monkeypatch.chdir(tmp_path)  # neither file is here: only the specs' folder has them
    code, _, stderr = plan(
        "run", scenario(sub, model="./my-card.yaml", device="my-gpu.yaml"), "--json"
    )
    assert code == 0, stderr
    code, _, stderr = plan(
        "search", space(sub, model="my-card.yaml", devices=["./my-gpu.yaml"]), "--out", "o",
        "--json",
    )  # fmt: skip
    assert code == 0, stderr
    written = yaml.safe_load((tmp_path / "o" / "space.yaml").read_text())
    assert written["model"] == str(sub / "my-card.yaml")
    assert written["devices"] == [str(sub / "my-gpu.yaml")]


# ------------------------------------------------------------------------------ stale cache


def _cache_entries(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (out / "cache").glob("*.json")}


def _tps(out: Path) -> float:
    import pandas as pd

    runs = pd.read_csv(out / "runs.csv")
    return float(runs["output_tok_per_s_per_gpu"].iloc[0])


def test_an_edited_profile_is_a_new_answer_in_the_same_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_tables: None
) -> None:
    """Edit the GPU profile (10x slower), rerun into the same --out: the new answer, not the
    cached one (the cache key holds the profile's sha256)."""
    gpu = Path(profile(tmp_path, "my-gpu.yaml"))
    args = ["search", space(tmp_path, devices=[str(gpu)]), "--out", str(tmp_path / "o"),
            "--json", "--workers", "1"]  # fmt: skip
    code, _, stderr = plan(*args)
    assert code == 0, stderr
    fast = _tps(tmp_path / "o")
    cached = sorted((tmp_path / "o" / "cache").glob("*.json"))
    text = gpu.read_text()
    for old, new in (
        ("bf16: 9.89e+14", "bf16: 9.89e+13"),
        ("fp8: 1.979e+15", "fp8: 1.979e+14"),
        ("memory_bw_bytes_per_s: 3.35e+12", "memory_bw_bytes_per_s: 3.35e+11"),
    ):
        assert old in text
        text = text.replace(old, new)
    gpu.write_text(text)
    catalog.hardware_profile.cache_clear()  # a new `plan` process reads the file anew
    code, _, stderr = plan(*args)
    assert code == 0, stderr
    slow = _tps(tmp_path / "o")
    assert slow < fast / 3, (fast, slow)
    # the first run's cache entry is still there (another key), beside the new one
    assert set(cached) < set((tmp_path / "o" / "cache").glob("*.json"))
    # and an unchanged rerun is served from the cache
    catalog.hardware_profile.cache_clear()
    entries = _cache_entries(tmp_path / "o")
    code, _, stderr = plan(*args)
    assert code == 0, stderr
    assert _cache_entries(tmp_path / "o") == entries  # nothing simulated again
    assert _tps(tmp_path / "o") == slow


def test_an_edited_trace_is_a_new_answer(tmp_path: Path) -> None:
    from simulator.planner.fingerprint import scenario_hash
    from simulator.specs import Scenario

    path = mooncake(tmp_path)
    sc = Scenario.model_validate({**SCENARIO, "workload": trace(path, concurrency=1)})
    before = scenario_hash(sc)
    assert scenario_hash(sc) == before
    Path(path).write_text(
        Path(path).read_text().replace('"output_length": 4', '"output_length": 9')
    )
    assert scenario_hash(sc) != before


# ------------------------------------------------------------------------------ output folders


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_failure_mid_write_leaves_the_old_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from simulator.simulation import SimResult

    out = tmp_path / "o"
    code, _, stderr = plan("run", scenario(tmp_path), "--out", str(out), "--json")
    assert code == 0, stderr
    (out / "notes.txt").write_text("mine")
    before = _snapshot(out)

    def broken(self: SimResult) -> Any:
        raise OSError(28, "No space left on device")

    # requests.csv is written into the temporary folder, then steps.csv fails
    monkeypatch.setattr(SimResult, "step_table", broken)
    workload = {**SCENARIO["workload"], "num_requests": 9}
    code, _, stderr = plan("run", scenario(tmp_path, workload=workload), "--out", str(out))
    assert code == 2, stderr  # the machine's state, not a planner bug (test_write_faults.py)
    assert "(write): No space left on device: the output was not written" in stderr
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "s.yaml"]  # no temporary folder


def test_a_rerun_drops_stale_files_and_keeps_the_users(tmp_path: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    # a folder written before manifests existed, by a disaggregated run, plus a user's note
    for name in ("transfers.csv", "pins.csv", "requests.csv"):
        (out / name).write_text("old\n")
    (out / "notes.txt").write_text("mine")
    code, _, stderr = plan("run", scenario(tmp_path), "--out", str(out), "--json")
    assert code == 0, stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([MANIFEST, "notes.txt", "requests.csv", "steps.csv", "summary.json"])
    assert (out / "requests.csv").read_text() != "old\n"
    assert json.loads((out / MANIFEST).read_text())["files"] == [
        "requests.csv",
        "steps.csv",
        "summary.json",
    ]


def test_search_keeps_its_cache_and_replaces_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "o"
    code, _, stderr = plan("search", space(tmp_path), "--out", str(out), "--json")
    assert code == 0, stderr
    (out / "modes.csv").write_text("stale\n")  # as an older search of another space left it
    cache = sorted((out / "cache").glob("*.json"))
    assert cache
    entries = _cache_entries(out)
    code, _, stderr = plan("search", space(tmp_path), "--out", str(out), "--json")
    assert code == 0, stderr
    assert _cache_entries(out) == entries  # served from the kept cache, nothing simulated
    assert not (out / "modes.csv").exists()
    before = _snapshot(out)

    import simulator.planner.report as report

    def broken(out_dir: Path, *args: Any) -> Any:
        (out_dir / "report.html").write_text("half")
        raise RuntimeError("the report failed")

    monkeypatch.setattr(report, "write_report", broken)
    code, _, stderr = plan("search", space(tmp_path, concurrency=[2, 3]), "--out", str(out))
    assert code == 1, stderr
    assert _snapshot(out) == before  # the old report, whole
    assert len(list((out / "cache").glob("*.json"))) == len(cache) + 1  # the new run kept
    assert not (out / MARKER).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "space.yaml"]


def test_a_killed_search_leaves_the_marker_and_the_next_run_cleans_up(tmp_path: Path) -> None:
    out = tmp_path / "o"
    env = {**os.environ, "PLAN_MEASURED": "off"}
    cmd = [sys.executable, "-c", "from simulator.cli import main; main()", "search"]
    first = subprocess.run(
        [*cmd, space(tmp_path), "--out", str(out), "--json"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    report = _snapshot(out)
    # minutes of work on any machine (it is killed after a second): a search that could
    # finish within the second after its marker appears would make this test a race
    slow = space(tmp_path, "slow.yaml", concurrency=[1, 2, 3, 4, 5, 6], duration_s=36_000.0,
                 workload={**SPACE["workload"], "num_requests": 200_000})  # fmt: skip
    proc = subprocess.Popen(
        [*cmd, slow, "--out", str(out), "--workers", "1"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (out / MARKER).exists() and time.monotonic() < deadline:
            assert proc.poll() is None, "the search ended before it could be killed"
            time.sleep(0.05)
        marker = json.loads((out / MARKER).read_text())
        assert marker["pid"] == proc.pid
        assert marker["command"] == "plan search"
        time.sleep(1.0)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    # killed: the previous report whole, and the marker says the folder was being replaced
    assert (out / MARKER).exists()
    assert {k: v for k, v in _snapshot(out).items() if k != MARKER} == report
    # the next run sweeps the killed run's temporary folder and ends with no marker
    again = subprocess.run(
        [*cmd, space(tmp_path), "--out", str(out), "--json"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert not (out / MARKER).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "slow.yaml", "space.yaml"]


def test_a_live_marker_refuses_a_second_writer(tmp_path: Path) -> None:
    import socket

    out = tmp_path / "o"
    out.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / MARKER).write_text(json.dumps(
            {"pid": sleeper.pid, "host": socket.gethostname(), "command": "plan search",
             "started": "now"}))  # fmt: skip
        code, _, stderr = plan("run", scenario(tmp_path), "--out", str(out))
        assert code == 2
        assert f"plan search (pid {sleeper.pid}" in stderr
        assert "is writing this folder" in stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    # its process gone, the marker is stale: the run proceeds and removes it
    code, _, stderr = plan("run", scenario(tmp_path), "--out", str(out), "--json")
    assert code == 0, stderr
    assert not (out / MARKER).exists()


# ------------------------------------------------------------------------------ defaults


def test_fit_writes_into_the_user_folder_not_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hardware_profiles import PROFILES_DIR

    monkeypatch.setenv("PLAN_HOME", str(tmp_path / "home"))
    rows = "".join(f"gemm,bf16,{m},4096,4096,{5 + m * 0.01:.3f}\n" for m in range(1, 300, 7))
    meas = write(tmp_path, "m.csv", "op,dtype,m,n,k,latency_us\n" + rows)
    before = sorted(p.name for p in (PROFILES_DIR / "h100").iterdir())
    code, _, stderr = plan("fit", "--device", "h100", "--measurements", meas)
    assert code == 0, stderr
    written = tmp_path / "home" / "profiles" / "h100" / "latency_models.json"
    assert json.loads(written.read_text())["device"] == "h100"
    assert sorted(p.name for p in (PROFILES_DIR / "h100").iterdir()) == before


def test_fit_into_a_user_folder_that_is_a_file_blames_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It named --out, which was not given."""
    home = tmp_path / "home"
    home.write_text("x")
    monkeypatch.setenv("PLAN_HOME", str(home))
    rows = "".join(f"gemm,bf16,{m},4096,4096,{5 + m * 0.01:.3f}\n" for m in range(1, 300, 7))
    meas = write(tmp_path, "m.csv", "op,dtype,m,n,k,latency_us\n" + rows)
    code, _, stderr = plan("fit", "--device", "h100", "--measurements", meas)
    assert code == 2
    assert f": (user data folder): {home} is a file, not a folder" in stderr
    assert "--out" not in stderr


def _edited_fit(fit: dict, change: str) -> dict:
    """A fitted latency file as a hand edit leaves it (``change`` names the edit)."""
    model = fit["models"][0]
    if change == "launch-1e300":
        model["roofline"]["launch_s"] = 1e300
    elif change == "efficiency-1e9":
        model["roofline"]["compute_efficiency"] = 1e9
    elif change == "class-twice":
        fit["models"] = [model, model]
    elif change == "other-device":
        fit["device"] = "h100"
    return fit


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        # a TTFT of 300 digits and 0.0 tok/s, exit 0
        ("launch-1e300", "models.0.roofline.launch_s: Input should be less than or equal to 0.001"),
        ("efficiency-1e9", "compute_efficiency: Input should be less than or equal to 1.5"),
        ("class-twice", "op_class 'gemm' is fitted twice"),
        # an h100 fit under profiles/gb300/ priced GB300 with H100's kernels, unsaid
        ("other-device", "device: 'h100': fitted for another device than 'gb300'"),
    ],
)
def test_a_hand_edited_fit_in_the_user_folder_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str, fragment: str
) -> None:
    monkeypatch.setenv("PLAN_HOME", str(tmp_path / "home"))
    rows = "".join(f"gemm,bf16,{m},4096,4096,{5 + m * 0.01:.3f}\n" for m in range(1, 300, 7))
    meas = write(tmp_path, "m.csv", "op,dtype,m,n,k,latency_us\n" + rows)
    fit = tmp_path / "fit.json"
    code, _, stderr = plan("fit", "--device", "gb300", "--measurements", meas, "--out", str(fit))
    assert code == 0, stderr
    folder = tmp_path / "home" / "profiles" / "gb300"
    folder.mkdir(parents=True)
    target = folder / "latency_models.json"
    target.write_text(json.dumps(_edited_fit(json.loads(fit.read_text()), change)))
    code, _, stderr = plan("step", "--model", "llama-3.1-8b", "--device", "gb300", "--decode", "4")
    assert code == 2, stderr
    (line,) = stderr.strip().splitlines()
    assert line.startswith(f"error: {target}: ")
    assert fragment in line, line


# ------------------------------------------------------------------------------ calibrate

NO_TORCH = 'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n'

CALIBRATE_CASES: list[tuple[str, list[str], str]] = [
    ("budget-nan", ["measure", "--device-name", "h100", "--budget-s", "nan"],
     "(arguments): budget-s: must be a finite number > 0, got nan"),
    ("budget-inf", ["measure", "--device-name", "h100", "--budget-s", "inf"],
     "budget-s: must be a finite number > 0, got inf"),
    ("budget-zero", ["measure", "--device-name", "h100", "--budget-s", "0"],
     "budget-s: must be a finite number > 0"),
    ("device-name-path", ["measure", "--device-name", "../h100"],
     "device-name: '../h100' is not a folder name"),
    ("no-torch-measure", ["measure", "--device-name", "h100", "--smoke"],
     "(environment): torch: not installed: install the calibrate extra"),
    ("no-torch-run", ["run", "--device-name", "h100", "--smoke"],
     "torch: not installed: install the calibrate extra"),
    ("fit-unknown-device", ["fit", "no-such-gpu"], "no such profile: create it first"),
    ("budget-given-twice",
     ["measure", "--device-name", "h100", "--budget-s", "5", "--budget-s", "6"],
     "budget-s: --budget-s given 2 times"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "args", "fragment"), CALIBRATE_CASES,
                         ids=[c[0] for c in CALIBRATE_CASES])  # fmt: skip
def test_calibrate_bad_input_is_one_line_and_exit_2(
    name: str, args: list[str], fragment: str, tmp_path: Path
) -> None:
    """``calibrate`` as a user runs it, without the calibrate extra (a ``torch`` that cannot
    be imported shadows any installed one): the friendly line, never ModuleNotFoundError."""
    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(NO_TORCH)
    env = {**os.environ, "PLAN_HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(shadow.parent)}  # fmt: skip
    code = "from kernels_calibration.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert not (tmp_path / "home" / "profiles" / "h100" / "measurements").exists()
