"""Rack scale: the scale-out NIC of the data-centre profiles (sourced, per GPU per direction),
fleets of NVL72 systems counted in racks where the search answer says what is bought, and
the search space sweeping wide EP, EPLB and the latent-MoE placement with pruning reasons."""

from __future__ import annotations

import io
import math
from typing import Any

import pandas as pd
import pytest
from rich.console import Console

from simulator import catalog
from simulator.cli.search import best_tables
from simulator.planner.analysis import fleet_unit
from simulator.planner.expand import expand, knob_label
from simulator.planner.space import SearchSpace

# per-GPU NIC line rate in Gb/s, as the vendor pages name the NIC (profiles' sources)
NIC_GBIT = {"h100": 400, "h200": 400, "b200": 400, "b300": 800, "gb200": 400, "gb300": 800,
            "mi300x": 400, "mi325x": 400, "mi355x": 400}  # fmt: skip


@pytest.mark.parametrize(("device", "gbit"), sorted(NIC_GBIT.items()))
def test_scale_out_nic_per_gpu_per_direction(device: str, gbit: int) -> None:
    profile = catalog.hardware_profile(device)
    out = profile.scale_out
    assert out is not None
    assert out.bw_bytes_per_s == gbit * 1e9 / 8  # bits to bytes, one direction
    assert out.kind in ("infiniband", "ethernet")
    source = profile.sources["scale_out"]
    assert "latency_s" in source
    assert "assumption" in source.split("latency_s", 1)[1]  # the latency is not a measurement
    # the NIC is slower than the scale-up fabric it extends
    assert profile.scale_up is not None
    assert out.bw_bytes_per_s < profile.scale_up.bw_bytes_per_s


@pytest.mark.parametrize("device", ["rtx4090", "m4-max"])
def test_devices_without_a_published_nic_have_none(device: str) -> None:
    assert catalog.hardware_profile(device).scale_out is None


def test_racks_for_nvl72_nodes_for_hgx() -> None:
    assert fleet_unit("gb300") == ("rack", 72)
    assert fleet_unit("gb200") == ("rack", 72)
    assert fleet_unit("h200") == ("node", 8)
    assert fleet_unit("mi355x") == ("node", 8)


def _space(**update: Any) -> SearchSpace:
    data = {
        "name": "rack",
        "model": "deepseek-v3",
        "devices": ["gb300"],
        "concurrency": [4],
        "workload": {"kind": "random", "input_tokens": 512, "output_tokens": 32,
                     "num_requests": 8, "concurrency": 1},
        "slo": {"interactivity_tok_per_s_p90": 20.0},
        "demand_users": 1000,
        **update,
    }  # fmt: skip
    return SearchSpace.model_validate(data)


def test_the_search_answer_counts_racks_for_nvl72() -> None:
    """``plan search`` prints what is bought: ceil(GPUs / 72) racks on GB300, ceil(GPUs / 8)
    nodes on H200 (``units`` of ``unit``), not GPUs / 8 for both."""
    space = _space(devices=["gb300", "h200"])
    gpus = {"gb300": 800, "h200": 800}
    rows = []
    for rank, device in enumerate(("gb300", "h200"), start=1):
        unit, per = fleet_unit(device)
        rows.append({
            "rank": rank, "device": device, "config_id": f"{device}-tp8-dcp1", "concurrency": 4,
            "gpus": gpus[device], "unit": unit, "units": math.ceil(gpus[device] / per),
            "usd_per_hour": 1000.0, "fleet_usd_per_hour": 1000.0 + rank,
        })  # fmt: skip
    best = pd.DataFrame(rows)
    text = io.StringIO()
    console = Console(file=text, width=250)
    for table in best_tables(space, best, 250):
        console.print(table)
    out = text.getvalue()
    assert "12 racks" in out  # 800 / 72 = 11.1 -> 12
    assert "100 nodes" in out  # 800 / 8
    assert "nodes / racks" in out
    # the $ per hour is what is bought (whole racks), not the GPUs in use x price
    assert "1,001" in out
    assert "1,002" in out


