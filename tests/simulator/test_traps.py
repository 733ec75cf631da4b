"""Silent traps: inputs that used to give a wrong answer without a word.

1. a search space's base ``serving:`` knobs were overwritten by the sweep defaults;
2. DCP on a GQA model was accepted beyond ``tp / num_kv_heads`` (vLLM refuses it);
3. requests longer than ``max_model_len`` were simulated (vLLM answers HTTP 400);
4. configurations whose readable labels coincide kept one result; repeated sweep values ran
   twice;
5. ``demand_users`` and ``demand_requests_per_s`` together: the second was ignored;
6. ``plan memory`` said a context beyond the model's fits.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from simulator import catalog
from simulator.deployment import check_deployment
from simulator.memory import plan_memory
from simulator.planner.expand import expand
from simulator.planner.space import SearchSpace, Sweep
from simulator.simulation import simulate
from simulator.specs.loading import SpecError, parse
from simulator.specs.scenario import Scenario
from simulator.specs.serving import ServingConfig
from simulator.workload import Replay, closed_loop, open_loop, poisson_sessions
from simulator.workload.generators import random_sessions
from simulator.workload.request import EMPTY_IDS, Request, Session, SubagentGroup, Turn

SPACE: dict[str, Any] = {
    "name": "traps",
    "model": "llama-3.1-8b",
    "devices": ["h200"],
    "concurrency": [2],
    "workload": {"kind": "random", "input_tokens": 256, "output_tokens": 16,
                 "num_requests": 4, "concurrency": 1},
    "slo": {},
    "search": "grid",  # no SLO: a max_load search needs a target
    "duration_s": 60.0,
    "warmup_s": 0.0,
}  # fmt: skip


def space(**over: Any) -> SearchSpace:
    return SearchSpace.model_validate({**SPACE, **over})


# ----------------------------------------------------------------------------- 1. base serving


def test_base_serving_knobs_are_kept_when_not_swept() -> None:
    base = {"tp": 2, "dcp": 2, "cpu_offload_bytes": 1e11}
    candidates, pruned = expand(space(model="kimi-linear-48b-a3b", serving=base))
    assert not pruned, pruned
    (c,) = candidates
    assert (c.knobs["tp"], c.knobs["dcp"], c.knobs["cpu_offload_bytes"]) == (2, 2, 1e11)
    serving = c.scenarios[0].serving
    assert (serving.tp, serving.dcp, serving.cpu_offload_bytes) == (2, 2, 1e11)
    assert c.config_id.startswith("h200-tp2-dcp2-offload")


def test_a_base_knob_combines_with_other_swept_knobs() -> None:
    candidates, _ = expand(space(serving={"tp": 2, "max_num_seqs": 64}, sweep={"dcp": [1]}))
    assert [(c.knobs["tp"], c.knobs["max_num_seqs"]) for c in candidates] == [(2, 64)]
    assert candidates[0].scenarios[0].serving.max_num_seqs == 64


def test_unset_knobs_still_take_the_sweep_defaults() -> None:
    (c,), _ = expand(space())
    assert (c.knobs["tp"], c.knobs["dcp"], c.knobs["cpu_offload_bytes"]) == (8, 1, 0.0)


def test_a_knob_set_in_the_base_and_swept_alike_is_fine() -> None:
    (c,), _ = expand(space(serving={"tp": 4}, sweep={"tp": [4]}))
    assert c.knobs["tp"] == 4


@pytest.mark.parametrize(
    ("serving", "sweep", "knob"),
    [
        ({"tp": 2}, {"tp": [4, 8]}, "tp"),
        ({"tp": 4}, {"tp": [4, 8]}, "tp"),
        ({"cpu_offload_bytes": 1e11}, {"cpu_offload_bytes": [0.0]}, "cpu_offload_bytes"),
        ({"max_num_seqs": 64}, {"max_num_seqs": [32, 64]}, "max_num_seqs"),
        ({"speculative": {"method": "eagle", "num_speculative_tokens": 2,
                          "acceptance_rate": 0.7}},
         {"speculative": [None]}, "speculative"),
    ],
)  # fmt: skip
def test_a_knob_set_in_the_base_and_swept_differently_is_an_error(
    serving: dict[str, Any], sweep: dict[str, Any], knob: str
) -> None:
    with pytest.raises(SpecError) as info:
        expand(space(serving=serving, sweep=sweep), "space.yaml")
    exc = info.value
    assert (exc.file, exc.field) == ("space.yaml", f"sweep.{knob}")
    assert f"serving.{knob}" in exc.reason
    assert "\n" not in str(exc)


def test_a_space_round_trips_through_json_and_expands_the_same() -> None:
    """The dashboard and ``space.yaml`` hand a space on as its dump: what was given must
    survive, or every default would read as "set in the base" (and conflict)."""
    for s in (space(), space(serving={"tp": 2}, sweep={"dcp": [1]})):
        again = SearchSpace.model_validate_json(s.model_dump_json())
        assert again == s
        assert [c.config_id for c in expand(again)[0]] == [c.config_id for c in expand(s)[0]]


# ----------------------------------------------------------------------------- 2. DCP on GQA

GOOD_DCP = [
    ("llama-3.3-70b", 8, 1),
    ("qwen3-235b-a22b-fp8", 8, 2),  # 4 KV heads: TP8 holds each twice, DCP2 removes that
    ("qwen3.5-397b-a17b", 8, 4),  # 2 KV heads: 8 // 2 = 4
    ("minimax-m3", 8, 2),
    ("deepseek-v3", 8, 8),  # MLA: one latent, replicated on every TP rank -> tp % dcp only
    ("kimi-k3", 8, 8),
]
BAD_DCP = [
    ("llama-3.3-70b", 8, 8),  # 8 KV heads on TP8: nothing replicated to shard by token
    ("llama-3.3-70b", 8, 2),
    ("llama-3.1-8b", 4, 2),
    ("gpt-oss-120b", 8, 2),
    ("qwen3-235b-a22b-fp8", 8, 4),
    ("qwen3.5-397b-a17b", 8, 8),
]


@pytest.mark.parametrize(("model", "tp", "dcp"), GOOD_DCP)
def test_dcp_within_vllm_limits_is_accepted(model: str, tp: int, dcp: int) -> None:
    check_deployment(catalog.model_card(model), ServingConfig(tp=tp, dcp=dcp))


@pytest.mark.parametrize(("model", "tp", "dcp"), BAD_DCP)
def test_dcp_beyond_tp_over_kv_heads_is_refused(model: str, tp: int, dcp: int) -> None:
    card = catalog.model_card(model)
    with pytest.raises(SpecError) as info:
        plan_memory(card, catalog.hardware_profile("h200"), ServingConfig(tp=tp, dcp=dcp), 8192)
    assert info.value.field == "serving.dcp"
    assert f"{card.gqa.num_kv_heads} KV heads" in info.value.reason  # type: ignore[union-attr]


def test_dcp_must_divide_the_query_heads_per_kv_head() -> None:
    """vLLM's third GQA check: (num_heads / num_kv_heads) % dcp == 0."""
    llama = catalog.model_card("llama-3.1-8b")
    assert llama.gqa is not None
    card = llama.model_copy(
        update={"gqa": llama.gqa.model_copy(update={"num_heads": 6, "num_kv_heads": 2})}
    )
    check_deployment(card, ServingConfig(tp=6, dcp=3))
    with pytest.raises(SpecError, match="query heads per KV head"):
        check_deployment(card, ServingConfig(tp=6, dcp=2))


