"""Inputs that parse but cannot give an honest answer, end to end: each is ONE
``error: <file>: <field>: <reason>`` line on stderr and exit code 2. Before, most printed an
answer from zero traffic (an empty or late trace, every request refused), a load the workload
never reached (fewer requests than users), or hung (100,000 workers).

Table-driven like ``test_bad_numbers``: (id, argv builder, the file the line names, fragments
of the line). The builders keep every run tiny.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_bad_numbers import (
    AGENTIC,
    ALLREDUCE,
    GEMM,
    PD,
    SCENARIO,
    SPACE,
    STEP,
    _write,
    _yaml,
    agentic_trace,
    assert_refused,
    fit_,
    jsonl,
    plan,
    predict_,
    profile_,
    run_,
    run_trace,
    search_,
    set_,
    stats_,
    weka,
)

MOONCAKE = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
INFERENCEMAX_HEADER = (
    "model,sequence,hwKey,precision,tp,conc,interactivity_tok_s_user,e2e_latency_s,"
    "tput_per_gpu,tpPerMw,cost_hyperscaler_per_Mtok,cost_neocloud_per_Mtok,"
    "cost_3yr_rental_per_Mtok\n"
)
INFERENCEMAX_ROW = "DeepSeek R1 0528,1K/1K,b200,fp4,4,4,111.238,8.48,215.01,99082.7,2.5,3.0,3.7\n"


def trace_run(trace: Callable[[Path], str], **workload: Any) -> Callable[[Path], list[str]]:
    """``plan run`` of the tiny scenario on ``trace`` (workload fields merged in; a field
    given as None is left out: ``concurrency=None`` replays the trace's own timestamps)."""

    def build(t: Path) -> list[str]:
        spec = {"kind": "trace", "path": trace(t), "concurrency": 1, **workload}
        spec = {k: v for k, v in spec.items() if v is not None}
        return ["run", _yaml(t, "s.yaml", {**SCENARIO, "workload": spec})]

    return build


def two_trace_files(t: Path) -> str:
    """A folder of two trace files, each a trace of id s1."""
    (t / "d").mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        jsonl(t / "d", name, [weka()])
    return str(t / "d")


def text(name: str, body: str) -> Callable[[Path], str]:
    return lambda t: _write(t, name, body)


def records(name: str, rows: list[Any]) -> Callable[[Path], str]:
    return lambda t: jsonl(t, name, rows)


def search_args(*extra: str, **over: Any) -> Callable[[Path], list[str]]:
    return lambda t: [*search_(**over)(t), *extra]


def raw_csv(body: str) -> Callable[[Path], list[str]]:
    return lambda t: ["ops", "predict", "--device", "h100", "--input", _write(t, "ops.csv", body)]


def inferencemax(body: str, *extra: str) -> Callable[[Path], list[str]]:
    return lambda t: [
        "validate", "inferencemax", "--data", _write(t, "im.csv", body), "--no-cache", *extra,
    ]  # fmt: skip


def hf_config(**fields: Any) -> Callable[[Path], list[str]]:
    config = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
              "vocab_size": 128256, "max_position_embeddings": 131072, **fields}  # fmt: skip
    return lambda t: ["models", "import", _write(t, "config.json", json.dumps(config))]


QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 512, "num_hidden_layers": 4,
             "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
             "intermediate_size": 1024, "moe_intermediate_size": 128, "num_experts": 8,
             "num_experts_per_tok": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
             "torch_dtype": "bfloat16"}  # fmt: skip
QWEN3_NEXT = {"model_type": "qwen3_next", "hidden_size": 512, "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
              "linear_num_key_heads": 16, "linear_num_value_heads": 32,
              "linear_key_head_dim": 32, "linear_value_head_dim": 32,
              "linear_conv_kernel_dim": 4, "num_experts": 8, "num_experts_per_tok": 2,
              "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
              "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 4096,
              "torch_dtype": "bfloat16"}  # fmt: skip
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "hidden_size": 512, "num_hidden_layers": 4,
               "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 1024,
               "moe_intermediate_size": 128, "n_routed_experts": 8, "n_shared_experts": 1,
               "num_experts_per_tok": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1,
               "kv_lora_rank": 64, "q_lora_rank": 96, "qk_nope_head_dim": 32,
               "qk_rope_head_dim": 16, "v_head_dim": 32, "vocab_size": 1000,
               "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}  # fmt: skip


