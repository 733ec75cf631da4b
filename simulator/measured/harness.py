"""Which harness timed an MLA module table, and the correction that puts every device's
MLA modules on the one the serving engine runs.

aiconfigurator-core's MLA module collector ran the module's RMSNorms as PyTorch's native
op chain (several small kernels each) until its fix of 2026-07-27 (ai-dynamo/aiconfigurator
#1423); vLLM serves them as one fused kernel. The package says so itself, in the
``collection_meta.yaml`` beside each table: B200's tables were re-collected with the fix
("norm_dispatch: vllm_c_eager_surrogate"; "the previous rows ran the never-in-serving native
chain (+34%)"), GB300's 0.27.0 tables were collected after it by the new collector, and the
other tables (B300, GB200, H100, H200 and GB300's own 0.24.0) are ``provenance: legacy``.

GB300 was timed both ways on the same shapes (0.24.0 legacy, 0.27.0 fixed; the FlashInfer
MLA kernels of both are the same, says its meta). Its ratio fixed / legacy per shape is
0.4-0.9 (x0.57 median: the native chain costs ~40-60 us at small batch and ~35 % of a large
prefill) and is the correction applied to every legacy table: a table read through it
prices the module as served. Blackwell devices run the same kernels as GB300; Hopper runs
FlashMLA, so on H100 / H200 the correction assumes the native chain costs the same share of
the module there (stated in docs/measured.md). Tables without a ``collection_meta.yaml``
(a user's folder, the test fixture) are used as they are.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from numpy.typing import NDArray

from simulator.measured.package import TableFile

if TYPE_CHECKING:
    import pandas as pd

Harness = Literal["fused", "legacy", "unknown"]
FIX_DATE = "2026-07-27"  # aiconfigurator #1423, per the B200 table's collection_meta.yaml
# the projections ``device.mla_core_frame`` subtracts are this model's; other models' rows
# (GB300 0.27.0 also times Kimi-K3 at its own dimensions) would be subtracted wrongly
REFERENCE_MODEL = "deepseek-ai/DeepSeek-V3"
KEYS = ["kv_cache_dtype", "num_heads", "batch_size", "isl", "step"]
MODULE_TABLES = ("mla_context_module_perf", "mla_generation_module_perf")


def harness(path: Path) -> Harness:
    """How the table at ``path`` was timed, from the ``collection_meta.yaml`` beside it."""
    import yaml

    meta_path = path.parent / "collection_meta.yaml"
    try:
        meta = yaml.safe_load(meta_path.read_text())
    except (OSError, yaml.YAMLError):
        return "unknown"
    if not isinstance(meta, dict):
        return "unknown"
    entry = (meta.get("tables") or {}).get(path.name.removesuffix(".parquet"))
    if not isinstance(entry, dict):
        return "unknown"
    if entry.get("norm_dispatch") or str(entry.get("collected_at", "")) >= FIX_DATE:
        return "fused"
    return "legacy"


def _latency_by_shape(path: Path) -> pd.Series:
    import pandas as pd

    df = pd.read_parquet(path, columns=[*KEYS, "model", "gemm_type", "latency"])
    df = df[(df["model"] == REFERENCE_MODEL) & (df["gemm_type"] == "bfloat16")]
    return df.groupby(KEYS)["latency"].median()


@cache
def reference_ratio(root: Path, table: str) -> tuple[str, pd.Series] | None:
    """(system, fused / legacy latency per shape) from the first system (by name) that has
    ``table`` timed both ways; None when no system has."""
    import pandas as pd

    file = f"{table}.parquet"
    for system in sorted(p.name for p in root.iterdir() if p.is_dir()):
        folder = root / system / "mla" / "vllm"
        if not folder.is_dir():
            continue
        by_harness: dict[str, Path] = {}
        for version in sorted(folder.iterdir()):
            if (version / file).is_file():
                by_harness.setdefault(harness(version / file), version / file)
        if "fused" in by_harness and "legacy" in by_harness:
            pair = pd.concat(
                [_latency_by_shape(by_harness["fused"]), _latency_by_shape(by_harness["legacy"])],
                axis=1,
                join="inner",
            )
            if pair.empty:
                continue
            ratio = (pair.iloc[:, 0] / pair.iloc[:, 1]).rename("ratio")
            return system, ratio[np.isfinite(ratio) & (ratio > 0)]
    return None


def _tokens(df: pd.DataFrame, decode: bool) -> NDArray[np.float64]:
    batch = df["batch_size"].to_numpy(dtype=np.float64)
    return batch if decode else batch * df["isl"].to_numpy(dtype=np.float64)


def serving_ratio(
    tf: TableFile, df: pd.DataFrame, decode: bool
) -> tuple[NDArray[np.float64], str | None]:
    """The factor that puts each row of ``df`` (read from ``tf``) on the fused harness, and a
    note saying what was done (None when nothing was)."""
    ones = np.ones(len(df))
    if harness(tf.path) != "legacy":
        return ones, None
    root = tf.path.parents[4]  # <root>/<system>/<op>/<backend>/<version>/<file>
    found = reference_ratio(root, tf.path.name.removesuffix(".parquet"))
    if found is None:
        return ones, (
            f"{tf.relative}: timed with the legacy native-RMSNorm harness; no device in the"
            " package is timed both ways, so the rows are used as measured"
        )
    system, ratio = found
    keys = [tuple(r) for r in df[KEYS].itertuples(index=False)]
    exact = ratio.reindex(keys).to_numpy(dtype=np.float64, copy=True)
    missing = ~np.isfinite(exact)
    if missing.any():  # the reference's median ratio at the nearest token count
        ref = ratio.reset_index()
        by_tokens = ref.assign(t=_tokens(ref, decode)).groupby("t")["ratio"].median()
        logt = np.log(by_tokens.index.to_numpy(dtype=np.float64))
        exact[missing] = np.interp(
            np.log(_tokens(df, decode)[missing]), logt, by_tokens.to_numpy(dtype=np.float64)
        )
    note = (
        f"{tf.relative}: timed with the legacy native-RMSNorm harness; scaled to the fused"
        f" (serving) harness by {system}'s tables timed both ways (x{np.median(exact):.2f}"
        f" median, {int((~missing).sum())} of {len(df)} shapes matched exactly)"
    )
    return exact, note
