"""The ``vllm serve`` command line that deploys a scenario's serving configuration.

Every knob the simulator modelled is written out, defaults resolved (``max_num_seqs`` and
``max_num_batched_tokens`` are vLLM's by device memory when the scenario leaves them unset),
so a test deployment runs what was simulated. Flag names are vLLM's (``vllm serve --help``;
docs/sizing.md lists each with the simulator's knob). What the simulator takes from the
workload rather than the server (speculative acceptance, think times) is not a flag.
"""

from __future__ import annotations

import json
import math
import shlex

from simulator import catalog
from simulator.deployment import batch_limits
from simulator.specs.pools import Pool
from simulator.specs.scenario import Scenario
from simulator.specs.serving import ServingConfig

GIB = float(1 << 30)
# the simulator's speculative methods as vLLM's speculative_config names them
SPEC_METHODS = {"mtp": "mtp", "eagle": "eagle", "draft_model": "draft_model", "ngram": "ngram"}
# methods whose draft weights vLLM needs named: left for the user to fill in
DRAFT_MODEL = "<draft model: fill in>"
# a multi-host instance's head address, left for the user; the DP RPC port is vLLM's
# documented example value (any free port the hosts agree on)
HEAD_IP = "<head host IP: fill in>"
DP_RPC_PORT = 13345


def serve_flags(hf_id: str, serving: ServingConfig, device_name: str) -> list[str]:
    """``vllm serve`` and its arguments for one replica group of ``serving``; on a device
    whose profile names another runtime (docs/devices.md), that runtime's server: MLX's with
    the model, llama.cpp's with one slot per sequence (vLLM's other knobs have no flag there)."""
    device = catalog.hardware_profile(device_name)
    tokens, seqs = batch_limits(device, serving)
    if device.runtime == "mlx":
        return ["mlx_lm.server", "--model", hf_id]
    if device.runtime == "llama.cpp":
        return ["llama-server", "--hf-repo", f"<GGUF of {hf_id}: fill in>", "--parallel", str(seqs)]
    args = ["vllm", "serve", hf_id, "--tensor-parallel-size", str(serving.tp)]
    if serving.dp > 1:
        args += ["--data-parallel-size", str(serving.dp)]
    if serving.api_server_count is not None:
        args += ["--api-server-count", str(serving.api_server_count)]
    if serving.ep > 1:
        args.append("--enable-expert-parallel")
    if serving.dcp > 1:
        args += ["--decode-context-parallel-size", str(serving.dcp)]
        if serving.dcp_interleave_tokens != 1:
            args += ["--cp-kv-cache-interleave-size", str(serving.dcp_interleave_tokens)]
    if serving.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", serving.kv_cache_dtype]
    if serving.state_dtype is not None:
        args += ["--mamba-ssm-cache-dtype", serving.state_dtype]
    args += ["--gpu-memory-utilization", f"{serving.gpu_memory_utilization:g}"]
    if serving.kv_cache_memory_bytes is not None:
        args += ["--kv-cache-memory-bytes", f"{serving.kv_cache_memory_bytes:.0f}"]
    args += ["--max-num-seqs", str(seqs), "--max-num-batched-tokens", str(tokens)]
    if serving.max_model_len is not None:
        args += ["--max-model-len", str(serving.max_model_len)]
    if serving.block_size_tokens != 16:
        args += ["--block-size", str(serving.block_size_tokens)]
    args.append("--enable-prefix-caching" if serving.enable_prefix_caching
                else "--no-enable-prefix-caching")  # fmt: skip
    if serving.cpu_offload_bytes:
        # vLLM's size is GiB for the whole replica (summed over its TP ranks)
        args += ["--kv-offloading-size", f"{serving.cpu_offload_bytes / GIB:g}",
                 "--kv-offloading-backend", "native"]  # fmt: skip
    spec = serving.speculative
    if spec is not None:
        config: dict[str, object] = {"method": SPEC_METHODS[spec.method],
                  "num_speculative_tokens": spec.num_speculative_tokens}  # fmt: skip
        if spec.method in ("eagle", "draft_model"):
            config["model"] = DRAFT_MODEL
        args += ["--speculative-config", json.dumps(config)]
    return args


