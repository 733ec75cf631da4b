"""Worker processes die with their parent (PR_SET_PDEATHSIG), Ctrl-C stops a pool at once,
and the per-point cache of the validation runs (``run_cached``) reads back what it wrote."""

from __future__ import annotations

import ctypes
import math
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest

from simulator.planner.executor import completed, die_with_parent, stop_pool, worker_pool
from simulator.specs.serving import ServingConfig
from simulator.validation.points import benchmark_scenario
from simulator.validation.runner import run_cached, run_parallel

REPO = Path(__file__).resolve().parents[2]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux only")
PR_GET_PDEATHSIG = 2


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


POOL_SCRIPT = textwrap.dedent(
    """
    import multiprocessing as mp, sys, time
    from simulator.planner.executor import worker_pool

    pool = worker_pool(2, mp.get_context(sys.argv[1]))
    futures = [pool.submit(time.sleep, 60) for _ in range(4)]
    while len(pool._processes) < 2:
        time.sleep(0.01)
    time.sleep(float(sys.argv[2]))  # let the workers reach their initializer
    print(*pool._processes, flush=True)
    time.sleep(60)
    """
)


@linux
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_die_with_a_killed_parent(method: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", POOL_SCRIPT, method, "3" if method == "spawn" else "0.5"],
        cwd=REPO, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    workers = [int(p) for p in proc.stdout.readline().split()]
    assert len(workers) == 2
    assert all(_alive(p) for p in workers)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    assert _gone_within(workers, 5) == []


def _armed() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    sig = ctypes.c_int(0)
    libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(sig), 0, 0, 0)
    ok = sig.value == signal.SIGKILL and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    os._exit(0 if ok else 3)


def _initialised(parent: int, then: bool) -> None:
    die_with_parent(parent)
    if then:
        _armed()
    os._exit(0)


@linux
def test_initializer_arms_the_signal_and_closes_the_race() -> None:
    ctx = mp.get_context("fork")
    child = ctx.Process(target=_initialised, args=(os.getpid(), True))
    child.start()
    child.join(10)
    assert child.exitcode == 0  # SIGKILL armed, Ctrl-C ignored
    # a worker whose parent died before the prctl was armed: nothing would kill it, it exits
    gone = subprocess.Popen(["true"])
    gone.wait()
    child = ctx.Process(target=_initialised, args=(gone.pid, False))
    child.start()
    child.join(10)
    assert child.exitcode == 1


def test_ctrl_c_kills_the_running_workers_at_once() -> None:
    pool = worker_pool(2)
    futures = [pool.submit(time.sleep, 60) for _ in range(4)]
    while len(pool._processes) < 2:  # type: ignore[attr-defined]
        time.sleep(0.01)
    workers = list(pool._processes)  # type: ignore[attr-defined]
    start = time.monotonic()
    stop_pool(pool, KeyboardInterrupt())
    assert time.monotonic() - start < 10
    assert _gone_within(workers, 5) == []
    assert all(f.done() for f in futures)


# A process started at a terminal handles SIGINT; one started by a shell's background job
# (`make test &`, nohup, some CI runners) inherits it ignored, and Python keeps it ignored:
# the scripts restore the terminal's default, or these tests would hang for that reason alone
CTRL_C_SCRIPT = textwrap.dedent(
    """
    import faulthandler, signal, time
    from simulator.validation.runner import run_parallel

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # where a hang is, for the test
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal

    run_parallel(time.sleep, [60.0] * 4, lambda s: s, workers=2,
                 on_result=lambda i, r: None)
    """
)