SIZE = ["size", "--model", "llama-3.1-8b", "--users", "4", "--slo-interactivity", "10"]
RAGGED = "op,dtype,m,n,k\ngemm,bf16,16,4096,4096\ngemm,bf16,16,4096,4096,7\n"

Row = tuple[str, Callable[[Path], list[str]], str, list[str]]
CORPUS: list[Row] = [
    # ---- a run that would serve nothing
    ("run-azure-header-only", trace_run(text("azure.csv", AZURE_HEADER)), "azure.csv",
     ["(records)", "holds no request"]),
    ("run-agentic-no-requests",
     trace_run(records("trace.jsonl", [{"id": "s1", "block_size": 64, "requests": []}])),
     "trace.jsonl", ["(records)", "no request"]),
    ("run-every-record-skipped",
     trace_run(records("mooncake.jsonl", [{**MOONCAKE, "input_length": 0}] * 3), skip_bad=True),
     "mooncake.jsonl", ["(records)", "every record is malformed (3 skipped", "input_length"]),
    ("run-trace-starts-after-duration",
     trace_run(records("mooncake.jsonl", [{**MOONCAKE, "timestamp": 60_000}]),
               concurrency=None),
     "mooncake.jsonl", ["(records)", "no request arrives within duration_s 30 s"]),
    ("run-every-request-beyond-max-model-len", run_(serving={"max_model_len": 200}), "s.yaml",
     ["serving.max_model_len", "every request (4) is refused", "nothing was served",
      "a larger max_model_len"]),
    ("run-workload-ends-inside-warmup", run_(warmup_s=20.0), "s.yaml",
     ["warmup_s", "inside warmup_s 20 s: nothing is measured"]),
    ("run-trace-ends-inside-warmup",
     lambda t: [*trace_run(records("mooncake.jsonl", [MOONCAKE] * 3))(t), "--set",
                "warmup_s=25"], "(arguments)", ["warmup_s", "inside warmup_s 25 s"]),
    ("run-interactivity-slo-on-one-token",
     run_(workload={**SCENARIO["workload"], "output_tokens": 1},
          slo={"interactivity_tok_per_s_p90": 20.0}), "s.yaml",
     ["slo", "every request outputs one token", "no inter-token gap"]),
    ("run-interactivity-slo-on-a-one-token-trace",
     lambda t: [*trace_run(records("mooncake.jsonl", [{**MOONCAKE, "output_length": 1}] * 6))(t),
                "--set", "slo.interactivity_tok_per_s_p90=20"], "(arguments)",
     ["slo.interactivity_tok_per_s_p90", "none of the 6 requests", "no inter-token gap"]),
    ("search-interactivity-slo-on-one-token",
     search_(workload={**SPACE["workload"], "output_tokens": 1}), "space.yaml",
     ["slo", "every request outputs one token"]),
    # ---- a closed loop that can never hold its load
    ("run-fewer-requests-than-users",
     run_(workload={**SCENARIO["workload"], "num_requests": 2, "concurrency": 4}), "s.yaml",
     ["workload.random", "num_requests 2 is below concurrency 4"]),
    ("run-fewer-sessions-than-users", run_(workload={**AGENTIC, "concurrency": 4}), "s.yaml",
     ["workload.agentic", "sessions 2 is below concurrency 4"]),
    ("run-ramp-reaches-duration", run_(workload={**AGENTIC, "ramp_s": 30.0}), "s.yaml",
     ["duration_s", "workload.ramp_s 30 s reaches duration_s 30 s"]),
    # options of another replay mode: accepted, and they did nothing
    ("run-think-scale-open-loop",
     trace_run(records("mooncake.jsonl", [MOONCAKE] * 3), concurrency=None,
               think_time_scale=5.0), "s.yaml",
     ["workload.trace", "an open-loop replay keeps the trace's own times"]),
    ("run-think-cap-single-turn-trace",
     trace_run(records("mooncake.jsonl", [MOONCAKE] * 3), think_time_cap_s=0.001),
     "mooncake.jsonl", ["a mooncake trace holds one request a session and no think times"]),
    ("run-time-scale-closed-loop",
     trace_run(records("mooncake.jsonl", [MOONCAKE] * 3), time_scale=2.0), "s.yaml",
     ["workload.trace", "time_scale scales the trace's timestamps in an open-loop replay"]),
    ("run-more-users-than-trace-sessions",
     trace_run(records("mooncake.jsonl", [MOONCAKE] * 3), concurrency=5), "s.yaml",
     ["workload.concurrency", "5 users", "run out after 3", "concurrency <= 3"]),
    # a trace of one too-long prompt "ran out after 0 users: give concurrency <= 0"
    ("run-only-prompt-too-long-closed-loop",
     trace_run(records("m.jsonl", [{**MOONCAKE, "input_length": 200_000,
                                    "hash_ids": list(range(391))}]), concurrency=1),
     "s.yaml", ["serving.max_model_len", "every request (1) is refused", "exceed max_model_len"]),
    ("run-agentic-t-backwards", run_trace(agentic_trace(t=5.0)), "trace.jsonl",
     ["line 1", "requests[1].t", "goes backwards"]),
    ("run-format-without-out", lambda t: [*run_()(t), "--format", "parquet"], "(arguments)",
     ["format", "give --out DIR"]),
    # ---- the line names the field the user set, and says what is wrong in words
    ("run-pool-tp-not-dividing-heads",
     run_(disaggregation={**PD, "prefill_serving": {"tp": 3}}), "s.yaml",
     ["disaggregation.prefill_serving.tp", "prefill pool: tp 3 does not divide"]),
    ("run-precision-not-a-mapping", set_("serving.weight_precision=fp8"), "(arguments)",
     ["serving.weight_precision", "must be a mapping (key: value), got 'fp8'"]),
    ("run-kv-bytes-hold-no-block", set_("serving.kv_cache_memory_bytes=1"), "s.yaml",
     ["KV cache holds 0 sequences of 1 token, not 1", "0 KV blocks",
      "(with --set serving.kv_cache_memory_bytes=1)"]),
    ("run-profile-below-default-reserve",
     lambda t: run_(device=profile_(t, usable_memory_bytes=1e9))(t), "s.yaml",
     ["serving.runtime_reserve_bytes", "(the default) exceeds", "usable_memory_bytes"]),
    # ---- plan search
    ("search-more-users-than-requests", search_(concurrency=[1, 8]), "space.yaml",
     ["workload", "num_requests 4 is below concurrency 8", "largest concurrency searched"]),
    ("search-ramp-reaches-duration",
     search_(workload={**AGENTIC, "concurrency": 1, "ramp_s": 40.0}), "space.yaml",
     ["duration_s", "ramp_s 40 s reaches duration_s 30 s"]),
    ("search-max-load-without-slo", search_(slo={}), "space.yaml",
     ["search", "slo gives no target"]),
    ("search-set-concurrency-above-requests",
     search_args("--set", "concurrency=[1, 8]"), "space.yaml",
     ["num_requests 4 is below concurrency 8", "(with --set concurrency=[1, 8])"]),
    ("search-more-users-than-trace-sessions",
     lambda t: search_(concurrency=[1, 5], search="grid", workload={
         "kind": "trace", "path": records("mooncake.jsonl", [MOONCAKE] * 3)(t),
         "concurrency": 1})(t), "space.yaml",
     ["space.yaml: concurrency: 5 users", "run out after 3", "(in run h100-"]),
    ("search-template-concurrency-unused",
     search_(workload={**SPACE["workload"], "num_requests": 100, "concurrency": 64}),
     "space.yaml", ["workload", "concurrency 64 is replaced by each searched level ([1])"]),
    ("search-device-twice", search_(devices=["h100", "h200", "h100"]), "space.yaml",
     ["devices", "h100 is listed twice"]),
    ("search-concurrency-twice", search_(concurrency=[1, 2, 2]), "space.yaml",
     ["concurrency", "2 is listed twice"]),
    ("search-workers-beyond-cpus", search_args("--workers", "100000"), "(arguments)",
     ["workers", "100,000 local worker processes", "per CPU"]),
    ("search-workers-zero", search_args("--workers", "0"), "(arguments)",
     ["workers", "at least 1"]),
    ("search-address-without-ray", search_args("--address", "10.0.0.1:6379"), "(arguments)",
     ["address", "--executor ray"]),
    # ---- plan step: a step vLLM would not schedule
    ("step-decode-beyond-max-num-seqs", lambda t: [*STEP, "--decode", "5000"], "(arguments)",
     ["decode", "5,000 requests", "max_num_seqs"]),
    ("step-context-reaches-max-model-len",
     lambda t: [*STEP, "--decode", "1", "--context", "131072"], "(arguments)",
     ["context", "131,072 tokens reach max_model_len 131,072"]),
    ("step-prefix-beyond-max-model-len",
     lambda t: [*STEP, "--prefill", "2000@130000"], "(arguments)",
     ["prefill", "exceed max_model_len"]),
    ("step-chunk-beyond-budget", lambda t: [*STEP, "--prefill", "4x8192"], "(arguments)",
     ["prefill", "4 x 8,192 tokens exceed max_num_batched_tokens"]),
    # the budget is the step's: each chunk fitting alone priced 8,500 tokens in one step
    ("step-decodes-and-chunk-beyond-budget",
     lambda t: [*STEP, "--decode", "1000", "--prefill", "7500"], "(arguments)",
     ["decode / prefill", "1,000 decode + 7,500 prefill tokens = 8,500 exceed"]),
    ("step-chunks-beyond-budget-together",
     lambda t: [*STEP, "--prefill", "4x2048", "--prefill", "1"], "(arguments)",
     ["prefill", "8,193 exceed max_num_batched_tokens"]),
    # int() took these: a prefix left empty read as 0, another script's digits as numbers
    *[(f"step-prefill-syntax-{i}", lambda t, v=v: [*STEP, "--prefill", v], "(arguments)",
       ["prefill", "is not [COUNTx]TOKENS[@PREFIX]"])
      for i, v in enumerate(["100@", "2x100@", "\u0661\u0662\u0663", "1 x 100", "+100", "1_000"])],
    # a step of prefills alone was blamed on --decode
    ("step-prefills-beyond-max-num-seqs", lambda t: [*STEP, "--prefill", "2000x1"],
     "(arguments)", ["prefill", "2,000 requests", "max_num_seqs"]),
    ("step-decode-at-context-zero",
     lambda t: [*STEP, "--decode", "1", "--context", "0"], "(arguments)",
     ["context", "at least its prompt"]),
    ("step-top-negative", lambda t: [*STEP, "--decode", "1", "--top", "-1"], "(arguments)",
     ["top", "must not be negative"]),
    # ---- plan ops predict / plan fit: shapes a collective or a fit cannot have
    ("ops-collective-bytes-zero", predict_([{**ALLREDUCE, "bytes": 0}]), "ops.csv",
     ["row 1, column bytes", "> 0"]),
    ("ops-collective-one-gpu", predict_([{**ALLREDUCE, "world_size": 1}]), "ops.csv",
     ["row 1, column world_size", "at least 2 GPUs"]),
    ("ops-column-twice", raw_csv("op,dtype,m,n,k,k\ngemm,bf16,16,4096,4096,8\n"), "ops.csv",
     ["column k", "more than once"]),
    ("ops-row-longer-than-header", raw_csv(RAGGED), "ops.csv",
     ["row 2", "6 cells where the header has 5"]),
    ("fit-one-distinct-shape", fit_([{**GEMM, "latency_us": 12.0 + i / 100} for i in range(12)]),
     "measured.csv", ["gemm has 1 distinct shape (12 rows)", "at least"]),
    # ---- plan validate inferencemax
    ("validate-inferencemax-header-only", inferencemax(INFERENCEMAX_HEADER), "im.csv",
     ["(points)", "no point to simulate (0 rows"]),
    ("validate-inferencemax-filters-leave-none",
     inferencemax(INFERENCEMAX_HEADER + INFERENCEMAX_ROW, "--devices", "h100"), "im.csv",
     ["(points)", "filters leave none of its 1 points"]),
    ("validate-inferencemax-workers-beyond-cpus",
     inferencemax(INFERENCEMAX_HEADER + INFERENCEMAX_ROW, "--workers", "100000"),
     "(arguments)", ["workers", "per CPU"]),
    ("validate-inferencemax-seed-negative",
     inferencemax(INFERENCEMAX_HEADER + INFERENCEMAX_ROW, "--seed", "-1"), "(arguments)",
     ["seed", "must be >= 0"]),
    # a billion in flight built a billion-request scenario (exit 1); a point that cannot run
    # anywhere (tp 3 of 128 heads) left a table of 0 points and exit 0
    ("validate-inferencemax-conc-1e9",
     inferencemax(INFERENCEMAX_HEADER + INFERENCEMAX_ROW.replace(",4,4,", ",4,1000000000,")),
     "im.csv", ["row 1, column conc", "exceeds 65,536"]),
    # a measured rate of 1e-300 tok/s printed an error of 10^302 %
    ("validate-inferencemax-tput-1e-300",
     inferencemax(INFERENCEMAX_HEADER + INFERENCEMAX_ROW.replace(",215.01,", ",1e-300,")),
     "im.csv", ["row 1, column tput_per_gpu", "1e-300 is below 0.001"]),
    ("validate-inferencemax-interactivity-1e9",
     inferencemax(INFERENCEMAX_HEADER + INFERENCEMAX_ROW.replace(",111.238,", ",1e9,")),
     "im.csv", ["row 1, column interactivity_tok_s_user", "1e9 exceeds 10,000,000 "]),
    ("validate-inferencemax-e2e-1e-9",
     inferencemax(INFERENCEMAX_HEADER + INFERENCEMAX_ROW.replace(",8.48,", ",1e-9,")),
     "im.csv", ["row 1, column e2e_latency_s", "1e-9 is below 0.0001"]),
    ("validate-inferencemax-requests-beyond-the-cap",
     inferencemax(INFERENCEMAX_HEADER + INFERENCEMAX_ROW, "--requests-per-conc", "10000000"),
     "(arguments)", ["requests-per-conc", "exceeds 10,000,000"]),
    ("validate-inferencemax-no-point-simulated",
     inferencemax(INFERENCEMAX_HEADER + INFERENCEMAX_ROW.replace(",4,4,", ",3,4,")), "im.csv",
     ["(points)", "none of its 1 points could be simulated", "tp 3 does not divide"]),
    ("validate-silicon-seed-negative", lambda t: ["validate", "silicon", "--seed", "-1"],
     "(arguments)", ["seed", "must be >= 0"]),
    # ---- plan models import
    ("models-zero-heads", hf_config(num_attention_heads=0), "config.json",
     ["num_attention_heads", "at least 1, got 0"]),
    ("models-zero-kv-heads", hf_config(num_key_value_heads=0), "config.json",
     ["num_key_value_heads", "at least 1, got 0"]),
    ("models-layers-zero", hf_config(num_hidden_layers=0), "config.json",
     ["num_hidden_layers", "greater than 0"]),
    ("models-heads-not-grouped", hf_config(num_key_value_heads=5), "config.json",
     ["num_attention_heads / num_key_value_heads", "not a multiple"]),
    ("models-vocab-zero", hf_config(vocab_size=0), "config.json",
     ["vocab_size", "greater than 0"]),
    # a billion layers filled the memory before any check; 10^400 overflowed; a zero layer
    # step divided by zero; a list as the dtype was unhashable: each an internal error
    ("models-layers-1e9", hf_config(num_hidden_layers=10**9), "config.json",
     ["num_hidden_layers", "at most 10,000", "1,000,000,000"]),
    ("models-layers-401-digits", hf_config(num_hidden_layers=10**400), "config.json",
     ["num_hidden_layers", "a 401-digit number"]),
    ("models-vocab-1e15", hf_config(vocab_size=10**15), "config.json",
     ["vocab_size", "at most 1,000,000,000,000"]),
    ("models-dtype-list", hf_config(torch_dtype=[4]), "config.json",
     ["torch_dtype", "unsupported dtype [4]"]),
    ("models-qwen-sparse-step-0", hf_config(**{**QWEN3_MOE, "decoder_sparse_step": 0}),
     "config.json",
     ["decoder_sparse_step", "at least 1, got 0"]),
    ("models-deepseek-moe-freq-0", hf_config(**{**DEEPSEEK_V3, "moe_layer_freq": 0}),
     "config.json",
     ["moe_layer_freq", "at least 1, got 0"]),
    ("models-fp8-block-0", hf_config(**{**DEEPSEEK_V3, "quantization_config": {
        "quant_method": "fp8", "weight_block_size": [0, 0]}}), "config.json",
     ["quantization_config.weight_block_size", "[rows, columns] >= 1"]),
    ("models-fp8-block-huge", hf_config(**{**DEEPSEEK_V3, "quantization_config": {
        "quant_method": "fp8", "weight_block_size": 1e30}}), "config.json",
     ["quantization_config.weight_block_size", "list of integers"]),
    # a string was read as its characters: every module with an a, b or c stayed unquantized
    ("models-not-convert-string", hf_config(**{**DEEPSEEK_V3, "quantization_config": {
        "quant_method": "fp8", "modules_to_not_convert": "abc"}}), "config.json",
     ["quantization_config.modules_to_not_convert", "list of strings"]),
    ("models-deepseek-first-dense-negative",
     hf_config(**{**DEEPSEEK_V3, "first_k_dense_replace": -1}), "config.json",
     ["first_k_dense_replace", "at least 0, got -1"]),
    # a MoE config turned dense without a word (its memory read 5.3 instead of ~80 GiB/GPU)
    ("models-deepseek-zero-experts", hf_config(**{**DEEPSEEK_V3, "n_routed_experts": 0}),
     "config.json", ["n_routed_experts", "0 routed experts, each token routed to 2"]),
    ("models-deepseek-first-dense-past-layers",
     hf_config(**{**DEEPSEEK_V3, "first_k_dense_replace": 100}), "config.json",
     ["first_k_dense_replace", "100 (moe_layer_freq 1) leaves none of the 4 layers MoE"]),
    ("models-qwen3-next-value-heads-not-grouped",
     hf_config(**{**QWEN3_NEXT, "linear_num_value_heads": 33}), "config.json",
     ["linear_num_value_heads", "33 is not a multiple of linear_num_key_heads 16"]),
    # ---- plan size
    # '' named the current folder, and a JSON file there was read as the trace
    ("size-workload-empty", lambda t: [*SIZE, "--workload", ""], "(arguments)",
     ["workload", "'' is neither a built-in workload"]),
    ("size-devices-empty", lambda t: [*SIZE, "--devices", ""], "(arguments)",
     ["devices", "names no device"]),
    ("size-devices-commas", lambda t: [*SIZE, "--devices", " , "], "(arguments)",
     ["devices", "names no device"]),
    ("size-isl-with-agentic", lambda t: [*SIZE, "--workload", "agentic", "--isl", "100"],
     "(arguments)", ["isl", "--workload is agentic"]),
    ("size-workers-beyond-cpus", lambda t: [*SIZE, "--workers", "100000"], "(arguments)",
     ["workers", "per CPU"]),
    ("size-max-runs-zero", lambda t: [*SIZE, "--max-runs", "0"], "(arguments)",
     ["max_runs", "must be at least 1, got 0"]),
    # ---- plan workload stats
    ("stats-limit-zero", lambda t: ["workload", "stats", "agentic", "--limit", "0"],
     "(arguments)", ["limit"]),
    # an option the source does not read is refused, not ignored
    ("stats-isl-with-agentic", lambda t: ["workload", "stats", "agentic", "--isl", "100"],
     "(arguments)", ["isl", "--isl does not apply to the agentic generator"]),
    ("stats-range-ratio-with-chat",
     lambda t: ["workload", "stats", "chat", "--range-ratio", "0.5"], "(arguments)",
     ["range-ratio", "does not apply to the chat generator"]),
    ("stats-skip-bad-with-generator", lambda t: ["workload", "stats", "random", "--skip-bad"],
     "(arguments)", ["skip-bad", "does not apply to the random generator"]),
    ("stats-sessions-with-trace",
     lambda t: ["workload", "stats", records("m.jsonl", [MOONCAKE])(t), "--sessions", "5"],
     "(arguments)", ["sessions", "--sessions does not apply to a trace file"]),
    ("stats-seed-with-trace",
     lambda t: ["workload", "stats", records("m.jsonl", [MOONCAKE])(t), "--seed", "3"],
     "(arguments)", ["seed", "does not apply to a trace file"]),
    # a trace's id scopes its hash_ids: two traces of one id shared blocks they never shared
    ("run-agentic-repeated-id", trace_run(records("trace.jsonl", [weka(), weka()])),
     "trace.jsonl", ["line 2", "id 's1' repeats the trace of trace.jsonl line 1"]),
    ("stats-agentic-repeated-id-across-files", stats_(two_trace_files),
     "b.jsonl", ["line 1", "id 's1' repeats the trace of a.jsonl line 1"]),
    ("stats-agentic-t-backwards", stats_(agentic_trace(t=4.0)), "trace.jsonl",
     ["line 1", "requests[1].t: 3 s goes backwards (the entry before is at 4 s)"]),
    # ---- option values that ran without end, or were dropped without a word
    ("validate-ops-folds-huge",
     lambda t: ["validate", "ops", "--tables", "--device", "h100", "--folds", "99999999999"],
     "(arguments)", ["folds", "99,999,999,999 exceeds 100"]),
    ("validate-ops-leave-out-with-device",
     lambda t: ["validate", "ops", "--leave-device-out", "h100", "--device", "b200"],
     "(arguments)", ["device", "does not apply to --leave-device-out"]),
    ("validate-ops-leave-out-with-folds",
     lambda t: ["validate", "ops", "--leave-device-out", "h100", "--folds", "7"],
     "(arguments)", ["folds", "does not apply to --leave-device-out"]),
    ("validate-ops-leave-out-twice",
     lambda t: ["validate", "ops", "--leave-device-out", "h100", "--leave-device-out", "h100"],
     "(arguments)", ["leave-device-out", "'h100' is given twice"]),
    # "" was read as no --device: every device, for minutes
    ("validate-ops-tables-device-empty",
     lambda t: ["validate", "ops", "--tables", "--device", ""], "(arguments)",
     ["device", "is empty"]),
    ("validate-silicon-replicates-huge",
     lambda t: ["validate", "silicon", "--limit", "1", "--replicates", "99999999999"],
     "(arguments)", ["replicates", "exceeds 100 seeds a point"]),
    # ---- plan examples copy: targets the OS refuses (exit 1 before)
    ("examples-copy-to-name-too-long",
     lambda t: ["examples", "copy", "kimi-k3-mi355x-agentic", "--to", str(t / ("d" * 300))],
     "ddd", ["--to", "file name too long"]),
    ("examples-copy-to-dangling-link",
     lambda t: (t.joinpath("dangl").symlink_to(t / "nowhere"),
                ["examples", "copy", "kimi-k3-mi355x-agentic", "--to", str(t / "dangl")])[1],
     "dangl", ["--to", "dangling symlink"]),
    # ---- an example's name where a file is wanted: say how to run the example
    ("run-example-name", lambda t: ["run", "kimi-k3-mi355x-agentic"], "kimi-k3-mi355x-agentic",
     ["no such file; kimi-k3-mi355x-agentic is a built-in example (scenario): plan run ",
      "examples/kimi-k3-mi355x-agentic.yaml", "plan examples copy kimi-k3-mi355x-agentic"]),
    # a scenario's name given to plan search: the command that runs it is plan run
    ("search-scenario-example-name", lambda t: ["search", "kimi-k3-mi355x-agentic.yaml"],
     "kimi-k3-mi355x-agentic", ["built-in example (scenario): plan run "]),
    ("search-example-name", lambda t: ["search", "search-kimi-k3-agentic"],
     "search-kimi-k3-agentic", ["built-in example (search space): plan search "]),
    ("run-no-such-name", lambda t: ["run", "no-such-scenario"], "no-such-scenario",
     ["(file): no such file"]),
    # ---- plan demo: a window too short to read, or none
    *[(f"demo-minutes-{v}", lambda t, v=v: ["demo", "--simulate-minutes", v], "(arguments)",
       ["simulate-minutes", "0 (the memory table only) or 20 to 1,440 minutes"])
      for v in ("0.5", "-1", "nan", "inf", "1e12", "19")],
]  # fmt: skip


