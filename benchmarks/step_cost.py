"""Step evaluations per second of the step cost model (issue: >= 10,000/s on one core).

Kimi K3 at TP8 on MI355X, priced with the profile's roofline priors:
  decode64  64 decodes at 100k context
  mixed     4 prefill chunks of 2048 tokens (contexts 0-100k) + 60 decodes at 100k
Two entry points: ``step(new, ctx)`` (per-request arrays, as a caller with a batch list would
use it) and ``price(shape)`` (the engine keeps the sums of StepShape itself). Then, at DCP 8
with 40 decodes and one prefill chunk, the engine's two cases of ``price``: ``new key`` (a
chunk of a size not seen before: the key's template is made; each eval a new size) and
``known key`` (the template reused, new contexts: docs/engine-speed.md).

Run:  .venv/bin/python benchmarks/step_cost.py [--repeats 7] [--evals 3000]
Prints the median of the repeats (this machine is shared and noisy; medians, not means).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core: numpy must not spread tiny ops

import numpy as np

from simulator import catalog
from simulator.cost.latency import LatencyModels
from simulator.cost.shapes import StepShape
from simulator.cost.step import StepCostModel, shape_of
from simulator.specs import ServingConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--evals", type=int, default=3000)
    args = parser.parse_args()
    profile = catalog.hardware_profile("mi355x")
    model = StepCostModel(
        catalog.model_card("kimi-k3"), profile, ServingConfig(tp=8), LatencyModels(profile)
    )
    batches = {
        "decode64": (np.ones(64, dtype=np.int64), np.full(64, 100_000, dtype=np.int64)),
        "mixed": (
            np.array([2048] * 4 + [1] * 60, dtype=np.int64),
            np.array([0, 20_000, 50_000, 100_000] + [100_000] * 60, dtype=np.int64),
        ),
    }
    print(f"{'batch':10} {'entry point':14} {'evals/s (median)':>17} {'us/eval':>8}")
    for name, (new, ctx) in batches.items():
        shape = shape_of(new, ctx)
        calls = {
            "step(arrays)": lambda new=new, ctx=ctx: model.step(new, ctx),
            "price(shape)": lambda shape=shape: model.price(shape),
        }
        for label, call in calls.items():
            call()
            rates = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                for _ in range(args.evals):
                    call()
                rates.append(args.evals / (time.perf_counter() - start))
            rate = statistics.median(rates)
            print(f"{name:10} {label:14} {rate:17,.0f} {1e6 / rate:8.1f}")
    # the engine's two cases: a step of a token-count key not seen before (a prompt's last
    # chunk: a template is made) and one of a known key with new contexts (a template reuse);
    # the shapes are made before the clock starts (the engine keeps the sums itself)
    dcp8 = StepCostModel(
        catalog.model_card("kimi-k3"), profile, ServingConfig(tp=8, dcp=8), LatencyModels(profile)
    )
    decodes = np.ones(40, dtype=np.int64)
    decodes_ctx = np.full(40, 80_000, dtype=np.int64)

    def new_keys(first: int) -> list[StepShape]:  # each a chunk size not seen before
        ctx = np.array([50_000, *decodes_ctx])
        return [shape_of(np.array([100 + first + i, *decodes]), ctx) for i in range(args.evals)]

    def known_key(first: int) -> list[StepShape]:  # one key, new contexts
        new = np.array([4000, *decodes])
        return [
            shape_of(new, np.array([50_000 + 100 * ((first + i) % 1000), *decodes_ctx]))
            for i in range(args.evals)
        ]

    dcp8.price(known_key(0)[0])
    for case, make in (("new key", new_keys), ("known key", known_key)):
        rates = []
        for r in range(args.repeats):
            shapes = make(r * args.evals)
            start = time.perf_counter()
            for shape in shapes:
                dcp8.price(shape)
            rates.append(args.evals / (time.perf_counter() - start))
        rate = statistics.median(rates)
        print(f"{case:10} {'price(DCP8)':14} {rate:17,.0f} {1e6 / rate:8.1f}")


if __name__ == "__main__":
    main()
