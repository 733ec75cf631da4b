"""``plan workload stats``: one streaming pass over a source's requests.

Memory holds a few numbers per request (lengths, think times) and the set of block ids seen,
never the requests. Reuse with an unlimited cache: a prompt block is a hit when its chain id
appeared in an earlier request (ids are chained, so the hits of a prompt are a leading run,
found by binary search). Block reuse = hit blocks / prompt blocks at the source's block size,
where a prompt has ``ceil(prompt_tokens / block_tokens)`` blocks and a partial tail block never
hits (vLLM never caches one). Token reuse = hit blocks x block_tokens / prompt tokens.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from simulator.specs.loading import SpecError
from simulator.workload.replay import IdCounter, session_requests
from simulator.workload.request import BlockIds, Request
from simulator.workload.source import Source

PERCENTILES = (10, 50, 90, 99)


def percentiles(values: Any) -> dict[str, float]:
    """p10/p50/p90/p99 (numpy's linear interpolation) and the mean; NaN when empty."""
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return {f"p{p}": float("nan") for p in PERCENTILES} | {"mean": float("nan")}
    qs = np.percentile(a, PERCENTILES)
    return {f"p{p}": float(q) for p, q in zip(PERCENTILES, qs, strict=True)} | {
        "mean": float(a.mean())
    }


@dataclass
class WorkloadStats:
    """What ``plan workload stats`` prints (``--json``: ``asdict``)."""

    source: str
    kind: str
    requests: int
    sessions: int
    subagent_sessions: int
    span_s: float
    arrival_rate_per_s: float
    prompt_tokens: dict[str, float]
    output_tokens: dict[str, float]
    requests_per_session: dict[str, float] | None
    think_time_s: dict[str, float] | None
    block_tokens: int | None
    prompt_blocks: int
    hit_blocks: int
    block_reuse: float | None
    token_reuse: float | None
    bad_records: int
    bad_reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class BlockSet:
    """A set of 64-bit block ids in one numpy array (open addressing, linear probing).

    16 bytes per id at the 1/2 load limit, where a Python set of ints takes ~70: a million
    agentic requests add ~60 M new ids. Ids are well mixed already, so the low bits are the
    slot. 0 marks an empty slot (an id of 0 is stored as 1).
    """

    def __init__(self, capacity_log2: int = 16) -> None:
        self.table: BlockIds = np.zeros(1 << capacity_log2, dtype=np.uint64)
        self.mask = (1 << capacity_log2) - 1
        self.size = 0

    def __len__(self) -> int:
        return int(np.count_nonzero(self.table))

    def __contains__(self, block_id: int) -> bool:
        x = block_id or 1
        i = x & self.mask
        table = self.table
        while True:
            v = table.item(i)
            if v == x:
                return True
            if v == 0:
                return False
            i = (i + 1) & self.mask

    def add_many(self, ids: BlockIds) -> None:
        if 2 * (self.size + len(ids)) > len(self.table):
            self.size = len(self)  # the running count overcounts duplicates within a batch
            if 2 * (self.size + len(ids)) > len(self.table):
                self._grow(self.size + len(ids))
        pending = np.where(ids == 0, np.uint64(1), ids)
        slots = (pending & np.uint64(self.mask)).astype(np.int64)
        table = self.table
        cur = table[slots]
        empty = cur == 0
        # Ids racing for one empty slot: one of the writes lands, the others probe on.
        table[slots[empty]] = pending[empty]
        cur = table[slots]
        landed = empty & (cur == pending)
        self.size += int(np.count_nonzero(landed))
        left = ~landed & (cur != pending)
        for x, i in zip(pending[left].tolist(), slots[left].tolist(), strict=True):
            while True:  # the few collisions: linear probing, one slot at a time
                v = table.item(i)
                if v == x:
                    break
                if v == 0:
                    table[i] = x
                    self.size += 1
                    break
                i = (i + 1) & self.mask

    def _grow(self, need: int) -> None:
        old = self.table[self.table != 0]
        del self.table  # free it before the larger table exists
        bits = max(int(np.ceil(np.log2(max(need, 1) * 2))), self.mask.bit_length() + 1)
        self.table = np.zeros(1 << bits, dtype=np.uint64)
        self.mask = (1 << bits) - 1
        self.size = 0
        for start in range(0, len(old), 1 << 20):  # chunks: bounded temporaries
            self.add_many(old[start : start + (1 << 20)])


# Distinct block ids the reuse count holds: the table takes 16 bytes an id, 2 GiB at 2^27
# (10,000 agentic sessions hold ~50 M; 10^6 of them filled 24 GB and were killed).
MAX_REUSE_IDS = 1 << 27


class TooManyBlocksError(Exception):
    """The reuse count would hold more than ``ReuseCounter.max_ids`` distinct block ids."""


class ReuseCounter:
    """Unlimited prefix cache over chain ids: hits of each prompt, then remember its blocks
    (at most ``MAX_REUSE_IDS`` distinct ids, then ``TooManyBlocksError``)."""

    def __init__(self) -> None:
        self.seen = BlockSet()
        self.max_ids = MAX_REUSE_IDS

    def hits(self, ids: BlockIds) -> int:
        """Leading blocks of ``ids`` seen before (binary search: chained ids make the seen
        blocks of a prompt a leading run); the prompt's blocks are then remembered."""
        lo, hi = 0, len(ids)  # the answer k: ids[:k] seen, ids[k] not
        seen = self.seen
        if hi == 0 or ids.item(0) not in seen:
            hi = 0
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if ids.item(mid - 1) in seen:
                lo = mid
            else:
                hi = mid - 1
        if lo < len(ids):
            if seen.size + len(ids) - lo > self.max_ids:
                raise TooManyBlocksError
            seen.add_many(ids[lo:])
        return lo


def _requests(source: Source, limit: int | None) -> Iterator[tuple[int, float, Request]]:
    """(top-level session index, session start, request) in session order."""
    ids = IdCounter()
    n = 0
    for k, session in enumerate(source.open()):
        for req in session_requests(session, ids):
            if limit is not None and n >= limit:
                return
            n += 1
            yield k, session.start_s, req


def workload_stats(source: Source, limit: int | None = None) -> WorkloadStats:
    prompt, output = array("q"), array("q")
    think = array("d")
    per_session: list[int] = []
    subagents: set[int] = set()
    first_s, last_s = float("inf"), float("-inf")
    reuse = ReuseCounter()
    hit_blocks = prompt_blocks = hit_tokens = 0
    block_tokens: set[int] = set()
    current = -1
    for k, start_s, req in _requests(source, limit):
        if k != current:
            per_session.append(0)
            current = k
        per_session[-1] += 1
        prompt.append(req.prompt_tokens)
        output.append(req.output_tokens)
        think.append(req.think_time_s)
        if req.parent_session_id is not None:
            subagents.add(req.session_id)
        t = start_s + req.arrival_s
        first_s, last_s = min(first_s, t), max(last_s, t)
        if source.has_prefix:
            block_tokens.add(req.block_tokens)
            try:
                h = reuse.hits(req.block_hashes)
            except TooManyBlocksError:
                raise SpecError(
                    source.label, "blocks", f"more than {reuse.max_ids:,} distinct prompt blocks"
                    f" by request {len(prompt):,}: the reuse count keeps every one (16 bytes"
                    " each); read fewer with --limit N",
                ) from None  # fmt: skip
            hit_blocks += h
            hit_tokens += h * req.block_tokens
            prompt_blocks += -(-req.prompt_tokens // req.block_tokens)
    n = len(prompt)
    span = max(0.0, last_s - first_s) if n else 0.0
    total_prompt = int(np.sum(np.asarray(prompt, dtype=np.int64))) if n else 0
    return WorkloadStats(
        source=source.label,
        kind=source.kind,
        requests=n,
        sessions=len(per_session),
        subagent_sessions=len(subagents),
        span_s=span,
        arrival_rate_per_s=n / span if span > 0 else float("nan"),
        prompt_tokens=percentiles(prompt),
        output_tokens=percentiles(output),
        requests_per_session=percentiles(per_session) if source.has_sessions else None,
        think_time_s=percentiles(think) if source.has_sessions else None,
        block_tokens=(block_tokens.pop() if len(block_tokens) == 1 else None),
        prompt_blocks=prompt_blocks,
        hit_blocks=hit_blocks,
        block_reuse=hit_blocks / prompt_blocks if source.has_prefix and prompt_blocks else None,
        token_reuse=hit_tokens / total_prompt if source.has_prefix and total_prompt else None,
        bad_records=source.bad.count,
        bad_reasons=list(source.bad.reasons),
    )
