"""Full garbage collections paused while an engine runs (``simulator.gc_pause``)."""

from __future__ import annotations

import gc
import threading

import pytest

from simulator.gc_pause import PAUSED_THRESHOLD, full_collections_paused


@pytest.fixture(autouse=True)
def _known_threshold() -> object:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_paused_inside_restored_after_even_when_nested_or_raising() -> None:
    with full_collections_paused():
        assert gc.get_threshold() == (700, 10, PAUSED_THRESHOLD)
        with full_collections_paused():
            pass
        assert gc.get_threshold()[2] == PAUSED_THRESHOLD  # the outer run is still going
    assert gc.get_threshold() == (700, 10, 10)
    with pytest.raises(KeyError), full_collections_paused():
        raise KeyError
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_runs_in_threads_restore_the_threshold_found_first() -> None:
    """Thread A enters, B enters, A leaves (B still paused), B leaves: the first threshold
    comes back, not B's paused one."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def run_a() -> None:
        with full_collections_paused():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def run_b() -> None:
        a_in.wait(5)
        with full_collections_paused():
            b_in.set()
            a_out.wait(5)
            seen["b_after_a"] = gc.get_threshold()[2]

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen["b_after_a"] == PAUSED_THRESHOLD
    assert gc.get_threshold() == (700, 10, 10)


def test_an_engine_run_pauses_full_collections_and_restores_them() -> None:
    from simulator.simulation import simulate
    from simulator.specs import Scenario

    scenario = Scenario.model_validate({
        "name": "gc", "model": "llama-3.1-8b", "device": "h100", "serving": {"tp": 1},
        "workload": {"kind": "random", "input_tokens": 300, "output_tokens": 20,
                     "num_requests": 6, "concurrency": 2},
    })  # fmt: skip
    during: list[int] = []
    simulate(scenario, progress=lambda _now, _done: during.append(gc.get_threshold()[2]))
    assert during
    assert set(during) == {PAUSED_THRESHOLD}
    assert gc.get_threshold() == (700, 10, 10)
