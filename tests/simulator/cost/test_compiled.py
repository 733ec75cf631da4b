"""Step pricing through per-key templates (``simulator.cost.compiled``) gives the price of
the full path, for steps whose context sums differ from the step the template was made on,
and keeps the latency models' bookkeeping as the full path would."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import catalog
from simulator.cost.shapes import StepShape
from simulator.cost.step import StepCostModel
from simulator.specs import ServingConfig

CASES = [  # (model, device, serving): MLA + KDA hybrid, DCP, SWA, spec decode, dense GQA
    ("kimi-k3", "mi355x", {"tp": 8}),
    ("kimi-k3", "b300", {"tp": 8, "dcp": 8}),
    ("deepseek-v3", "h200", {"tp": 8, "dcp": 4}),
    ("gpt-oss-120b", "b200", {"tp": 2}),
    ("llama-3.3-70b", "h100", {"tp": 8, "fused_decode_kernels": True}),
    ("llama-3.3-70b", "h200", {"tp": 4, "speculative": {
        "method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.7}}),
    ("qwen3-235b-a22b-fp8", "h100", {"tp": 4, "ep": 4}),
]  # fmt: skip


@pytest.fixture(autouse=True)
def _no_kept_templates() -> None:
    """Templates are kept per process: each test counts its own misses from none."""
    from simulator.cost.compiled import clear_shared_templates

    clear_shared_templates()


def _shape(rng: np.random.Generator, key: tuple[int, int, int, int]) -> StepShape:
    """A step of the key's token counts with random contexts."""
    nd, dt, np_, pt = key
    dec = rng.integers(1, 200_000, size=nd).astype(float) + dt / max(nd, 1)
    new = np.full(np_, pt / max(np_, 1))
    ctx = rng.integers(0, 100_000, size=np_).astype(float) * rng.integers(0, 2, size=np_)
    kv = ctx + new
    return StepShape(
        num_decodes=nd, decode_tokens=dt, decode_kv=float(dec.sum()),
        decode_kv_window=float(np.minimum(dec, 4096).sum()),
        decode_kv_sparse=float(np.minimum(dec, 2048).sum()),
        num_prefills=np_, prefill_tokens=pt, prefill_kv=float(kv.sum()),
        prefill_kv_window=float(np.minimum(kv, new + 4096).sum()),
        prefill_pairs=float((new * ctx + new * (new + 1) / 2).sum()),
        prefill_pairs_window=float(np.minimum(new * ctx + new * (new + 1) / 2, new * 4096).sum()),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("model", "device", "serving"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_templates_price_as_the_full_path(model: str, device: str, serving: dict) -> None:
    card, profile = catalog.model_card(model), catalog.hardware_profile(device)
    cfg = ServingConfig.model_validate(serving)
    k = cfg.num_speculative_tokens
    compiled = StepCostModel(card, profile, cfg)
    full = StepCostModel(card, profile, cfg)
    full.use_templates = False
    rng = np.random.default_rng(0)
    keys = [(64, 64 * (1 + k), 0, 0), (0, 0, 1, 2048), (100, 100 * (1 + k), 2, 1948),
            (1, 1 + k, 1, 8000), (7, 7 * (1 + k), 3, 300)]  # fmt: skip
    for _ in range(4):  # the first of each key makes its template, the others reuse it
        for key in keys:
            shape = _shape(rng, key)
            a, b = compiled.price(shape), full.price(shape)
            assert a.seconds == pytest.approx(b.seconds, rel=1e-12)
            assert a.gpu_s == pytest.approx(b.gpu_s, rel=1e-12)
            for cat, secs in b.breakdown_s.items():
                assert a.breakdown_s[cat] == pytest.approx(secs, rel=1e-9, abs=1e-15), cat
    # one template per key (MLA: two, with and without cached context to re-project)
    n_templates = 2 * len(keys) if card.mla else len(keys)
    assert compiled.pricer.misses <= n_templates
    assert compiled.pricer.hits == 4 * len(keys) - compiled.pricer.misses
    assert compiled.latency.queries == full.latency.queries
    assert compiled.latency.extrapolations == full.latency.extrapolations
    for src, secs in full.latency.seconds_by_source.items():
        assert compiled.latency.seconds_by_source[src] == pytest.approx(secs, rel=1e-9)


def test_a_step_of_another_context_is_not_priced_from_the_template() -> None:
    """The context lines are priced for each step: a longer context costs more."""
    m = StepCostModel(catalog.model_card("llama-3.3-70b"), catalog.hardware_profile("h100"),
                      ServingConfig(tp=8))  # fmt: skip
    short = StepShape(num_decodes=64, decode_tokens=64, decode_kv=64 * 1_000.0)
    long = StepShape(num_decodes=64, decode_tokens=64, decode_kv=64 * 100_000.0)
    a, b = m.price(short), m.price(long)
    assert m.pricer.hits == 1
    assert b.breakdown_s["attention"] > 10 * a.breakdown_s["attention"]


def test_least_recently_used_templates_go_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for two templates, a third key drops the least recently used one: its next
    step is priced in full again (a miss), the kept ones are reused, and the price and the
    bookkeeping stay the full path's throughout."""
    from simulator.cost import compiled as compiled_module

    monkeypatch.setattr(compiled_module, "MAX_TEMPLATES", 2)
    card, profile = catalog.model_card("llama-3.3-70b"), catalog.hardware_profile("h100")
    cfg = ServingConfig(tp=8)
    compiled = StepCostModel(card, profile, cfg)
    full = StepCostModel(card, profile, cfg)
    full.use_templates = False
    rng = np.random.default_rng(1)
    a, b, c = (8, 8, 0, 0), (16, 16, 0, 0), (0, 0, 1, 2048)
    misses = []
    for key in (a, b, a, c, b, a):  # c evicts b (a was used after b); b then evicts a
        shape = _shape(rng, key)
        assert compiled.price(shape).seconds == pytest.approx(full.price(shape).seconds, rel=1e-12)
        misses.append(compiled.pricer.misses)
    assert misses == [1, 2, 2, 3, 4, 5]
    assert len(compiled.pricer.templates) == 2
    assert compiled.latency.queries == full.latency.queries
    for src, secs in full.latency.seconds_by_source.items():
        assert compiled.latency.seconds_by_source[src] == pytest.approx(secs, rel=1e-9)


@pytest.mark.parametrize("device", ["h100", "mi355x"])  # fitted models (finite p) / priors
def test_one_row_in_scalar_arithmetic_is_the_vectorised_float(device: str) -> None:
    """``compute_seconds_one`` (a template's few context lines) gives bit for bit what the
    vectorised pass gives, and counts the same queries and extrapolations."""
    from simulator.cost.latency import LatencyModels

    profile = catalog.hardware_profile(device)
    one, mixed = LatencyModels.for_device(profile), LatencyModels.for_device(profile)
    classes = sorted({"gemm", "attn_decode", "attn_prefill", "mla_decode", "elementwise",
                      "kda_prefill", *one.fitted})  # fmt: skip
    classes = [c for c in classes if c not in ("allreduce", "allgather", "reducescatter",
                                               "alltoall")]  # fmt: skip
    rng = np.random.default_rng(1)
    n = 200
    cls = [classes[i] for i in rng.integers(0, len(classes), n)]
    flops = 10.0 ** rng.uniform(3, 15, n)
    moved = 10.0 ** rng.uniform(2, 11, n)
    peak = np.full(n, profile.peak_flops_per_s.bf16)
    kernels = rng.integers(0, 4, n).astype(float)
    want = mixed.compute_seconds_mixed(cls, flops, moved, peak, kernels)
    got = [one.compute_seconds_one(c, f, b, p, k)
           for c, f, b, p, k in zip(cls, flops, moved, peak, kernels, strict=True)]  # fmt: skip
    assert got == want.tolist()
    assert one.queries == mixed.queries
    assert one.extrapolations == mixed.extrapolations
    if device == "h100":
        assert any(np.isfinite(m.roofline.sharpness) for m in one.fitted.values() if m.roofline)
        assert sum(one.extrapolations.values()) > 0  # the range checks ran


def test_templates_of_one_structure_share_their_structural_parts() -> None:
    """Two keys of the same op structure keep one copy of the row categories, the context
    lines' places and the query counts; their numbers are their own."""
    m = StepCostModel(catalog.model_card("kimi-k3"), catalog.hardware_profile("mi355x"),
                      ServingConfig(tp=8))  # fmt: skip
    rng = np.random.default_rng(1)
    m.price(_shape(rng, (40, 40, 1, 3000)))
    m.price(_shape(rng, (40, 40, 1, 3001)))
    a, b = list(m.pricer.templates.values())
    assert a.cats is b.cats
    assert a.dyn_rows is b.dyn_rows
    assert a.static.queries is b.static.queries
    assert a.total is not b.total
    assert not np.array_equal(a.total, b.total)


def test_models_of_one_pricing_identity_share_templates() -> None:
    """A second model of the same card, device and serving config (the next run of a search)
    reuses the first one's templates and prices as the full path; another TP makes its own."""
    card, profile = catalog.model_card("llama-3.3-70b"), catalog.hardware_profile("h100")
    cfg = ServingConfig(tp=8)
    rng = np.random.default_rng(2)
    shapes = [_shape(rng, (32, 32, 1, 1000)) for _ in range(3)]
    first = StepCostModel(card, profile, cfg)
    for shape in shapes:
        first.price(shape)
    assert (first.pricer.misses, first.pricer.hits) == (1, 2)
    second = StepCostModel(card, profile, cfg)
    full = StepCostModel(card, profile, cfg)
    full.use_templates = False
    for shape in shapes:
        assert second.price(shape).seconds == pytest.approx(full.price(shape).seconds, rel=1e-12)
    assert (second.pricer.misses, second.pricer.hits) == (0, 3)
    assert second.latency.queries == full.latency.queries
    for src, secs in full.latency.seconds_by_source.items():
        assert second.latency.seconds_by_source[src] == pytest.approx(secs, rel=1e-9)
    other = StepCostModel(card, profile, ServingConfig(tp=4))
    other.price(shapes[0])
    assert other.pricer.misses == 1


def test_configs_that_differ_in_scheduling_alone_share_templates() -> None:
    """Serving fields no price reads (``compiled.NOT_PRICED``: batch limits, memory, the
    cache, the API server) do not split the store; CUDA-graph sizes (from ``max_num_seqs``)
    act through the padded token count in the key: a decode step padded alike is shared, one
    padded otherwise makes its own. Every price is the full path's, bit for bit."""
    from simulator.cost import compiled as compiled_module

    compiled_module.clear_shared_templates()
    card, profile = catalog.model_card("llama-3.3-70b"), catalog.hardware_profile("h100")
    rng = np.random.default_rng(5)
    shapes = [_shape(rng, (24, 24, 1, 700)), _shape(rng, (24, 24, 0, 0)),
              _shape(rng, (100, 100, 0, 0))]  # fmt: skip
    first = StepCostModel(card, profile, ServingConfig(tp=8))  # graphs up to 512 tokens
    for shape in shapes:
        first.price(shape)
    assert first.pricer.misses == 3
    fields = {
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 32,
        "gpu_memory_utilization": 0.8,
        "enable_prefix_caching": False,
        "cpu_offload_bytes": 2**34,
        "api_server_count": 2,
    }
    assert set(fields) <= compiled_module.NOT_PRICED
    cfg = ServingConfig(tp=8, **fields)  # type: ignore[arg-type]
    second = StepCostModel(card, profile, cfg, max_num_seqs=32)  # graphs up to 64 tokens
    full = StepCostModel(card, profile, cfg, max_num_seqs=32)
    full.use_templates = False
    for shape in shapes:
        assert second.price(shape) == full.price(shape)
    # the chunk and the 24 decodes (padded to 24 both ways) are shared; 100 decodes pad to
    # 104 under graphs to 512 and run unpadded beyond graphs to 64: a template of its own
    assert (second.pricer.misses, second.pricer.hits) == (1, 2)
    assert first.padded(shapes[2]) != second.padded(shapes[2])


def test_kept_stores_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_STORES pricing identities the least recently used store is dropped."""
    from simulator.cost import compiled as compiled_module

    monkeypatch.setattr(compiled_module, "MAX_STORES", 2)
    card, profile = catalog.model_card("llama-3.3-70b"), catalog.hardware_profile("h100")
    shape = _shape(np.random.default_rng(3), (8, 8, 0, 0))
    for tp in (2, 4, 8, 2):  # tp 2's store was dropped when tp 8's came
        m = StepCostModel(card, profile, ServingConfig(tp=tp))
        m.price(shape)
        assert m.pricer.misses == 1
    assert len(compiled_module._STORES) == 2
    again = StepCostModel(card, profile, ServingConfig(tp=8))  # kept
    again.price(shape)
    assert again.pricer.hits == 1
