"""Built tables read back from the on-disk cache unpickle each grid at its first use only."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from simulator import catalog
from simulator.cost.latency import LatencyModels
from simulator.cost.step import StepCostModel
from simulator.measured import device
from simulator.measured.device import tables_for
from simulator.measured.grid import Grid, LazyGrids
from simulator.specs import ServingConfig


def _loaded(grids: object) -> int:
    assert isinstance(grids, LazyGrids)
    return sum(isinstance(g, Grid) for g in grids._items.values())


def test_read_back_grids_answer_as_the_built_ones_and_load_when_asked(
    fixture_tables: Path,
) -> None:
    """Every grid of every kind, read back, keeps its family order and answers bit for bit
    what the built grid answers, inside and outside its axes (the baseline bound again);
    none is unpickled before it is asked; a model pickled again half read gives the same."""
    built = tables_for(catalog.hardware_profile("h200"))
    assert built is not None
    back = pickle.loads(pickle.dumps(built))
    rng = np.random.default_rng(11)
    for kind, model in built.models.items():
        read = back.models[kind]
        assert list(read.grids) == list(model.grids), kind
        assert _loaded(read.grids) == 0
        for i, fam in enumerate(model.grids):
            assert fam in read.grids
            g, h = model.grids[fam], read.grids[fam]
            assert _loaded(read.grids) == i + 1
            lo = np.array([v[0] for v in g.values_per_axis]) / 2
            hi = np.array([v[-1] for v in g.values_per_axis]) * 2
            pts = np.exp(rng.uniform(np.log(lo), np.log(hi), size=(64, g.ndim)))
            (a, out_a), (b, out_b) = g.log_seconds(pts), h.log_seconds(pts)
            assert a.tobytes() == b.tobytes(), (kind, fam)
            assert (out_a == out_b).all(), (kind, fam)
            if i == 0:  # half read: the rest still blobs, pickled as they came
                again = pickle.loads(pickle.dumps(read))
                assert list(again.grids) == list(model.grids)
                assert again.grids[fam].log_seconds(pts)[0].tobytes() == a.tobytes()


def test_a_dense_model_never_reads_a_moe_grid(fixture_tables: Path) -> None:
    """Pricing Llama steps from the cached tables reads attention and GEMM grids only."""
    profile = catalog.hardware_profile("h200")
    tables_for(profile)  # builds and writes the cache
    device.reset()
    tables = tables_for(profile)  # read back
    assert tables is not None
    card = catalog.model_card("llama-3.3-70b")
    serving = ServingConfig(tp=8)
    model = StepCostModel(card, profile, serving, LatencyModels.for_device(profile))
    model.step(np.array([1, 1, 512]), np.array([900, 4000, 0]))
    moe = [k for k in tables.models if k.startswith("moe")]
    assert moe
    assert all(_loaded(tables.models[k].grids) == 0 for k in moe)
    assert _loaded(tables.models["attn_decode"].grids) >= 1
