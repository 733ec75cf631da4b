"""Prefill/decode disaggregation on the engine's replicas (vllm_mechanics.md 9, NixlConnector
pull mode with ``bidirectional_kv_xfer``).

The first ``prefill_replicas`` replicas form the prefill pool, the rest the decode pool, each
behind its own router. A request prefills on a prefill replica (``max_tokens`` 1, the prompt
less the hybrid backoff), which keeps its blocks until the decode side has read them. Its
result reaches the proxy with the step's token (``output_delay_s`` after the step ends, async
scheduling) and goes to a decode replica, which admits it, reads the KV past its own prefix
hit over the link (``simulator.cache.transfer``; WAITING_FOR_REMOTE_KVS), computes the last
prompt token and decodes. TTFT = prefill queue + prefill + output delay + decode queue + read
+ one decode step + its output delay.

Send-back: the decode replica pins a finished request's blocks for the TTL. The session's next
turn, at its prefill replica's admission, pulls them unless fewer than the threshold tokens
would be reused; when it does not pull (or has a full local hit) its notification frees them
at once, a pull frees them when it lands, and the TTL frees the rest (sessions that ended or
paused longer). Pins and reads are recorded (``PinRecord``, ``TransferRecord``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.cache.prefix import HitLike
from simulator.cache.transfer import (
    Nics,
    TransferCost,
    TransferSizer,
    reserve,
    send_back_tokens,
)
from simulator.records import PinRecord, TransferRecord
from simulator.states import ReqState, Status

if TYPE_CHECKING:
    from simulator.engine import Engine, Router
    from simulator.replica import Replica


@dataclass(frozen=True)
class DisaggSpec:
    """Prefill/decode disaggregation, as the engine needs it: the first ``prefill_replicas`` of
    the parts form the prefill pool, the rest the decode pool."""

    prefill_replicas: int
    sizer: TransferSizer  # bytes per GPU of a read (the same layout on both sides)
    link_bw_bytes_per_s: float
    link_latency_s: float
    backoff_tokens: int = 0  # the prefill side stops this short of the prompt (1 for hybrids)
    send_back: bool = False
    ttl_s: float = 480.0
    recompute_threshold_tokens: int = 64
    # per direction, when the pools differ or descriptors cost time (None: ``sizer`` alone,
    # no descriptor cost): decode reads from prefill ("kv"), prefill from decode ("send_back")
    kv_cost: TransferCost | None = None
    back_cost: TransferCost | None = None

    def cost(self, kind: str) -> TransferCost:
        cost = self.kv_cost if kind == "kv" else self.back_cost
        return cost if cost is not None else TransferCost(self.sizer)


@dataclass(eq=False)
class Pin:
    """A finished decode-side request whose blocks stay pinned for the session's next turn."""

    state: ReqState
    replica: Replica
    tokens: int  # its computed tokens (``remote_num_tokens``)
    start_s: float
    expiry_s: float
    released: bool = False


def continues(prev: ReqState, state: ReqState) -> bool:
    """Does ``state``'s prompt continue ``prev``'s: does it start with all of its blocks?

    A real client appends the output before its next message; the generated workloads draw
    the prompt growth apart from the output length, so a continuation may be shorter than the
    previous prompt + output (then the pull stops at the prompt, as vLLM's ``min`` does). A
    prompt that dropped blocks (compaction, an edited tail) is not a continuation: vLLM would
    pull blocks of another sequence (vllm#43094); here nothing is pulled and the pin runs out.
    """
    n = len(prev.block_hashes)
    ids = state.block_hashes
    return len(ids) >= n and ids[:n] == prev.block_hashes


