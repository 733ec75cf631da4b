"""Step pricing compiled per token-count key: the ops that do not see the context priced once.

A step's op lines split in two. Most (projections, MLP / MoE, norms, the LM head, the
collectives) depend only on the step's token counts: the number of decodes and their tokens,
the number of prefill chunks and theirs (``Key``). The attention cores (and the few lines
sized by the cached context: MLA's ``kv_b`` re-projection, DCP's prefill all-gather) depend on
the context sums too, which differ in every step. So the first step of each key records
every line, prices all but the context lines (``row_totals(static_only=True)``) and keeps
them as a :class:`Template`: every line's seconds, and where the context lines sit. Every
step of the key, the first included, records and prices only those lines
(``StepOps.static_off``) and drops them into the template's places; the sums then run over
the same lines in the same order as ``StepOps.finish`` would, so the price is the full
path's, to the last bit in practice (the context lines go through the same vectorised
formulas in a shorter array; ``tests/simulator/cost/test_compiled.py``, ``benchmarks/golden.py``).

The latency models' bookkeeping (queries, extrapolations, seconds by source, the measured
curves' query counts) advances by the template's share of them on every reuse, measured while
the template was priced.

Templates are kept per process, not per model: every ``StepCostModel`` of the same pricing
identity (card, device, the serving config less the fields only the scheduler, the cache and
the API server read (``NOT_PRICED``), fitted latency models, the same measured-tables object)
shares one store, so the runs of a search (seeds, loads, the configurations that differ in
``max_num_seqs`` or ``max_num_batched_tokens`` alone) and the replicas of a run reuse each
other's templates. A template is a function of that identity and its key alone (the key
holds the step's padded token count, which the CUDA-graph sizes decide), so sharing changes
no price (``benchmarks/golden.py``; ``tests/simulator/cost/test_compiled.py``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from simulator.cost.layers import StepOps
from simulator.cost.shapes import CATEGORIES, StepCost, StepShape

if TYPE_CHECKING:
    from simulator.cost.step import StepCostModel
    from simulator.measured.lookup import Curve

Key = tuple[int, int, int, int, int]  # decodes, decode tokens, prefills, prefill tokens, padded
# serving fields no step price reads (scheduling, cache and memory, the API server): left out
# of the pricing identity. A field not named here is in it, so a new one is safe by default
NOT_PRICED = frozenset(
    {
        "gpu_memory_utilization",
        "kv_cache_memory_bytes",
        "max_num_batched_tokens",
        "max_num_seqs",
        "api_server_count",
        "max_model_len",
        "enable_prefix_caching",
        "prefix_cache_retention_interval",
        "hybrid_store_attention_remainder",
        "runtime_reserve_bytes",
        "cpu_offload_bytes",
        "decoder_kv_blocks_ttl_s",
        "kv_recompute_threshold_tokens",
    }
)
# templates kept, least recently used dropped first: a bound on memory. A template's own
# numbers are ~1.3 KB (its row and collective totals, its seconds by source); what only the
# step's structure decides (row categories, context-line places, query counts, curves) is
# shared between templates (``_Interned``). The 710-session agentic replay makes 34,302 keys.
MAX_TEMPLATES = 40_000
# pricing identities whose stores are kept, least recently used dropped first (a search worker
# runs hundreds of configurations); a new store also drops old ones while they hold more than
# MAX_TEMPLATES between them
MAX_STORES = 32


@dataclass(slots=True)
class _Counts:
    """What one pricing added to the latency models' bookkeeping (``_Counting``)."""

    queries: Counter[str]
    extrapolations: Counter[str]
    by_source: dict[str, float]
    curves: dict[int, tuple[Curve, int, int]]  # id -> (curve, queries, outside)

    def add_to(self, model: StepCostModel, curves: bool = True) -> None:
        """Add these counts to the model's latency models and (``curves``) its curves."""
        lat = model.latency
        q, e, src = lat.queries, lat.extrapolations, lat.seconds_by_source
        for k, v in self.queries.items():
            q[k] += v
        for k, v in self.extrapolations.items():
            e[k] += v
        for k, secs in self.by_source.items():
            src[k] += secs
        if curves:
            for c, n, o in self.curves.values():
                c.queries += n
                c.outside += o


