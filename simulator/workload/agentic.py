"""Agentic session traces in the WEKA kv-cache-tester / AgentX format.

One trace = one session: ``{id, block_size: 64, hash_id_scope: "local", requests: [...]}``,
a request ``{t, in, out, hash_ids, think_time, api_time, ...}`` or a sub-agent
``{type: "subagent", agent_id, t, duration_ms, requests: [...]}``. ``hash_ids`` are per-trace
content ids of the prompt's full 64-token blocks, as plain ints or, with
``hash_ids_encoding: "ranges"``, ints and inclusive ``[a, b]`` runs.

Accepted inputs: JSON Lines (one trace per line, ``.gz`` allowed), one upstream trace JSON file
(an object, or a list of them), or a directory of such files (sorted by name).

Times, as the traces show them (checked on all 63 sub-agents of the shared 710 traces):
``t`` of a request is seconds since the session start and equals the previous request's
``t + api_time + think_time``. A sub-agent's ``t`` is when it *finished*; it started
``duration_ms`` earlier, right after the parent request that spawned it; consecutive
sub-agent entries ran in parallel, and the parent's next request came after the last one
finished. So a run of sub-agent entries becomes one :class:`SubagentGroup` after the parent
request that spawned it; the first turn of each sub-agent gets the observed spawn delay as its
think time, and the parent's next turn the delay after the group finished.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.specs import limits
from simulator.specs.loading import SpecError, loads_unique
from simulator.workload.id_runs import Runs, common_blocks, expand_runs, hash_id_runs
from simulator.workload.request import (
    BlockIds,
    ChainedIds,
    Session,
    SubagentGroup,
    Turn,
    content_keys,
    scope_key,
)
from simulator.workload.source import (
    BadRecords,
    check_tokens,
    json_line_error,
    lines,
    open_text,
)

BLOCK_TOKENS = 64


@dataclass(frozen=True, slots=True)
class _Req:
    t_s: float
    prompt_tokens: int
    output_tokens: int
    think_time_s: float
    api_time_s: float
    runs: Runs  # of the prompt's local hash ids


@dataclass(frozen=True, slots=True)
class _Sub:
    key: str
    end_s: float
    duration_s: float | None
    entries: tuple[_Req | _Sub, ...]


def _number(
    r: dict[str, Any],
    key: str,
    where: str,
    default: float | None = None,
    maximum: float = limits.MAX_TRACE_TIME_S,
) -> float:
    value = r.get(key, default)
    if value is None:
        raise ValueError(f"{where}: missing field {key!r}")
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ValueError(f"{where}.{key}: expected a number, got {value!r}")
    if not math.isfinite(value):  # json reads Infinity: a time no replay ever reaches
        raise ValueError(f"{where}.{key}: must be a finite number, got {value}")
    if value < 0:
        raise ValueError(f"{where}.{key}: must be >= 0, got {value}")
    if value > maximum:  # a session spanning centuries: a unit mix-up, not a trace
        raise ValueError(
            f"{where}.{key}: {value:g} exceeds {maximum:g} (simulator/specs/limits.py)"
        )
    return float(value)


def _count(r: dict[str, Any], key: str, where: str, minimum: int = 0) -> int:
    """A request's token count: an integer in [minimum, 10^7] (10^12 tokens in a few bytes of
    run-encoded ids asked for 7 TiB of block ids)."""
    value = r.get(key)
    if value is None:
        raise ValueError(f"{where}: missing field {key!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}.{key}: expected an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{where}.{key}: must be >= {minimum}, got {value}")
    return check_tokens(value, f"{where}.{key}")


def _entries(reqs: Any, ranges: bool, block: int, where: str) -> tuple[_Req | _Sub, ...]:
    if not isinstance(reqs, list):
        raise ValueError(f"{where}: expected a list of requests")
    out: list[_Req | _Sub] = []
    prev_t: float | None = None
    for i, r in enumerate(reqs):
        w = f"{where}[{i}]"
        if not isinstance(r, dict):
            raise ValueError(f"{w}: expected an object")
        t = _number(r, "t", w)
        if prev_t is not None and t < prev_t:
            raise ValueError(f"{w}.t: {t:g} s goes backwards (the entry before is at {prev_t:g} s)")
        prev_t = t
        if r.get("type") == "subagent":
            dur = r.get("duration_ms")
            duration_s = (
                None
                if dur is None
                else _number(r, "duration_ms", w, maximum=1e3 * limits.MAX_TRACE_TIME_S) / 1000.0
            )
            sub = _entries(r.get("requests"), ranges, block, f"{w}.requests")
            key = str(r.get("agent_id", f"subagent{i}"))
            out.append(_Sub(key, t, duration_s, sub))
            continue
        prompt = _count(r, "in", w, minimum=1)  # a request has a prompt (vLLM: >= 1 token)
        runs = hash_id_runs(r.get("hash_ids"), ranges, w)
        n_ids = sum(b - a + 1 for a, b in runs)
        if n_ids not in (prompt // block, -(-prompt // block)):
            raise ValueError(
                f"{w}.hash_ids: {n_ids} block ids for {prompt} tokens, expected "
                f"{prompt // block} (one per full {block}-token block)"
            )
        out.append(
            _Req(
                t_s=t,
                prompt_tokens=prompt,
                output_tokens=_count(r, "out", w),
                think_time_s=_number(r, "think_time", w, default=0.0),
                api_time_s=_number(r, "api_time", w, default=0.0),
                runs=runs,
            )
        )
    return tuple(out)


def _sub_start(sub: _Sub) -> float:
    if sub.duration_s is not None:
        return max(0.0, sub.end_s - sub.duration_s)
    last = [e for e in sub.entries if isinstance(e, _Req)]
    return max(0.0, sub.end_s - (last[-1].t_s + last[-1].api_time_s if last else 0.0))


class _Chain:
    """Chain ids of one (sub-)session's turns, each extending the previous turn's: a turn's
    prompt mostly starts with the previous one's blocks, so only the rest is mixed."""

    __slots__ = ("chain", "n", "runs", "scope")

    def __init__(self, scope: int) -> None:
        self.scope = scope
        self.runs: Runs = ()
        self.n = 0  # blocks the previous turn used of its runs
        self.chain = ChainedIds()

    def of(self, runs: Runs, n: int) -> BlockIds:
        """The chain ids of the first ``n`` blocks of ``runs`` (maximal runs): only the
        blocks past the previous turn's common prefix are expanded and mixed."""
        p = min(common_blocks(runs, self.runs), n, self.n)  # blocks in common
        self.chain.cut(p)
        self.chain.extend(content_keys(self.scope, expand_runs(runs, p, n)))
        self.runs, self.n = runs, n
        return self.chain.ids


