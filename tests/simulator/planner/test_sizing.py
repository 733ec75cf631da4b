"""plan size's defaults (which configurations each device tries), its deploy command and one
small sizing end to end through the real engine."""

import shlex
from pathlib import Path

import pytest

from simulator import catalog
from simulator.planner.deploy import vllm_serve_command
from simulator.planner.sizing import (
    SizeRequest,
    base_space,
    devices_for,
    plan_candidates,
    run_size,
    tp_tried,
)
from simulator.specs import Scenario, SpecError

TIB = 2**40


def sweep_of(model: str, device: str, workload: str = "agentic") -> dict[str, list[object]]:
    request = SizeRequest(model=model, users=100, slo_interactivity_tok_per_s=30,
                          devices=[device], workload=workload)  # fmt: skip
    _, candidates, pruned = plan_candidates(base_space(request))
    return {
        "tp": sorted({c.knobs["tp"] for c in candidates}),
        "dcp": sorted({c.knobs["dcp"] for c in candidates}),
        "offload": sorted({c.knobs["cpu_offload_bytes"] for c in candidates}),
        "pruned": sorted({p.reason for p in pruned}),
    }


@pytest.mark.parametrize(
    ("model", "device", "workload", "tp", "dcp", "offload"),
    [
        # an MLA hybrid on agentic traffic: one node, DCP off/on, offload off/half the host
        ("kimi-k3", "mi355x", "agentic", [8], [1, 8], [0.0, 1.0 * TIB]),
        # GB300's host is 240 GB per GPU: half of it, whole GiB, times the TP; a model that
        # fills a board also tries twice the TP on the NVL72 fabric
        (
            "kimi-k3",
            "gb300",
            "agentic",
            [8, 16],
            [1, 8, 16],
            [0.0, 8 * 111 * 2**30, 16 * 111 * 2**30],
        ),
        # GB200 (186 GB) needs 12 GPUs for Kimi K3: TP16 and TP32 within the rack, where a
        # board-sized TP list called it "does not fit" (plan memory: fits on 16x gb200)
        (
            "kimi-k3",
            "gb200",
            "agentic",
            [16, 32],
            [1, 16, 32],
            [0.0, 16 * 111 * 2**30, 32 * 111 * 2**30],
        ),
        # a small GQA model: the smallest TP that fits and a node; no DCP, no offload on random
        ("llama-3.1-8b", "h100", "random", [1, 8], [1], [0.0]),
        # a GQA model on agentic traffic: offload yes, DCP no (the rule is for MLA)
        ("llama-3.3-70b", "h200", "agentic", [2, 8], [1], [0.0, 2 * 128 * 2**30, 8 * 128 * 2**30]),
    ],
)
def test_candidate_rules(model, device, workload, tp, dcp, offload) -> None:
    got = sweep_of(model, device, workload)
    assert (got["tp"], got["dcp"], got["offload"]) == (tp, dcp, offload)


@pytest.mark.parametrize(
    ("fits", "tried"),
    [
        ([1, 2, 4, 8], [1, 8]),  # a small model: the smallest TP and a board
        ([8], [8]),  # an HGX box that the model fills
        ([2, 4, 8, 16, 32, 64], [2, 8]),  # NVL72, a small model: no wider than a board
        ([8, 16, 32, 64], [8, 16]),  # NVL72, a model that fills a board: twice it too
        ([16, 32, 64], [16, 32]),  # NVL72, weights past one board
        ([32, 64], [32, 64]),
        ([16], [16]),  # nothing wider fits the domain
    ],
)
def test_tp_tried(fits, tried) -> None:
    assert tp_tried(fits) == tried


def test_a_device_that_cannot_hold_the_weights_is_only_pruned() -> None:
    got = sweep_of("kimi-k3", "h200")
    assert got["tp"] == []
    assert got["pruned"]


