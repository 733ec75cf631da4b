"""Measurement rows from Vidur's public H100 profiling tables (``../shared/data/vidur_profiling``).

``compute__h100__meta-llama__Llama-2-70b-hf__mlp.csv``: per-op median times (ms) of one
Llama-2-70B block (n_head 64, n_kv_head 8, n_embd 8192, n_expanded_embd 28672, head_dim 128,
gated MLP, bf16) at ``num_tokens`` tokens on ``num_tensor_parallel_workers`` GPUs, measured
by Vidur on sarathi-serve layers. Its linear layers become GEMM rows (ColumnParallel /
RowParallel shapes per TP rank, checked against the data: a TP1 ``mlp_up_proj`` at one token
reads 8192 x 57344 bf16 weights = 0.94 GB, 0.28 ms at 3.35 TB/s; measured 0.311 ms):

=================  =========  ==============  ==============
vidur op           m          k               n
=================  =========  ==============  ==============
attn_pre_proj      tokens     8192            (64+2*8)*128/tp
attn_post_proj     tokens     64*128/tp       8192
mlp_up_proj        tokens     8192            2*28672/tp
mlp_down_proj      tokens     28672/tp        8192
=================  =========  ==============  ==============

``network__h100_dgx__all_reduce.csv``: NCCL all-reduce kernel time (ms, median) on an 8-GPU
H100 DGX. ``size`` is bytes: Vidur writes ``size * 2`` for its fp16 buffer of ``size``
elements (``CollectiveWrapper.profile``), and every rank reduces the whole buffer, so it is the
per-rank size of the reduced tensor. Vidur ran NCCL eagerly (``DISABLE_GRAPH = True``).

Elementwise rows (``ELEMENTWISE``) are assumptions about the sarathi CUDA kernels, listed
there; they are off by default because the three kernels reach very different fractions of
HBM bandwidth (see ``plan validate ops``), so one elementwise model cannot fit them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from simulator.specs.loading import SpecError

if TYPE_CHECKING:
    import pandas as pd

    from simulator.cost.measurements import MeasurementTable

MLP_FILE = "compute__h100__meta-llama__Llama-2-70b-hf__mlp.csv"
ALL_REDUCE_FILE = "network__h100_dgx__all_reduce.csv"

N_HEAD, N_KV_HEAD, N_EMBD, N_EXPANDED, HEAD_DIM = 64, 8, 8192, 28672, 128


def gemm_shapes(
    tokens: NDArray[np.float64], tp: NDArray[np.float64]
) -> dict[str, tuple[NDArray[np.float64], ...]]:
    """(m, n, k) per TP rank of the four Llama-2-70B linear layers Vidur times."""
    m = tokens.astype(np.float64)
    full = np.full_like(m, float(N_EMBD))
    return {
        "attn_pre_proj": (m, (N_HEAD + 2 * N_KV_HEAD) * HEAD_DIM / tp, full),
        "attn_post_proj": (m, full, N_HEAD * HEAD_DIM / tp),
        "mlp_up_proj": (m, 2.0 * N_EXPANDED / tp, full),
        "mlp_down_proj": (m, full, N_EXPANDED / tp),
    }


# vidur op -> (elements per token at TP tp, bytes moved per element), bf16 tensors:
#   add: residual + hidden (2 reads + 1 write of n_embd); mlp_act: SiluAndMul reads gate and up
#   (2 x inter/tp) and writes inter/tp, counted per output element; input_layernorm: RMSNorm
#   reads x and writes the output (the second pass over x assumed to hit cache, weights ignored).
ELEMENTWISE: dict[str, tuple[float, float, float]] = {
    # name: (elements per token, divided by tp (1) or not (0), bytes per element)
    "add": (N_EMBD, 0.0, 6.0),
    "mlp_act": (N_EXPANDED, 1.0, 6.0),
    "input_layernorm": (N_EMBD, 0.0, 4.0),
}


def _read(path: Path) -> pd.DataFrame:
    """One of Vidur's CSVs, every cell as text (checked by :func:`_column`)."""
    from simulator.cost.shape_csv import read_table
    from simulator.specs.loading import check_text_file

    if not path.exists() and not path.is_symlink():
        raise SpecError(path, "(file)", "no such file (is --vidur the vidur_profiling folder?)")
    check_text_file(path)  # a regular UTF-8 file (a FIFO would block the reader)
    table = read_table(path)
    if table.empty:
        raise SpecError(path, "(file)", "no rows under the header")
    return table


def _column(table: pd.DataFrame, path: Path, column: str) -> NDArray[np.float64]:
    """``column`` of every row: present, a finite number > 0 (Vidur's counts and times)."""
    from simulator.cost.shape_csv import numeric_column

    rows = np.arange(len(table))
    return numeric_column(table, column, rows, path, "Vidur's profiling table", positive=True)


def vidur_tables(folder: str | Path, elementwise: bool = False) -> list[MeasurementTable]:
    """Measurement tables (gemm; allreduce; elementwise when asked) from Vidur's H100 CSVs."""
    import pandas as pd

    from simulator.cost.measurements import MeasurementTable

    root = Path(folder)
    mlp_path = root / MLP_FILE
    mlp = _read(mlp_path)
    tokens = _column(mlp, mlp_path, "num_tokens")
    tp = _column(mlp, mlp_path, "num_tensor_parallel_workers")
    gemms = []
    for name, (m, n, k) in gemm_shapes(tokens, tp).items():
        gemms.append(
            pd.DataFrame(
                {
                    "op": "gemm",
                    "dtype": "bf16",
                    "m": m,
                    "n": n,
                    "k": k,
                    "latency_us": _column(mlp, mlp_path, f"time_stats.{name}.median") * 1e3,
                    "vidur_op": name,
                    "vidur_tp": tp,
                }
            )
        )
    tables = [MeasurementTable(mlp_path, pd.concat(gemms, ignore_index=True))]
    if elementwise:
        parts = []
        for name, (per_token, split, bpe) in ELEMENTWISE.items():
            parts.append(
                pd.DataFrame(
                    {
                        "op": "elementwise",
                        "dtype": "bf16",
                        "elements": tokens * per_token / np.where(split > 0, tp, 1.0),
                        "bytes_per_elem": bpe,
                        "latency_us": _column(mlp, mlp_path, f"time_stats.{name}.median") * 1e3,
                        "vidur_op": name,
                        "vidur_tp": tp,
                    }
                )
            )
        tables.append(MeasurementTable(mlp_path, pd.concat(parts, ignore_index=True)))
    ar_path = root / ALL_REDUCE_FILE
    ar = _read(ar_path)
    tables.append(
        MeasurementTable(
            ar_path,
            pd.DataFrame(
                {
                    "op": "allreduce",
                    "bytes": _column(ar, ar_path, "size"),
                    "world_size": _column(ar, ar_path, "num_workers"),
                    "latency_us": _column(ar, ar_path, "time_stats.all_reduce.median") * 1e3,
                }
            ),
        )
    )
    return tables
