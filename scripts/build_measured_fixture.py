"""Cut the small committed test fixture out of the installed aiconfigurator-core tables.

    .venv/bin/python scripts/build_measured_fixture.py   # -> tests/fixtures/measured/

Writes, for one system (h200_sxm), a few hundred rows of every table the planner reads in the
package's own layout (``<system>/<op>/<backend>/<version>/<file>.parquet``), so that
``PLAN_MEASURED_DATA=tests/fixtures/measured`` points the planner at it. The rows are the
package's, unchanged (Apache-2.0; see the fixture's SOURCE.md).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pandas as pd

from simulator.measured.package import data_source

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "measured"
SYSTEM = "h200_sxm"
M_VALUES = (1, 4, 16, 64, 256, 1024, 4096)


def subset(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """A few hundred rows: two or three families, their full axis sweeps."""
    if name == "gemm":
        sel = df["n"].isin([1024, 2048]) & df["k"].isin([4096, 8192]) & df["m"].isin(M_VALUES)
        return df[sel & df["gemm_dtype"].isin(["bfloat16", "fp8", "fp8_block"])]
    if name == "moe":
        gptoss = (
            (df["hidden_size"] == 2880) & (df["num_experts"] == 128) & (df["moe_ep_size"] == 1)
            & df["moe_tp_size"].isin([1, 8])
        )  # fmt: skip
        # the Marlin MXFP4 kernel, timed at another model's shape only (moe_kernel tests)
        marlin = df["kernel_source"].str.contains("marlin") & (df["moe_dtype"] == "w4a16_mxfp4")
        marlin &= (df["moe_tp_size"] == 1) & (df["moe_ep_size"] == 1)
        return df[(gptoss | marlin) & (df["distribution"] == "power_law_1.2")]
    if name in ("context_attention", "generation_attention"):
        return df[
            (df["head_dim"] == 128) & (df["num_heads"] == 8) & (df["num_key_value_heads"] == 1)
            & (df["window_size"] == 0) & (df["kv_cache_dtype"] == "bfloat16")
            & df["batch_size"].isin([1, 4, 16, 64])
        ]  # fmt: skip
    if name in ("mla_context_module", "mla_generation_module"):
        return df[
            df["num_heads"].isin([8, 16]) & (df["kv_cache_dtype"] == "bfloat16")
            & (df["gemm_type"] == "bfloat16") & df["batch_size"].isin([1, 8, 64])
        ]  # fmt: skip
    if name == "mla_bmm":
        return df[df["num_heads"].isin([8, 16]) & df["num_tokens"].isin(M_VALUES)]
    if name == "kda":
        return df[(df["num_k_heads"] == 12) & df["batch_size"].isin([1, 8, 64])]
    if name == "gdn":
        return df[
            (df["num_k_heads"] == 2) & (df["num_v_heads"] == 8) & df["batch_size"].isin([1, 8, 64])
        ]
    if name in ("custom_allreduce", "nccl"):
        return df[df["num_gpus"].isin([2, 8])]
    if name == "moe_a2a":
        return df[(df["hidden_size"] == 7168) & (df["topk"] == 8) & (df["num_experts"] == 256)]
    raise KeyError(name)


def main() -> None:
    source = data_source()
    if source is None:
        raise SystemExit("aiconfigurator-core is not installed: pip install '.[measured]'")
    total = 0
    lines = []
    for name, tf in source.tables(SYSTEM).items():
        df = pd.read_parquet(tf.path)
        part = subset(name, df).reset_index(drop=True)
        dest = OUT / tf.relative
        dest.parent.mkdir(parents=True, exist_ok=True)
        part.to_parquet(dest, index=False)
        total += len(part)
        lines.append(f"| `{tf.relative}` | {len(part)} of {len(df):,} |")
    version = importlib.metadata.version("aiconfigurator-core")
    (OUT / "SOURCE.md").write_text(
        "# Test fixture: a cut of the public vLLM op tables\n\n"
        f"Rows copied unchanged from `aiconfigurator-core=={version}` (pip; Apache-2.0,"
        " NVIDIA), `aiconfigurator_core/systems/data/`, by `scripts/build_measured_fixture.py`"
        f" ({total} rows). The tests point the planner at this folder with"
        " `PLAN_MEASURED_DATA`; the planner itself reads the installed package.\n\n"
        "| table | rows kept |\n|---|---|\n" + "\n".join(lines) + "\n"
    )
    print(f"wrote {OUT} ({total} rows)")


if __name__ == "__main__":
    main()