def _items(
    entries: tuple[_Req | _Sub, ...], scope: int, block: int, key: str, first_think_s: float
) -> Iterator[Turn | SubagentGroup]:
    ids_of = _Chain(scope)
    prev_end = 0.0  # when the previous parent request finished (trace time)
    group_end: float | None = None
    i = 0
    first = True
    while i < len(entries):
        e = entries[i]
        if isinstance(e, _Sub):
            group: list[Session] = []
            while i < len(entries) and isinstance(entries[i], _Sub):
                sub = entries[i]
                assert isinstance(sub, _Sub)
                start = _sub_start(sub)
                spawn_delay = max(0.0, start - prev_end)
                sub_key = f"{key}/{sub.key}"
                group.append(
                    Session(sub_key, start, _items(sub.entries, scope, block, sub_key, spawn_delay))
                )
                group_end = max(group_end or 0.0, sub.end_s)
                i += 1
            yield SubagentGroup(tuple(group))
            continue
        think = e.think_time_s
        if first:
            think = first_think_s
        elif group_end is not None:
            think = max(0.0, e.t_s - group_end)
        yield Turn(
            prompt_tokens=e.prompt_tokens,
            output_tokens=e.output_tokens,
            block_hashes=ids_of.of(e.runs, e.prompt_tokens // block),
            block_tokens=block,
            think_time_s=think,
            offset_s=e.t_s,
        )
        prev_end = e.t_s + e.api_time_s
        group_end = None
        first = False
        i += 1


def parse_trace(obj: Any, default_id: str) -> Session:
    """One trace object -> a lazy Session; a malformed trace raises ValueError(reason)."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a trace object, got {type(obj).__name__}")
    trace_id = str(obj.get("id", default_id))
    block = obj.get("block_size", BLOCK_TOKENS)
    if isinstance(block, bool) or not isinstance(block, int) or block <= 0:
        raise ValueError(f"block_size: expected a positive integer, got {block!r}")
    encoding = obj.get("hash_ids_encoding")
    if encoding not in (None, "ranges"):
        raise ValueError(f"hash_ids_encoding: unknown {encoding!r} (known: ranges)")
    if "requests" not in obj:
        raise ValueError("missing field 'requests'")
    entries = _entries(obj["requests"], encoding == "ranges", block, "requests")
    scope = scope_key("agentic", trace_id)
    session = Session(trace_id, 0.0, _items(entries, scope, block, trace_id, 0.0))
    session.meta["block_tokens"] = str(block)
    return session


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(
            p
            for p in path.iterdir()
            if p.name.endswith((".json", ".jsonl", ".json.gz", ".jsonl.gz"))
        )
        if not files:
            raise SpecError(path, "(file)", "no *.json / *.jsonl trace files in this directory")
        return files
    return [path]


def read_agentic(path: Path, bad: BadRecords) -> Iterator[Session]:
    """Sessions of WEKA/AgentX traces, one at a time (a trace is parsed when it is reached).

    A trace's ``id`` scopes its ``hash_ids`` (they are numbered per trace), so two traces of
    one id would share cached blocks they never shared: a repeated id is malformed."""
    seen: dict[str, str] = {}  # trace id -> where it was first
    for file in _files(path):
        if file.name.endswith((".json", ".json.gz")):
            for where, session in _read_json_file(file, bad):
                if _unique(session, f"{file.name} {where}", seen, bad, file, where):
                    yield session
            continue
        for lineno, text in lines(file):
            try:
                session = parse_trace(loads_unique(text), f"{file.name}:{lineno}")
            except json.JSONDecodeError as exc:
                bad.handle(SpecError(file, f"line {lineno}", json_line_error(text, exc)))
                continue
            except ValueError as exc:
                bad.handle(SpecError(file, f"line {lineno}", str(exc)))
                continue
            if _unique(session, f"{file.name} line {lineno}", seen, bad, file, f"line {lineno}"):
                yield session


def _unique(
    session: Session, place: str, seen: dict[str, str], bad: BadRecords, file: Path, where: str
) -> bool:
    """Whether ``session``'s id is new (else the record is malformed: reported, or skipped)."""
    first = seen.setdefault(session.key, place)
    if first == place:
        return True
    bad.handle(
        SpecError(
            file, where,
            f"id {session.key!r} repeats the trace of {first}: a trace's id scopes its"
            " hash_ids, so the two would share cached blocks; give each trace its own id",
        )
    )  # fmt: skip
    return False


def _read_json_file(file: Path, bad: BadRecords) -> Iterator[tuple[str, Session]]:
    with open_text(file) as fh:
        try:
            doc = loads_unique(fh.read())
        except json.JSONDecodeError as exc:
            bad.handle(SpecError(file, f"line {exc.lineno}", f"invalid JSON: {exc.msg}"))
            return
        except ValueError as exc:
            bad.handle(SpecError(file, "(trace)", str(exc)))
            return
    docs = doc if isinstance(doc, list) else [doc]
    for k, obj in enumerate(docs):
        where = f"trace {k}" if len(docs) > 1 else "(trace)"
        try:
            name = file.name.split(".")[0] + (f"[{k}]" if len(docs) > 1 else "")
            yield where, parse_trace(obj, name)
        except ValueError as exc:
            bad.handle(SpecError(file, where, str(exc)))
