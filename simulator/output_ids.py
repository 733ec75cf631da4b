"""Provisional ids of the blocks a request's output fills, and when they can be made late.

A prompt's full blocks come with chain ids (the workload's); the blocks its output fills get a
provisional id, unique to (request, block), under which they are cached like any block: a
multi-turn session's next turn renames them to its chain ids (``KVCacheManager.rename``), a
preempted request finds them again. ``lazy_output_ids`` says when they may be made only when
the request's blocks are freed (``Scheduler.lazy_ids``).
"""

from __future__ import annotations

from simulator.workload.request import scope_key

_MASK64 = (1 << 64) - 1
_OUTPUT_SALT = scope_key("output")  # keeps provisional ids apart from every chain id's stream


def lazy_output_ids(prefix_caching: bool, cpu_tier: bool, state_groups: int, disagg: bool) -> bool:
    """Whether output ids can wait until a request's blocks are freed with the same answer.

    A provisional id is unique to its request, so until the request frees its blocks (they
    hold a reference: never evicted) nobody can hit them; caching a block earlier or at the
    free puts it at the same place in the free queue. That holds unless something reads the
    ids while the request runs: a CPU tier (offloads blocks as they fill, in order), recurrent
    state (checkpoint pages keyed by block ids are freed and cached mid-request) or
    disaggregation (the other pool reads a finished request's blocks). Without prefix caching
    nothing is cached at all: the ids are never read (a commit only counts tokens)."""
    if disagg or state_groups:
        return False
    return not prefix_caching or not cpu_tier


def output_block_id(req_id: int, index: int) -> int:
    """A provisional 64-bit id for a block filled by a request's output (not a chain id):
    the splitmix64 finaliser of (salt, request, block index), in plain integer arithmetic (a
    fraction of a microsecond; a blake2b digest per block was a third of the engine loop on
    long outputs). Distinct (request, index) pairs collide with probability ~2**-64."""
    x = (_OUTPUT_SALT + req_id * 0x9E3779B97F4A7C15 + index * 0xD1B54A32D192ED03) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)
