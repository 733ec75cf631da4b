"""What a run records: append-only rows the engine writes and ``simulator.metrics`` reads.

No arithmetic here: the engine loop only appends (``Recorder``); the window and its figures
are computed after the run (``simulator.window``, ``simulator.metrics.summarize``).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from simulator.states import ReqState


@dataclass(slots=True)
class StepRecord:
    replica: int
    start_s: float
    step_s: float
    steps: int  # > 1 when identical decode steps were fast-forwarded together
    decodes: int
    prefill_tokens: int
    kv_blocks_used: int
    breakdown_s: tuple[float, ...]  # seconds by category, in ``cost.shapes.CATEGORIES`` order
    kv_blocks_held: int = 0  # of the used: blocks finished requests keep (disaggregation)
    prompt_computed: int = 0  # prompt tokens computed for the first time by their request
    waiting: int = 0  # requests this step left in the waiting queue (not admitted)


@dataclass(slots=True)
class HitRecord:
    """Prompt tokens a request held when it was admitted (its prefix-cache hit), by tier."""

    replica: int
    t_s: float
    gpu_tokens: int
    cpu_tokens: int
    remote_tokens: int  # pulled from the other pool (send-back)
    store_tokens: int = 0  # of the CPU-tier tokens, those loaded from the remote KV store


@dataclass(slots=True)
class OpenStep:
    """A step (or fast-forwarded run of ``steps`` decode steps) still running when the run
    stopped at its duration: its prompt tokens count pro rata, and the tokens of a
    fast-forwarded run's steps that had reached the client count as emitted."""

    replica: int
    start_s: float
    step_s: float  # one step
    steps: int
    prompt_computed: int
    waiting: int
    decodes: list[ReqState]  # a fast-forwarded run's requests (one token per step each)
    output_delay_s: float


@dataclass(slots=True)
class TransferRecord:
    """One KV read between replicas (disaggregation)."""

    kind: str  # "kv": prefill -> decode; "send_back": decode -> prefill (the next turn)
    src: int
    dst: int
    req_id: int
    asked_s: float  # the reader admitted the request
    start_s: float  # both NICs free
    landed_s: float
    bytes_per_gpu: float
    tokens: int
    descriptors: int = 0  # NIXL descriptors one reader rank posted


@dataclass(slots=True)
class PinRecord:
    """Blocks a finished decode-side request kept for send-back, and how the pin ended."""

    replica: int
    req_id: int
    start_s: float
    end_s: float
    blocks: int
    tokens: int
    outcome: str  # "pulled", "declined" (the next turn recomputed), "expired", "replaced"


@dataclass
class Recorder:
    """Append-only rows; no arithmetic in the engine loop."""

    steps: list[StepRecord] = field(default_factory=list)
    requests: list[ReqState] = field(default_factory=list)  # finished or rejected
    transfers: list[TransferRecord] = field(default_factory=list)
    pins: list[PinRecord] = field(default_factory=list)
    hits: list[HitRecord] = field(default_factory=list)
    # set by the engine when the run stops
    end_s: float | None = None  # simulated time the run stopped
    workload_ended: bool = False  # no request outstanding and none to come
    speculative: bool = False  # a speculative verify's tokens reach the client together
    unfinished: list[ReqState] = field(default_factory=list)  # client requests in the system
    waiting_at_end: int = 0  # of those, in a waiting queue (never admitted, or preempted)
    open_steps: list[OpenStep] = field(default_factory=list)  # one per replica still busy
    # the API servers' busy spans, one per request with prompt work to do, flat (start, end,
    # start, end, ...): 16 bytes a request where a list of tuples took ~110
    frontend_busy: array[float] = field(default_factory=lambda: array("d"))
    frontends: int = 1

    def frontend_spans(self) -> list[tuple[float, float]]:
        """``frontend_busy`` as (start, end) pairs."""
        b = self.frontend_busy
        return [(b[i], b[i + 1]) for i in range(0, len(b), 2)]

    def on_step(self, row: StepRecord) -> None:
        self.steps.append(row)

    def on_done(self, req: ReqState) -> None:
        self.requests.append(req)

    def on_transfer(self, row: TransferRecord) -> None:
        self.transfers.append(row)

    def on_pin(self, row: PinRecord) -> None:
        self.pins.append(row)

    def on_hit(self, row: HitRecord) -> None:
        self.hits.append(row)


@dataclass(frozen=True, slots=True)
class Pools:
    """A disaggregated deployment: replicas ``0 .. prefill_replicas-1`` prefill, the rest
    decode, ``gpus_per_replica`` GPUs and ``num_blocks`` KV blocks each."""

    prefill_replicas: int
    decode_replicas: int
    gpus_per_replica: int
    num_blocks: int
    # the prefill pool's, when the pools have their own parallelism (None: as the decode's)
    prefill_gpus_per_replica: int | None = None
    prefill_num_blocks: int | None = None
