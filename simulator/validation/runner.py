"""Running per-point simulations: in worker processes, in input order, cached per point.

Shared by ``plan validate inferencemax`` (:mod:`simulator.validation.run`) and ``plan
validate silicon`` (:mod:`simulator.validation.silicon_sim`)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from simulator.planner.executor import (
    completed,
    is_number,
    read_cached,
    stop_pool,
    worker_pool,
    write_whole,
)
from simulator.planner.fingerprint import scenario_hash
from simulator.specs.scenario import Scenario

T = TypeVar("T")
R = TypeVar("R")


def run_parallel(
    fn: Callable[[T], R],
    items: Sequence[T],
    cost: Callable[[T], float],
    workers: int = 1,
    progress: Callable[[int, int, R], None] | None = None,
    on_result: Callable[[int, R], None] | None = None,
) -> list[R]:
    """``fn`` over every item, in worker processes when ``workers > 1`` (``fn`` must pickle:
    a module-level function or a ``functools.partial`` of one). Results come in the input
    order whatever the worker count; the costliest items start first, so one long item does
    not finish alone at the end. ``on_result(index, result)`` is called in this process as
    each result arrives (in completion order), before ``progress``.

    The workers die with this process (``kill -9`` included: see
    :func:`simulator.planner.executor.worker_pool`); on Ctrl-C or a failed item the queue is
    dropped."""
    total = len(items)
    by_index: dict[int, R] = {}

    def got(i: int, r: R) -> None:
        by_index[i] = r
        if on_result is not None:
            on_result(i, r)
        if progress is not None:
            progress(len(by_index), total, r)

    if workers <= 1 or total <= 1:
        for i, item in enumerate(items):
            got(i, fn(item))
        return [by_index[i] for i in range(total)]
    order = sorted(range(total), key=lambda i: -cost(items[i]))
    pool = worker_pool(workers)
    try:
        futures = {pool.submit(fn, items[i]): i for i in order}
        for future in completed(futures):
            got(futures[future], future.result())
    except BaseException as exc:
        stop_pool(pool, exc)
        raise
    pool.shutdown()
    return [by_index[i] for i in range(total)]


def user_cache_dir() -> Path:
    """Where ``plan validate`` keeps per-point results without ``--out``: ``$PLAN_CACHE_DIR/
    validate`` or ``~/.cache/hybrid-capacity-planner/validate``."""
    from simulator.userdata import cache_root

    return cache_root() / "validate"


class Cached(Protocol):
    """A per-point result dataclass whose first field is its point (PointResult,
    SiliconResult): cached as its other fields."""

    @property
    def point(self) -> Any: ...


C = TypeVar("C", bound=Cached)


def _plausible(values: dict[str, Any], fields: tuple[dataclasses.Field[Any], ...]) -> bool:
    """Whether a cached result holds what its fields say: a non-negative finite number where
    a number belongs (None where it may be), a string where a string (an edited ``"abc"``
    was a TypeError in the tables, -5 an error of -107 %)."""
    for f in fields:
        if f.name not in values:
            continue
        value, kind = values[f.name], str(f.type)
        if value is None:
            if "None" not in kind:
                return False
        elif kind.startswith("str"):
            if not isinstance(value, str):
                return False
        elif not is_number(value) or value < 0 or (kind.startswith("int") and value % 1):
            return False
    return True


def run_cached(
    fn: Callable[[T], C],
    items: Sequence[T],
    cost: Callable[[T], float],
    scenario: Callable[[T], Scenario],
    result_type: type[C],
    cache_dir: Path | None,
    workers: int = 1,
    progress: Callable[[int, int, C], None] | None = None,
) -> list[C]:
    """:func:`run_parallel`, cached per item: each result is written whole to
    ``<cache_dir>/<scenario_hash>.json`` as it arrives (the hash covers the scenario and the
    code), so a killed run loses only the items in flight and a rerun simulates only the
    rest. ``cache_dir=None``: no cache. The cache is best effort: a folder or file that
    cannot be written only costs the next run the simulation."""
    if cache_dir is None:
        return run_parallel(fn, items, cost, workers, progress)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        return run_parallel(fn, items, cost, workers, progress)
    paths = [cache_dir / f"{scenario_hash(scenario(item))}.json" for item in items]
    fields_of = dataclasses.fields(result_type)  # type: ignore[arg-type]
    names = [f.name for f in fields_of if f.name != "point"]
    found: dict[int, C] = {}
    for i, (item, path) in enumerate(zip(items, paths, strict=True)):
        data = read_cached(path)
        fields = data.get("result") if data is not None else None
        if isinstance(fields, dict) and set(fields) == set(names) and _plausible(fields, fields_of):
            found[i] = result_type(item, **fields)  # type: ignore[call-arg]
    todo = [i for i in range(len(items)) if i not in found]
    total = len(items)

    def store(j: int, r: C) -> None:
        i = todo[j]
        fields = {k: getattr(r, k) for k in names}
        with contextlib.suppress(OSError):
            write_whole(paths[i], {"scenario": scenario(items[i]).name, "result": fields})

    def step(done: int, _: int, r: C) -> None:
        if progress is not None:
            progress(len(found) + done, total, r)

    if progress is not None and found and not todo:
        last = found[max(found)]
        progress(total, total, last)
    ran = run_parallel(fn, [items[i] for i in todo], cost, workers, step, store)
    out = dict(found)
    out.update(zip(todo, ran, strict=True))
    return [out[i] for i in range(total)]
