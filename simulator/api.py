"""The planner from Python: ``from simulator import simulate, search, size, plan_memory``.

Each function takes what its ``plan`` command takes (a spec object, a YAML path or a plain
dict of the YAML's fields), validates it the same way (a mistake raises
:class:`simulator.specs.SpecError` naming the file, the field and the reason) and returns the
objects the command prints from. docs/python-api.md has a runnable example.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from simulator.specs.frozen import Spec

if TYPE_CHECKING:
    import pandas as pd

    from simulator.memory import MemoryReport
    from simulator.planner.search import SearchResult
    from simulator.planner.sizing import SizeResult
    from simulator.simulation import SimResult
    from simulator.specs import Scenario

S = TypeVar("S", bound=Spec)


def _load(kind: type[S], spec: S | str | Path | Mapping[str, Any]) -> tuple[S, str, Path]:
    """The spec, the name errors give its source, and the folder relative paths start in."""
    from simulator.specs.loading import parse, read_yaml

    if isinstance(spec, kind):
        return spec, f"({kind.__name__})", Path()
    if isinstance(spec, str | Path):
        path = Path(spec)
        return parse(kind, read_yaml(path), path), str(path), path.resolve().parent
    if isinstance(spec, Mapping):
        return parse(kind, dict(spec), f"({kind.__name__})"), f"({kind.__name__})", Path()
    raise TypeError(f"expected a {kind.__name__}, a YAML path or a dict, got {type(spec).__name__}")


def simulate(
    scenario: Scenario | str | Path | Mapping[str, Any],
    progress: Callable[[float, int], None] | None = None,
) -> SimResult:
    """Simulate one scenario (what ``plan run`` does).

    Returns a ``SimResult``: ``.summary`` (throughput per GPU, interactivity and TTFT
    percentiles, prefix-hit rates, ...), ``.request_table()`` and ``.step_table()`` (pandas),
    ``.memory`` (the replica's memory report), ``.wall_s``. ``progress(simulated_s,
    requests_done)`` is called as requests finish."""
    from simulator.simulation import simulate as run
    from simulator.specs import Scenario

    spec, source, base = _load(Scenario, scenario)
    return run(spec, source, base, progress)


def search(
    space: Any,
    out: str | Path | None = None,
    workers: int = 2,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[SearchResult, pd.DataFrame]:
    """Run a search space (what ``plan search`` does): the max-load search (or the grid) of
    every device x knob configuration under every seed.

    ``space`` is a ``SearchSpace``, a YAML path or a dict. Returns the ``SearchResult``
    (``.runs``: one row per point with means and 95 % intervals; ``.searches``) and the best
    configuration per device (pandas, with the fleet for the space's demand). Results are
    cached per scenario under ``out/cache`` (``out`` given; the report is then written
    there too) or the user data folder's ``cache``."""
    from simulator.planner.analysis import best_per_device
    from simulator.planner.search import search_space
    from simulator.planner.space import SearchSpace

    spec, source, base = _load(SearchSpace, space)
    found = search_space(spec, source, base, None if out is None else Path(out), workers,
                         progress)  # fmt: skip
    return found, best_per_device(found.space or spec, found.runs)


def size(
    model: str,
    users: int,
    slo_interactivity_tok_per_s: float,
    out: str | Path | None = None,
    workers: int = 2,
    progress: Callable[[int, int], None] | None = None,
    overrides: list[str] | None = None,
    **options: Any,
) -> SizeResult:
    """Size a deployment (what ``plan size`` does): the cheapest SLO-meeting fleet per device
    for ``users`` concurrent users at ``slo_interactivity_tok_per_s`` (P90).

    ``options`` are the other fields of ``SizeRequest``: ``slo_ttft_p90_s``, ``devices``,
    ``workload`` (agentic, chat, random or a trace path), ``isl``/``osl``, ``cost_model``,
    ``seeds``, ``quick``. ``overrides`` are ``plan size --set`` items (``duration_s=600``)
    applied to the search it runs. Returns a ``SizeResult``: ``.answer`` (one line),
    ``.table`` (ranked, pandas), ``.commands`` (``vllm serve`` per configuration),
    ``.not_served``."""
    from simulator.planner.sizing import SizeRequest, run_size
    from simulator.specs.loading import parse

    request = parse(
        SizeRequest,
        {"model": model, "users": users,
         "slo_interactivity_tok_per_s": slo_interactivity_tok_per_s, **options},
        "(size)",
    )  # fmt: skip
    return run_size(request, None if out is None else Path(out), workers, progress,
                    overrides=overrides)  # fmt: skip


def plan_memory(
    model: str,
    device: str,
    context_tokens: int = 8192,
    num_seqs: int = 1,
    **serving: Any,
) -> MemoryReport:
    """Memory per GPU of ``model`` on ``device`` (what ``plan memory`` prints): weights,
    activation and runtime reserves, KV cache and state per sequence at ``context_tokens``,
    the sequences that fit. ``serving`` are ``ServingConfig`` fields (``tp=8``, ``dcp=8``,
    ``kv_cache_dtype="fp8"``, ...)."""
    from simulator import catalog
    from simulator.memory import plan_memory as plan
    from simulator.specs.loading import parse
    from simulator.specs.serving import ServingConfig

    config = parse(ServingConfig, dict(serving), "(serving)")
    devices = [catalog.hardware_profile(n) for n in catalog.device_names()]
    return plan(catalog.model_card(model), catalog.hardware_profile(device), config,
                context_tokens, num_seqs, devices)  # fmt: skip
