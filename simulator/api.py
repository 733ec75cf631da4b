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
from simulator.specs.limits import (
    MAX_GENERATED_SESSIONS,
    MAX_GENERATED_TOKENS,
    MAX_SEARCH_RUNS,
    check_workers,
)

if TYPE_CHECKING:
    import pandas as pd

    from simulator.memory import MemoryReport
    from simulator.planner.search import SearchResult
    from simulator.planner.sizing import SizeResult
    from simulator.simulation import SimResult
    from simulator.specs import Scenario

S = TypeVar("S", bound=Spec)


def _arg_error(field: str, reason: str) -> Exception:
    from simulator.specs.loading import SpecError

    return SpecError("(arguments)", field, reason)


def _check_progress(progress: object) -> None:
    """A ``progress`` callback must be callable: checked before any work, not at the first
    finished request, deep inside the engine."""
    if progress is not None and not callable(progress):
        raise _arg_error("progress", f"must be a function or None, got {type(progress).__name__}")


def _check_count(value: object, field: str, maximum: int) -> int:
    """An integer argument of 1 to ``maximum`` (``plan memory --context`` / ``--num-seqs``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _arg_error(field, f"must be an integer, got {value!r}")
    if value < 1:
        raise _arg_error(field, f"must be at least 1, got {value}")
    if value > maximum:
        raise _arg_error(field, f"{value:,} exceeds {maximum:,} (simulator/specs/limits.py)")
    return value


def _check_name(value: object, field: str) -> None:
    if not isinstance(value, str):
        raise _arg_error(field, f"must be a name or a path (a string), got {value!r}")


def _check_overrides(overrides: object) -> list[str]:
    """``--set`` items: a list of ``KEY=VALUE`` strings (a bare string would be read one
    character at a time)."""
    if overrides is None:
        return []
    if isinstance(overrides, str) or not isinstance(overrides, list | tuple):
        raise _arg_error("overrides", f"must be a list of 'KEY=VALUE' strings, got {overrides!r}")
    bad = [o for o in overrides if not isinstance(o, str)]
    if bad:
        raise _arg_error("overrides", f"items must be 'KEY=VALUE' strings, got {bad[0]!r}")
    return list(overrides)


def _load(kind: type[S], spec: S | str | Path | Mapping[str, Any]) -> tuple[S, str, Path]:
    """The spec, the name errors give its source, and the folder relative paths start in."""
    from simulator.specs.loading import parse
    from simulator.specs.spec_file import read_spec_file

    if isinstance(spec, kind):
        return spec, f"({kind.__name__})", Path()
    if isinstance(spec, str | Path):
        path = Path(spec)
        return parse(kind, read_spec_file(path), path), str(path), path.resolve().parent
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

    _check_progress(progress)
    spec, source, base = _load(Scenario, scenario)
    return run(spec, source, base, progress)


def search(
    space: Any,
    out: str | Path | None = None,
    workers: int = 2,
    progress: Callable[[int, int], None] | None = None,
    max_runs: int = MAX_SEARCH_RUNS,
) -> tuple[SearchResult, pd.DataFrame]:
    """Run a search space (what ``plan search`` does): the max-load search (or the grid) of
    every device x knob configuration under every seed.

    ``space`` is a ``SearchSpace``, a YAML path or a dict. Returns the ``SearchResult``
    (``.runs``: one row per point with means and 95 % intervals; ``.searches``) and the best
    configuration per device (pandas, with the fleet for the space's demand). Results are
    cached per scenario under ``out/cache`` (``out`` given; the report is then written
    there too) or the user data folder's ``cache``. A space of more than ``max_runs``
    simulations (as written, before pruning) is refused, as ``plan search --max-runs``."""
    from simulator.planner.analysis import best_per_device
    from simulator.planner.run_count import check_run_count, count_runs
    from simulator.planner.search import search_space
    from simulator.planner.space import SearchSpace

    check_workers(workers)
    _check_progress(progress)
    _check_count(max_runs, "max_runs", 10**12)
    spec, source, base = _load(SearchSpace, space)
    check_run_count(count_runs(spec, source), max_runs, source)
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
    max_runs: int = MAX_SEARCH_RUNS,
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
    from simulator.planner.sizing import SizeRequest, check_lengths, run_size
    from simulator.specs.loading import parse

    check_workers(workers)
    _check_progress(progress)
    _check_count(max_runs, "max_runs", 10**12)
    sets = _check_overrides(overrides)
    check_lengths(options.get("workload", "agentic"), options.get("isl"), options.get("osl"))
    request = parse(
        SizeRequest,
        {"model": model, "users": users,
         "slo_interactivity_tok_per_s": slo_interactivity_tok_per_s, **options},
        "(size)",
    )  # fmt: skip
    return run_size(request, None if out is None else Path(out), workers, progress,
                    overrides=sets, max_runs=max_runs)  # fmt: skip


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

    _check_name(model, "model")
    _check_name(device, "device")
    _check_count(context_tokens, "context_tokens", MAX_GENERATED_TOKENS)
    _check_count(num_seqs, "num_seqs", MAX_GENERATED_SESSIONS)
    config = parse(ServingConfig, dict(serving), "(serving)")
    devices = [catalog.hardware_profile(n) for n in catalog.device_names()]
    return plan(catalog.model_card(model), catalog.hardware_profile(device), config,
                context_tokens, num_seqs, devices)  # fmt: skip