class _Counting:
    """The bookkeeping of one pricing on its own: the latency models tally into fresh
    counters while it runs (``end`` adds them to the model's and returns them, without the
    entries left at zero), and ``curves``' counts are read before and after. Cheaper than
    two snapshots of the model's whole tallies and their difference, and a template's
    seconds by source are then its own sums, not a difference of two running totals."""

    __slots__ = ("curves", "lat", "model", "saved")

    def __init__(self, model: StepCostModel, curves: list[Curve]) -> None:
        lat = self.lat = model.latency
        self.model = model
        self.saved = (lat.queries, lat.extrapolations, lat.seconds_by_source)
        lat.queries, lat.extrapolations = Counter(), Counter()
        lat.seconds_by_source = defaultdict(float)
        self.curves = {id(c): (c, c.queries, c.outside) for c in curves}

    def end(self) -> _Counts:
        lat = self.lat
        curves = {}
        for k, (c, n0, o0) in self.curves.items():
            if c.queries != n0 or c.outside != o0:
                curves[k] = (c, c.queries - n0, c.outside - o0)
        counts = _Counts(
            +lat.queries, +lat.extrapolations,
            {k: v for k, v in lat.seconds_by_source.items() if v}, curves,
        )  # fmt: skip
        lat.queries, lat.extrapolations, lat.seconds_by_source = self.saved
        counts.add_to(self.model, curves=False)  # the curves counted themselves
        return counts


@dataclass(slots=True)
class Template:
    """One key's full pricing: per-line totals, and the places of the context lines."""

    total: NDArray[np.float64]  # every row's seconds x count (context rows overwritten)
    cats: NDArray[np.int64]
    dyn_rows: NDArray[np.int64]  # positions of the context rows, in recording order
    coll_total: NDArray[np.float64]
    dyn_colls: NDArray[np.int64]
    fused: bool
    static: _Counts  # bookkeeping of the lines the template stands for


class _Interned:
    """One shared copy of each equal structural part of a template (read only once stored):
    a long replay's templates differ in their numbers, not in their structure."""

    def __init__(self) -> None:
        self._arrays: dict[bytes, NDArray[np.int64]] = {}
        self._counters: dict[tuple[tuple[str, int], ...], Counter[str]] = {}
        self._curves: dict[tuple[tuple[int, int, int], ...], dict[int, tuple[Curve, int, int]]] = {}

    def array(self, values: list[int]) -> NDArray[np.int64]:
        arr = np.array(values, dtype=np.int64)
        return self._arrays.setdefault(arr.tobytes(), arr)

    def counter(self, c: Counter[str]) -> Counter[str]:
        return self._counters.setdefault(tuple(c.items()), c)

    def counts(self, c: _Counts) -> _Counts:
        key = tuple((k, n, o) for k, (_, n, o) in c.curves.items())
        curves = self._curves.setdefault(key, c.curves)
        return _Counts(self.counter(c.queries), self.counter(c.extrapolations), c.by_source, curves)


def _curves(ops: StepOps) -> list[Curve]:
    out = [c for c, _ in ops.curves.values()]
    return out + [c[5] for c in ops.colls if c[5] is not None]


FullKey = tuple[Key, tuple[str, ...], tuple[str, ...]]


class _Store:
    """The templates of one pricing identity, and their shared structural parts."""

    __slots__ = ("shared", "tables", "templates")

    def __init__(self, tables: object) -> None:
        # per key, per set of context lines (MLA's kv_b re-projection runs only when a chunk
        # has cached context): the template; least recently used first
        self.templates: dict[FullKey, Template] = {}
        self.shared = _Interned()
        self.tables = tables  # the measured-tables object the templates were priced with


_STORES: dict[str, _Store] = {}  # by pricing identity, least recently used first


def _identity(model: StepCostModel) -> str:
    """Everything a template's numbers depend on besides its key (the tables by identity;
    the CUDA-graph sizes act through the key's padded token count)."""
    lat = model.latency
    fitted = sorted((k, v.model_dump_json()) for k, v in lat.fitted.items())
    return "|".join(
        (
            model.card.model_dump_json(),
            model.device.model_dump_json(),
            model.serving.model_dump_json(exclude=set(NOT_PRICED)),
            repr(fitted),
            repr(sorted(lat.calibrated)),
            str(id(lat.tables)),
        )
    )


