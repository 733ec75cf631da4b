"""Workloads: requests and sessions from traces or generators, replayed for the engine.

One interface for every source: a :class:`Source` yields sessions; :func:`build_replay`
turns a scenario's workload spec into a :class:`Replay` (closed loop, open loop or Poisson
sessions); :func:`iter_requests` / :func:`workload_stats` read a source's requests once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from simulator.specs import limits
from simulator.specs.limits import check_seed
from simulator.specs.loading import SpecError
from simulator.specs.scenario import (
    AgenticWorkload,
    ChatWorkload,
    RandomPromptWorkload,
    TraceWorkload,
)
from simulator.workload.agentic import read_agentic
from simulator.workload.generators import agentic_sessions, chat_sessions, random_sessions
from simulator.workload.replay import (
    ClosedLoop,
    OpenLoop,
    PoissonSessions,
    Replay,
    ReplayMode,
    closed_loop,
    open_loop,
    poisson_sessions,
)
from simulator.workload.request import Request, Session, SubagentGroup, Turn, reblock
from simulator.workload.source import BadRecords, Source
from simulator.workload.stats import WorkloadStats, workload_stats
from simulator.workload.traces import FORMATS, detect_format, read_azure, read_mooncake

__all__ = [
    "FORMATS",
    "GENERATORS",
    "BadRecords",
    "ClosedLoop",
    "OpenLoop",
    "PoissonSessions",
    "Replay",
    "ReplayMode",
    "Request",
    "Session",
    "Source",
    "SubagentGroup",
    "Turn",
    "WorkloadStats",
    "build_replay",
    "closed_loop",
    "generator_source",
    "iter_requests",
    "open_loop",
    "poisson_sessions",
    "reblock",
    "source_for_spec",
    "trace_source",
    "workload_stats",
]

GENERATORS = ("agentic", "chat", "random")
_READERS = {"agentic": read_agentic, "mooncake": read_mooncake, "azure": read_azure}


def _limited(sessions: Iterator[Session], limit: int | None) -> Iterator[Session]:
    for k, s in enumerate(sessions):
        if limit is not None and k >= limit:
            return
        yield s


def trace_source(
    path: str | Path,
    format: str | None = None,
    skip_bad: bool = False,
    limit: int | None = None,
) -> Source:
    """A trace file (or directory of agentic traces); ``format=None`` detects it."""
    p = Path(path)
    if not p.exists():
        raise SpecError(p, "(file)", "no such file or directory")
    fmt = format or detect_format(p)
    if fmt not in _READERS:
        raise SpecError(p, "format", f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    reader = _READERS[fmt]
    bad = BadRecords(skip=skip_bad)

    def open_() -> Iterator[Session]:
        bad.count = 0
        bad.reasons.clear()
        return _limited(reader(p, bad), limit)

    block = {"agentic": 64, "mooncake": 512, "azure": 1}[fmt]
    return Source(
        label=str(p),
        kind=fmt,
        block_tokens=block,
        open=open_,
        timed=fmt != "agentic",
        has_sessions=fmt == "agentic",
        has_prefix=fmt != "azure",
        bad=bad,
    )


def generator_source(
    name: str,
    sessions: int,
    seed: int,
    input_tokens: int = 1024,
    output_tokens: int = 1024,
    range_ratio: float = 0.8,
    output_range_ratio: float | None = None,
) -> Source:
    """A built-in generator: ``agentic``, ``chat`` or ``random`` (ISL/OSL/range ratios; the
    output's is the input's unless given)."""
    if sessions < 1:
        raise SpecError("(arguments)", "sessions", f"must be at least 1, got {sessions}")
    check_seed(seed)
    cap = limits.MAX_GENERATED_REQUESTS if name == "random" else limits.MAX_GENERATED_SESSIONS
    if sessions > cap:
        what = "requests of the random generator" if name == "random" else "sessions"
        raise SpecError(
            "(arguments)", "sessions", f"{sessions:,} exceeds {cap:,} {what} (simulator/specs/"
            "limits.py: beyond it a generator runs for hours)",
        )  # fmt: skip
    for value, flag in ((input_tokens, "isl"), (output_tokens, "osl")):
        if value > limits.MAX_GENERATED_TOKENS:
            raise SpecError(
                "(arguments)", flag, f"{value:,} tokens exceeds {limits.MAX_GENERATED_TOKENS:,}"
                " (10x the longest context of any model card)",
            )  # fmt: skip
    if name == "agentic":
        return Source(name, name, 64, lambda: agentic_sessions(sessions, seed), False, True, True)
    if name == "chat":
        return Source(name, name, 64, lambda: chat_sessions(sessions, seed), False, True, True)
    if name == "random":
        return Source(
            name,
            name,
            64,
            lambda: random_sessions(
                sessions, input_tokens, output_tokens, range_ratio, seed, output_range_ratio
            ),
            timed=False,
            has_sessions=False,
            has_prefix=False,
        )
    raise SpecError(
        "(arguments)", "source", f"unknown generator {name!r}; known: {', '.join(GENERATORS)}"
    )


WorkloadSpecs = RandomPromptWorkload | TraceWorkload | AgenticWorkload | ChatWorkload


def source_for_spec(spec: WorkloadSpecs, seed: int, base_dir: str | Path = ".") -> Source:
    """The source a workload spec names; a relative trace path is relative to ``base_dir``."""
    if isinstance(spec, TraceWorkload):
        path = Path(spec.path)
        path = path if path.is_absolute() else Path(base_dir) / path
        return trace_source(path, spec.format, spec.skip_bad, spec.limit)
    if isinstance(spec, RandomPromptWorkload):
        return generator_source(
            "random",
            spec.num_requests,
            seed,
            spec.input_tokens,
            spec.output_tokens,
            spec.range_ratio,
            spec.output_range_ratio,
        )
    return generator_source(spec.kind, spec.sessions, seed)


def build_replay(
    spec: WorkloadSpecs,
    seed: int,
    base_dir: str | Path = ".",
    max_model_len: int | None = None,
    horizon_s: float | None = None,
) -> Replay:
    """The Replay of a scenario's workload (the mode follows from the spec's fields).

    ``max_model_len``: requests whose prompt + max_tokens exceed it are refused by the replay
    (vLLM's HTTP 400) up to ``horizon_s``; see :mod:`simulator.workload.replay`."""
    source = source_for_spec(spec, seed, base_dir)
    if (
        isinstance(spec, TraceWorkload)
        and not source.has_sessions
        and (spec.think_time_scale != 1.0 or spec.think_time_cap_s is not None)
    ):
        raise SpecError(
            spec.path, "(format)", f"a {source.kind} trace holds one request a session and no"
            " think times: think_time_scale / think_time_cap_s do nothing; drop them",
        )  # fmt: skip
    mode: ReplayMode
    if isinstance(spec, RandomPromptWorkload):
        if spec.concurrency is not None:
            mode = closed_loop(spec.concurrency)
        else:
            assert spec.request_rate_per_s is not None  # the spec's validator
            mode = poisson_sessions(spec.request_rate_per_s, seed)
    elif spec.concurrency is not None:
        mode = closed_loop(
            spec.concurrency, spec.think_time_scale, spec.think_time_cap_s, spec.ramp_s
        )
    elif spec.session_rate_per_s is not None:
        mode = poisson_sessions(
            spec.session_rate_per_s, seed, spec.think_time_scale, spec.think_time_cap_s
        )
    else:
        assert isinstance(spec, TraceWorkload)  # generated workloads need one of the two
        mode = open_loop(spec.time_scale)
    replay = Replay(source.open(), mode, max_model_len=max_model_len, horizon_s=horizon_s)
    replay.single_turn = not source.has_sessions  # no request follows another's output
    replay.bad = source.bad
    return replay


def iter_requests(source: Source, limit: int | None = None) -> Iterator[Request]:
    """The source's requests in session order (times relative to each session's start)."""
    from simulator.workload.stats import _requests

    for _, _, req in _requests(source, limit):
        yield req
