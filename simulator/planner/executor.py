"""Run a search's scenarios on a local process pool or a Ray cluster, cached by scenario hash.

Each finished run is written to ``<cache_dir>/<hash>.json`` at once, so an interrupted search
resumes where it stopped and a repeated search costs nothing. Ray (``executor="ray"``) runs
the same function as remote tasks: on the cluster at ``address``, or on a local instance that
is started for the search and stopped after it.

Workers die with the process that started them (:func:`worker_pool`): on Linux each worker
asks the kernel for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), so a
``kill -9`` of ``plan search`` or ``plan validate`` leaves no worker computing on; workers
ignore Ctrl-C, the parent stops them (:func:`stop_pool`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import math
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from simulator.outputs import pid_alive
from simulator.planner.fingerprint import scenario_hash
from simulator.planner.replicates import Chain
from simulator.specs.loading import SpecError
from simulator.specs.scenario import SLO, Scenario


class ChainBrokeError(Exception):
    """A chain's run raised after its earlier runs finished: their results (kept in the
    cache by the parent, so a resumed search does not make them again) and the error."""

    def __init__(self, results: list[dict[str, Any]], error: BaseException) -> None:
        super().__init__(results, error)  # the args a pickled copy is rebuilt from
        self.results = results
        self.error = error


def run_chain(payloads: list[str], until_miss: str | None) -> list[dict[str, Any]]:
    """A chain's runs, in a worker process: in turn, up to the first that misses."""
    chain = Chain((), None if until_miss is None else SLO.model_validate_json(until_miss))
    results: list[dict[str, Any]] = []
    for payload in payloads:
        try:
            results.append(run_scenario(payload))
        except Exception as exc:
            if not results:
                raise
            raise ChainBrokeError(results, exc) from exc
        if chain.misses(results[-1]):
            break
    return results


def _finished(
    store: Callable[[Chain, list[Path], list[dict[str, Any]]], None],
    chain: Chain,
    paths: list[Path],
    result: Callable[[], list[dict[str, Any]]],
) -> None:
    """Store a chain's results; where a later run raised, store those before it and raise
    that run's error (Ray hands the worker's exception back as its ``cause``)."""
    try:
        outs = result()
    except Exception as exc:
        broke = getattr(exc, "cause", exc)
        if not isinstance(broke, ChainBrokeError):
            raise
        store(chain, paths, broke.results)
        raise broke.error from exc
    store(chain, paths, outs)


def run_scenario(payload: str) -> dict[str, Any]:
    """One run, in a worker process: the summary plus what the analysis needs."""
    from simulator.simulation import simulate

    scenario = Scenario.model_validate_json(payload)
    result = simulate(scenario, scenario.name)
    steps = result.recorder.steps
    peak_blocks = max((s.kv_blocks_used for s in steps), default=0)
    return {
        **result.summary.model_dump(mode="json"),
        "num_blocks": result.memory.num_blocks,
        "peak_blocks_used": peak_blocks,
        "kv_cache_gib_per_gpu": result.memory.kv_cache_bytes_per_gpu / 2**30,
        "wall_s": result.wall_s,
    }


Executor = Literal["local", "ray"]


