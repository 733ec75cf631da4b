"""The table adapter and lookup on the committed fixture (a cut of the public H200 tables)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator import catalog
from simulator.cost.latency import LatencyModels
from simulator.cost.step import StepCostModel
from simulator.measured.device import tables_for
from simulator.measured.lookup import EXTRAPOLATED, MEASURED, TRANSFERRED
from simulator.measured.package import TABLE_FILES, TableFile, data_source
from simulator.measured.tables import read_frames, read_table
from simulator.specs import ServingConfig
from simulator.specs.loading import SpecError

GEN_ATTN = "h200_sxm/attention/vllm/0.24.0/generation_attention_perf.parquet"


def table(root: Path, relative: str) -> pd.DataFrame:
    return pd.read_parquet(root / relative)


def test_fixture_tables_are_found_newest_version_first(fixture_tables: Path) -> None:
    source = data_source()
    assert source is not None
    assert source.package_version == "override"
    found = source.tables("h200_sxm")
    assert set(found) == set(TABLE_FILES)
    assert found["kda"].backend_version == "0.1.dev19262"
    assert found["nccl"].relative == "h200_sxm/comm/nccl/2.29.2/nccl_perf.parquet"


def test_units_and_readings_of_every_kind(fixture_tables: Path) -> None:
    frames = read_frames(data_source().tables("h200_sxm"))  # type: ignore[union-attr]
    f = frames.frames
    assert {"gemm", "bmm", "moe", "attn_decode", "attn_prefill", "mla_decode_module",
            "mla_prefill_module", "kda_prefill", "kda_decode", "kda_verify", "allreduce",
            "allgather", "reducescatter", "alltoall"} <= set(f)  # fmt: skip
    # milliseconds -> seconds; fp8 block-scaled GEMM rows dropped with the reason recorded
    raw = table(fixture_tables, "h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet")
    row = raw[(raw.gemm_dtype == "bfloat16") & (raw.m == 64) & (raw.n == 2048) & (raw.k == 8192)]
    got = f["gemm"][(f["gemm"].dtype == "bf16") & (f["gemm"].m == 64) & (f["gemm"].n == 2048)
                    & (f["gemm"].k == 8192)]  # fmt: skip
    assert got.seconds.iloc[0] == pytest.approx(row.latency.iloc[0] * 1e-3)
    assert "fp8_block" not in set(f["gemm"].dtype)
    assert any("fp8_block" in d for d in frames.dropped)
    assert any("causal_conv1d_fn_qkv3" in d for d in frames.dropped)
    # generation attention attends step + 1 keys; the MLA module's step already counts them
    gen = table(fixture_tables, GEN_ATTN)
    assert set(f["attn_decode"].ctx_len) == set(gen.step + 1)
    mla = table(fixture_tables, "h200_sxm/mla/vllm/0.24.0/mla_generation_module_perf.parquet")
    assert set(f["mla_decode_module"].ctx_len) == set(mla.step)
    # NCCL counts elements; all-gather's count is the gathered output: one rank's shard is /n
    nccl = table(fixture_tables, "h200_sxm/comm/nccl/2.29.2/nccl_perf.parquet")
    ag = nccl[(nccl.op_name == "all_gather") & (nccl.num_gpus == 8) & (nccl.nccl_dtype == "half")]
    mine = f["allgather"][f["allgather"].world == 8]
    assert sorted(mine.bytes) == sorted(ag.message_size * 2 / 8)
    # KDA decode is the one fused kernel; verify sums conv update + recurrence
    kda = table(fixture_tables, "h200_sxm/kda/vllm/0.1.dev19262/kda_perf.parquet")
    ver = kda[(kda.phase == "verify") & (kda.batch_size == 8) & (kda.seq_len == 2)]
    total = f["kda_verify"][(f["kda_verify"].kind == "kda") & (f["kda_verify"].batch == 8)
                            & (f["kda_verify"].queries == 2)].seconds  # fmt: skip
    assert total.iloc[0] == pytest.approx(ver.latency.sum() * 1e-3)


def test_a_step_prices_measured_points_exactly(fixture_tables: Path) -> None:
    profile = catalog.hardware_profile("h200")
    lat = LatencyModels.for_device(profile)
    assert lat.tables is not None
    assert lat.tables.measured
    card = catalog.model_card("llama-3.3-70b")  # TP8: 8 query heads, 1 KV head, dim 128
    m = StepCostModel(card, profile, ServingConfig(tp=8), lat)
    cost = m.step(np.ones(4, dtype=np.int64), np.full(4, 1023), detail=True)
    line = next(x for x in cost.lines if x.name == "gqa.decode_attention")
    gen = table(fixture_tables, GEN_ATTN)
    row = gen[(gen.batch_size == 4) & (gen.step == 1023) & (gen.num_heads == 8)]
    assert line.seconds == pytest.approx(card.layers.count * row.latency.iloc[0] * 1e-3)
    assert lat.seconds_by_source["measured"] > 0
    assert lat.source("attn_decode") == "measured"
    assert lat.source("elementwise") == "prior"


def test_lookup_statuses(fixture_tables: Path) -> None:
    t = tables_for(catalog.hardware_profile("h200"))
    assert t is not None
    gemm = t.models["gemm"]
    bf16 = gemm.family(dtype="bf16")
    inside = np.array([[64.0, 2048.0, 8192.0], [100.0, 1500.0, 6000.0]])
    _, status = gemm.log_seconds(bf16, inside)
    assert list(status) == [MEASURED, MEASURED]
    _, status = gemm.log_seconds(bf16, np.array([[1e5, 2048.0, 8192.0]]))
    assert status[0] == EXTRAPOLATED
    _, status = gemm.log_seconds(gemm.family(dtype="mxfp4"), inside[:1])
    assert status[0] == TRANSFERRED  # no MXFP4 GEMM table: the fitted baseline answers


def test_a_device_without_tables_learns_from_the_nearest_measured_one(
    fixture_tables: Path,
) -> None:
    t = tables_for(catalog.hardware_profile("mi355x"))
    assert t is not None
    assert not t.measured
    assert "from h200" in t.basis
    # AMD has no measured device: classes the leave-family-out check found worse than the
    # prior stay on the prior (hardware_profiles/measured_errors.json: MoE today)
    assert "new vendor" in t.basis
    assert "moe" not in t.models
    assert "gemm" in t.models
    lat = LatencyModels.for_device(catalog.hardware_profile("mi355x"))
    assert lat.source("gemm") == "fitted"
    assert lat.source("moe") == "prior"


def test_provenance_names_every_table_with_its_sha256(fixture_tables: Path) -> None:
    import hashlib

    t = tables_for(catalog.hardware_profile("h200"))
    assert t is not None
    prov = t.provenance()
    assert prov["basis"] == "measured: h200_sxm"
    first = prov["tables"][0]
    path = fixture_tables / first["table"]
    assert first["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert {x["table"].split("/")[1] for x in prov["tables"]} >= {"gemm", "moe", "attention"}


def test_switched_off_and_absent_tables_fall_back_to_priors(
    monkeypatch: pytest.MonkeyPatch, no_tables: None
) -> None:
    from simulator.measured import package
    from simulator.measured.summary import describe, one_line

    lat = LatencyModels.for_device(catalog.hardware_profile("h200"))
    assert lat.tables is None
    assert "switched off" in one_line(describe(lat))
    monkeypatch.delenv("PLAN_MEASURED", raising=False)
    monkeypatch.delenv("PLAN_MEASURED_DATA", raising=False)
    monkeypatch.setattr(package.importlib.util, "find_spec", lambda name: None)
    package.data_source.cache_clear()
    assert package.data_source() is None
    lat = LatencyModels.for_device(catalog.hardware_profile("h200"))
    assert lat.tables is None
    line = one_line(describe(lat))
    assert "not installed" in line
    assert "pip install '.[measured]'" in line
    package.data_source.cache_clear()


def broken_copy(tmp_path: Path, fixture: Path, edit: str) -> TableFile:
    """A copy of the fixture's generation-attention table, broken one way."""
    dest = tmp_path / "data" / GEN_ATTN
    dest.parent.mkdir(parents=True)
    df = pd.read_parquet(fixture / GEN_ATTN)
    if edit == "missing column":
        df.drop(columns=["num_key_value_heads"]).to_parquet(dest)
    elif edit == "empty":
        df.iloc[:0].to_parquet(dest)
    elif edit == "text in a number":
        df.astype({"latency": object}).assign(latency="fast").to_parquet(dest)
    elif edit == "not parquet":
        dest.write_text("op,latency\ngemm,1\n")
    return TableFile("generation_attention", dest, GEN_ATTN, "0.24.0")