def test_default_devices_are_the_priced_ones() -> None:
    request = SizeRequest(model="kimi-k3", users=10, slo_interactivity_tok_per_s=50)
    prices = catalog.cost_model(request.cost_model).usd_per_gpu_hour
    names = devices_for(request)
    assert names
    assert set(names) == set(prices) & set(catalog.device_names())


def test_quick_and_demand_shape_the_search() -> None:
    slow = base_space(SizeRequest(model="kimi-k3", users=500, slo_interactivity_tok_per_s=50))
    quick = base_space(
        SizeRequest(model="kimi-k3", users=20, slo_interactivity_tok_per_s=50, quick=True)
    )
    assert slow["concurrency"] == [8, 256]
    assert quick["concurrency"] == [8, 20]
    assert slow["demand_users"] == 500
    assert (slow["seeds"], quick["seeds"]) == (3, 2)
    assert quick["duration_s"] < slow["duration_s"]


@pytest.mark.parametrize(
    ("serving", "present", "absent"),
    [
        ({"tp": 8}, ["--tensor-parallel-size 8", "--max-num-seqs 1024",
                     "--max-num-batched-tokens 16384", "--enable-prefix-caching"],
         ["--decode-context-parallel-size", "--kv-offloading-size"]),
        ({"tp": 8, "dcp": 8, "cpu_offload_bytes": TIB}, ["--decode-context-parallel-size 8",
         "--kv-offloading-size 1024", "--kv-offloading-backend native"], []),
        ({"tp": 4, "dp": 2, "ep": 8, "kv_cache_dtype": "fp8", "max_num_seqs": 64,
          "enable_prefix_caching": False},
         ["--data-parallel-size 2", "--enable-expert-parallel", "--kv-cache-dtype fp8",
          "--max-num-seqs 64", "--no-enable-prefix-caching"], ["--enable-prefix-caching"]),
        ({"tp": 8, "speculative": {"method": "mtp", "num_speculative_tokens": 3,
                                   "acceptance_rate": 0.7}},
         ['--speculative-config {"method": "mtp", "num_speculative_tokens": 3}'], []),
    ],
)  # fmt: skip
def test_vllm_serve_flags(serving, present, absent) -> None:
    scenario = Scenario.model_validate({
        "name": "d", "model": "kimi-k3", "device": "mi355x", "serving": serving,
        "workload": {"kind": "agentic", "sessions": 10, "concurrency": 4},
    })  # fmt: skip
    text = vllm_serve_command(scenario)
    words = shlex.split(text.replace("\\\n", " "))
    assert words[:3] == ["vllm", "serve", "moonshotai/Kimi-K3"]
    flat = " ".join(words)
    for flag in present:
        assert flag in flat, flag
    for flag in absent:
        assert flag not in flat, flag


def _serve(device: str, serving: dict[str, object], **extra: object) -> list[str]:
    """The deploy text's lines: comments as they are, each command as one flat line."""
    scenario = Scenario.model_validate({
        "name": "d", "model": "kimi-k3", "device": device, "serving": serving,
        "workload": {"kind": "agentic", "sessions": 10, "concurrency": 4}, **extra,
    })  # fmt: skip
    text = vllm_serve_command(scenario).replace("\\\n", " ")
    return [ln if ln.startswith("#") else " ".join(shlex.split(ln)) for ln in text.split("\n")]