def test_plan_run_refuses_dcp_beyond_the_kv_heads() -> None:
    scenario = Scenario.model_validate(
        {"name": "x", "model": "llama-3.3-70b", "device": "h200", "serving": {"tp": 8, "dcp": 8},
         "workload": {"kind": "random", "input_tokens": 64, "output_tokens": 4,
                      "num_requests": 2, "concurrency": 1}}
    )  # fmt: skip
    with pytest.raises(SpecError) as info:
        simulate(scenario, "s.yaml")
    assert (info.value.file, info.value.field) == ("s.yaml", "serving.dcp")


def test_search_prunes_dcp_beyond_the_kv_heads_with_the_reason() -> None:
    candidates, pruned = expand(space(model="llama-3.3-70b", sweep={"dcp": [1, 2, 8]}))
    assert [c.knobs["dcp"] for c in candidates] == [1]
    assert sorted(p.knobs["dcp"] for p in pruned) == [2, 8]
    assert all("serving.dcp" in p.reason and "KV heads" in p.reason for p in pruned)


# ----------------------------------------------------------------------------- 3/6. max_model_len


def test_plan_memory_never_fits_beyond_the_model_context() -> None:
    card = catalog.model_card("llama-3.3-70b")
    device = catalog.hardware_profile("h200")
    r = plan_memory(card, device, ServingConfig(tp=8), context_tokens=500_000)
    assert not r.fits
    assert "500,000" in r.fits_reason
    assert "131,072" in r.fits_reason
    assert r.max_model_len == 131_072
    assert r.max_context_for_num_seqs <= 131_072
    assert plan_memory(card, device, ServingConfig(tp=8), context_tokens=131_072).fits