def test_the_space_sweeps_wide_ep_and_prunes_with_reasons() -> None:
    space = _space(
        sweep={"tp": [1], "dp": [72], "ep": [1, 72], "eplb_redundant_experts": [0, 32],
               "all2all_backend": ["generic", "deepep_low_latency"],
               "latent_moe_projection": ["replicated", "rank_split"]},
    )  # fmt: skip
    candidates, pruned = expand(space)
    ran = {c.config_id for c in candidates}
    # EP over the 72 GPUs of the NVL72 domain with 32 redundant experts: (256 + 32) / 72 = 4
    assert "gb300-tp1-dcp1-dp72-ep72-eplb32" in ran
    assert "gb300-tp1-dcp1-dp72-ep72-eplb32-deepep-ll" in ran
    reasons = [p.reason for p in pruned]
    assert any("ep 72 does not divide the 256 experts + 0 redundant" in r for r in reasons)
    assert any("redundant experts need expert parallelism" in r for r in reasons)
    assert any("deepep_low_latency dispatches tokens between DP ranks" in r for r in reasons)
    assert any("rank_split needs a latent MoE" in r for r in reasons)
    # every combination either runs or is pruned with its reason
    assert len(candidates) + len(pruned) == 2 * 2 * 2 * 2


def test_default_knobs_keep_the_old_labels() -> None:
    knobs = {"tp": 8, "dcp": 1, "dp": 1, "ep": 1, "cpu_offload_bytes": 0.0,
             "max_num_seqs": None, "max_num_batched_tokens": None, "speculative": None,
             "eplb_redundant_experts": 0, "moe_load_imbalance": 1.0,
             "all2all_backend": "generic", "latent_moe_projection": "replicated",
             "disaggregation": None}  # fmt: skip
    assert knob_label(knobs) == "tp8-dcp1"
    knobs |= {"moe_load_imbalance": 1.3, "latent_moe_projection": "rank_split"}
    assert knob_label(knobs) == "tp8-dcp1-imb1.3-latent-split"


def test_the_rack_example_expands_and_its_wide_ep_split_runs() -> None:
    """The shipped rack-scale search (DeepSeek-V4-Flash on GB300 NVL72): every candidate is
    kept (none pruned), and its 1P1D candidate with a 16-rank DP-attention, EP16 decode pool
    runs end to end on a short slice of the workload: 8 prefill + 16 decode GPUs, KV read
    over the profile's ConnectX-8 link, tokens decoded on the decode pool."""
    from simulator.cli.examples import EXAMPLES_DIR
    from simulator.simulation import simulate
    from simulator.specs.loading import load

    space = load(SearchSpace, EXAMPLES_DIR / "search-deepseek-v4-gb300-nvl72.yaml")
    candidates, pruned = expand(space)
    assert not pruned
    assert len(candidates) == len(space.sweep.disaggregation)
    wide = [
        sc
        for c in candidates
        for sc in c.scenarios[:1]
        if sc.disaggregation is not None
        and sc.disaggregation.prefill_replicas == 1
        and sc.disaggregation.decode_serving is not None
        and sc.disaggregation.decode_serving.dp == 16
        and sc.disaggregation.decode_serving.all2all_backend in (None, "generic")
    ]
    assert len(wide) == 1
    short = wide[0].model_copy(
        update={
            "workload": wide[0].workload.model_copy(update={"sessions": 24, "concurrency": 16}),
            "duration_s": 240.0,
            "warmup_s": 0.0,
        }
    )
    s = simulate(short).summary
    assert (s.prefill_gpus, s.decode_gpus) == (8, 16)
    assert s.requests_finished > 0
    assert (s.decode_output_tok_per_s_per_gpu or 0.0) > 0
    assert (s.kv_transfer_bytes_per_gpu_mean or 0.0) > 0