@pytest.mark.parametrize(
    ("device", "serving", "head", "others"),
    [
        # NVL72 hosts hold 4 GPUs: a TP16 instance is 4 hosts of the multiprocessing backend
        ("gb200", {"tp": 16}, ["--tensor-parallel-size 16", "--distributed-executor-backend mp",
         "--nnodes 4 --node-rank 0 --master-addr <head host IP: fill in>"],
         "on host N (1-3) the same line with --headless --node-rank N"),
        ("gb300", {"tp": 8}, ["--nnodes 2 --node-rank 0"],
         "on the other host the same line with --headless --node-rank 1"),
        # wide EP: 72 DP ranks of TP1, 4 a host
        ("gb300", {"tp": 1, "dp": 72, "ep": 72}, ["--data-parallel-size 72",
         "--data-parallel-size-local 4 --data-parallel-address <head host IP: fill in>"
         " --data-parallel-rpc-port 13345"],
         "on host N (1-17) the same line with --headless --data-parallel-start-rank 4N"),
        # 6 ranks of TP2 on hosts of 4: two a host, three hosts
        ("gb300", {"tp": 2, "dp": 6}, ["--data-parallel-size-local 2"],
         "on host N (1-2) the same line with --headless --data-parallel-start-rank 2N"),
    ],
)  # fmt: skip
def test_an_instance_wider_than_a_host_gets_the_multi_node_flags(
    device, serving, head, others
) -> None:
    note, line = _serve(device, serving)
    assert note.startswith("# one instance spans")
    assert note.endswith(others)
    assert line.startswith("vllm serve moonshotai/Kimi-K3")
    for flags in head:
        assert flags in line, flags


@pytest.mark.parametrize(
    ("device", "serving"),
    [("mi355x", {"tp": 8}), ("h200", {"tp": 4, "dp": 2}), ("gb300", {"tp": 4})],
)
def test_an_instance_on_one_host_is_one_line(device, serving) -> None:
    (line,) = _serve(device, serving)
    assert "--nnodes" not in line
    assert "--data-parallel-address" not in line


def test_a_pool_of_its_own_parallelism_deploys_with_it() -> None:
    lines = _serve("gb300", {"tp": 8}, disaggregation={
        "prefill_replicas": 2, "decode_replicas": 1, "prefill_serving": {"tp": 4},
        "decode_serving": {"tp": 1, "dp": 16, "ep": 16}})  # fmt: skip
    prefill, decode = (
        lines.index("# prefill: 2 replicas of this"),
        lines.index("# decode: 1 replica of this"),
    )
    assert "--tensor-parallel-size 4" in lines[prefill + 1]  # one host: one line
    assert "--data-parallel-size 16" in lines[decode + 2]
    assert "--data-parallel-size-local 4" in lines[decode + 2]
    assert all("NixlConnector" in lines[i] for i in (prefill + 1, decode + 2))


def test_a_small_sizing_end_to_end(tmp_path: Path) -> None:
    request = SizeRequest(model="llama-3.1-8b", users=24, slo_interactivity_tok_per_s=40,
                          devices=["h100", "h200", "d270"], workload="random", isl=1024,
                          osl=128, quick=True, seeds=1)  # fmt: skip
    seen: list[tuple[int, int]] = []
    result = run_size(
        request, tmp_path / "out", progress=lambda d, t: seen.append((d, t)),
        overrides=["duration_s=40", "warmup_s=0", "workload.num_requests=200"],
    )  # fmt: skip
    table = result.table
    assert len(table) >= 1
    assert list(table["rank"]) == list(range(1, len(table) + 1))
    priced = table[table.usd_per_hour.notna()]
    assert priced.usd_per_hour.is_monotonic_increasing
    # d270 has no price in the cost model: after the priced ones, saying so (or not served)
    unpriced = table[table.usd_per_hour.isna()]
    assert list(unpriced.index) == list(range(len(priced), len(table)))
    assert all("no price" in v for v in unpriced.verdict)
    assert "d270" in set(table.device) or any(m.startswith("d270") for m in result.not_served)
    top = table.iloc[0]
    assert top.device.upper() in result.answer
    assert f"${top.usd_per_hour:,.2f}" in result.answer
    assert top.gpus <= top.gpus_bought
    assert top.users_per_deployment <= 24
    assert top.replicas * top.users_per_deployment >= 24
    command = " ".join(shlex.split(result.commands[top.config_id].replace("\\\n", " ")))
    assert f"--tensor-parallel-size {int(top.label.split()[0][2:])}" in command
    assert seen
    assert all(d <= t for d, t in seen)
    out = tmp_path / "out"
    for name in ("size.md", "size.json", "deploy.sh", "report.html", "runs.csv"):
        assert (out / name).is_file(), name
    assert result.answer in (out / "size.md").read_text()


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"users": 0}, "users"),
        ({"slo_interactivity_tok_per_s": -1}, "slo_interactivity_tok_per_s"),
        ({"devices": ["nosuch"]}, "nosuch"),
        ({"workload": "no/such/trace.jsonl"}, "neither a built-in workload"),
        ({"model": "nosuch-model"}, "nosuch-model"),
        ({"cost_model": "nosuch"}, "nosuch"),
    ],
)
def test_bad_requests_are_one_spec_error(fields, fragment) -> None:
    from simulator.specs.loading import parse

    data = {"model": "kimi-k3", "users": 10, "slo_interactivity_tok_per_s": 50, **fields}

    def plan() -> None:
        plan_candidates(base_space(parse(SizeRequest, data, "(arguments)")))

    with pytest.raises(SpecError) as err:
        plan()
    assert fragment in str(err.value)