@pytest.mark.parametrize(
    ("edit", "field", "reason"),
    [
        ("missing column", "column num_key_value_heads", "missing"),
        ("empty", "(file)", "empty table"),
        ("text in a number", "row 1, column latency", "not a finite number"),
        ("not parquet", "(file)", "not a readable parquet table"),
    ],
)
def test_bad_tables_are_one_spec_error(
    tmp_path: Path, fixture_tables: Path, edit: str, field: str, reason: str
) -> None:
    tf = broken_copy(tmp_path, fixture_tables, edit)
    with pytest.raises(SpecError) as exc:
        read_table(tf, ("kv_cache_dtype",), ("num_key_value_heads", "latency"))
    assert exc.value.file == str(tf.path)
    assert exc.value.field == field
    assert reason in exc.value.reason


def test_a_bad_table_stops_a_command_with_exit_2(
    tmp_path: Path, fixture_tables: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from simulator.cli import app
    from simulator.measured import device

    data = tmp_path / "copy"
    shutil.copytree(fixture_tables, data)
    target = data / GEN_ATTN
    pd.read_parquet(target).drop(columns=["step"]).to_parquet(target)
    monkeypatch.setenv("PLAN_MEASURED_DATA", str(data))
    device.reset()
    shapes = tmp_path / "ops.csv"
    shapes.write_text("op,dtype,m,n,k\ngemm,bf16,64,2048,8192\n")
    result = CliRunner().invoke(app, ["ops", "predict", "--device", "h200", "--input", str(shapes)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0] == f"error: {target}: column step: missing (the planner reads it)"


def test_the_cache_keeps_the_most_recently_used_built_tables_per_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every code, package or data version builds its own file; only the newest few of a
    device stay, whatever other devices (or a device whose name extends this one) hold."""
    from simulator.measured import device

    monkeypatch.setenv("PLAN_CACHE_DIR", str(tmp_path))
    root = device.cache_dir()
    root.mkdir(parents=True)
    names = [f"h100-{i:024x}.pickle" for i in range(6)]
    names += [f"h100-nvl-{0:024x}.pickle", f"h200-{0:024x}.pickle", "h100-notes.pickle"]
    for i, name in enumerate(names):
        (root / name).write_bytes(b"x")
        os.utime(root / name, ns=(i * 10**9, i * 10**9))
    os.utime(root / names[0], ns=(100 * 10**9, 100 * 10**9))  # the oldest, read again now
    stale = device.prune_cache("h100", keep=3)
    kept = sorted(p.name for p in root.iterdir())
    assert sorted(p.name for p in stale) == sorted(names[1:4])
    assert kept == sorted([names[0], *names[4:]])


def test_a_build_prunes_older_builds_and_a_read_marks_its_file_used(fixture_tables: Path) -> None:
    from simulator.measured import device

    root = device.cache_dir()
    root.mkdir(parents=True)
    old = [root / f"h200-{i:024x}.pickle" for i in range(5)]
    for p in old:
        p.write_bytes(b"stale")
        os.utime(p, ns=(10**9, 10**9))
    profile = catalog.hardware_profile("h200")
    assert tables_for(profile) is not None  # built: the fixture has no cached build yet
    built = [p for p in root.glob("h200-*.pickle") if p not in old]
    assert len(built) == 1
    assert len(list(root.glob("h200-*.pickle"))) == device.KEEP_BUILT
    os.utime(built[0], ns=(10**9, 10**9))
    device.reset()
    assert tables_for(profile) is not None  # read back from the cache
    assert built[0].stat().st_mtime_ns > 10**9


def test_the_2d_curve_fast_path_gives_the_general_paths_floats_and_counts(
    fixture_tables: Path,
) -> None:
    """``Curve.seconds``' 2-D fast path (a query inside the grid: MLA decode, KDA prefill,
    attention, every step) returns bit for bit what ``Curve._seconds`` (the general path)
    returns, and counts the same; outside the grid both go the general way."""
    from simulator.measured.lookup import Curve

    t = tables_for(catalog.hardware_profile("h200"))
    assert t is not None
    model = t.models["attn_decode"]
    curve = Curve(model, next(iter(model.grids)), {}, ("batch", "ctx_len"))
    assert curve._t2
    rng = np.random.default_rng(3)
    (lo_a, *_, hi_a), (lo_b, *_, hi_b) = np.log(curve.values[0]), np.log(curve.values[1])
    for _ in range(500):
        # mostly inside, some outside (below and above), some on grid points
        x = [float(np.exp(rng.uniform(lo_a - 0.3, hi_a + 0.3))),
             float(np.exp(rng.uniform(lo_b - 0.3, hi_b + 0.3)))]  # fmt: skip
        if rng.random() < 0.1:
            x = [float(rng.choice(v)) for v in curve.values]
        queries, outside = curve.queries, curve.outside
        fast = curve.seconds(*x)
        fast_out = curve.last_outside
        assert fast == curve._seconds(*x)
        assert fast_out == curve.last_outside
        assert curve.queries == queries + 2
        assert curve.outside == outside + 2 * fast_out
    assert 0 < curve.outside < curve.queries  # both kinds of query were asked


def test_a_1d_curve_remembers_its_answers_bit_for_bit(
    fixture_tables: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 1-D fast path keeps the values it was asked inside the grid: asked again (from
    the memo) or on a curve that never remembers, the same float, the same counts; outside
    the grid nothing is kept; the memo starts afresh when full."""
    from simulator.measured import lookup
    from simulator.measured.lookup import Curve

    t = tables_for(catalog.hardware_profile("h200"))
    assert t is not None
    model = t.models["gemm"]
    fam = next(iter(model.grids))
    grid = model.grids[fam]
    n, k = (float(v[len(v) // 2]) for v in grid.values_per_axis[1:])
    curve, fresh = (Curve(model, fam, {"n": n, "k": k}, ("m",)) for _ in range(2))
    assert curve._t1
    lo, hi = np.log(curve.values[0][0]), np.log(curve.values[0][-1])
    rng = np.random.default_rng(5)
    xs = [float(np.exp(rng.uniform(lo - 0.5, hi + 0.5))) for _ in range(200)]
    first = [curve.seconds(x) for x in xs]
    again = [curve.seconds(x) for x in xs]
    outs = []
    for x in xs:
        fresh._memo.clear()
        outs.append(fresh.seconds(x))
        fresh._memo.clear()
    assert first == again == outs
    assert curve.queries == 400
    assert fresh.queries == 200
    assert curve.outside == 2 * fresh.outside > 0
    inside = {x for x in xs if lo <= np.log(x) <= hi}
    assert set(curve._memo) == inside
    monkeypatch.setattr(lookup, "MEMO_MAX", 3)
    for x in sorted(inside)[:5]:
        curve.seconds(x + 1.0)
    assert 1 <= len(curve._memo) <= 3


def test_lines_sharing_a_curve_are_tallied_by_their_own_query(fixture_tables: Path) -> None:
    """Two GEMM lines of one shape read one bound curve; one inside the measured grid, one
    far outside it: each line's seconds go to its own source (before, both followed the
    curve's last query)."""
    from simulator.cost.layers import StepOps
    from simulator.cost.ops import gemm
    from simulator.cost.shapes import StepShape

    profile = catalog.hardware_profile("h200")
    lat = LatencyModels.for_device(profile)
    m = StepCostModel(catalog.model_card("llama-3.3-70b"), profile, ServingConfig(tp=8), lat)
    ops = StepOps(m, StepShape(num_decodes=1, decode_tokens=1, decode_kv=100.0))
    curve = m.lookups.gemm("probe", "bf16", 2048.0, 8192.0)
    assert curve is not None
    for rows in (64.0, 1e7):  # inside the grid, then far past its largest m
        work = gemm(rows, 2048.0, 8192.0, 2.0)
        ops.add("probe", "gemm", "dense", 1.0, work, 1e15, curve, (rows,))
    for scalar in (True, False):  # a few rows in scalar arithmetic, or one vectorised pass
        lat.seconds_by_source.clear()
        ops.want_shapes = not scalar  # (shape tables force the vectorised pass)
        total = ops.row_totals()
        assert lat.seconds_by_source["measured"] == total[0]
        assert lat.seconds_by_source["fitted"] == total[1]


def test_the_line_of_a_run_that_priced_no_step_says_so(fixture_tables: Path) -> None:
    """Nothing priced: the line says no step was simulated (it printed "( of simulated GPU
    time)" with an empty share list)."""
    from simulator.measured.summary import describe, one_line

    lat = LatencyModels.for_device(catalog.hardware_profile("h200"))
    assert lat.tables is not None
    line = one_line(describe(lat))
    assert "(no step simulated)" in line, line
    assert "( of" not in line


def test_a_zero_link_latency_still_finds_a_nearest_device() -> None:
    """A user's profile may give its link no latency (the spec allows 0): the transfer rule's
    log distance read it as log 0 and divided by zero (exit 1 on every device without
    tables). A zero is a tiny latency: finite, and nearest to the lowest-latency link."""
    from simulator.measured.device import nearest_device, spec_distance
    from simulator.measured.work import Device

    def dev(name: str, latency_s: float) -> Device:
        return Device(name, {}, 1e15, 3e12, 4e11, latency_s)

    zero = dev("mine", 0.0)
    assert np.isfinite(spec_distance("allreduce", zero, dev("a", 2e-6)))
    assert np.isfinite(spec_distance("allreduce", zero, zero))
    assert nearest_device("allreduce", {"a": dev("a", 5e-6), "b": dev("b", 1e-6)}, zero) == "b"


def test_the_known_systems_are_the_installed_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    """``measured_tables`` is checked against a list written down (specs/hardware.py), so a
    package of another version with other system folders must show here, not as a profile
    refused or a typo let through."""
    from simulator.measured.package import ENV_DATA_DIR, TESTED_VERSION
    from simulator.specs.hardware import MEASURED_SYSTEMS

    monkeypatch.delenv(ENV_DATA_DIR, raising=False)
    source = data_source()
    if source is None:
        pytest.skip("the measured extra (aiconfigurator-core) is not installed")
    if source.package_version != TESTED_VERSION:
        pytest.skip(f"aiconfigurator-core {source.package_version}, not {TESTED_VERSION}")
    folders = sorted(p.name for p in source.root.iterdir() if p.is_dir())
    assert list(MEASURED_SYSTEMS) == folders


@pytest.mark.parametrize(
    ("variable", "value", "fragment"),
    [
        # a typo of off read as on; a missing or foreign folder ran on priors, unsaid
        ("PLAN_MEASURED", "offf", "PLAN_MEASURED: 'offf' is neither off"),
        ("PLAN_MEASURED", "2", "PLAN_MEASURED: '2' is neither off"),
        ("PLAN_MEASURED_DATA", "{tmp}/nowhere", "PLAN_MEASURED_DATA: no such folder"),
        ("PLAN_MEASURED_DATA", "{tmp}/file", "PLAN_MEASURED_DATA: not a folder (a file)"),
        ("PLAN_MEASURED_DATA", "{tmp}/empty", "holds no system folder of the measured tables"),
    ],
)
def test_a_bad_measured_tables_variable_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str, fragment: str
) -> None:
    from typer.testing import CliRunner

    from simulator.cli import app
    from simulator.measured import device

    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    monkeypatch.delenv("PLAN_MEASURED", raising=False)
    monkeypatch.setenv(variable, value.format(tmp=tmp_path))
    device.reset()
    result = CliRunner().invoke(
        app, ["step", "--model", "llama-3.1-8b", "--device", "h200", "--decode", "4"]
    )
    device.reset()
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
    assert fragment in line, line


@pytest.mark.parametrize("value", ["off", "OFF", " no ", "0", "on", "", "true"])
def test_the_measured_tables_switch_takes_its_words(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    from simulator.measured.package import switched_off

    monkeypatch.setenv("PLAN_MEASURED", value)
    assert switched_off() is (value.strip().lower() in ("off", "no", "0"))