class PrefillDecode:
    """The prefill and decode pools of a disaggregated engine, the handoff between them, the
    KV reads over the link and the send-back pins (see the module docstring)."""

    def __init__(self, engine: Engine, spec: DisaggSpec) -> None:
        self.engine = engine
        self.env = engine.env
        self.spec = spec
        self.pins: dict[int, Pin] = {}  # session id -> its last turn's pinned blocks
        self.pulls: dict[int, Pin] = {}  # prefill-side request id -> the pin it may pull
        # decode-side request id -> the prefill replica and request holding its KV
        self.sources: dict[int, tuple[Replica, ReqState]] = {}

    def on_finish(self, replica_id: int) -> Callable[[ReqState], None]:
        """The finish callback of replica ``replica_id`` (prefill or decode pool)."""
        return self._prefilled if replica_id < self.spec.prefill_replicas else self._decoded

    def attach(self, replicas: list[Replica], prefill: Router, decode: Router) -> None:
        """The engine built the replicas (with ``on_finish``) and one router per pool."""
        self.replicas = replicas
        self.prefill, self.decode = prefill, decode
        for replica in replicas:
            replica.nics = Nics(self.spec.link_bw_bytes_per_s, self.spec.link_latency_s)
            replica.sched.remote = _Reads(self, replica)

    def _at(self, t_s: float, action: Callable[[], None]) -> None:
        event = self.env.timeout(max(t_s - self.env.now, 0.0))
        event.callbacks.append(lambda _: action())

    # ------------------------------------------------------------------ prefill side

    def arrive(self, client: ReqState) -> None:
        """A client request arrives at the proxy: send it to a prefill replica (``max_tokens``
        1, the prompt less the backoff) with the session's pinned blocks, if any."""
        request = client.request
        prompt = request.prompt_tokens - self.spec.backoff_tokens
        if prompt < 1:  # nothing for the prefill side (a one-token prompt of a hybrid)
            client.keep_blocks = self.spec.send_back
            client.prefill_done_s = client.arrival_s
            self.decode.pick(request).submit(client)
            return
        short = dataclasses.replace(request, prompt_tokens=prompt, output_tokens=1)
        state = ReqState(
            short,
            short.engine_blocks(self.engine.block_tokens),
            arrival_s=client.arrival_s,
            keep_blocks=True,  # until the decode side has read them
            client=client,
        )
        pin = self.pins.pop(request.session_id, None)
        if pin is not None:
            if pin.released:
                client.send_back = "expired"
            elif continues(pin.state, client):
                state.remote_tokens = pin.tokens
                self.pulls[request.request_id] = pin
            else:  # not a continuation (e.g. a compacted context): the pin runs out
                client.send_back = "none"
        self.prefill.pick(short).submit(state)

    def _prefilled(self, state: ReqState) -> None:
        """A prefill-side request finished (or was rejected): hand it to the decode pool when
        its result reaches the proxy (``output_delay_s`` after its step, as a client sees it)."""
        client = state.client
        assert client is not None
        self.pulls.pop(state.req_id, None)
        if state.status is Status.REJECTED:
            client.status = Status.REJECTED
            client.reject_reason = f"prefill replica {state.replica}: {state.reject_reason}"
            client.finish_s = self.env.now
            self.engine.finished(client)
            return
        client.gpu_hit_tokens = state.gpu_hit_tokens
        client.cpu_hit_tokens = state.cpu_hit_tokens
        client.recomputed_tokens = state.recomputed_tokens
        client.prefill_preemptions = state.preemptions
        client.accounted = True  # the decode side's prefix hit saves a transfer, not compute
        client.keep_blocks = self.spec.send_back
        client.prefill_done_s = state.finish_s
        client.remote_tokens = client.prompt_tokens - 1  # the decode side computes the last
        source = self.replicas[state.replica]
        if client.remote_tokens:
            self.sources[client.req_id] = (source, state)
        else:
            source.release(state)
        done_s = state.finish_s if state.finish_s is not None else self.env.now
        self._at(done_s, lambda: self.decode.pick(client.request).submit(client))

    # ------------------------------------------------------------------ decode side

    def _decoded(self, state: ReqState) -> None:
        if state.status is Status.REJECTED:
            source = self.sources.pop(state.req_id, None)
            if source is not None:
                source[0].release(source[1])
        elif state.keep_blocks:
            self._pin(state)
        self.engine.finished(state)

    def _pin(self, state: ReqState) -> None:
        now = self.env.now
        tokens = min(state.computed, state.num_tokens - 1)
        pin = Pin(state, self.replicas[state.replica], tokens, now, now + self.spec.ttl_s)
        old = self.pins.pop(state.request.session_id, None)
        if old is not None:
            self._unpin(old, "replaced")
        self.pins[state.request.session_id] = pin
        self._at(pin.expiry_s, lambda: self._unpin(pin, "expired"))

    def _unpin(self, pin: Pin, outcome: str) -> None:
        if pin.released:
            return
        pin.released = True
        sched = pin.replica.sched
        blocks = sched.held[pin.state.req_id]
        pin.replica.release(pin.state)
        self.engine.recorder.on_pin(
            PinRecord(
                replica=pin.replica.id,
                req_id=pin.state.req_id,
                start_s=pin.start_s,
                end_s=self.env.now,
                blocks=blocks,
                tokens=pin.tokens,
                outcome=outcome,
            )
        )

    # ------------------------------------------------------------------ reads

    def read_tokens(self, req: ReqState, hit: HitLike) -> int:
        """``RemoteKv.tokens``: a prefill-side request pulls a pinned sequence (send-back
        rule); a decode-side one reads what its local hit lacks."""
        if req.client is None:
            return req.remote_tokens if req.remote_tokens > hit.gpu_tokens else 0
        pin = self.pulls.get(req.req_id)
        if pin is None or pin.released:
            return 0
        spec = self.spec
        return send_back_tokens(
            pin.tokens, req.prompt_tokens, hit.gpu_tokens, spec.recompute_threshold_tokens
        )

    def read_started(
        self, reader: Replica, req: ReqState, hit: HitLike, tokens: int, now_s: float
    ) -> float | None:
        """``RemoteKv.admitted``: book the read on both sides' NICs; the source frees its blocks
        when it lands (or at once, by notification, when nothing is read)."""
        start = hit.gpu_tokens
        if req.client is not None:  # send-back pull, decode -> prefill
            client = req.client
            pin = self.pulls.pop(req.req_id, None)
            if pin is None:
                return None
            if pin.released:
                client.send_back = "expired"
                return None
            if not tokens:
                client.send_back = "recompute"
                self._unpin(pin, "declined")
                return None
            client.send_back = "pull"
            client.remote_hit_tokens = tokens - start
            landed = self._read("send_back", pin.replica, reader, req, start, tokens, now_s)
            self._at(landed, lambda: self._unpin(pin, "pulled"))
            return landed
        source = self.sources.pop(req.req_id, None)
        if source is None:
            return None
        writer, written = source
        if not tokens:  # a full local hit: only the notification goes
            writer.release(written)
            return None
        end = req.prompt_tokens - self.spec.backoff_tokens
        landed = self._read("kv", writer, reader, req, start, end, now_s)
        req.kv_ready_s = landed
        self._at(landed, lambda: writer.release(written))
        return landed

    def _read(
        self,
        kind: str,
        writer: Replica,
        reader: Replica,
        req: ReqState,
        start_tokens: int,
        end_tokens: int,
        now_s: float,
    ) -> float:
        assert writer.nics is not None
        assert reader.nics is not None
        cost = self.spec.cost(kind)
        nbytes = cost.sizer.bytes_per_gpu(start_tokens, end_tokens)
        descriptors = cost.descriptors(start_tokens, end_tokens)
        begin, landed = reserve(
            writer.nics,
            reader.nics,
            now_s,
            nbytes,
            cost.send_bytes(nbytes),
            descriptors * cost.descriptor_s,
        )
        self.engine.recorder.on_transfer(
            TransferRecord(
                kind=kind,
                src=writer.id,
                dst=reader.id,
                req_id=req.req_id,
                asked_s=now_s,
                start_s=begin,
                landed_s=landed,
                bytes_per_gpu=nbytes,
                tokens=end_tokens - start_tokens,
                descriptors=descriptors,
            )
        )
        return landed


class _Reads:
    """One replica's ``RemoteKv`` (the scheduler's view of ``PrefillDecode``)."""

    __slots__ = ("pools", "replica")

    def __init__(self, pools: PrefillDecode, replica: Replica) -> None:
        self.pools = pools
        self.replica = replica

    def tokens(self, req: ReqState, hit: HitLike) -> int:
        return self.pools.read_tokens(req, hit)

    def admitted(self, req: ReqState, hit: HitLike, tokens: int, now_s: float) -> float | None:
        return self.pools.read_started(self.replica, req, hit, tokens, now_s)