def test_a_set_sweep_replaces_the_defaults_knob() -> None:
    from simulator.specs.overrides import apply_overrides

    request = SizeRequest(model="kimi-k3", users=500, slo_interactivity_tok_per_s=50,
                          devices=["mi355x"])  # fmt: skip
    data = apply_overrides(
        base_space(request),
        ["sweep.dcp=[8]", "sweep.disaggregation=[null, {prefill_replicas: 1, decode_replicas: 2}]"],
        "(arguments)",
    )
    space, candidates, _ = plan_candidates(data)
    assert {c.knobs["dcp"] for c in candidates} == {8}
    assert {bool(c.knobs["disaggregation"]) for c in candidates} == {False, True}
    assert space.sweep.dcp == [8]


def test_a_trace_path_is_replayed_as_a_closed_loop(tmp_path: Path) -> None:
    trace = tmp_path / "traces" / "mine.jsonl"
    trace.parent.mkdir()
    trace.write_text("")
    request = SizeRequest(model="llama-3.1-8b", users=10, slo_interactivity_tok_per_s=30,
                          workload="traces/mine.jsonl")  # fmt: skip
    workload = base_space(request, base=tmp_path)["workload"]
    assert workload == {"kind": "trace", "path": str(trace), "concurrency": 1}
    # relative to the folder given, not to wherever the process happens to run
    with pytest.raises(SpecError, match="neither a built-in workload"):
        base_space(request, base=tmp_path / "traces")


def test_runs_that_refused_requests_are_said_so() -> None:
    """A point whose requests outgrow max_model_len is judged on the requests it served: the
    runs table keeps the worst seed's refused share and the answer adds a note (plan size on
    130k-token prompts sized a fleet on 62 % of the workload, unsaid)."""
    import pandas as pd

    from simulator.planner.analysis import _refused_share
    from simulator.planner.answer import refused_note

    ran = {"requests_rejected": 10, "requests_finished": 25, "requests_in_flight_at_end": 4,
           "requests_waiting_at_end": 1, "requests_seen": 40}  # fmt: skip
    assert _refused_share(ran) == pytest.approx(0.25)
    # 10 more finished in the warm-up: the share is of the run's requests (it read 10 / 40)
    assert _refused_share({**ran, "requests_seen": 50}) == pytest.approx(0.2)
    assert _refused_share({"requests_finished": 0}) == 0.0
    assert refused_note(pd.DataFrame({"refused_share": [0.0, 0.0]})) is None
    assert refused_note(pd.DataFrame({"other": [1]})) is None
    note = refused_note(pd.DataFrame({"refused_share": [0.0, 0.25, 0.1]}))
    assert note is not None
    assert "2 of 3 simulated points" in note
    assert "up to 25%" in note
    # a small share is not rounded to nothing ("up to 0%" beside a refused_share of 0.005)
    for share, text in ((0.005, "up to 0.5%"), (0.0004, "up to under 0.1%")):
        small = refused_note(pd.DataFrame({"refused_share": [share]}))
        assert small is not None
        assert text in small