@pytest.mark.parametrize(("build", "file", "needles"), [r[1:] for r in CORPUS],
                         ids=[r[0] for r in CORPUS])  # fmt: skip
def test_bad_run_is_one_line_and_exit_2(
    build: Callable[[Path], list[str]],
    file: str,
    needles: list[str],
    tmp_path: Path,
    no_hang: None,
) -> None:
    assert_refused(*plan(*build(tmp_path)), file, needles)


def test_corpus_ids_are_unique() -> None:
    ids = [r[0] for r in CORPUS]
    assert len(ids) == len(set(ids))


# ----------------------------------------------------------------------------- the edges pass


def test_the_same_inputs_at_their_edge_still_run(tmp_path: Path) -> None:
    """Each refusal above stops at its edge: one more request, one second more, one fewer
    token run as before (so the checks do not refuse what vLLM serves)."""
    ok: list[list[str]] = [
        run_(workload={**SCENARIO["workload"], "num_requests": 4, "concurrency": 4})(tmp_path),
        run_(workload={**AGENTIC, "ramp_s": 29.0})(tmp_path),
        run_(serving={"max_model_len": 264})(tmp_path),  # 256 in + 8 out fits exactly
        trace_run(records("mooncake.jsonl", [MOONCAKE] * 3), concurrency=3)(tmp_path),
        [*STEP, "--decode", "1", "--context", "131071"],
        [*STEP, "--prefill", "1000@130072"],
        [*STEP, "--prefill", "8192"],
    ]
    for argv in ok:
        code, _, stderr = plan(*argv, "--json")
        assert code == 0, (argv, stderr)
    space = {**SPACE, "concurrency": [1, 4], "slo": {}, "search": "grid"}
    code, _, stderr = plan("search", _yaml(tmp_path, "grid.yaml", space),
                           "--out", str(tmp_path / "g"), "--json")  # fmt: skip
    assert code == 0, stderr


