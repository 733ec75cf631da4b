"""Built-in, seeded session generators: agentic coding, chat, InferenceX random prompts.

Every random draw comes from ``np.random.Generator``s seeded by (seed, session index), and
each session's block ids are scoped by (generator, seed, session index): same seed, same
workload, whatever order a replay consumes the sessions in.

Agentic coding (``agentic_sessions``), fitted to the 710 WEKA Claude Code traces (tables,
source and date in ``fitted.py``; refit with ``benchmarks/workload_fit.py``). A session:
- is *fresh* (55 %: first prompt below 40k tokens = system + tools + first message) or
  *resumed* (a conversation continued from a large context);
- draws its number of turns, first prompt and total prompt growth together (a Gaussian copula
  with the traces' Spearman correlations, e.g. long sessions grow more);
- spreads that growth over its turns in per-turn steps shaped like the traces' (median 655,
  mean 1.8k tokens: the previous output, tool results, the next message): each prompt is the
  previous prompt plus new tokens, so it re-reads the previous prompt as a cached prefix;
- auto-compacts when its prompt passes the session's threshold (200k-context models: the
  traces' compaction points, ~150k; 1M-context sessions, 19 %: near the largest prompt seen):
  the system + tools prefix stays cached, the rest becomes a summary of the traces' size;
- occasionally (6 % of turns) loses the last blocks of its cached prefix (an edited or
  stripped tail: those blocks miss);
- draws output lengths and think times (whole seconds) i.i.d. from the traces' tables; the
  first turn has no think time.
Prompt lengths are then passed through a monotone calibration map (model quantiles -> trace
quantiles) so that the per-request prompt distribution matches the traces'; a growing prompt
still grows. Result (2,000 sessions vs the traces): every prompt, output, think-time and
turns-per-session percentile within 10 %, block reuse 96.6 % (traces 96.3 %). Sub-agents
(1.4 % of the traces' requests) are not generated.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import ceil
from typing import Any

import numpy as np

from simulator.workload.fitted import AgenticParams, ChatParams
from simulator.workload.request import (
    EMPTY_IDS,
    BlockIds,
    ChainedIds,
    Session,
    Turn,
    content_keys,
    scope_key,
)

AGENTIC_BLOCK_TOKENS = 64


class _Context:
    """A session's context as block segments ``(first block, version)``: a block's content
    key depends on its position and its segment's version. The first ``shared_blocks`` blocks
    can come from a scope shared by all sessions (a system prompt). Chain ids are extended
    incrementally: a turn that appends blocks costs only the new blocks."""

    def __init__(self, scope: int, shared_scope: int = 0, shared_blocks: int = 0) -> None:
        self.scope = scope
        self.shared_scope = shared_scope
        self.shared_blocks = shared_blocks
        self.segments: list[tuple[int, int]] = [(0, 0)]
        self.version = 0
        self._chain = ChainedIds()

    def rewrite_from(self, block: int) -> None:
        """Blocks from ``block`` on get new content (earlier segments are kept)."""
        self.version += 1
        self.segments = [s for s in self.segments if s[0] < block] + [(block, self.version)]
        self._chain.cut(block)

    def _keys(self, start: int, end: int) -> BlockIds:
        parts = []
        bounds = [s[0] for s in self.segments[1:]] + [end]
        for (first, version), stop in zip(self.segments, bounds, strict=True):
            lo, hi = max(first, start), min(stop, end)
            if lo < hi:
                pos = np.arange(lo, hi, dtype=np.int64)
                parts.append(content_keys(scope_key(self.scope, version), pos))
        keys = np.concatenate(parts)
        k = min(self.shared_blocks, end)
        if k > start:
            keys[: k - start] = content_keys(self.shared_scope, np.arange(start, k))
        return keys

    def ids(self, n_blocks: int) -> BlockIds:
        have = len(self._chain.ids)
        if n_blocks > have:
            self._chain.extend(self._keys(have, n_blocks))
        return self._chain.ids[:n_blocks]


def _correlated_uniforms(rng: np.random.Generator, rho: tuple[float, float, float]) -> Any:
    """Three U(0,1) with the given Spearman correlations (a Gaussian copula)."""
    from scipy.special import ndtr  # 0.3 s to import: only the generators that need it

    r = [2.0 * np.sin(np.pi * x / 6.0) for x in rho]  # Spearman -> Pearson of the normals
    cov = np.array([[1.0, r[0], r[1]], [r[0], 1.0, r[2]], [r[1], r[2], 1.0]])
    z = np.linalg.cholesky(cov) @ rng.standard_normal(3)
    return ndtr(z)


def agentic_prompts(rng: np.random.Generator, p: AgenticParams) -> tuple[Any, Any]:
    """One session's prompt lengths (before the calibration map) and compaction flags."""
    cls = p.fresh if rng.random() < p.fresh.share else p.resumed
    u = _correlated_uniforms(rng, cls.rank_correlation)
    turns = max(1, ceil(float(cls.turns.at(u[0:1])[0])))  # integers: the inverse CDF
    context = float(cls.first_prompt.at(u[1:2])[0])
    total = float(cls.total_growth.at(u[2:3])[0])
    compact_at = p.compact_at.one(rng)
    if rng.random() < cls.big_context_share or context >= compact_at:
        compact_at = p.big_context_compact_at
    growth = p.growth_tokens.sample(rng, turns)
    growth[0] = 0.0
    growth *= total / max(float(growth.sum()), 1.0)
    summaries = p.compacted_prompt.sample(rng, turns)
    prompts = np.empty(turns)
    compacted = np.zeros(turns, dtype=bool)
    for t in range(turns):
        context += growth[t]
        if context > compact_at:
            context = float(summaries[t])
            compacted[t] = True
        prompts[t] = context
    return prompts, compacted


