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
import json
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from simulator.outputs import pid_alive
from simulator.planner.fingerprint import scenario_hash
from simulator.specs.loading import SpecError
from simulator.specs.scenario import Scenario


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


# more runs to make once a run's result is in (a max-load probe's other seeds, once its
# first seed meets the SLO): called with each scenario and its result, cached or fresh
Follow = Callable[[Scenario, dict[str, Any]], list[Scenario]]


def run_all(
    scenarios: list[Scenario],
    cache_dir: Path,
    workers: int = 2,
    progress: Callable[[int, int], None] | None = None,
    executor: Executor = "local",
    address: str | None = None,
    kept: KeptPool | None = None,
    follow: Follow | None = None,
) -> dict[str, dict[str, Any]]:
    """Results by scenario name; cached runs are read, the rest run ``workers`` at a time
    (local: on ``kept``'s pool when given, else on a pool of their own) or as Ray tasks.
    ``follow`` adds runs as results come in; which runs it adds depends on the results
    only, never on the order they finish in. ``progress(done, total)`` counts every run
    known so far (``total`` grows with what ``follow`` adds)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    known = 0

    def take(batch: list[Scenario]) -> list[tuple[Scenario, Path]]:
        """``batch``'s runs to make: the cached ones are answered here, and what ``follow``
        adds for them taken in turn."""
        nonlocal known
        todo, waiting = [], list(batch)
        while waiting:
            sc = waiting.pop(0)
            known += 1
            path = cache_dir / f"{scenario_hash(sc)}.json"
            cached = read_cached(path)
            if cached is None:
                todo.append((sc, path))
                continue
            results[sc.name] = cached
            if follow is not None:
                waiting.extend(follow(sc, cached))
        return todo

    def store(sc: Scenario, path: Path, out: dict[str, Any]) -> list[tuple[Scenario, Path]]:
        write_whole(path, out)
        results[sc.name] = out
        more = take(follow(sc, out)) if follow is not None else []
        if progress is not None:
            progress(len(results), known)
        return more

    todo = take(scenarios)
    if progress is not None:
        progress(len(results), known)
    if not todo:
        return results
    if executor == "ray":
        _run_ray(todo, store, workers, address)
        return results
    pool = kept.get() if kept is not None else worker_pool(workers, _context())
    try:
        running: dict[Future[dict[str, Any]], tuple[Scenario, Path]] = {}
        finished = Completions()

        def submit(items: list[tuple[Scenario, Path]]) -> None:
            for sc, path in items:
                future = pool.submit(run_scenario, sc.model_dump_json())
                running[future] = (sc, path)
                finished.add(future)

        submit(todo)
        while finished.pending:
            future = finished.next()
            sc, path = running.pop(future)
            submit(store(sc, path, future.result()))
    except BaseException as exc:  # a failed run, Ctrl-C, or a stop raised by `progress`
        stop_pool(pool, exc)
        if kept is not None:
            kept.lost()
        raise
    if kept is None:
        pool.shutdown()
    return results


def read_cached(path: Path) -> dict[str, Any] | None:
    """A cached result, or None when there is none or it cannot be read back."""
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


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


class Completions:
    """Futures as they finish, each once (those already finished when added first, in the
    order added); more can be added while waiting. A terminal's SIGINT can land on one of
    the executor's threads instead of the main one; a main thread blocked in a lock without
    a timeout then never runs the handler (``as_completed`` hangs so:
    tests/simulator/test_processes.py). Waiting in slices of ``POLL_S`` lets it run."""

    def __init__(self) -> None:
        self._done: queue.SimpleQueue[Future[Any]] = queue.SimpleQueue()
        self.pending = 0

    def add(self, future: Future[Any]) -> None:
        self.pending += 1
        future.add_done_callback(self._done.put)  # at once if already finished

    def next(self) -> Future[Any]:
        while True:
            try:
                item = self._done.get(timeout=POLL_S)
                break
            except queue.Empty:
                pass  # woke to let a pending signal handler run
        self.pending -= 1
        return item


def completed(futures: Iterable[F]) -> Iterator[F]:
    """``as_completed`` that a Ctrl-C always interrupts (:class:`Completions`)."""
    done = Completions()
    for f in futures:
        done.add(f)
    while done.pending:
        yield cast(F, done.next())  # one of ``futures``, handed back by its callback


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
    todo: list[tuple[Scenario, Path]],
    store: Callable[[Scenario, Path, dict[str, Any]], list[tuple[Scenario, Path]]],
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
        remote = ray.remote(run_scenario)
        pending: dict[Any, tuple[Scenario, Path]] = {}

        def submit(items: list[tuple[Scenario, Path]]) -> None:
            for sc, path in items:
                pending[remote.remote(sc.model_dump_json())] = (sc, path)

        submit(todo)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                sc, path = pending.pop(ref)
                submit(store(sc, path, ray.get(ref)))
    finally:
        if started:
            ray.shutdown()