def test_a_trace_with_some_bad_records_still_runs(tmp_path: Path) -> None:
    """``skip_bad`` with one good record left serves it (only an all-bad trace is refused),
    and says what it skipped: the answer is of fewer requests than the file holds."""
    rows = [{**MOONCAKE, "input_length": 0}, MOONCAKE, {**MOONCAKE, "output_length": -1}]
    argv = trace_run(records("mooncake.jsonl", rows), skip_bad=True)(tmp_path)
    code, stdout, stderr = plan(*argv, "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    assert (data["requests_finished"], data["records_skipped"]) == (1, 2)
    assert "line 1: input_length" in data["records_skipped_reasons"][0]
    assert "line 3: output_length" in data["records_skipped_reasons"][1]
    code, stdout, stderr = plan(*argv)
    assert code == 0, stderr
    assert "note: 2 malformed trace records skipped (skip_bad), not replayed" in stdout
    assert "line 1: input_length: must be >= 1, got 0" in stdout


def test_a_run_with_some_requests_refused_says_how_many(tmp_path: Path) -> None:
    """Some prompts beyond max_model_len: the run answers for the rest, and says so (the
    table's "finished / rejected" alone was easy to miss)."""
    workload = {**SCENARIO["workload"], "input_tokens": 400, "range_ratio": 0.5,
                "num_requests": 40, "concurrency": 4}  # fmt: skip
    argv = run_(serving={"max_model_len": 300}, workload=workload)(tmp_path)
    code, stdout, stderr = plan(*argv, "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    refused, served = data["requests_rejected"], data["requests_finished"]
    assert 0 < refused < 40
    assert refused + served == 40
    code, stdout, stderr = plan(*argv)
    assert code == 0, stderr
    note = next(ln for ln in stdout.splitlines() if "were refused" in ln)
    assert f"{refused} of 40 requests ({refused / 40:.0%}) were refused" in note
    assert "exceed max_model_len 300" in note
    assert data["requests_seen"] == 40
    # with a warm-up the window's finished count is smaller, the run's requests are not: the
    # share was refused / (window's finished + refused), 35 % where 29 % were refused
    warmup = f"warmup_s={data['window_end_s'] / 3}"
    code, stdout, stderr = plan(*argv, "--set", warmup, "--json")
    data = json.loads(stdout)
    assert (code, data["requests_seen"], data["requests_rejected"]) == (0, 40, refused)
    assert data["requests_finished"] < served
    code, stdout, stderr = plan(*argv, "--set", warmup)
    assert f"{refused} of 40 requests ({refused / 40:.0%}) were refused" in stdout


def test_a_run_of_few_requests_says_its_ttft_tail_is_rough(tmp_path: Path) -> None:
    code, stdout, stderr = plan(*run_()(tmp_path))  # 4 requests
    assert code == 0, stderr
    assert "note: only 4 requests finished inside the measured window" in stdout
    workload = {**SCENARIO["workload"], "num_requests": 40}
    code, stdout, stderr = plan(*run_(workload=workload)(tmp_path))
    assert code == 0, stderr
    assert "requests finished inside the measured window" not in stdout
