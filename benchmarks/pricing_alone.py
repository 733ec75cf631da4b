"""Step pricing alone: the 710-session agentic replay's step shapes, priced again by one model.

The replay (``engine_agentic.py``'s scenario) spends about half its time pricing steps. This
separates that half from the rest: ``--capture`` runs the replay once and keeps its first
replica's step-cost model and every step shape it priced (197,862 shapes, ~33 MB, pickled);
a plain run loads them into a fresh template store and prices them all twice:

- ``first``: a new key makes its template (34,119 of them), the rest reuse one: the replay's
  own mix;
- ``hits``: every key known, every step a template reuse.

It prints both walls per repeat, their medians and fastest (``--shapes N``: the first N
shapes only, for quicker alternating pairs), the misses, and a checksum of every price
and of the latency models' tallies, so two versions of the pricing code can be compared for
speed and for exactness in one go (run each, alternating, on the same capture; a capture
holds the model as pickled by the code that made it, so take a new one when the model's
fields change).

Run:  .venv/bin/python benchmarks/pricing_alone.py --capture [--out /tmp/pricing-alone.pkl]
      .venv/bin/python benchmarks/pricing_alone.py [--out /tmp/pricing-alone.pkl] [--repeats 3]
                                                   [--shapes 40000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import statistics
import struct
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from engine_agentic import TRACE, agentic_scenario

from simulator.cost.compiled import CompiledPricer, clear_shared_templates
from simulator.cost.shapes import StepShape
from simulator.cost.step import StepCostModel
from simulator.simulation import simulate


def capture(trace: Path, out: Path) -> None:
    shapes: list[StepShape] = []
    models: list[StepCostModel] = []
    price = StepCostModel.price

    def recording(self: StepCostModel, shape: StepShape, detail: bool = False) -> Any:
        if not models:
            models.append(self)
        if self is models[0]:
            shapes.append(shape)
        return price(self, shape, detail)

    StepCostModel.price = recording  # type: ignore[method-assign]
    try:
        simulate(agentic_scenario(trace))
    finally:
        StepCostModel.price = price  # type: ignore[method-assign]
    model = models[0]
    model.pricer = None  # type: ignore[assignment]  # rebuilt on load: a fresh store
    with out.open("wb") as fh:
        pickle.dump((model, shapes), fh)
    print(f"captured {len(shapes):,} step shapes -> {out}")


def measure(out: Path, repeats: int, first: int | None = None) -> None:
    with out.open("rb") as fh:
        model, shapes = pickle.load(fh)
    shapes = shapes[:first]
    firsts, hits, digests, misses = [], [], set(), 0
    for _ in range(repeats):
        clear_shared_templates()
        lat = model.latency
        for tally in (lat.queries, lat.extrapolations, lat.seconds_by_source):
            tally.clear()
        model.pricer = CompiledPricer(model)
        t0 = time.perf_counter()
        first = [model.price(s) for s in shapes]
        t1 = time.perf_counter()
        again = [model.price(s) for s in shapes]
        t2 = time.perf_counter()
        firsts.append(t1 - t0)
        hits.append(t2 - t1)
        misses = model.pricer.misses
        h = hashlib.sha256()
        for c in first + again:
            h.update(struct.pack("ddd", c.seconds, c.gpu_s, c.cpu_s))
            h.update(struct.pack(f"{len(c.breakdown_s)}d", *c.breakdown_s.values()))
        for tally in (lat.queries, lat.extrapolations, lat.seconds_by_source):
            h.update(repr(sorted(tally.items())).encode())
        digests.add(h.hexdigest()[:16])
        print(f"first {t1 - t0:.2f} s   hits {t2 - t1:.2f} s")
    n = len(shapes)
    f, r = statistics.median(firsts), statistics.median(hits)
    digest = " ".join(sorted(digests)) + ("" if len(digests) == 1 else "  (repeats DIFFER)")
    print(f"{n:,} shapes, {misses:,} misses (templates made), checksum {digest}")
    print(f"first pass median {f:.2f} s ({f / n * 1e6:.0f} us a step), fastest {min(firsts):.2f} s")
    print(f"all hits median   {r:.2f} s ({r / n * 1e6:.0f} us a step), fastest {min(hits):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", action="store_true", help="run the replay, keep its shapes")
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--out", type=Path, default=Path("/tmp/pricing-alone.pkl"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shapes", type=int, help="price only the first N shapes (quicker)")
    args = parser.parse_args()
    if args.capture:
        if not args.trace.exists():
            raise SystemExit(f"trace not found: {args.trace} (clone beside ../shared)")
        capture(args.trace, args.out)
    else:
        if not args.out.exists():
            raise SystemExit(f"{args.out}: no capture yet (run with --capture first)")
        measure(args.out, args.repeats, args.shapes)


if __name__ == "__main__":
    main()
