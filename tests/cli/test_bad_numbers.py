"""Bad numbers and spec values, end to end: each one is ONE ``error: <file>: <field>: <reason>``
line on stderr and exit code 2 (never a traceback, never an absurd answer, never a hang).

The corpus is table-driven: (id, argv builder, the file the line must name, fragments of the
line). Every builder writes its inputs under ``tmp_path`` and keeps the run tiny.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from simulator import catalog
from simulator.cli import app

runner = CliRunner()

# A corpus row may not take longer than this (the inputs that hung before must fail fast).


def plan(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


# ----------------------------------------------------------------------------- inputs

SCENARIO: dict[str, Any] = {
    "name": "bad-numbers",
    "model": "llama-3.1-8b",
    "device": "h100",
    "serving": {"tp": 1},
    "workload": {"kind": "random", "input_tokens": 256, "output_tokens": 8,
                 "num_requests": 4, "concurrency": 2},
    "duration_s": 30.0,
}  # fmt: skip

AGENTIC = {"kind": "agentic", "sessions": 2, "concurrency": 2}

SPACE: dict[str, Any] = {
    "name": "bad-numbers",
    "model": "llama-3.1-8b",
    "devices": ["h100"],
    "concurrency": [1],
    "workload": {"kind": "random", "input_tokens": 256, "output_tokens": 8,
                 "num_requests": 4, "concurrency": 1},
    "slo": {"interactivity_tok_per_s_p90": 1.0},
    "duration_s": 30.0,
    "warmup_s": 0.0,
    "seeds": 1,
}  # fmt: skip


def _write(tmp: Path, name: str, text: str) -> str:
    p = tmp / name
    p.write_text(text)
    return str(p)


def _yaml(tmp: Path, name: str, data: Any) -> str:
    return _write(tmp, name, yaml.safe_dump(data, sort_keys=False))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def run_(**over: Any) -> Callable[[Path], list[str]]:
    """``plan run`` of the tiny scenario with ``over`` merged in (nested dicts merge, but a
    workload given replaces the scenario's whole)."""
    workload = over.pop("workload", SCENARIO["workload"])
    return lambda t: ["run", _yaml(t, "s.yaml", {**_merge(SCENARIO, over), "workload": workload})]


def set_(*items: str, **over: Any) -> Callable[[Path], list[str]]:
    """``plan run`` of the tiny scenario (``over`` merged in) with ``--set`` of each item."""
    return lambda t: [*run_(**over)(t), *(a for item in items for a in ("--set", item))]


def search_(**over: Any) -> Callable[[Path], list[str]]:
    return lambda t: [
        "search", _yaml(t, "space.yaml", {**SPACE, **over}), "--out", str(t / "o"),
    ]  # fmt: skip


MEM = ["memory", "--model", "llama-3.1-8b", "--device", "h100"]


def memory_serving(text: str) -> Callable[[Path], list[str]]:
    return lambda t: [*MEM, "--serving", _write(t, "serving.yaml", text)]


STEP = ["step", "--model", "llama-3.1-8b", "--device", "h100"]


def _everything(data: Any, value: float) -> Any:
    """Every float of a spec replaced by ``value``, except the efficiencies (bounded by 1
    before any of this): what an all-``.inf`` profile that simulated 422 tok/s/user held."""
    if isinstance(data, dict):
        return {
            k: v if k.endswith("_efficiency") else _everything(v, value) for k, v in data.items()
        }
    if isinstance(data, list):
        return [_everything(v, value) for v in data]
    if isinstance(data, float):
        return value
    return data


def profile_(tmp: Path, everything: float | None = None, **changes: Any) -> str:
    data = catalog.hardware_profile("h100").model_dump(mode="json")
    if everything is not None:
        data = _everything(data, everything)
    data = _merge(data, changes)
    return _yaml(tmp, "gpu.yaml", data)


def card_(tmp: Path, model: str = "llama-3.1-8b", **changes: Any) -> str:
    data = _merge(catalog.model_card(model).model_dump(mode="json"), changes)
    return _yaml(tmp, "card.yaml", data)


def ops_csv(tmp: Path, rows: list[dict[str, Any]], name: str = "ops.csv") -> str:
    columns: list[str] = []
    for r in rows:
        columns += [c for c in r if c not in columns]
    lines = [",".join(columns)]
    lines += [",".join(str(r.get(c, "")) for c in columns) for r in rows]
    return _write(tmp, name, "\n".join(lines) + "\n")


def predict_(rows: list[dict[str, Any]]) -> Callable[[Path], list[str]]:
    return lambda t: ["ops", "predict", "--device", "h100", "--input", ops_csv(t, rows)]


GEMM = {"op": "gemm", "dtype": "bf16", "m": 16, "n": 4096, "k": 4096}
MOE = {"op": "moe", "dtype": "fp8", "num_tokens": 64, "hidden": 7168, "inter": 2048,
       "num_experts": 256, "topk": 8}  # fmt: skip
ATTN = {"op": "attn_decode", "dtype": "bf16", "batch": 8, "ctx_len": 4096, "num_heads": 32,
        "num_kv_heads": 8, "head_dim": 128, "kv_dtype": "fp8"}  # fmt: skip
ALLREDUCE = {"op": "allreduce", "bytes": 1 << 20, "world_size": 8}


def measured_gemms(n: int) -> list[dict[str, Any]]:
    """``n`` GEMM rows with a plausible latency (m = 1, 2, 4, ..., 32,768, then steps of
    32,768: 2^38 rows took 1,647 s, past a measured latency's 1,000 s bound)."""
    rows = []
    for i in range(n):
        m = 2**i if i < 16 else 2**15 * (i - 14)
        t = max(2 * m * 4096 * 4096 / 7e14, (2 * m * 4096 * 2 + 4096 * 4096 * 2) / 3e12) + 5e-6
        rows.append({**GEMM, "m": m, "latency_us": round(t * 1e6, 4)})
    return rows


def fit_(rows: list[dict[str, Any]], *extra: str) -> Callable[[Path], list[str]]:
    return lambda t: [
        "fit", "--device", "h100", "--measurements", ops_csv(t, rows, "measured.csv"),
        "--out", str(t / "latency_models.json"), *extra,
    ]  # fmt: skip


def validate_(rows: list[dict[str, Any]], *extra: str) -> Callable[[Path], list[str]]:
    return lambda t: [
        "validate", "ops", "--device", "h100", "--measurements",
        ops_csv(t, rows, "measured.csv"), *extra,
    ]  # fmt: skip


def weka(**request: Any) -> dict[str, Any]:
    """One WEKA/AgentX session of two requests; ``request`` overrides the first request."""
    first = {"t": 0.0, "in": 640, "out": 5, "hash_ids": list(range(10)),
             "think_time": 0.0, "api_time": 1.0, **request}  # fmt: skip
    second = {"t": 3.0, "in": 704, "out": 5, "hash_ids": list(range(11)),
              "think_time": 2.0, "api_time": 1.0}  # fmt: skip
    return {"id": "s1", "block_size": 64, "requests": [first, second]}


def jsonl(tmp: Path, name: str, records: list[Any]) -> str:
    # json.dumps writes NaN / Infinity (what Python's json reads back): the traces we meet
    return _write(tmp, name, "".join(json.dumps(r) + "\n" for r in records))


def agentic_trace(**request: Any) -> Callable[[Path], str]:
    return lambda t: jsonl(t, "trace.jsonl", [weka(**request)])


def subagent_trace(**sub: Any) -> Callable[[Path], str]:
    def build(t: Path) -> str:
        trace = weka()
        trace["requests"].insert(1, {"type": "subagent", "agent_id": "a", "t": 2.0,
                                     "duration_ms": 500, **sub,
                                     "requests": [weka()["requests"][0]]})  # fmt: skip
        return jsonl(t, "trace.jsonl", [trace])

    return build


def azure_trace(timestamp: str) -> Callable[[Path], str]:
    return lambda t: _write(
        t, "azure.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,100,10\n"
        f"{timestamp},200,20\n",
    )  # fmt: skip


def azure_rows(*rows: str) -> Callable[[Path], str]:
    """An Azure CSV of ``rows`` (``\\uXXXX`` escapes decoded: a digit of another script)."""
    body = "".join(r.encode().decode("unicode_escape") + "\n" for r in rows)
    return lambda t: _write(t, "azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n" + body)


def mooncake_trace(**rec: Any) -> Callable[[Path], str]:
    base = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
    return lambda t: jsonl(t, "mooncake.jsonl", [{**base, **rec}])


def stats_(trace: Callable[[Path], str]) -> Callable[[Path], list[str]]:
    return lambda t: ["workload", "stats", trace(t)]


def run_trace(trace: Callable[[Path], str]) -> Callable[[Path], list[str]]:
    def build(t: Path) -> list[str]:
        path = trace(t)
        workload = {"kind": "trace", "path": path, "concurrency": 1}
        return ["run", _yaml(t, "s.yaml", {**SCENARIO, "workload": workload})]

    return build


def big_space(t: Path) -> list[str]:
    """About 4 x 10^6 combinations: 100 x 100 x 100 knob values x 4 loads."""
    space = {
        **SPACE,
        "concurrency": [1, 2, 3, 4],
        "search": "grid",
        "sweep": {
            "max_num_seqs": list(range(1, 101)),
            "max_num_batched_tokens": list(range(8192, 8292)),
            "cpu_offload_bytes": [float(i) * 1e9 for i in range(100)],
        },
    }
    return ["search", _yaml(t, "space.yaml", space), "--out", str(t / "o")]


INF, NAN = math.inf, math.nan
PD = {"prefill_replicas": 1, "decode_replicas": 1}

# (id, argv builder, the file the line names, fragments the line contains)
Row = tuple[str, Callable[[Path], list[str]], str, list[str]]
CORPUS: list[Row] = [
    # ---- plan run: the scenario file's own numbers
    ("run-duration-inf", run_(duration_s=INF), "s.yaml", ["duration_s", "finite"]),
    ("run-duration-nan", run_(duration_s=NAN), "s.yaml", ["duration_s", "finite"]),
    ("run-warmup-inf", run_(duration_s=None, warmup_s=INF), "s.yaml", ["warmup_s", "finite"]),
    ("run-warmup-nan", run_(warmup_s=NAN), "s.yaml", ["warmup_s", "finite"]),
    ("run-warmup-beyond-duration", run_(warmup_s=60.0), "s.yaml", ["warmup_s", "duration_s"]),
    ("run-seed-negative", run_(seed=-1), "s.yaml", ["seed", ">= 0"]),
    ("run-seed-bool", run_(seed=True), "s.yaml", ["seed", "boolean"]),
    ("run-slo-inf", run_(slo={"interactivity_tok_per_s_p90": INF}), "s.yaml",
     ["slo.interactivity_tok_per_s_p90", "finite"]),
    ("run-slo-ttft-nan", run_(slo={"ttft_s_p90": NAN}), "s.yaml", ["slo.ttft_s_p90", "finite"]),
    ("run-unknown-cost-model", run_(cost_model="free_lunch"), "s.yaml", ["cost_model"]),
    # ---- plan run: serving numbers
    ("run-tp-true", run_(serving={"tp": True}), "s.yaml", ["serving.tp", "boolean"]),
    ("run-dp-float", run_(serving={"dp": 1.5}), "s.yaml", ["serving.dp"]),
    ("run-prefix-caching-int", run_(serving={"enable_prefix_caching": 1}), "s.yaml",
     ["serving.enable_prefix_caching", "true or false"]),
    ("run-kv-bytes-inf", run_(serving={"kv_cache_memory_bytes": INF}), "s.yaml",
     ["serving.kv_cache_memory_bytes", "finite"]),
    ("run-kv-bytes-1e30", run_(serving={"kv_cache_memory_bytes": 1e30}), "s.yaml",
     ["serving.kv_cache_memory_bytes", "usable memory"]),
    ("run-offload-inf", run_(serving={"cpu_offload_bytes": INF}), "s.yaml",
     ["serving.cpu_offload_bytes", "finite"]),
    ("run-offload-nan", run_(serving={"cpu_offload_bytes": NAN}), "s.yaml",
     ["serving.cpu_offload_bytes", "finite"]),
    ("run-offload-beyond-host", run_(serving={"cpu_offload_bytes": 1e15}), "s.yaml",
     ["serving.cpu_offload_bytes", "host DRAM"]),
    ("run-utilization-nan", run_(serving={"gpu_memory_utilization": NAN}), "s.yaml",
     ["serving.gpu_memory_utilization", "finite"]),
    ("run-reserve-inf", run_(serving={"runtime_reserve_bytes": INF}), "s.yaml",
     ["serving.runtime_reserve_bytes", "finite"]),
    ("run-reserve-beyond-memory", run_(serving={"runtime_reserve_bytes": 1e12}), "s.yaml",
     ["serving.runtime_reserve_bytes", "usable memory"]),
    ("run-dp-100000", run_(serving={"dp": 100_000}), "s.yaml", ["serving.dp", "1,024"]),
    ("run-block-size-7", run_(serving={"block_size_tokens": 7}), "s.yaml",
     ["serving.block_size_tokens", "1, 8, 16, 32, 64, 128, 256"]),
    ("run-batched-below-seqs",
     run_(serving={"max_num_batched_tokens": 64, "max_num_seqs": 128}), "s.yaml",
     ["serving.max_num_batched_tokens", "max_num_seqs"]),
    ("run-acceptance-nan",
     run_(serving={"speculative": {"method": "eagle", "num_speculative_tokens": 2,
                                   "acceptance_rate": NAN}}), "s.yaml",
     ["serving.speculative.acceptance_rate", "finite"]),
    ("run-ttl-inf", run_(serving={"decoder_kv_blocks_ttl_s": INF}), "s.yaml",
     ["serving.decoder_kv_blocks_ttl_s", "finite"]),
    # ---- plan run: workload numbers
    ("run-think-scale-inf", run_(workload={**AGENTIC, "think_time_scale": INF}), "s.yaml",
     ["workload.agentic.think_time_scale", "finite"]),
    ("run-think-cap-nan", run_(workload={**AGENTIC, "think_time_cap_s": NAN}), "s.yaml",
     ["workload.agentic.think_time_cap_s", "finite"]),
    ("run-ramp-inf", run_(workload={**AGENTIC, "ramp_s": INF}), "s.yaml",
     ["workload.agentic.ramp_s", "finite"]),
    ("run-ramp-without-users",
     run_(workload={"kind": "agentic", "sessions": 2, "session_rate_per_s": 1.0, "ramp_s": 9}),
     "s.yaml", ["workload.agentic", "needs concurrency"]),
    ("run-session-rate-inf",
     run_(workload={"kind": "agentic", "sessions": 2, "session_rate_per_s": INF}), "s.yaml",
     ["workload.agentic.session_rate_per_s", "finite"]),
    ("run-request-rate-inf",
     run_(workload={"kind": "random", "input_tokens": 256, "output_tokens": 8,
                    "num_requests": 4, "request_rate_per_s": INF}), "s.yaml",
     ["workload.random.request_rate_per_s", "finite"]),
    ("run-range-ratio-nan", run_(workload={**SCENARIO["workload"], "range_ratio": NAN}), "s.yaml",
     ["workload.random.range_ratio", "finite"]),
    ("run-concurrency-true", run_(workload={**AGENTIC, "concurrency": True}), "s.yaml",
     ["workload.agentic.concurrency", "boolean"]),
    ("run-sessions-1e9", run_(workload={**AGENTIC, "sessions": 10**9}), "s.yaml",
     ["workload.agentic.sessions", "1,000,000"]),
    # derived times past the clock's resolution: TTFT read 0.0 s and a TTFT target "met"
    ("run-request-rate-1e-15",
     run_(workload={"kind": "random", "input_tokens": 256, "output_tokens": 8,
                    "num_requests": 3, "request_rate_per_s": 1e-15}), "s.yaml",
     ["workload.random", "num_requests 3 at request_rate_per_s 1e-15 arrive over ~3e+15 s"]),
    ("run-session-rate-1e-15",
     run_(workload={"kind": "agentic", "sessions": 4, "session_rate_per_s": 1e-15}), "s.yaml",
     ["workload.agentic", "sessions 4 at session_rate_per_s 1e-15"]),
    ("run-think-scale-1e15", run_(workload={**AGENTIC, "think_time_scale": 1e15}), "s.yaml",
     ["workload.agentic.think_time_scale", "exceeds 1e+04"]),
    ("run-trace-time-scale-1e16",
     run_(workload={"kind": "trace", "path": "t.jsonl", "time_scale": 1e16}), "s.yaml",
     ["workload.trace.time_scale", "exceeds 1e+04"]),
    ("run-ramp-1e300", run_(workload={**AGENTIC, "ramp_s": 1e300}), "s.yaml",
     ["workload.agentic.ramp_s", "seconds of simulated time"]),
    ("run-think-cap-1e20", run_(workload={**AGENTIC, "think_time_cap_s": 1e20}), "s.yaml",
     ["workload.agentic.think_time_cap_s", "exceeds 1e+09"]),
    ("run-duration-1e20", run_(duration_s=1e20), "s.yaml", ["duration_s", "exceeds 1e+09"]),
    ("run-warmup-1e20", run_(warmup_s=1e20), "s.yaml", ["warmup_s", "exceeds 1e+09"]),
    # ---- plan run: disaggregation numbers
    ("run-link-inf", run_(disaggregation={**PD, "link_bw_bytes_per_s": INF}), "s.yaml",
     ["disaggregation.link_bw_bytes_per_s", "finite"]),
    ("run-replicas-100000", run_(disaggregation={**PD, "decode_replicas": 100_000}), "s.yaml",
     ["disaggregation", "1,024"]),
    ("run-link-latency-1e30", run_(disaggregation={**PD, "link_latency_s": 1e30}), "s.yaml",
     ["disaggregation.link_latency_s", "exceeds 1"]),
    ("run-kv-descriptor-1e30", run_(disaggregation={**PD, "kv_descriptor_s": 1e30}), "s.yaml",
     ["disaggregation.kv_descriptor_s", "exceeds 1"]),
    ("run-link-bw-1e20", run_(disaggregation={**PD, "link_bw_bytes_per_s": 1e20}), "s.yaml",
     ["disaggregation.link_bw_bytes_per_s", "exceeds 1e+14"]),
    # the remote KV store, bounded as a link: a 300 s latency left a load in flight at the end
    ("run-store-latency-300", run_(kv_store={"capacity_bytes": 1e12, "latency_s": 300}),
     "s.yaml", ["kv_store.latency_s", "300 exceeds 1"]),
    ("run-store-bw-1e-300",
     run_(kv_store={"capacity_bytes": 1e12, "bw_bytes_per_s": 1e-300}), "s.yaml",
     ["kv_store.bw_bytes_per_s", "is below 1e+06"]),
    ("run-store-capacity-1e300", run_(kv_store={"capacity_bytes": 1e300}), "s.yaml",
     ["kv_store.capacity_bytes", "exceeds 1e+18"]),
    # ---- plan run: values the OS cannot take as a name or path, and a failed field that a
    # later check reads (only its own error: no second line against a default)
    ("run-model-name-5000-chars", run_(model="x" * 5000), "s.yaml", ["model", "unknown model"]),
    ("run-device-name-5000-chars", run_(device="x" * 5000), "s.yaml",
     ["device", "unknown device"]),
    ("run-trace-path-nul", run_(workload={"kind": "trace", "path": "a\x00b"}), "a\\x00b",
     ["NUL byte"]),
    ("run-trace-path-empty", run_(workload={"kind": "trace", "path": ""}), "s.yaml",
     ["workload.trace.path", "at least 1 character"]),
    ("run-kind-with-newline", run_(workload={**AGENTIC, "kind": "a\nb"}), "s.yaml",
     ["workload", "'a\\nb'"]),
    ("run-draft-tokens-1000",
     run_(serving={"tp": 1, "speculative": {"method": "ngram", "num_speculative_tokens": 1000,
                                           "acceptance_rate": 0.5}}),
     "s.yaml", ["serving.speculative.num_speculative_tokens", "exceeds 64"]),
    ("run-api-servers-1e6", run_(serving={"tp": 1, "api_server_count": 10**6}), "s.yaml",
     ["serving.api_server_count", "exceeds 1,024"]),
    ("run-tp-0-with-dcp", run_(serving={"tp": 0, "dcp": 8}), "s.yaml", ["serving.tp", "greater"]),
    ("run-tp-0-with-ep", run_(serving={"tp": 0, "ep": 8}), "s.yaml", ["serving.tp", "greater"]),
    ("run-dp-0-with-all2all",
     run_(serving={"dp": 0, "ep": 8, "all2all_backend": "deepep_low_latency"}), "s.yaml",
     ["serving.dp", "greater"]),
    # ---- plan run: the device and the card it names
    ("run-profile-all-inf", lambda t: run_(device=profile_(t, everything=INF))(t), "gpu.yaml",
     ["finite"]),
    # 1e-30 priced a step at 6e37 s (and a run that served nothing exited 0)
    ("run-profile-bandwidth-1e-30",
     lambda t: run_(device=profile_(t, memory_bw_bytes_per_s=1e-30))(t), "gpu.yaml",
     ["memory_bw_bytes_per_s", "is below 1e+08"]),
    ("run-profile-peak-1e3",
     lambda t: run_(device=profile_(t, peak_flops_per_s={"bf16": 1e3}))(t), "gpu.yaml",
     ["peak_flops_per_s.bf16", "is below 1e+09"]),
    ("run-profile-efficiency-1e-30",
     lambda t: run_(device=profile_(t, roofline={"memory_efficiency": 1e-30}))(t), "gpu.yaml",
     ["roofline.memory_efficiency", "is below 0.001"]),
    ("run-profile-link-1e-30",
     lambda t: run_(device=profile_(t, scale_up={"bw_bytes_per_s": 1e-30}))(t), "gpu.yaml",
     ["scale_up.bw_bytes_per_s", "is below 1e+06"]),
    # a typo read no tables and the run went on transferred from another device, unsaid
    ("run-profile-measured-tables-typo",
     lambda t: run_(device=profile_(t, measured_tables="h100_sxn"))(t), "gpu.yaml",
     ["measured_tables", "unknown system 'h100_sxn'", "h100_sxm"]),
    ("run-profile-latency-nan",
     lambda t: run_(device=profile_(t, scale_up={"latency_s": NAN}))(t), "gpu.yaml",
     ["scale_up.latency_s", "finite"]),
    ("run-profile-domain-true",
     lambda t: run_(device=profile_(t, scale_up={"domain_size": True}))(t), "gpu.yaml",
     ["scale_up.domain_size", "boolean"]),
    # hosts of 5 GPUs cannot tile an 8-GPU domain: the deploy line would start a partial host
    ("run-profile-hosts-untiled",
     lambda t: run_(device=profile_(t, scale_up={"gpus_per_host": 5}))(t), "gpu.yaml",
     ["scale_up.gpus_per_host", "5 does not divide domain_size 8"]),
    ("run-card-zero-heads", lambda t: run_(model=card_(t, gqa={"num_heads": 0}))(t), "card.yaml",
     ["gqa.num_heads"]),
    ("run-card-hidden-inf", lambda t: run_(model=card_(t, hidden_size=INF))(t), "card.yaml",
     ["hidden_size"]),
    # ---- plan run: trace records
    ("run-trace-in-zero", run_trace(agentic_trace(**{"in": 0, "hash_ids": []})), "trace.jsonl",
     ["line 1", "in", ">= 1"]),
    ("run-trace-t-inf", run_trace(agentic_trace(t=INF)), "trace.jsonl",
     ["line 1", "requests[0].t", "finite"]),
    # 1e30 s made a session span 1e30 s: a time past 32 years is a unit mix-up
    ("run-trace-t-1e30", run_trace(agentic_trace(t=1e30)), "trace.jsonl",
     ["line 1", "requests[0].t", "exceeds 1e+09"]),
    # json keeps the last of a repeated key: "out": 10, "out": 2000 replayed 2,000 tokens
    ("run-trace-agentic-key-twice",
     run_trace(lambda t: _write(t, "trace.jsonl", json.dumps(weka()).replace(
         '"out": ', '"out": 10, "out": ', 1) + "\n")), "trace.jsonl",
     ["line 1", "duplicate key 'out' in one object"]),
    ("run-trace-mooncake-key-twice",
     run_trace(lambda t: _write(t, "m.jsonl", '{"timestamp": 0, "input_length": 100,'
                                ' "output_length": 10, "output_length": 2000, "hash_ids": [1]}\n')),
     "m.jsonl", ["line 1", "duplicate key 'output_length' in one object"]),
    # a RecursionError from json's decoder, out of the engine
    ("run-trace-nested-deep",
     lambda t: ["run", _yaml(t, "s.yaml", {**SCENARIO, "workload": {
         "kind": "trace", "format": "mooncake", "concurrency": 1,
         "path": _write(t, "deep.jsonl", "[" * 100_000 + "]" * 100_000 + "\n")}})],
     "deep.jsonl", ["line 1", "invalid JSON: nested too deeply"]),
    ("run-trace-think-1e30", run_trace(agentic_trace(think_time=1e30)), "trace.jsonl",
     ["line 1", "requests[0].think_time", "exceeds 1e+09"]),
    ("run-trace-subagent-duration-1e30", run_trace(subagent_trace(duration_ms=1e30)),
     "trace.jsonl", ["line 1", "requests[1].duration_ms", "exceeds 1e+12"]),
    ("run-trace-azure-nan", run_trace(azure_trace("nan")), "azure.csv",
     ["line 3", "TIMESTAMP", "finite"]),
    # ---- plan run --set: a malformed item, and values checked as the file's are
    # PyYAML's int() refused it past Python's 4,300-digit limit: an internal error before
    ("run-seed-5000-digits", lambda t: [*run_()(t), "--set", "seed=" + "1" * 5000],
     "(arguments)", ["set", "an integer of more than 4,300 digits"]),
    ("run-file-seed-5000-digits",
     lambda t: ["run", _write(t, "s.yaml", yaml.safe_dump(SCENARIO) + "seed: " + "1" * 5000)],
     "s.yaml", ["(yaml)", "an integer of more than 4,300 digits"]),
    ("run-set-no-equals", set_("serving.tp"), "(arguments)", ["set", "'serving.tp' has no '='"]),
    ("run-set-empty-key", set_("=4"), "(arguments)", ["set", "empty key"]),
    ("run-set-empty-part", set_("serving..tp=4"), "(arguments)", ["set", "empty part"]),
    ("run-set-no-value", set_("serving.tp="), "(arguments)", ["set", "has no value"]),
    ("run-set-not-yaml", set_("serving.tp=[1,"), "(arguments)", ["set", "not YAML"]),
    ("run-set-given-twice", set_("serving.tp=1", "serving.tp=2"), "(arguments)",
     ["set", "serving.tp given twice"]),
    ("run-set-overlapping", set_("serving={tp: 1}", "serving.tp=2"), "(arguments)",
     ["set", "overlaps"]),
    ("run-set-through-a-number", set_("duration_s.x=1"), "(arguments)",
     ["set", "duration_s is 30.0, not a mapping"]),
    ("run-set-unknown-field", set_("serving.tpp=2"), "(arguments)",
     ["serving.tpp", "unknown field"]),
    ("run-set-duration-inf", set_("duration_s=.inf"), "(arguments)", ["duration_s", "finite"]),
    ("run-set-tp-true", set_("serving.tp=true"), "(arguments)", ["serving.tp", "boolean"]),
    ("run-set-sessions-1e9", set_("workload.sessions=1000000000", workload=AGENTIC),
     "(arguments)", ["workload.agentic.sessions", "1,000,000"]),
    ("run-set-tp-not-dividing-heads", set_("serving.tp=3"), "(arguments)",
     ["serving.tp", "does not divide"]),
    ("run-file-value-with-a-set", set_("serving.tp=1", duration_s=INF), "s.yaml",
     ["duration_s", "finite"]),
    ("run-format-unknown", lambda t: [*run_()(t), "--format", "xml"], "(arguments)",
     ["format", "unknown format 'xml'"]),
    # ---- plan search
    # the default warm-up was blamed as if the file gave it
    ("search-default-warmup-past-duration",
     lambda t: ["search", _yaml(t, "space.yaml", {k: v for k, v in SPACE.items()
                                                  if k != "warmup_s"}), "--out", str(t / "o")],
     "space.yaml", ["warmup_s: 600 s (the default: give a smaller warmup_s) leaves nothing"]),
    ("search-set-unknown-field", lambda t: [*search_()(t), "--set", "sweep.tpp=[1]"],
     "(arguments)", ["sweep.tpp", "unknown field"]),
    ("search-set-offload-nan",
     lambda t: [*search_()(t), "--set", "sweep.cpu_offload_bytes=[0.0, .nan]"], "(arguments)",
     ["sweep.cpu_offload_bytes.1", "finite"]),
    ("search-set-device-index", lambda t: [*search_()(t), "--set", "devices.3=h200"],
     "(arguments)", ["set", "devices is a list of 1; '3' is not an index of it"]),
    ("search-all-pruned-tp3", search_(sweep={"tp": [3]}), "space.yaml",
     ["every configuration was pruned", "tp 3"]),
    ("search-offload-nan", search_(sweep={"cpu_offload_bytes": [0.0, NAN]}), "space.yaml",
     ["sweep.cpu_offload_bytes.1", "finite"]),
    ("search-all-pruned-offload-negative", search_(sweep={"cpu_offload_bytes": [-1.0]}),
     "space.yaml", ["every configuration was pruned", "cpu_offload_bytes"]),
    ("search-level-0-with-template-concurrency",
     search_(concurrency=[0], workload={**SPACE["workload"], "num_requests": 16,
                                        "concurrency": 8}),
     "space.yaml", ["concurrency.0", "greater"]),
    ("search-all-pruned-dp-disagg", search_(sweep={"dp": [2], "disaggregation": [PD]}),
     "space.yaml", ["every configuration was pruned", "dp"]),
    ("search-all-pruned-kv-1e30", search_(serving={"kv_cache_memory_bytes": 1e30}),
     "space.yaml", ["every configuration was pruned", "usable memory"]),
    ("search-all-pruned-batched", search_(sweep={"max_num_batched_tokens": [64],
                                                 "max_num_seqs": [128]}),
     "space.yaml", ["every configuration was pruned", "max_num_seqs"]),
    ("search-all-pruned-dp-100000", search_(sweep={"dp": [100_000]}), "space.yaml",
     ["every configuration was pruned", "1,024"]),
    ("search-profile-inf",
     lambda t: search_(devices=[profile_(t, memory_bw_bytes_per_s=INF)])(t), "gpu.yaml",
     ["memory_bw_bytes_per_s", "finite"]),
    ("search-tp-true", search_(sweep={"tp": [True]}), "space.yaml", ["sweep.tp", "boolean"]),
    ("search-seeds-and-set-seeds",
     lambda t: [*search_()(t), "--seeds", "2", "--set", "seeds=3"], "(arguments)",
     ["set", "'seeds=3' sets seeds, which --seeds sets"]),
    ("search-grid-and-set-search",
     lambda t: [*search_()(t), "--grid", "--set", "search=max_load"], "(arguments)",
     ["set", "sets search, which --grid sets"]),
    ("search-slo-interactivity-1e-300",
     search_(slo={"interactivity_tok_per_s_p90": 1e-300}), "space.yaml",
     ["slo.interactivity_tok_per_s_p90", "is below 0.001"]),
    ("search-duration-1e10", search_(duration_s=1e10), "space.yaml",
     ["duration_s", "exceeds 1e+09: seconds of simulated time"]),
    ("search-duration-inf", search_(duration_s=INF), "space.yaml", ["duration_s", "finite"]),
    ("search-warmup-beyond-duration", search_(warmup_s=60.0), "space.yaml",
     ["warmup_s", "duration_s"]),
    ("search-rate-workload",
     search_(workload={"kind": "random", "input_tokens": 256, "output_tokens": 8,
                       "num_requests": 4, "request_rate_per_s": 2.0}), "space.yaml",
     ["workload", "request_rate_per_s"]),
    ("search-session-rate-workload",
     search_(workload={"kind": "agentic", "sessions": 2, "session_rate_per_s": 0.5}),
     "space.yaml", ["workload", "session_rate_per_s"]),
    ("search-seed-negative", search_(seed=-1), "space.yaml", ["seed", ">= 0"]),
    ("search-tolerance-nan", search_(load_tolerance=NAN), "space.yaml",
     ["load_tolerance", "finite"]),
    ("search-unknown-model", search_(model="gpt-9"), "space.yaml", ["model", "unknown model"]),
    ("search-4e6-combinations", big_space, "space.yaml", ["simulations", "--max-runs"]),
    ("search-max-runs-zero", lambda t: [*search_()(t), "--max-runs", "0"], "(arguments)",
     ["max_runs"]),
    # ---- plan memory
    ("memory-device-twice", lambda t: [*MEM, "--device", "h100"], "(arguments)",
     ["device", "'h100' is given twice"]),
    ("memory-block-size-7", lambda t: [*MEM, "--block-size", "7"], "(arguments)",
     ["serving.block_size_tokens", "power of two"]),
    ("memory-block-size-512", lambda t: [*MEM, "--block-size", "512"], "(arguments)",
     ["serving.block_size_tokens"]),
    ("memory-utilization-nan", lambda t: [*MEM, "--gpu-memory-utilization", "nan"],
     "(arguments)", ["serving.gpu_memory_utilization", "finite"]),
    ("memory-utilization-inf", lambda t: [*MEM, "--gpu-memory-utilization", "inf"],
     "(arguments)", ["serving.gpu_memory_utilization", "finite"]),
    ("memory-batched-below-seqs",
     lambda t: [*MEM, "--max-num-batched-tokens", "64", "--max-num-seqs", "128"],
     "(arguments)", ["serving.max_num_batched_tokens", "max_num_seqs (128)"]),
    ("memory-batched-below-default-seqs", lambda t: [*MEM, "--max-num-batched-tokens", "100"],
     "(arguments)", ["serving.max_num_batched_tokens", "max_num_seqs (1024"]),
    ("memory-dp-100000", lambda t: [*MEM, "--dp", "100000"], "(arguments)", ["serving.dp"]),
    ("memory-kv-bytes-1e30", memory_serving("kv_cache_memory_bytes: 1.0e+30\n"),
     "serving.yaml", ["serving.kv_cache_memory_bytes", "usable memory"]),
    ("memory-kv-bytes-inf", memory_serving("kv_cache_memory_bytes: .inf\n"), "serving.yaml",
     ["serving.kv_cache_memory_bytes", "finite"]),
    ("memory-offload-inf", memory_serving("cpu_offload_bytes: .inf\n"), "serving.yaml",
     ["serving.cpu_offload_bytes", "finite"]),
    ("memory-tp-true", memory_serving("tp: true\n"), "serving.yaml", ["serving.tp", "boolean"]),
    ("memory-utilization-true", memory_serving("gpu_memory_utilization: true\n"), "serving.yaml",
     ["serving.gpu_memory_utilization", "boolean"]),
    ("memory-card-zero-heads",
     lambda t: ["memory", "--model", card_(t, gqa={"num_heads": 0}), "--device", "h100"],
     "card.yaml", ["gqa.num_heads"]),
    ("memory-card-topk-beyond-experts",
     lambda t: ["memory", "--model", card_(t, "gpt-oss-120b", moe={"top_k": 200}),
                "--device", "h100"], "card.yaml", ["moe", "top_k 200 exceeds num_experts 128"]),
    ("memory-card-window-nan",
     lambda t: ["memory", "--model", card_(t, "gpt-oss-120b", gqa={"sliding_window_tokens": NAN}),
                "--device", "h100"], "card.yaml", ["gqa.sliding_window_tokens"]),
    ("memory-profile-all-inf",
     lambda t: ["memory", "--model", "llama-3.1-8b", "--device", profile_(t, everything=INF)],
     "gpu.yaml", ["finite"]),
    ("memory-profile-memory-1e30",
     lambda t: ["memory", "--model", "llama-3.1-8b", "--device",
                profile_(t, memory_bytes=1e30, usable_memory_bytes=1e30)],
     "gpu.yaml", ["memory_bytes"]),
    ("memory-profile-power-nan",
     lambda t: ["memory", "--model", "llama-3.1-8b", "--device",
                profile_(t, power_w=NAN)], "gpu.yaml", ["power_w", "finite"]),
    # ---- plan step
    ("step-serving-block-size-7",
     lambda t: [*STEP, "--decode", "1", "--serving",
                _write(t, "serving.yaml", "block_size_tokens: 7\n")], "serving.yaml",
     ["serving.block_size_tokens"]),
    ("step-serving-batched-below-seqs",
     lambda t: [*STEP, "--decode", "1", "--serving",
                _write(t, "serving.yaml", "max_num_batched_tokens: 64\nmax_num_seqs: 128\n")],
     "serving.yaml", ["serving.max_num_batched_tokens", "max_num_seqs (128)"]),
    ("step-serving-offload-beyond-host",
     lambda t: [*STEP, "--decode", "1", "--serving",
                _write(t, "serving.yaml", "cpu_offload_bytes: 1.0e+15\n")], "serving.yaml",
     ["serving.cpu_offload_bytes", "host DRAM"]),
    ("step-dp-100000", lambda t: [*STEP, "--decode", "1", "--dp", "100000"], "(arguments)",
     ["serving.dp", "1,024"]),
    ("step-serving-kv-inf",
     lambda t: [*STEP, "--decode", "1", "--serving",
                _write(t, "serving.yaml", "kv_cache_memory_bytes: .inf\n")], "serving.yaml",
     ["serving.kv_cache_memory_bytes", "finite"]),
    ("step-serving-tp-true",
     lambda t: [*STEP, "--decode", "1", "--serving", _write(t, "serving.yaml", "tp: true\n")],
     "serving.yaml", ["serving.tp", "boolean"]),
    # ---- plan ops predict
    ("ops-gemm-m-fraction", predict_([{**GEMM, "m": 1.5}]), "ops.csv",
     ["row 1, column m", "integer"]),
    ("ops-gemm-m-inf", predict_([{**GEMM, "m": "inf"}]), "ops.csv", ["row 1, column m"]),
    ("ops-gemm-n-nan", predict_([{**GEMM, "n": "nan"}]), "ops.csv", ["row 1, column n"]),
    ("ops-gemm-k-zero", predict_([GEMM, {**GEMM, "k": 0}]), "ops.csv",
     ["row 2, column k", "> 0"]),
    # 1e30 priced to 4.6e28 us; a decode over no context looked its table up at log 0
    ("ops-gemm-m-1e30", predict_([{**GEMM, "m": "1e30"}]), "ops.csv",
     ["row 1, column m", "exceeds 1e+13"]),
    ("ops-allreduce-bytes-1e20",
     predict_([{"op": "allreduce", "bytes": "1e20", "world_size": 8}]), "ops.csv",
     ["row 1, column bytes", "exceeds 1e+13"]),
    ("ops-allreduce-dtype-unknown",
     predict_([{"op": "allreduce", "dtype": "foo", "bytes": 1024, "world_size": 8}]), "ops.csv",
     ["row 1, column dtype", "unknown dtype 'foo'"]),
    ("ops-attn-ctx-zero", predict_([{**ATTN, "ctx_len": 0}]), "ops.csv",
     ["row 1, column ctx_len", "> 0"]),
    ("ops-mla-decode-ctx-zero",
     predict_([{"op": "mla_decode", "batch": 8, "ctx_len": 0, "num_heads": 16,
                "kv_dtype": "bf16"}]), "ops.csv",
     ["row 1, column ctx_len", "> 0"]),
    ("ops-moe-topk-beyond-experts", predict_([{**MOE, "topk": 300}]), "ops.csv",
     ["row 1, column topk", "num_experts"]),
    ("ops-moe-ep-beyond-experts", predict_([{**MOE, "ep": 512}]), "ops.csv",
     ["row 1, column ep", "num_experts"]),
    ("ops-attn-zero-heads", predict_([{**ATTN, "num_heads": 0}]), "ops.csv",
     ["row 1, column num_heads", "> 0"]),
    ("ops-attn-heads-not-grouped", predict_([{**ATTN, "num_heads": 30}]), "ops.csv",
     ["row 1, column num_heads", "num_kv_heads"]),
    ("ops-allreduce-world-1000", predict_([{**ALLREDUCE, "world_size": 1000}]), "ops.csv",
     ["row 1, column world_size", "scale-up domain"]),
    ("ops-allreduce-world-fraction", predict_([{**ALLREDUCE, "world_size": 2.5}]), "ops.csv",
     ["row 1, column world_size", "integer"]),
    ("ops-unknown-op", predict_([{**GEMM, "op": "conv3d"}]), "ops.csv",
     ["row 1, column op", "'conv3d'"]),
    ("ops-unknown-dtype", predict_([{**GEMM, "dtype": "int3"}]), "ops.csv",
     ["row 1, column dtype", "'int3'"]),
    ("ops-unknown-kv-dtype", predict_([{**ATTN, "kv_dtype": "fp7"}]), "ops.csv",
     ["row 1, column kv_dtype", "'fp7'"]),
    # ---- plan fit
    ("fit-one-row", fit_(measured_gemms(1)), "measured.csv", ["gemm", "rows", "at least"]),
    ("fit-too-few-rows", fit_(measured_gemms(4)), "measured.csv", ["gemm", "at least 5"]),
    ("fit-allreduce-two-rows",
     fit_([{**ALLREDUCE, "bytes": 1 << 20, "latency_us": 20.0},
           {**ALLREDUCE, "bytes": 1 << 22, "latency_us": 40.0}]),
     "measured.csv", ["allreduce", "world size 8", "at least 3"]),
    ("fit-m-fraction", fit_([*measured_gemms(6), {**GEMM, "m": 2.5, "latency_us": 10.0}]),
     "measured.csv", ["row 7, column m", "integer"]),
    ("fit-latency-inf", fit_([*measured_gemms(6), {**GEMM, "latency_us": "inf"}]),
     "measured.csv", ["row 7, column latency_us"]),
    # ---- plan validate ops
    ("validate-folds-beyond-rows", validate_(measured_gemms(39), "--folds", "50"),
     "(arguments)", ["folds", "50 folds for 39 gemm rows"]),
    ("validate-one-row", validate_(measured_gemms(1)), "measured.csv", ["gemm", "rows"]),
    ("validate-folds-leave-too-few", validate_(measured_gemms(5), "--folds", "5"),
     "(arguments)", ["folds", "at least 5"]),
    ("validate-seed-negative", validate_(measured_gemms(20), "--seed", "-1"), "(arguments)",
     ["seed", ">= 0"]),
    # ---- plan workload stats
    ("stats-agentic-in-zero", stats_(agentic_trace(**{"in": 0, "hash_ids": []})), "trace.jsonl",
     ["line 1", "requests[0].in", ">= 1"]),
    ("stats-agentic-t-nan", stats_(agentic_trace(t=NAN)), "trace.jsonl",
     ["line 1", "requests[0].t"]),
    ("stats-agentic-t-inf", stats_(agentic_trace(t=INF)), "trace.jsonl",
     ["line 1", "requests[0].t", "finite"]),
    ("stats-agentic-think-inf", stats_(agentic_trace(think_time=INF)), "trace.jsonl",
     ["line 1", "requests[0].think_time", "finite"]),
    ("stats-agentic-api-inf", stats_(agentic_trace(api_time=INF)), "trace.jsonl",
     ["line 1", "requests[0].api_time", "finite"]),
    ("stats-subagent-duration-inf", stats_(subagent_trace(duration_ms=INF)), "trace.jsonl",
     ["line 1", "duration_ms", "finite"]),
    ("stats-azure-nan", stats_(azure_trace("nan")), "azure.csv",
     ["line 3", "TIMESTAMP", "finite"]),
    ("stats-azure-inf", stats_(azure_trace("inf")), "azure.csv",
     ["line 3", "TIMESTAMP", "finite"]),
    ("stats-mooncake-timestamp-nan", stats_(mooncake_trace(timestamp=NAN)), "mooncake.jsonl",
     ["line 1", "timestamp"]),
    ("stats-mooncake-input-zero", stats_(mooncake_trace(input_length=0, hash_ids=[])),
     "mooncake.jsonl", ["line 1", "input_length"]),
    # trace numbers past what a replay can hold: exit 1 (OverflowError, MemoryError) or a
    # span of 1e300 s, accepted; and int()'s quirks read as numbers
    ("stats-azure-ts-1e300", stats_(azure_rows("0,10,5", "1e300,10,5")), "azure.csv",
     ["line 3", "TIMESTAMP (from the first row): 1e+300 s exceeds 1e+09 s"]),
    ("stats-azure-seconds-then-date",
     stats_(azure_rows("0,10,5", "2023-11-16 18:15:46.6805900,10,5")), "azure.csv",
     ["line 3", "is a date and time, the first row's is seconds"]),
    ("stats-azure-tokens-1e20", stats_(azure_rows("0,100000000000000000000,5")), "azure.csv",
     ["line 2", "ContextTokens: ~1e20 tokens exceeds 10,000,000"]),
    ("stats-azure-tokens-underscore", stats_(azure_rows("0,1_000,5")), "azure.csv",
     ["line 2", "ContextTokens: expected an integer, got '1_000'"]),
    ("stats-azure-tokens-arabic-digits", stats_(azure_rows("0,\u0661\u0662,5")), "azure.csv",
     ["line 2", "ContextTokens: expected an integer"]),
    ("stats-mooncake-timestamp-1e400", stats_(mooncake_trace(timestamp=10**400)),
     "mooncake.jsonl", ["line 1", "timestamp: ~1e400 ms exceeds 1e+12 ms"]),
    ("stats-mooncake-output-1e30", stats_(mooncake_trace(output_length=10**30)),
     "mooncake.jsonl", ["line 1", "output_length: ~1e30 tokens exceeds 10,000,000"]),
    ("stats-mooncake-hash-past-int64", stats_(mooncake_trace(hash_ids=[1, 10**23])),
     "mooncake.jsonl", ["line 1", "hash_ids", "[0, 2^63 - 1]"]),
    ("stats-agentic-out-1e30", stats_(agentic_trace(out=10**30)), "trace.jsonl",
     ["line 1", "requests[0].out: ~1e30 tokens exceeds 10,000,000"]),
    ("stats-agentic-hash-2-70", stats_(agentic_trace(hash_ids=[2**70, *range(9)])),
     "trace.jsonl", ["line 1", "bad element 1180591620717411303424", "[0, 2^63 - 1]"]),
    ("stats-agentic-hash-2-63", stats_(agentic_trace(hash_ids=[2**63, *range(9)])),
     "trace.jsonl", ["line 1", "bad element 9223372036854775808"]),
    # 6.4e13 tokens in a few bytes of run-encoded ids asked for 7 TiB of block ids
    ("stats-agentic-ranges-in-6e13",
     lambda t: ["workload", "stats", jsonl(t, "trace.jsonl", [{
         "id": "a", "hash_ids_encoding": "ranges", "requests": [
             {"t": 0, "in": 64 * 10**12, "out": 10, "hash_ids": [[0, 10**12 - 1]]}]}])],
     "trace.jsonl", ["line 1", "requests[0].in: 64,000,000,000,000 tokens exceeds"]),
    ("stats-seed-negative", lambda t: ["workload", "stats", "agentic", "--seed", "-1"],
     "(arguments)", ["seed", ">= 0"]),
    ("stats-range-ratio-nan", lambda t: ["workload", "stats", "random", "--range-ratio", "nan"],
     "(arguments)", ["range_ratio"]),
    ("stats-sessions-1e9", lambda t: ["workload", "stats", "agentic", "--sessions", "1000000000"],
     "(arguments)", ["sessions", "1,000,000"]),
    ("stats-isl-1e12", lambda t: ["workload", "stats", "random", "--isl", "1000000000000"],
     "(arguments)", ["isl", "10,000,000"]),
]  # fmt: skip


# rows whose file has several bad values: every one is its own error line (the first line
# the corpus row's), never "(and N more errors)"
SEVERAL: dict[str, list[str]] = {
    "run-profile-all-inf": ["memory_bytes", "usable_memory_bytes", "memory_bw_bytes_per_s",
                            "host_dram_bytes_per_gpu", "power_w"],
    "memory-profile-all-inf": ["memory_bytes", "usable_memory_bytes", "memory_bw_bytes_per_s",
                               "host_dram_bytes_per_gpu", "power_w"],
    "memory-profile-memory-1e30": ["memory_bytes", "usable_memory_bytes"],
}  # fmt: skip


@pytest.mark.parametrize(("build", "file", "needles"), [r[1:] for r in CORPUS],
                         ids=[r[0] for r in CORPUS])  # fmt: skip
def test_bad_number_is_one_line_and_exit_2(
    build: Callable[[Path], list[str]],
    file: str,
    needles: list[str],
    tmp_path: Path,
    no_hang: None,
    request: pytest.FixtureRequest,
) -> None:
    assert_refused(*plan(*build(tmp_path)), file, needles, SEVERAL.get(request.node.callspec.id))


def assert_refused(
    code: int, stdout: str, stderr: str, file: str, needles: list[str],
    fields: list[str] | None = None,
) -> None:  # fmt: skip
    """Exit 2 and one ``error: <file>: <field>: <reason>`` line naming ``file`` and holding
    every needle (or, with ``fields``, one such line per field, in that order)."""
    assert code == 2, (code, stdout[-2000:], stderr[-2000:])
    lines = stderr.strip().splitlines()
    assert len(lines) == (len(fields) if fields else 1), stderr
    if fields:  # one line per bad field, in the file's order
        assert [ln.split(": ")[2] for ln in lines] == fields, stderr
    line = lines[0]
    for each in lines:
        assert each.startswith("error: "), each
        assert file in each.split(": ")[1], each  # the file the value came from
        assert "more error" not in each, each
    for needle in needles:
        assert needle in line, (needle, line)
    assert "np.str_" not in line, line
    assert "np.float" not in line, line
    assert "Traceback" not in stdout + stderr


def test_corpus_is_large_and_ids_are_unique() -> None:
    ids = [r[0] for r in CORPUS]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 60
    commands = {"run", "search", "memory", "step", "ops", "fit", "validate", "stats"}
    assert {i.split("-")[0] for i in ids} == commands


# ----------------------------------------------------------------------------- still accepted


def test_numbers_within_the_bounds_still_run(tmp_path: Path) -> None:
    """The bounds do not refuse what real deployments use."""
    ok = [
        [*MEM, "--block-size", "32"],
        [*MEM, "--block-size", "256"],
        [*MEM, "--max-num-batched-tokens", "2048", "--max-num-seqs", "2048"],
        [*MEM, "--dp", "1024"],
        [*MEM, "--serving", _write(tmp_path, "a.yaml", "kv_cache_memory_bytes: 4.0e+10\n")],
        [*MEM, "--serving", _write(tmp_path, "b.yaml", "cpu_offload_bytes: 2.0e+11\n")],
        # the longest context, and the most sequences (1,024 at 131,000 tokens together
        # hold 300x the KV pool: no step vLLM runs)
        [*STEP, "--decode", "1", "--context", "131000"],
        [*STEP, "--decode", "1024", "--context", "400"],
        [*STEP, "--decode", "20", "--prefill", "4x2000@50000"],
        ["workload", "stats", "random", "--sessions", "10", "--isl", "128", "--osl", "8"],
    ]
    for argv in ok:
        code, _, stderr = plan(*argv, *(["--json"] if argv[0] != "workload" else []))
        assert code == 0, (argv, stderr)


def test_search_prints_its_count_before_it_starts(tmp_path: Path) -> None:
    argv = search_(sweep={"max_num_seqs": [8, 16]})(tmp_path)
    code, stdout, stderr = plan(*argv)
    assert code == 0, stderr
    first = stdout.splitlines()[0]
    assert first == (
        "plan search: 2 configurations x at most 1 load x 1 seed = at most 2 simulations"
    )
    code, stdout, stderr = plan(*argv, "--json", "--grid")
    assert code == 0, stderr
    planned = json.loads(stdout)["planned"]
    assert planned["text"] == "2 configurations x 1 load x 1 seed = 2 simulations"
    assert (planned["simulations"], planned["loads_upper_bound"]) == (2, False)


def test_max_runs_raises_the_cap(tmp_path: Path) -> None:
    argv = search_(sweep={"max_num_seqs": [8, 16, 32]}, seeds=2)(tmp_path)
    code, _, stderr = plan(*argv, "--max-runs", "5")
    assert code == 2
    assert "6 simulations" in stderr
    assert "--max-runs" in stderr
    code, _, stderr = plan(*argv, "--max-runs", "6", "--json")
    assert code == 0, stderr
