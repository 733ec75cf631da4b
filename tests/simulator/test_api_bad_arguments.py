"""The Python API refuses what its commands refuse, with the same one-line SpecError and
before any work: no run cap, no worker check, unchecked memory arguments and callbacks were a
24 GB out-of-memory kill, a hang of thousands of processes, ``fits=True`` for zero sequences
and TypeErrors from inside the engine. Table-driven: (id, call, field, fragment)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator import plan_memory, search, simulate, size
from simulator.specs import SpecError

TINY = Path(__file__).parents[1] / "app" / "tiny_search.yaml"
SCENARIO = {
    "name": "x", "model": "llama-3.1-8b", "device": "h100",
    "workload": {"kind": "random", "input_tokens": 64, "output_tokens": 8, "num_requests": 4,
                 "concurrency": 2},
}  # fmt: skip


def tiny(**changes: Any) -> dict[str, Any]:
    return {**yaml.safe_load(TINY.read_text()), **changes}


def sized(**options: Any) -> Callable[[], object]:
    fields = {"users": 8, "slo_interactivity_tok_per_s": 20.0, "devices": ["h100"],
              "quick": True, "seeds": 1, **options}  # fmt: skip
    return lambda: size("llama-3.1-8b", **fields)


CASES: list[tuple[str, Callable[[], object], str, str]] = [
    # 30,000 runs started (plan search refuses past 20,000); seeds 10^9 was OOM-killed
    ("search-past-the-cap", lambda: search(tiny(seeds=30_000)), "(search size)",
     "exceed the cap of 20,000"),
    ("search-max-runs-lowered", lambda: search(tiny(), max_runs=3), "(search size)",
     "exceed the cap of 3"),
    # 10^6 workers hung starting thousands of processes; "2" / None / 1.5 were TypeErrors
    ("search-workers-huge", lambda: search(tiny(), workers=10**6), "workers",
     "local worker processes"),
    ("search-workers-str", lambda: search(tiny(), workers="2"), "workers", "an integer"),
    ("search-workers-none", lambda: search(tiny(), workers=None), "workers", "an integer"),
    ("search-workers-float", lambda: search(tiny(), workers=1.5), "workers", "an integer"),
    ("search-workers-zero", lambda: search(tiny(), workers=0), "workers", "at least 1"),
    ("size-workers-huge", sized(workers=10**6), "workers", "local worker processes"),
    ("search-progress-str", lambda: search(tiny(), progress="yes"), "progress", "a function"),
    # the engine called it at the first finished request: a TypeError from inside SimPy
    ("simulate-progress-str", lambda: simulate(SCENARIO, progress="yes"), "progress",
     "a function"),
    # isl / osl were dropped without a word for another workload (plan size refuses them)
    ("size-isl-with-agentic", sized(workload="agentic", isl=256), "isl",
     "--workload is agentic"),
    ("size-osl-default-workload", sized(osl=32), "osl", "--workload is agentic"),
    # a string was read one character at a time; None an AttributeError in the parser
    ("size-overrides-string", sized(overrides="duration_s=60"), "overrides", "a list of"),
    ("size-overrides-none-item", sized(overrides=[None]), "overrides", "got None"),
    ("size-overrides-int-item", sized(overrides=[60]), "overrides", "got 60"),
    # 0 / negative gave fits=True with negative KV bytes; NaN / inf / str internal errors
    ("memory-context-zero", lambda: plan_memory("llama-3.1-8b", "h100", context_tokens=0),
     "context_tokens", "at least 1, got 0"),
    ("memory-context-negative", lambda: plan_memory("llama-3.1-8b", "h100", context_tokens=-5),
     "context_tokens", "at least 1"),
    ("memory-context-nan",
     lambda: plan_memory("llama-3.1-8b", "h100", context_tokens=float("nan")),
     "context_tokens", "an integer"),
    ("memory-context-str", lambda: plan_memory("llama-3.1-8b", "h100", context_tokens="8192"),
     "context_tokens", "an integer"),
    ("memory-context-huge", lambda: plan_memory("llama-3.1-8b", "h100", context_tokens=10**30),
     "context_tokens", "exceeds 10,000,000"),
    ("memory-seqs-zero", lambda: plan_memory("llama-3.1-8b", "h100", num_seqs=0), "num_seqs",
     "at least 1"),
    ("memory-seqs-bool", lambda: plan_memory("llama-3.1-8b", "h100", num_seqs=True), "num_seqs",
     "an integer"),
    ("memory-model-none", lambda: plan_memory(None, "h100"), "model", "a string"),
    ("memory-device-none", lambda: plan_memory("llama-3.1-8b", None), "device", "a string"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "field", "fragment"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_a_bad_argument_is_one_spec_error(
    call: Callable[[], object], field: str, fragment: str
) -> None:
    with pytest.raises(SpecError) as caught:
        call()
    assert caught.value.field == field, str(caught.value)
    assert fragment in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


def test_good_arguments_still_answer() -> None:
    report = plan_memory("llama-3.1-8b", "h100", context_tokens=4096, num_seqs=2)
    assert report.fits
    assert report.kv_bytes_per_seq_per_gpu > 0