def test_a_smaller_max_model_len_caps_what_fits() -> None:
    card = catalog.model_card("llama-3.3-70b")
    device = catalog.hardware_profile("h200")
    s = ServingConfig(tp=8, max_model_len=32_768)
    assert plan_memory(card, device, s, context_tokens=32_768).fits
    r = plan_memory(card, device, s, context_tokens=32_769)
    assert not r.fits
    assert "serving.max_model_len" in r.fits_reason
    assert r.max_context_for_num_seqs == 32_768


def test_max_model_len_beyond_the_card_is_refused() -> None:
    card = catalog.model_card("llama-3.3-70b")
    with pytest.raises(SpecError) as info:
        check_deployment(card, ServingConfig(tp=8, max_model_len=500_000))
    assert info.value.field == "serving.max_model_len"
    assert "131,072" in info.value.reason
    with pytest.raises(SpecError, match="max_model_len"):
        expand(space(model="llama-3.3-70b", serving={"max_model_len": 500_000}), "space.yaml")


def _session(key: str, lengths: list[tuple[int, int]], think_s: float = 1.0) -> Session:
    turns = [Turn(p, o, EMPTY_IDS, 64, think_s if k else 0.0, k * think_s)
             for k, (p, o) in enumerate(lengths)]  # fmt: skip
    return Session(key, 0.0, iter(turns))


class _Rejects:
    def __init__(self) -> None:
        self.seen: list[tuple[float, Request, str]] = []

    def __call__(self, request: Request, t: float, reason: str) -> None:
        self.seen.append((t, request, reason))


def _drive(replay: Replay, service_s: float = 1.0) -> list[tuple[float, Request]]:
    pending = sorted([*replay.initial(), *replay.arrivals()], key=lambda d: d[0])
    served = []
    while pending:
        t, req = pending.pop(0)
        served.append((t, req))
        pending += replay.on_finish(req, t + service_s)
        pending.sort(key=lambda d: (d[0], d[1].request_id))
    return served


@pytest.mark.parametrize(
    "mode",
    [closed_loop(1), open_loop(), poisson_sessions(1.0, 0)],
    ids=["closed", "open", "poisson"],
)
def test_replay_rejects_requests_beyond_max_model_len(mode: Any) -> None:
    """A turn whose prompt + max_tokens exceed max_model_len is answered at once (vLLM's
    HTTP 400), counted as rejected, and never reaches the engine; the session goes on."""
    sessions = [
        _session("a", [(900, 100), (901, 100), (500, 10)]),  # 1,000 fits, 1,001 does not
        _session("b", [(2_000, 1)]),
    ]
    rejects = _Rejects()
    replay = Replay(iter(sessions), mode, max_model_len=1_000, on_reject=rejects)
    served = _drive(replay)
    assert [(r.prompt_tokens, r.turn) for _, r in served] == [(900, 0), (500, 2)]
    assert sorted(r.prompt_tokens for _, r, _ in rejects.seen) == [901, 2_000]
    assert replay.rejected == 2
    assert replay.issued == 4
    assert all("max_model_len 1,000" in why for _, _, why in rejects.seen)
    assert replay.done


def test_replay_rejections_do_not_recurse_per_session() -> None:
    """A closed-loop user whose every request is too long rejects them one after another."""
    sessions = (_session(str(k), [(5_000, 10)]) for k in range(5_000))
    rejects = _Rejects()
    replay = Replay(sessions, closed_loop(1), max_model_len=1_000, on_reject=rejects)
    assert replay.initial() == []
    assert replay.rejected == 5_000
    assert replay.done