def across_hosts(args: list[str], serving: ServingConfig, device_name: str) -> list[str]:
    """``args`` as the lines that start one instance of ``serving`` (tp x dp GPUs) on its
    hosts: unchanged (one line) where a host holds the instance, else the head host's line
    with vLLM's multi-node flags and a comment saying what the other hosts run. A tensor-
    parallel group wider than a host (NVL72: 4 GPUs a compute tray) uses the multiprocessing
    backend's ``--nnodes`` / ``--node-rank`` / ``--master-addr`` (``--headless`` off the
    head); data-parallel ranks spread over hosts use ``--data-parallel-size-local`` and
    ``--data-parallel-address`` (``--headless --data-parallel-start-rank`` off the head)."""
    scale_up = catalog.hardware_profile(device_name).scale_up
    per_host = scale_up.host_gpus if scale_up is not None else serving.tp * serving.dp
    if serving.tp * serving.dp <= per_host or args[:2] != ["vllm", "serve"]:
        return [_join(args)]
    if serving.tp <= per_host:
        local = per_host // serving.tp
        hosts = math.ceil(serving.dp / local)
        head = [
            *args,
            "--data-parallel-size-local",
            str(local),
            "--data-parallel-address",
            HEAD_IP,
            "--data-parallel-rpc-port",
            str(DP_RPC_PORT),
        ]
        others = _others(hosts, "--headless --data-parallel-start-rank", local)
        note = (
            f"# one instance spans {hosts} hosts of {per_host} GPUs ({local} DP ranks each):"
            f" this line on the head host; {others}"
        )
        if serving.dp % local:
            note += f" (the last host: --data-parallel-size-local {serving.dp % local})"
        return [note, _join(head)]
    if serving.dp > 1:
        note = (
            f"# tp {serving.tp} spans hosts of {per_host} GPUs and dp is {serving.dp}: the"
            " multi-node flags of this layout are not written here (vLLM's data-parallel"
            " deployment docs); the line below is the instance's flags"
        )
        return [note, _join(args)]
    hosts = math.ceil(serving.tp / per_host)
    head = [
        *args,
        "--distributed-executor-backend",
        "mp",
        "--nnodes",
        str(hosts),
        "--node-rank",
        "0",
        "--master-addr",
        HEAD_IP,
    ]
    note = (
        f"# one instance spans {hosts} hosts of {per_host} GPUs: this line on the head host;"
        f" {_others(hosts, '--headless --node-rank', 1)}"
    )
    return [note, _join(head)]


def _others(hosts: int, flags: str, step: int) -> str:
    """What the hosts after the head run: the head's line with ``flags`` and the host's rank
    (host N's: N x ``step``)."""
    if hosts == 2:
        return f"on the other host the same line with {flags} {step}"
    rank = "N" if step == 1 else f"{step}N"
    return f"on host N (1-{hosts - 1}) the same line with {flags} {rank}"


def vllm_serve_command(scenario: Scenario) -> str:
    """The shell command (several for a disaggregated deployment, one per pool; an instance
    wider than one host adds the multi-node flags, :func:`across_hosts`)."""
    card = catalog.model_card(scenario.model)
    # a card's hf_id may carry a note after the repository id ("deepseek-ai/DeepSeek-V3
    # (DeepSeek-R1 identical architecture)"): the id is its first word
    hf_id = card.hf_id.split(" ")[0]
    d = scenario.disaggregation
    if d is None:
        serving = scenario.serving
        return "\n".join(
            across_hosts(serve_flags(hf_id, serving, scenario.device), serving, scenario.device)
        )
    lines = []
    transfer = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
    pools: tuple[tuple[Pool, int], ...] = (
        ("prefill", d.prefill_replicas),
        ("decode", d.decode_replicas),
    )
    for role, count in pools:
        serving = d.pool_serving(scenario.serving, role)  # a pool's own parallelism, if any
        args = [*serve_flags(hf_id, serving, scenario.device), "--kv-transfer-config", transfer]
        lines.append(f"# {role}: {count} replica{'s' if count > 1 else ''} of this")
        lines += across_hosts(args, serving, scenario.device)
    return "\n".join(lines)


def _join(args: list[str]) -> str:
    """Shell-quoted, one flag per continuation line after the model."""
    parts = [shlex.quote(a) for a in args]
    head, rest = " ".join(parts[:3]), parts[3:]
    lines, i = [head], 0
    while i < len(rest):
        if i + 1 < len(rest) and not rest[i + 1].startswith("-"):
            lines.append(f"{rest[i]} {rest[i + 1]}")
            i += 2
        else:
            lines.append(rest[i])
            i += 1
    return " \\\n  ".join(lines)
