"""Collectives timed with ``torch.distributed`` across the GPUs of one node.

One process per rank (``torch.multiprocessing``); rank 0 reports, per (op, bytes), the median
over repetitions of the slowest rank's time (a collective ends when its last rank does). Byte
counts follow the cost model (``simulator.cost.latency``): all-reduce the message size,
all-gather / reduce-scatter one rank's shard, all-to-all what one rank sends.

NCCL / RCCL on GPUs; gloo on CPUs (all-reduce and all-gather only), which is how the tests
exercise this code without a GPU.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernels_calibration.shapes import Job
from kernels_calibration.timing import Stats

GLOO_OPS = ("allreduce", "allgather")
ALL_OPS = ("allreduce", "allgather", "reducescatter", "alltoall")
FULL_BYTES = tuple(2**p for p in range(12, 29, 2))  # 4 KiB .. 256 MiB
SMOKE_BYTES = (2**16, 2**22)


def jobs(world_sizes: Sequence[int], sizes: Sequence[int], ops: Sequence[str]) -> list[Job]:
    return [
        Job(op, "torch.distributed", "bf16", (("bytes", s), ("world_size", n)), source="nccl")
        for n in world_sizes
        for op in ops
        for s in sizes
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one(op: str, nbytes: int, world: int, device: torch.device) -> Any:
    elems = max(1, nbytes // 2)
    x = torch.ones(elems, device=device, dtype=torch.bfloat16)
    if op == "allreduce":
        return lambda: dist.all_reduce(x)
    if op == "allgather":
        out = [torch.empty_like(x) for _ in range(world)]
        return lambda: dist.all_gather(out, x)
    if op == "reducescatter":
        big = torch.ones(elems * world, device=device, dtype=torch.bfloat16)
        return lambda: dist.reduce_scatter_tensor(x, big)
    if op == "alltoall":
        send = torch.ones(max(world, elems // world * world), device=device, dtype=torch.bfloat16)
        recv = torch.empty_like(send)
        return lambda: dist.all_to_all_single(recv, send)
    raise ValueError(op)


def _worker(
    rank: int, world: int, port: int, backend: str, work: list[tuple[str, int]], reps: int, out: str
) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    results = []
    try:
        for op, nbytes in work:
            fn = _one(op, nbytes, world, device)
            for _ in range(3):
                fn()
            times = torch.zeros(reps, dtype=torch.float64)
            for i in range(reps):
                dist.barrier()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                fn()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times[i] = time.perf_counter() - t0
            dist.all_reduce(times, op=dist.ReduceOp.MAX)  # gloo/nccl both reduce fp64 on host
            results.append([op, nbytes, times.tolist()])
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps(results))


def measure(
    world: int, work: Sequence[tuple[str, int]], backend: str = "nccl", reps: int = 20
) -> dict[tuple[str, int], Stats]:
    """Time each (op, bytes) over ``world`` ranks; seconds summarised in microseconds."""
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.json")
        mp.start_processes(
            _worker,
            args=(world, _free_port(), backend, list(work), reps, out),
            nprocs=world,
            join=True,
            start_method="spawn",
        )
        rows = json.loads(Path(out).read_text())
    stats = {}
    for op, nbytes, times in rows:
        us = np.asarray(times) * 1e6
        p20, med, p80 = np.quantile(us, [0.2, 0.5, 0.8])
        stats[(op, int(nbytes))] = Stats(float(med), float(p20), float(p80), len(times))
    return stats