def _agentic_session(
    rng: np.random.Generator, index: int, seed: int, p: AgenticParams
) -> Iterator[Turn]:
    raw, compacted = agentic_prompts(rng, p)
    turns = len(raw)
    if p.prompt_map_from is not None and p.prompt_map_to is not None:
        raw = p.prompt_map_to.at(p.prompt_map_from.cdf(raw))
    prompts = np.maximum(AGENTIC_BLOCK_TOKENS, np.round(raw)).astype(np.int64)
    system_blocks = round(p.system_tokens.one(rng)) // AGENTIC_BLOCK_TOKENS
    outputs = np.maximum(0, np.round(p.output_tokens.sample(rng, turns))).astype(np.int64)
    thinks = np.round(p.think_time_s.sample(rng, turns))  # the traces log whole seconds
    breaks = rng.random(turns) < p.prefix_break_share
    break_blocks = p.prefix_break_blocks.sample(rng, turns)
    ctx = _Context(scope_key("agentic-generator", seed, index))
    offset_s = 0.0
    prev_blocks = 0
    for t in range(turns):
        think = float(thinks[t]) if t > 0 else 0.0
        offset_s += think
        if compacted[t]:
            ctx.rewrite_from(min(system_blocks, prev_blocks))
        elif t > 0 and breaks[t]:
            ctx.rewrite_from(max(0, prev_blocks - max(1, round(break_blocks[t]))))
        prev_blocks = int(prompts[t]) // AGENTIC_BLOCK_TOKENS
        yield Turn(
            prompt_tokens=int(prompts[t]),
            output_tokens=int(outputs[t]),
            block_hashes=ctx.ids(prev_blocks),
            block_tokens=AGENTIC_BLOCK_TOKENS,
            think_time_s=think,
            offset_s=offset_s,
        )


def agentic_sessions(
    sessions: int, seed: int, params: AgenticParams | None = None
) -> Iterator[Session]:
    """``sessions`` agentic-coding sessions (lazily; see the module docstring)."""
    from simulator.workload.fitted import AGENTIC

    p = AGENTIC if params is None else params
    for k in range(sessions):
        rng = np.random.default_rng([seed, k])  # per session: lazy replay order cannot matter
        yield Session(f"agentic-{k}", 0.0, _agentic_session(rng, k, seed, p))


def random_sessions(
    num_requests: int,
    input_tokens: int,
    output_tokens: int,
    range_ratio: float,
    seed: int,
    output_range_ratio: float | None = None,
) -> Iterator[Session]:
    """InferenceX random prompts: one-request sessions, no prefix reuse.

    Lengths are uniform integers in ``[floor(x * range_ratio), x]`` for x = ISL and OSL, as in
    the ``sample_random_requests`` of the benchmark_serving/bench_serving scripts InferenceMAX
    v1 ran with ``--random-range-ratio 0.8`` (SGLang: "0.5 means lengths are sampled from
    [input_len * 0.5, input_len]"). Newer ``vllm bench serve`` samples [x(1-r), x(1+r)].
    ``output_range_ratio`` (default: ``range_ratio``) sets the OSL's own range (Vidur's
    reference workload: ISL in [2048, 8192], OSL in [512, 1024]).
    """
    rng = np.random.default_rng(seed)
    out_ratio = range_ratio if output_range_ratio is None else output_range_ratio
    lo_in, lo_out = int(input_tokens * range_ratio), int(output_tokens * out_ratio)
    chunk = 4096
    for start in range(0, num_requests, chunk):
        n = min(chunk, num_requests - start)
        ins = rng.integers(max(1, lo_in), input_tokens + 1, size=n)
        outs = rng.integers(max(1, lo_out), output_tokens + 1, size=n)
        for k in range(n):
            turn = Turn(int(ins[k]), int(outs[k]), EMPTY_IDS, AGENTIC_BLOCK_TOKENS, 0.0, 0.0)
            yield Session(f"random-{start + k}", 0.0, iter((turn,)))


CHAT_BLOCK_TOKENS = 64


def _chat_session(rng: np.random.Generator, index: int, seed: int, p: ChatParams) -> Iterator[Turn]:
    turns = int(rng.geometric(1.0 / p.mean_turns))
    system = p.system_tokens
    ctx = _Context(
        scope_key("chat-generator", seed, index),
        shared_scope=scope_key("chat-system", seed),
        shared_blocks=system // CHAT_BLOCK_TOKENS,  # the same system prompt in every session
    )
    messages = p.message_tokens.sample(rng, turns)
    outputs = np.maximum(1, np.round(p.output_tokens.sample(rng, turns))).astype(np.int64)
    thinks = rng.lognormal(np.log(p.think_time_median_s), p.think_time_sigma, size=turns)
    prompt = system
    offset_s = 0.0
    prev_output = 0
    for t in range(turns):
        prompt += prev_output + max(1, round(messages[t]))
        think = float(thinks[t]) if t > 0 else 0.0
        offset_s += think
        ids = ctx.ids(prompt // CHAT_BLOCK_TOKENS)
        yield Turn(prompt, int(outputs[t]), ids, CHAT_BLOCK_TOKENS, think, offset_s)
        prev_output = int(outputs[t])


def chat_sessions(sessions: int, seed: int, params: ChatParams | None = None) -> Iterator[Session]:
    """Multi-turn chat conversations (parameters and sources: ``fitted.CHAT``)."""
    from simulator.workload.fitted import CHAT

    p = CHAT if params is None else params
    for k in range(sessions):
        rng = np.random.default_rng([seed, k])
        yield Session(f"chat-{k}", 0.0, _chat_session(rng, k, seed, p))