@linux
def test_ctrl_c_at_the_terminal_stops_everything_with_one_traceback() -> None:
    """SIGINT to the whole process group (what a terminal's Ctrl-C sends): the workers ignore
    it, the parent kills them and ends with its KeyboardInterrupt."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_SCRIPT], cwd=REPO, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    workers: list[int] = []
    while len(workers) < 2 and time.monotonic() < deadline:
        workers = [
            int(d.name)
            for d in Path("/proc").iterdir()
            if d.name.isdigit() and _ppid(d) == proc.pid
        ]
        time.sleep(0.05)
    assert len(workers) >= 2
    time.sleep(1.0)  # the workers are in their task
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:  # do not leave the group running into later tests
        os.kill(proc.pid, signal.SIGUSR1)  # its threads' stacks to stderr (faulthandler)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"the parent did not stop within 15 s of the Ctrl-C:\n{err[-4000:]}")
    assert proc.returncode != 0
    assert err.count("Traceback") == 1
    assert err.rstrip().endswith("KeyboardInterrupt")
    assert _gone_within(workers, 5) == []


# SIGINT delivered to a thread other than the main one, as a terminal's Ctrl-C can land on
# an executor's thread: the main thread, waiting for a future, must still stop
OTHER_THREAD_SCRIPT = textwrap.dedent(
    """
    import signal, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor, as_completed
    from simulator.planner.executor import completed

    signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal

    gate = threading.Event()
    pool = ThreadPoolExecutor(1)
    future = pool.submit(gate.wait)  # done only when told

    def ctrl_c_on_this_thread():
        time.sleep(0.3)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    threading.Thread(target=ctrl_c_on_this_thread, daemon=True).start()
    wait_for = completed if sys.argv[1] == "completed" else as_completed
    try:
        for _ in wait_for([future]):
            pass
    except KeyboardInterrupt:
        print("interrupted")
    finally:
        gate.set()
        pool.shutdown()
    """
)


@linux
@pytest.mark.parametrize(("waiter", "stops"), [("completed", True), ("as_completed", False)])
def test_a_ctrl_c_on_another_thread_stops_the_wait_for_results(waiter: str, stops: bool) -> None:
    """``executor.completed`` wakes every ``POLL_S``, so the main thread runs the SIGINT
    handler even when the signal landed on another thread; ``as_completed``, which the pools
    used before, waits on: the second case shows the test can tell them apart."""
    try:
        got = subprocess.run(
            [sys.executable, "-c", OTHER_THREAD_SCRIPT, waiter], cwd=REPO,
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        assert not stops, f"{waiter} did not stop within 10 s of the Ctrl-C"
        return
    assert stops, f"{waiter} stopped: {got.stdout!r}"
    assert got.stdout.strip() == "interrupted", got.stderr


def test_completed_yields_every_future_once_the_finished_ones_in_submission_order() -> None:
    ready: list[Future[int]] = [Future() for _ in range(4)]
    for i in (2, 0, 3, 1):  # all done before the wait: submission order
        ready[i].set_result(i)
    assert list(completed(ready)) == ready
    late: list[Future[int]] = [Future() for _ in range(3)]
    late[1].set_result(1)
    timers = [threading.Timer(0.05 * (i + 1), late[i].set_result, (i,)) for i in (0, 2)]
    for t in timers:
        t.start()
    got = list(completed(late))  # one now, two later
    assert got[0] is late[1]
    assert sorted(f.result() for f in got) == [0, 1, 2]
    assert len(got) == 3


def _ppid(d: Path) -> int:
    try:
        return int((d / "stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def test_run_parallel_keeps_the_input_order_and_reports_each_result() -> None:
    items = [float(x) for x in range(9)]
    seen: dict[int, float] = {}
    done: list[int] = []
    got = run_parallel(
        math.sqrt, items, lambda x: x, workers=2,
        progress=lambda n, total, _: done.append(n), on_result=seen.__setitem__,
    )  # fmt: skip
    assert got == [math.sqrt(x) for x in items]
    assert seen == dict(enumerate(got))
    assert done == list(range(1, 10))
    with pytest.raises(ValueError, match="math domain error"):
        run_parallel(math.sqrt, [4.0, -1.0, 9.0], lambda x: x, workers=2)


@dataclass(frozen=True)
class Result:
    point: float
    value: float
    note: str | None = None


CALLS: list[float] = []


def _root(x: float) -> Result:
    CALLS.append(x)
    return Result(x, math.sqrt(x), "ok")


def _scenario(x: float):  # type: ignore[no-untyped-def]
    return benchmark_scenario(f"x {x}", "llama-3.1-8b", "h100", ServingConfig(tp=1), 8, 8, 1)


def test_run_cached_reads_back_and_redoes_only_what_is_missing(tmp_path: Path) -> None:
    items = [1.0, 4.0, 9.0]
    CALLS.clear()
    first = run_cached(_root, items, lambda x: x, _scenario, Result, tmp_path, workers=1)
    assert items == CALLS
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 3
    assert not list(tmp_path.glob(".*.tmp"))
    CALLS.clear()
    done: list[int] = []
    again = run_cached(
        _root, items, lambda x: x, _scenario, Result, tmp_path,
        progress=lambda n, total, _: done.append(n),
    )  # fmt: skip
    assert again == first
    assert CALLS == []
    assert done == [3]
    files[0].write_text('{"scenario": "x", "result": {"value": 2.0}}')  # fields missing
    files[1].write_text('{"scenario": "x", "res')  # truncated
    again = run_cached(_root, items, lambda x: x, _scenario, Result, tmp_path)
    assert again == first
    assert len(CALLS) == 2
    CALLS.clear()
    assert run_cached(_root, items, lambda x: x, _scenario, Result, None) == first
    assert items == CALLS


@pytest.mark.parametrize(
    "entry",
    [
        '{"result": {"value": "abc", "note": "ok"}}',  # a string where a number belongs
        '{"result": {"value": -5.0, "note": "ok"}}',  # printed as an error of -107 %
        '{"result": {"value": true, "note": "ok"}}',  # JSON's true is not a number
        '{"result": {"value": null, "note": "ok"}}',  # not optional
        '{"result": {"value": 2.0, "note": 7}}',  # a number where a string belongs
        None,  # a folder where the file should be: an IsADirectoryError, exit 1
    ],
)
def test_an_edited_or_broken_cache_entry_is_simulated_again(tmp_path: Path, entry) -> None:
    items = [4.0]
    first = run_cached(_root, items, lambda x: x, _scenario, Result, tmp_path)
    (path,) = tmp_path.glob("*.json")
    if entry is None:
        path.unlink()
        path.mkdir()
    else:
        path.write_text(entry)
    CALLS.clear()
    assert run_cached(_root, items, lambda x: x, _scenario, Result, tmp_path) == first
    assert items == CALLS