def test_replay_rejects_inside_sub_agents() -> None:
    group = SubagentGroup((_session("sub", [(5_000, 1)]), _session("ok", [(10, 1)])))
    parent = Session("p", 0.0, iter([Turn(10, 1, EMPTY_IDS, 64, 0.0, 0.0), group,
                                     Turn(20, 1, EMPTY_IDS, 64, 0.0, 0.0)]))  # fmt: skip
    replay = Replay(iter([parent]), closed_loop(1), max_model_len=1_000, on_reject=_Rejects())
    served = _drive(replay)
    assert [r.prompt_tokens for _, r in served] == [10, 10, 20]
    assert replay.rejected == 1
    assert replay.done


def test_replay_leaves_requests_past_the_horizon_to_the_engine() -> None:
    """Past the run's end the engine never delivers a request; the replay must not count a
    rejection there either."""
    sessions = iter([_session("a", [(5_000, 1)] * 10, think_s=10.0)])
    replay = Replay(sessions, closed_loop(1), max_model_len=1_000, horizon_s=35.0,
                    on_reject=_Rejects())  # fmt: skip
    ((t, _),) = replay.initial()  # turns at 0, 10, 20, 30 rejected; the one at 40 is not
    assert t == 40.0
    assert replay.rejected == 4


def _random_scenario(**serving: Any) -> Scenario:
    return Scenario.model_validate(
        {"name": "long", "model": "llama-3.1-8b", "device": "h100", "serving": serving,
         "workload": {"kind": "random", "input_tokens": 1_000, "output_tokens": 100,
                      "num_requests": 40, "concurrency": 4}}
    )  # fmt: skip


def test_simulate_counts_requests_beyond_max_model_len_as_rejected() -> None:
    result = simulate(_random_scenario(tp=1, max_model_len=1_000))
    lengths = [
        (t.prompt_tokens, t.output_tokens)
        for s in random_sessions(40, 1_000, 100, 0.8, 0)
        for t in s.items
        if isinstance(t, Turn)
    ]
    too_long = sum(1 for p, o in lengths if p + o > 1_000)
    assert 0 < too_long < 40
    s = result.summary
    assert (s.requests_rejected, s.requests_finished) == (too_long, 40 - too_long)
    table = result.request_table()
    rejected = table[table.status == "rejected"]
    assert len(rejected) == too_long
    assert (rejected.prompt_tokens + 100 > 1_000).all()  # max_tokens is at most 100
    assert rejected.reject_reason.str.contains("max_model_len 1,000").all()


def test_simulate_rejects_prompts_beyond_the_card_context() -> None:
    """200k-token prompts on a 131,072-token Llama: the KV cache of an H100 would hold them,
    vLLM would not take them."""
    workload = _random_scenario().workload.model_copy(
        update={"input_tokens": 200_000, "range_ratio": 0.5, "num_requests": 12}
    )
    result = simulate(_random_scenario(tp=1).model_copy(update={"workload": workload}))
    table = result.request_table()
    refused = table[table.status == "rejected"]
    assert 0 < len(refused) < 12
    assert result.summary.requests_finished > 0
    assert (refused.prompt_tokens + 100 > 131_072).all()  # each is one vLLM would refuse
    assert result.memory.kv_capacity_tokens > 200_100  # not the KV cache's rejection
    assert refused.reject_reason.str.contains("max_model_len 131,072").all()
    # every request refused: no answer, one error naming the knob and a request's reason
    every = workload.model_copy(update={"range_ratio": 1.0, "num_requests": 6})
    with pytest.raises(SpecError) as info:
        simulate(_random_scenario(tp=1).model_copy(update={"workload": every}), "s.yaml")
    assert (info.value.file, info.value.field) == ("s.yaml", "serving.max_model_len")
    assert "every request (6) is refused" in info.value.reason
    assert "max_model_len 131,072" in info.value.reason


def test_scenario_max_model_len_beyond_the_card_is_one_error() -> None:
    with pytest.raises(SpecError) as info:
        simulate(_random_scenario(tp=1, max_model_len=200_000), "s.yaml")
    assert (info.value.file, info.value.field) == ("s.yaml", "serving.max_model_len")


# ----------------------------------------------------------------------------- 4. config ids


