"""A scenario, end to end: build the replicas from the specs, replay the workload, summarise."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from simulator import catalog, lockstep
from simulator.cost.latency import LatencyModels
from simulator.cost.shapes import CATEGORIES
from simulator.cost.step import StepCostModel
from simulator.deployment import batch_limits, effective_max_model_len
from simulator.engine import Engine
from simulator.gc_pause import full_collections_paused
from simulator.kv_layout import kv_layout
from simulator.measured.summary import describe
from simulator.memory import MemoryReport, plan_memory
from simulator.metrics import Summary, summarize
from simulator.output_ids import lazy_output_ids
from simulator.pd_pools import disaggregation_spec as disaggregation_spec
from simulator.pd_pools import load_bytes_with_store, pool_plans, remote_store
from simulator.records import Pools, Recorder
from simulator.replica import ReplicaParts
from simulator.scheduler import Scheduler
from simulator.served import check_measurable, check_served
from simulator.specs.loading import SpecError
from simulator.specs.model import ModelCard
from simulator.specs.scenario import Scenario, TraceWorkload
from simulator.specs.serving import ServingConfig
from simulator.states import ReqState, Status
from simulator.workload import build_replay

if TYPE_CHECKING:
    import pandas as pd

    from simulator.cache.prefix import HitLike
    from simulator.cache.remote_tier import RemoteTier


@dataclass
class SimResult:
    scenario: Scenario
    summary: Summary
    recorder: Recorder
    memory: MemoryReport  # a decode replica's when disaggregated
    wall_s: float
    prefill_memory: MemoryReport | None = None  # disaggregated: a prefill replica's
    # where the op latencies came from and the stated op error (simulator.measured.summary)
    latency: dict[str, Any] = field(default_factory=dict)
    # trace records skipped as malformed (``skip_bad``): how many, and the first reasons
    skipped_records: int = 0
    skipped_reasons: list[str] = field(default_factory=list)

    def request_table(self) -> pd.DataFrame:
        import pandas as pd

        disagg = self.scenario.disaggregation is not None
        rows = [
            {
                "request_id": r.req_id,
                "session_id": r.request.session_id,
                "turn": r.request.turn,
                "status": r.status.value,
                "arrival_s": r.arrival_s,
                "first_token_s": r.first_token_s,
                "finish_s": r.finish_s,
                "ttft_s": None if r.first_token_s is None else r.first_token_s - r.arrival_s,
                "e2e_s": None if r.finish_s is None else r.finish_s - r.arrival_s,
                "prompt_tokens": r.prompt_tokens,
                "output_tokens": r.generated,
                "gpu_hit_tokens": r.gpu_hit_tokens,
                "cpu_hit_tokens": r.cpu_hit_tokens,
                "computed_prompt_tokens": r.prompt_tokens
                - r.gpu_hit_tokens
                - r.cpu_hit_tokens
                - r.remote_hit_tokens,
                "recomputed_tokens": r.recomputed_tokens,
                "preemptions": r.preemptions,
                "reject_reason": r.reject_reason,
                **(
                    {
                        "remote_hit_tokens": r.remote_hit_tokens,
                        "send_back": r.send_back,
                        "prefill_preemptions": r.prefill_preemptions,
                        "prefill_done_s": r.prefill_done_s,
                        "kv_ready_s": r.kv_ready_s,
                    }
                    if disagg
                    else {}
                ),
            }
            # the unfinished too (status waiting / loading / running): the summary's TTFT
            # counts those whose first token came inside the window
            for r in (*self.recorder.requests, *self.recorder.unfinished)
        ]
        return pd.DataFrame(rows)

    def transfer_table(self) -> pd.DataFrame:
        """KV reads between replicas (disaggregated runs; empty otherwise)."""
        import pandas as pd

        return pd.DataFrame([dataclasses.asdict(t) for t in self.recorder.transfers])

    def pin_table(self) -> pd.DataFrame:
        """Send-back pins and how they ended (disaggregated runs; empty otherwise)."""
        import pandas as pd

        return pd.DataFrame([dataclasses.asdict(p) for p in self.recorder.pins])

    def step_table(self) -> pd.DataFrame:
        import pandas as pd

        d = self.scenario.disaggregation
        prefill_n = 0 if d is None else d.engine_replicas(self.scenario.serving, "prefill")
        return pd.DataFrame(
            [
                {
                    "replica": s.replica,
                    **(
                        {"pool": "prefill" if s.replica < prefill_n else "decode"}
                        if d is not None
                        else {}
                    ),
                    "start_s": s.start_s,
                    "step_s": s.step_s,
                    "steps": s.steps,
                    "decodes": s.decodes,
                    "prefill_tokens": s.prefill_tokens,
                    "kv_blocks_used": s.kv_blocks_used,
                    **({"kv_blocks_held": s.kv_blocks_held} if d is not None else {}),
                    **{
                        f"{k}_s": v * s.steps
                        for k, v in zip(CATEGORIES, s.breakdown_s, strict=True)
                    },
                }
                for s in self.recorder.steps
            ]
        )


def acceptance_rate(serving: ServingConfig) -> float | None:
    """i.i.d. per-draft acceptance a; from a mean acceptance length L by solving
    (1 - a^(K+1)) / (1 - a) = L (bisection: the left side grows with a)."""
    spec = serving.speculative
    if spec is None:
        return None
    if spec.acceptance_rate is not None:
        return spec.acceptance_rate
    assert spec.mean_acceptance_length is not None
    k, target = spec.num_speculative_tokens, spec.mean_acceptance_length
    lo, hi = 0.0, 1.0 - 1e-12
    for _ in range(100):
        a = (lo + hi) / 2
        length = sum(a**i for i in range(k + 1))
        lo, hi = (a, hi) if length < target else (lo, a)
    return (lo + hi) / 2


def _replica_parts(
    card: ModelCard,
    serving: ServingConfig,
    memory: MemoryReport,
    cost: StepCostModel,
    disaggregated: bool = False,
    store: RemoteTier | None = None,
) -> ReplicaParts:
    from simulator.cache import CacheConfig, KVCacheManager

    device = cost.device
    layout = kv_layout(card, serving)
    per_gpu = layout.bytes_per_block
    cpu_blocks = int(serving.cpu_offload_bytes // (per_gpu * serving.gpus_per_replica))
    config = CacheConfig.from_layout(
        layout, serving, memory.num_blocks, cpu_blocks, serving.hybrid_store_attention_remainder
    )
    cache = KVCacheManager(config)
    if not config.prefix_caching:
        cache.count_only()  # nothing is ever cached, so nothing is found: counts suffice
    else:
        cache.defer_identities()  # counts until a block is cached under a real id
    if store is not None:
        cache.attach_store(store)
    block_tokens = layout.block_size_tokens * serving.dcp
    tokens_per_block, seqs = batch_limits(device, serving)
    state_blocks = memory.state_pages_per_seq
    full_groups = max(layout.count("full"), 1)
    max_tokens = max(memory.num_blocks - state_blocks, 0) // full_groups * block_tokens
    scheduler = Scheduler(
        cache,
        max_num_batched_tokens=tokens_per_block,
        max_num_seqs=seqs,
        block_tokens=block_tokens,
        hybrid=card.is_hybrid,
        max_request_tokens=max_tokens,
        num_speculative_tokens=serving.num_speculative_tokens,
    )
    tiers = cache.cpu is not None or cache.store is not None
    scheduler.lazy_ids = lazy_output_ids(
        config.prefix_caching, tiers, config.state_groups, disaggregated
    )
    if lockstep.applies(scheduler, cost.window, cost.sparse_span):
        edge = 0 if scheduler.lazy_ids else block_tokens  # commits that matter: block edges
        scheduler.lockstep = lockstep.Lockstep(cost.window, cost.sparse_span, edge)
    load_bytes: Callable[[HitLike], float] = cache.load_bytes  # type: ignore[assignment]
    if cache.store is not None:
        load_bytes = load_bytes_with_store(load_bytes, cache.store, device.host_link)
    return ReplicaParts(
        scheduler=scheduler,
        cost=cost,
        block_tokens=block_tokens,
        load_bytes=load_bytes,
        host_bw_bytes_per_s=device.host_link.bw_bytes_per_s,
        host_latency_s=device.host_link.latency_s,
        blocks_used=lambda: cache.pool.num_used,
    )


W = TypeVar("W")


def resolve_workload(workload: W, base_dir: str | Path) -> W:
    """``workload`` with a relative trace path made absolute against ``base_dir`` (the folder
    of the scenario or search-space file that names it), so that it reads the same file from
    any current folder and in any worker process."""
    if isinstance(workload, TraceWorkload):
        path = Path(workload.path).expanduser()
        if not path.is_absolute():
            path = Path(base_dir).resolve() / path
        return workload.model_copy(update={"path": str(path)})
    return workload


def check_workload_files(workload: Any) -> None:
    """Everything the workload's replay will read, checked before it starts (a trace file or
    a folder of traces: regular files, intact gzip streams, UTF-8): see
    :func:`simulator.workload.traces.check_trace`."""
    from simulator.workload.traces import check_trace

    if isinstance(workload, TraceWorkload):
        check_trace(workload.path, workload.format)


def simulate(
    scenario: Scenario,
    source: str | Path = "(scenario)",
    base_dir: str | Path = ".",
    progress: Callable[[float, int], None] | None = None,
) -> SimResult:
    """Run ``scenario``; ``source`` names its file in error messages.

    ``progress(simulated_s, requests_done)`` is called when a request finishes and at least
    every ``engine.PROGRESS_EVERY_S`` of wall time while steps run; an exception it raises
    ends the run and propagates (how the dashboard's Stop button stops one)."""
    start = time.perf_counter()
    # the trace, relative to the scenario's folder, checked whole before anything runs
    workload = resolve_workload(scenario.workload, base_dir)
    check_workload_files(workload)
    try:
        card = catalog.model_card(scenario.model)
        device = catalog.hardware_profile(scenario.device)
    except SpecError as exc:
        if exc.file != "(arguments)":
            raise
        raise SpecError(source, exc.field, exc.reason) from None
    serving = scenario.serving
    devices = [catalog.hardware_profile(n) for n in catalog.device_names()]
    d = scenario.disaggregation
    memory: MemoryReport | None = None
    if d is None or not d.per_pool:  # per-pool parallelism: each pool is checked on its own
        try:
            memory = plan_memory(card, device, serving, context_tokens=1, devices=devices)
        except SpecError as exc:
            raise SpecError(source, exc.field, exc.reason) from None
        if memory.num_blocks <= memory.blocks_per_seq:
            reason = f"{card.name} on {device.name}: {memory.fits_reason}"
            raise SpecError(source, "serving", reason)
    latency = LatencyModels.for_device(device)
    if latency.tables is not None:
        latency.tables.reset_counts()

    # one step-cost model per serving config, shared by its replicas: it holds no replica
    # state, only its pricing templates (DP16 makes 16x fewer full pricings)
    costs: dict[int, StepCostModel] = {}  # by id: the pools' configs live through the run

    def replica(
        serving: ServingConfig, memory: MemoryReport, store: RemoteTier | None = None
    ) -> ReplicaParts:
        cost = costs.get(id(serving))
        if cost is None:
            seqs = batch_limits(device, serving)[1]
            cost = costs[id(serving)] = StepCostModel(card, device, serving, latency, seqs)
        return _replica_parts(
            card, serving, memory, cost, scenario.disaggregation is not None, store
        )

    prefill_memory = pools = spec = None
    if d is None:
        assert memory is not None
        store = remote_store(card, device, scenario, serving)
        parts = [replica(serving, memory, store) for _ in range(serving.dp)]
    else:
        p_plan, d_plan = pool_plans(card, device, scenario, devices, str(source), memory)
        memory, prefill_memory = d_plan.memory, p_plan.memory
        # the store sits behind the prefill pool's prefix cache (as the host tier)
        store = remote_store(card, device, scenario, p_plan.serving)
        parts = [replica(p_plan.serving, prefill_memory, store) for _ in range(p_plan.replicas)]
        parts += [replica(d_plan.serving, memory) for _ in range(d_plan.replicas)]
        spec = disaggregation_spec(card, scenario, device)
        pools = Pools(
            p_plan.replicas,
            d_plan.replicas,
            d_plan.serving.gpus_per_replica,
            memory.num_blocks,
            prefill_gpus_per_replica=p_plan.serving.gpus_per_replica if d.per_pool else None,
            prefill_num_blocks=prefill_memory.num_blocks if d.per_pool else None,
        )
    # vLLM refuses a request whose prompt + max_tokens exceed max_model_len (HTTP 400) before
    # its engine sees it: the replay refuses it at its arrival and the engine's recorder
    # holds it as rejected, with the reason (the scheduler's own rejection is for the cache)
    replay = build_replay(
        workload,
        scenario.seed,
        base_dir,
        max_model_len=effective_max_model_len(card, serving),
        horizon_s=scenario.duration_s,
    )
    for part in parts:
        part.scheduler.sink_finished = part.scheduler.lazy_ids and replay.single_turn
    engine = Engine(
        replay,
        parts,
        router=scenario.router,
        seed=scenario.seed,
        acceptance_rate=acceptance_rate(serving),
        duration_s=scenario.duration_s,
        progress=progress,
        disaggregation=spec,
    )
    replay.on_reject = lambda request, t, reason: engine.recorder.on_done(
        ReqState(request, (), t, status=Status.REJECTED, finish_s=t, reject_reason=reason)
    )
    with full_collections_paused():  # the run and its summary walk every record: gc_pause.py
        recorder = engine.run()
        summary = summarize(
            recorder, scenario.num_gpus, scenario.warmup_s, scenario.duration_s, pools
        )
    check_served(
        recorder, summary, workload, replay, scenario.duration_s, source, scenario.warmup_s
    )
    check_measurable(summary, scenario.slo, source)
    wall_s = time.perf_counter() - start
    bad = replay.bad
    return SimResult(
        scenario, summary, recorder, memory, wall_s, prefill_memory, describe(latency),
        bad.count if bad is not None else 0, list(bad.reasons) if bad is not None else [],
    )  # fmt: skip


def slo_met(scenario: Scenario, summary: Summary) -> bool | None:
    """Whether the run meets the scenario's SLO (None: the scenario gives none). A saturated
    run does not: its percentiles are of the few requests served while the queue grew (a
    TTFT target read "met" with nothing finished), as the search's verdict needs no
    saturated seed."""
    met = scenario.slo.met(summary.interactivity_tok_per_s_p90, summary.ttft_s_p90)
    return met and not summary.saturated if met is not None else None


def tokens_per_dollar(scenario: Scenario, tok_per_s_per_gpu: float) -> float | None:
    """throughput per GPU x 3600 / (USD per GPU-hour) under the scenario's cost model; None
    when that cost model does not price the device."""
    model = catalog.cost_model(scenario.cost_model)
    device = catalog.hardware_profile(scenario.device).name
    if device not in model.usd_per_gpu_hour:
        return None
    return tok_per_s_per_gpu * 3600 / model.price(device)