def _store_for(model: StepCostModel) -> _Store:
    key = _identity(model)
    store = _STORES.pop(key, None)
    if store is None or store.tables is not model.latency.tables:
        store = _Store(model.latency.tables)
        held = sum(len(s.templates) for s in _STORES.values())
        while _STORES and (len(_STORES) >= MAX_STORES or held > MAX_TEMPLATES):
            held -= len(_STORES.pop(next(iter(_STORES))).templates)
    _STORES[key] = store  # now the most recently used
    return store


def clear_shared_templates() -> None:
    """Forget every kept template (tests that count template misses start from none)."""
    _STORES.clear()


class CompiledPricer:
    """``price(shape)`` of one ``StepCostModel`` through per-key templates, kept in the
    process-wide store of the model's pricing identity."""

    def __init__(self, model: StepCostModel) -> None:
        self.m = model
        store = _store_for(model)
        self.templates = store.templates
        self.hits = 0
        self.misses = 0
        self._shared = store.shared

    def price(self, shape: StepShape) -> StepCost:
        dyn = StepOps(self.m, shape)
        key = (
            shape.num_decodes, shape.decode_tokens, shape.num_prefills, shape.prefill_tokens,
            int(dyn.t),
        )  # fmt: skip
        dyn.static_off = True
        dyn.build()
        names = tuple(r[0] for r in dyn.rows)
        full_key = (key, names, tuple(c[0] for c in dyn.colls))
        tpl = self.templates.pop(full_key, None)
        if tpl is not None:
            self.templates[full_key] = tpl  # now the most recently used
            self.hits += 1
            tpl.static.add_to(self.m)
            return self._reuse(tpl, dyn)
        self.misses += 1
        return self._full(full_key, shape, dyn)

    def _full(self, key: FullKey, shape: StepShape, dyn: StepOps) -> StepCost:
        """Make the key's template (its lines priced, the context lines left out, and the
        bookkeeping that pricing did), then price the step through it as a reuse would."""
        full = StepOps(self.m, shape)
        full.build()
        counting = _Counting(self.m, _curves(full))
        try:
            total = full.row_totals(static_only=True) if full.rows else np.zeros(0)
            coll = full.collective_totals(static_only=True) if full.colls else np.zeros(0)
        finally:
            counts = counting.end()
        if len(self.templates) >= MAX_TEMPLATES:
            del self.templates[next(iter(self.templates))]  # the least recently used
        shared = self._shared
        tpl = self.templates[key] = Template(
            total=total,
            cats=shared.array([r[2] for r in full.rows]),
            dyn_rows=shared.array([i for i, d in enumerate(full.dyn) if d]),
            coll_total=coll,
            dyn_colls=shared.array([i for i, d in enumerate(full.dyn_colls) if d]),
            fused=full.fused,
            static=shared.counts(counts),
        )
        return self._reuse(tpl, dyn)

    def _reuse(self, tpl: Template, dyn: StepOps) -> StepCost:
        per_cat = np.zeros(len(CATEGORIES))
        gpu = 0.0
        had_rows = len(tpl.total) > 0
        if had_rows:
            total = tpl.total.copy()
            if dyn.rows:
                total[tpl.dyn_rows] = dyn.row_totals()
            per_cat += np.bincount(tpl.cats, weights=total, minlength=len(CATEGORIES))
            gpu += float(total.sum())
        if tpl.fused:
            launches = dyn.fused_launch_s()
            per_cat[dyn.cat_index["overhead"]] += launches
            gpu += launches
        if len(tpl.coll_total):
            coll = tpl.coll_total.copy()
            if dyn.colls:
                coll[tpl.dyn_colls] = dyn.collective_totals()
            comm = float(coll.sum())
            per_cat[dyn.cat_index["communication"]] += comm
            gpu += comm
        cpu = self.m.cpu_seconds(dyn.s) if had_rows else 0.0
        return dyn.cost(gpu, cpu, per_cat, ())