@pytest.mark.parametrize(
    ("knob", "values"),
    [
        ("speculative", [
            {"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": 0.5},
            {"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": 0.9},
        ]),
        ("cpu_offload_bytes", [1e9, 1.0000001e9]),
    ],
)  # fmt: skip
def test_configurations_with_equal_labels_get_distinct_ids(knob: str, values: list[Any]) -> None:
    candidates, _ = expand(space(sweep={knob: values}))
    assert len(candidates) == 2
    ids = [c.config_id for c in candidates]
    assert len(set(ids)) == 2, ids
    names = [sc.name for c in candidates for sc in c.scenarios]
    assert len(set(names)) == len(names)
    # the readable part stays, a short hash of the knob values tells them apart
    assert ids[0].rsplit("-", 1)[0] == ids[1].rsplit("-", 1)[0]


def test_ids_without_a_collision_are_unchanged() -> None:
    candidates, _ = expand(space(sweep={"max_num_seqs": [32, 64]}))
    assert [c.config_id for c in candidates] == ["h200-tp8-dcp1-seqs32", "h200-tp8-dcp1-seqs64"]


@pytest.mark.parametrize(
    ("knob", "given", "kept"),
    [
        ("tp", [8, 4, 8], [8, 4]),
        ("cpu_offload_bytes", [0.0, 1e11, 0, 1e11], [0.0, 1e11]),
        ("max_num_seqs", [None, 64, None], [None, 64]),
    ],
)
def test_repeated_sweep_values_run_once_with_a_note(
    knob: str, given: list[Any], kept: list[Any]
) -> None:
    assert getattr(Sweep.model_validate({knob: given}), knob) == kept
    candidates, pruned = expand(space(sweep={knob: given}))
    assert [c.knobs[knob] for c in candidates] == kept
    notes = [p for p in pruned if "repeat" in p.reason]
    assert len(notes) == len(given) - len(kept)
    assert all(f"sweep.{knob}" in p.reason for p in notes)


# ----------------------------------------------------------------------------- 5. demand


def test_both_demands_are_an_error() -> None:
    data = {**SPACE, "demand_users": 100, "demand_requests_per_s": 3.0}
    with pytest.raises(ValidationError):
        SearchSpace.model_validate(data)
    with pytest.raises(SpecError) as info:
        parse(SearchSpace, data, "space.yaml")
    assert (info.value.file, info.value.field) == ("space.yaml", "demand_requests_per_s")
    assert "demand_users" in info.value.reason
    assert space(demand_users=100).demand_users == 100
    assert space(demand_requests_per_s=3.0).demand_requests_per_s == 3.0


@settings(max_examples=40)
@given(
    st.lists(st.sampled_from([0.0, 1e9, 1.0000001e9, 2**40]), min_size=1, max_size=4),
    st.lists(st.sampled_from([None, 32, 64, 64]), min_size=1, max_size=3),
    st.lists(
        st.sampled_from([None, 0.5, 0.9, 0.90000001]).map(
            lambda a: (
                None
                if a is None
                else {"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": a}
            )
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_configuration_ids_are_unique_over_generated_spaces(
    offload: list[float], seqs: list[int | None], spec: list[dict[str, Any] | None]
) -> None:
    candidates, _ = expand(
        space(
            devices=["h200", "h100"],
            sweep={"cpu_offload_bytes": offload, "max_num_seqs": seqs, "speculative": spec},
        )
    )
    ids = [c.config_id for c in candidates]
    assert len(ids) == len(set(ids))
    names = [sc.name for c in candidates for sc in c.scenarios]
    assert len(names) == len(set(names))


def test_the_request_table_holds_the_unfinished_and_gives_the_summary_ttft() -> None:
    """A run cut off by its duration: requests.csv left out the requests still running or
    waiting, so the summary's TTFT (which counts them) could not be recomputed from it."""
    import numpy as np

    scenario = _random_scenario(tp=1).model_copy(update={"duration_s": 3.0, "warmup_s": 0.5})
    result = simulate(scenario)
    s = result.summary
    table = result.request_table()
    left = table[~table.status.isin(["finished", "rejected"])]
    assert len(left) == s.requests_in_flight_at_end + s.requests_waiting_at_end > 0
    assert len(table) == s.requests_seen
    w0, w1 = s.window_start_s, s.window_end_s
    seen = table[(table.arrival_s >= w0) & table.first_token_s.between(w0, w1)]
    assert float(np.percentile(seen.ttft_s, 50)) == pytest.approx(s.ttft_s_p50, rel=1e-12)