class KeptPool:
    """One local worker pool for several ``run_all`` batches (a max-load search's rounds):
    its workers keep what they loaded (imports, op tables, step-pricing templates) from one
    batch to the next. Made at the first batch that needs it, in that thread; closed on exit.
    A batch that fails or is interrupted stops it; the next batch makes a new one."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def get(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = worker_pool(self.workers, _context())
        return self._pool

    def lost(self) -> None:
        self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> KeptPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _context() -> BaseContext | None:
    # fork is the fast start, but forking a threaded host (a Streamlit server, Ray's client)
    # can copy held locks into the children: spawn there
    return mp.get_context("spawn") if threading.active_count() > 1 else None


def run_all(
    scenarios: Sequence[Scenario | Chain],
    cache_dir: Path,
    workers: int = 2,
    progress: Callable[[int, int], None] | None = None,
    executor: Executor = "local",
    address: str | None = None,
    kept: KeptPool | None = None,
) -> dict[str, dict[str, Any]]:
    """Results by scenario name; cached runs are read, the rest run ``workers`` at a time
    (local: on ``kept``'s pool when given, else on a pool of their own) or as Ray tasks, a
    :class:`Chain` as one task. ``progress(done, total)`` counts runs; ``total`` is what is
    left to run at most, and drops as chains stop early."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    todo: list[tuple[Chain, list[Path]]] = []
    total = 0
    for item in scenarios:
        chain = Chain.of(item)
        paths = [cache_dir / f"{scenario_hash(sc)}.json" for sc in chain.scenarios]
        total += len(paths)
        for i, (sc, path) in enumerate(zip(chain.scenarios, paths, strict=True)):
            cached = read_cached(path)
            if cached is not None and not summary_shaped(cached):
                cached = None  # edited or foreign: simulated again
            if cached is None:  # this run and the chain's rest, in a worker
                todo.append((Chain(chain.scenarios[i:], chain.until_miss), paths[i:]))
                break
            results[sc.name] = cached
            if chain.misses(cached):
                total -= len(paths) - i - 1
                break
    if progress is not None:
        progress(len(results), total)
    if not todo:
        return results

    def store(chain: Chain, paths: list[Path], outs: list[dict[str, Any]]) -> None:
        nonlocal total
        for sc, path, out in zip(chain.scenarios, paths, outs, strict=False):
            write_whole(path, out)
            results[sc.name] = out
        total -= len(paths) - len(outs)
        if progress is not None:
            progress(len(results), total)

    if executor == "ray":
        _run_ray(todo, store, workers, address)
        return results
    pool = kept.get() if kept is not None else worker_pool(workers, _context())
    try:
        futures = {
            pool.submit(run_chain, *_payload(chain)): (chain, paths) for chain, paths in todo
        }
        for future in completed(futures):
            chain, paths = futures[future]
            _finished(store, chain, paths, future.result)
    except BaseException as exc:  # a failed run, Ctrl-C, or a stop raised by `progress`
        stop_pool(pool, exc)
        if kept is not None:
            kept.lost()
        raise
    if kept is None:
        pool.shutdown()
    return results


def _payload(chain: Chain) -> tuple[list[str], str | None]:
    slo = None if chain.until_miss is None else chain.until_miss.model_dump_json()
    return [sc.model_dump_json() for sc in chain.scenarios], slo


def read_cached(path: Path) -> dict[str, Any] | None:
    """A cached result, or None when there is none or it cannot be read back (a folder in
    its place, a truncated or edited file: the run is simulated again)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError
        return None
    return data if isinstance(data, dict) else None


def summary_shaped(data: dict[str, Any]) -> bool:
    """Whether a cached search result is what a worker wrote: a ``Summary``'s fields with
    their types, and its few numbers beside them (an edited ``"abc"`` failed deep in the
    tables)."""
    from pydantic import ValidationError

    from simulator.metrics import Summary

    fields = Summary.model_fields
    try:
        Summary.model_validate({k: v for k, v in data.items() if k in fields})
    except ValidationError:
        return False
    return all(v is None or is_number(v) for k, v in data.items() if k not in fields)


def is_number(value: object) -> bool:
    """A finite int or float, not a bool (JSON's true would read as 1)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def write_whole(path: Path, data: dict[str, Any]) -> None:
    """``data`` as JSON at ``path``, whole or not at all (a temporary file, then a rename): a
    kill mid-write leaves at most a stray ``.*.tmp``, never a truncated result."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data) + "\n")
    os.replace(tmp, path)


# ------------------------------------------------------------------ workers die with parent

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _set_parent_death_signal(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent (the thread that forked
    it) exits; False where there is no prctl (not Linux, no libc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int) -> None:
    """Worker initializer: SIGKILL when the parent dies (Linux), and Ctrl-C ignored (the
    terminal sends it to the whole process group; the parent stops the pool itself).

    The parent may die between the fork and the prctl, and then no signal would come: so
    once the signal is armed, a worker whose parent is no longer ``parent_pid`` (it was
    reparented) and ``parent_pid`` is gone exits at once. (A worker of a forkserver has the
    server as its parent, which dies with ``parent_pid``.) Where prctl is missing, only
    the Ctrl-C part applies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _set_parent_death_signal(signal.SIGKILL):
        return
    if os.getppid() != parent_pid and not pid_alive(parent_pid):
        os._exit(1)


F = TypeVar("F", bound=Future[Any])
# how often the parent wakes while it waits for its workers: the longest a Ctrl-C waits
POLL_S = 0.25


def completed(futures: Iterable[F]) -> Iterator[F]:
    """``as_completed`` that a Ctrl-C always interrupts: each future once, as it finishes
    (those already finished first, in submission order). A terminal's SIGINT can land on one
    of the executor's threads instead of the main one; a main thread blocked in a lock
    without a timeout then never runs the handler (``as_completed`` hangs so:
    tests/simulator/test_processes.py). Waiting in slices of ``POLL_S`` lets it run."""
    done: queue.SimpleQueue[Future[Any]] = queue.SimpleQueue()
    n = 0
    for f in futures:
        f.add_done_callback(done.put)  # at once if already finished
        n += 1
    for _ in range(n):
        while True:
            try:
                item = done.get(timeout=POLL_S)
                break
            except queue.Empty:
                pass  # woke to let a pending signal handler run
        yield cast(F, item)  # one of ``futures``, handed back by its callback


def worker_pool(workers: int, context: BaseContext | None = None) -> ProcessPoolExecutor:
    """A process pool whose workers die with this process (:func:`die_with_parent`). Keep
    it in the thread that created it: the kernel's parent-death signal follows the thread
    that forked each worker."""
    return ProcessPoolExecutor(
        max_workers=max(1, workers),
        mp_context=context,
        initializer=die_with_parent,
        initargs=(os.getpid(),),
    )


def stop_pool(pool: ProcessPoolExecutor, exc: BaseException) -> None:
    """Stop a pool on ``exc``: queued work is dropped; on Ctrl-C the running workers are
    killed at once (their results would be thrown away), otherwise (a failed run, a stop
    raised by a progress callback) the running ones finish first."""
    if isinstance(exc, KeyboardInterrupt):
        processes: dict[int, Any] = getattr(pool, "_processes", None) or {}
        for proc in list(processes.values()):
            with contextlib.suppress(OSError, ValueError):  # already gone, or closed
                proc.kill()
    pool.shutdown(wait=True, cancel_futures=True)


def _run_ray(
    todo: list[tuple[Chain, list[Path]]],
    store: Callable[[Chain, list[Path], list[dict[str, Any]]], None],
    workers: int,
    address: str | None,
) -> None:
    try:
        import ray
    except ImportError:
        raise SpecError(
            "(arguments)", "executor", "ray is not installed (pip install ray, or the [ray] extra)"
        ) from None
    started = not ray.is_initialized()
    if started:
        if address is None:  # a local instance for this search
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    try:
        remote = ray.remote(run_chain)
        pending = {remote.remote(*_payload(chain)): (chain, paths) for chain, paths in todo}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                chain, paths = pending.pop(ref)
                _finished(store, chain, paths, functools.partial(ray.get, ref))
    finally:
        if started:
            ray.shutdown()
