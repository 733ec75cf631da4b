"""The MLA module tables' harness: read from collection_meta.yaml, and the legacy tables put
on the fused (serving) harness by a device timed both ways. Built on small synthetic tables
in a temporary data folder (the layout of aiconfigurator-core's systems/data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.measured import harness as h
from simulator.measured.package import DataSource
from simulator.measured.tables import Frames, read_frames

GEN = "mla_generation_module_perf"
LEGACY_META = "schema_version: 1\nprovenance: legacy\ntables:\n  {t}:\n    status: complete\n"
FIXED_META = "tables:\n  {t}:\n    status: complete\n    norm_dispatch: vllm_c_eager_surrogate\n"
NEW_META = "provenance: local\ntables:\n  {t}:\n    collected_at: '2026-08-18'\n"


def rows(latency_ms: dict[tuple[int, int], float], model: str = h.REFERENCE_MODEL) -> pd.DataFrame:
    """Generation-module rows keyed by (heads, batch), bf16 projections and KV, step 1024."""
    return pd.DataFrame(
        {
            "model": model,
            "kv_cache_dtype": "bfloat16",
            "gemm_type": "bfloat16",
            "num_heads": [k[0] for k in latency_ms],
            "batch_size": [k[1] for k in latency_ms],
            "isl": 1,
            "step": 1024,
            "latency": list(latency_ms.values()),
        }
    )


def put(root: Path, system: str, version: str, meta: str | None, df: pd.DataFrame) -> Path:
    folder = root / system / "mla" / "vllm" / version
    folder.mkdir(parents=True, exist_ok=True)
    if meta is not None:
        (folder / "collection_meta.yaml").write_text(meta.format(t=GEN))
    path = folder / f"{GEN}.parquet"
    df.to_parquet(path)
    return path


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        (LEGACY_META, "legacy"),
        (FIXED_META, "fused"),  # B200's re-collection names its norm dispatch
        (NEW_META, "fused"),  # collected after the fix by the new collector
        ("provenance: local\ntables:\n  {t}:\n    collected_at: '2026-07-01'\n", "legacy"),
        (None, "unknown"),  # a user's folder, the test fixture
        ("tables: [not, a, mapping", "unknown"),  # unreadable YAML
        ("tables:\n  other_table:\n    status: complete\n", "unknown"),
    ],
)
def test_harness_is_read_from_the_collection_meta(
    tmp_path: Path, meta: str | None, expected: str
) -> None:
    path = put(tmp_path, "x", "0.24.0", meta, rows({(16, 1): 0.08}))
    assert h.harness(path) == expected


def test_legacy_rows_are_scaled_by_the_pair_and_fused_rows_kept(tmp_path: Path) -> None:
    h.reference_ratio.cache_clear()
    shapes = {(16, 1): 0.080, (16, 64): 0.100, (128, 64): 0.300}
    fixed = {(16, 1): 0.040, (16, 64): 0.075, (128, 64): 0.240}  # ratios 0.5, 0.75, 0.8
    put(tmp_path, "ref", "0.24.0", LEGACY_META, rows(shapes))
    put(tmp_path, "ref", "0.27.0", NEW_META, rows(fixed))
    # the device to correct has one shape the pair lacks: (16, 8), between batch 1 and 64
    mine = {(16, 1): 0.090, (16, 8): 0.095, (128, 64): 0.330}
    legacy = put(tmp_path, "dev", "0.24.0", LEGACY_META, rows(mine))
    frames = read_frames(DataSource(tmp_path, "test").tables("dev"))
    got = frames.frames["mla_decode_module"].set_index(["num_heads", "batch"])["seconds"]
    assert got[(16, 1)] == pytest.approx(0.090e-3 * 0.5)
    assert got[(128, 64)] == pytest.approx(0.330e-3 * 0.8)
    # unmatched shape: the pair's median ratio at batch 1 (0.5) and 64 (0.775), log-interpolated
    want = np.interp(np.log(8.0), [0.0, np.log(64.0)], [0.5, (0.75 + 0.8) / 2])
    assert got[(16, 8)] == pytest.approx(0.095e-3 * want)
    (note,) = [d for d in frames.dropped if "legacy" in d]
    assert "ref's tables timed both ways" in note
    assert "2 of 3 shapes matched exactly" in note
    assert legacy.parent.name in note
    # the reference system's own newest (fused) table is read as measured
    ref = read_frames(DataSource(tmp_path, "test").tables("ref"))
    ref_s = ref.frames["mla_decode_module"].set_index(["num_heads", "batch"])["seconds"]
    assert ref_s[(16, 1)] == pytest.approx(0.040e-3)
    assert not [d for d in ref.dropped if "legacy" in d]


def test_no_pair_leaves_legacy_rows_as_measured_and_says_so(tmp_path: Path) -> None:
    h.reference_ratio.cache_clear()
    put(tmp_path, "dev", "0.24.0", LEGACY_META, rows({(16, 1): 0.090}))
    frames = read_frames(DataSource(tmp_path, "test").tables("dev"))
    assert frames.frames["mla_decode_module"]["seconds"].iloc[0] == pytest.approx(0.090e-3)
    assert any("used as measured" in d for d in frames.dropped)


def test_rows_of_other_models_are_dropped(tmp_path: Path) -> None:
    h.reference_ratio.cache_clear()
    both = pd.concat([rows({(16, 1): 0.05}), rows({(16, 1): 0.07}, model="moonshotai/Kimi-K3")])
    put(tmp_path, "dev", "0.27.0", NEW_META, both)
    frames: Frames = read_frames(DataSource(tmp_path, "test").tables("dev"))
    assert frames.frames["mla_decode_module"]["seconds"].tolist() == pytest.approx([0.05e-3])
    assert any("other models" in d for d in frames.dropped)
