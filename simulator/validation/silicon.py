"""End-to-end validation against the measured vLLM serving points of aiconfigurator-core.

The ``aiconfigurator-core`` package (0.12.0; the planner's ``measured`` extra) ships
``systems/silicon_sample.csv``: serving points measured on real GPUs, each with its model,
system, precision, parallelism, ISL/OSL, batch size and the measured TTFT and TPOT. This
module reads and maps its vLLM aggregated points (``silicon_sim.py`` simulates them,
``silicon_report.py`` compares TTFT and TPOT). It is a validation set: nothing in the
planner is fitted or tuned to these points.

Reading of a point (the benchmark client's steady state, as the package's source
establishes: ``batch_size x attention_dp_size`` is the client's max concurrency in every vLLM
aggregated row, and the rows match SemiAnalysis InferenceX records):

- closed loop with ``concurrency = batch_size x attention_dp_size`` requests in flight,
  ``10 x concurrency`` requests (``--num-prompts CONC*10``, ``--max-concurrency CONC``);
- prompt and output lengths uniform integers in [0.8 x len, len] (random dataset,
  ``--random-range-ratio 0.8``), ``--ignore-eos``, no prefix reuse, prefix caching off;
- simulated TTFT = mean over requests of first token - arrival; TPOT = mean of
  (E2E - TTFT) / (output tokens - 1): the statistic of the rows. The CSV does not say it,
  but the package's end-to-end accuracy tooling (ai-dynamo/aisimulate,
  ``scripts/e2e_accuracy/``) fills ``silicon_ttft_ms`` / ``silicon_tpot_ms`` from the
  InferenceX records' ``mean_ttft`` / ``mean_tpot``. The medians go to the CSV too.

Errors: APE = |sim - measured| / measured x 100; bias = (sim - measured) / measured x 100, so
for these latencies a positive bias means the simulator is pessimistic (slower than measured).
Rows that cannot be simulated faithfully are skipped and counted with a reason; malformed
files or rows are a :class:`SpecError` naming file, row and column.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from simulator import catalog
from simulator.specs import limits
from simulator.specs.loading import SpecError
from simulator.specs.model import ModuleGroup
from simulator.specs.precision import KvCacheDtype, WeightPrecision
from simulator.specs.serving import MoEKernel
from simulator.validation.points import Router, read_records
from simulator.validation.silicon_flags import measured_date, script_flag
from simulator.validation.silicon_models import MODELS, PRECISIONS
from simulator.validation.silicon_rows import repeated_rows, untrusted_layouts
from simulator.validation.silicon_serve import serve_flags

CSV_NAME = "silicon_sample.csv"
MAX_LATENCY_MS = limits.MAX_TRACE_TIME_S * 1e3
# No measured TTFT or TPOT is below a microsecond (the 0.12.0 file: TTFT >= 25 ms, TPOT >=
# 1.9 ms); 1e-300 ms printed an error of 10^300 %.
MIN_LATENCY_MS = 1e-3

REQUIRED_COLUMNS = (
    "id",
    "backend",
    "model_path",
    "system",
    "precision",
    "mode",
    "isl",
    "osl",
    "gemm_quant_mode",
    "moe_quant_mode",
    "batch_size",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
)

SKIP_BACKEND = "backend {backend!r}: not vLLM"
SKIP_DISAGG = (
    "mode disagg (prefill/decode disaggregated on separate workers): this validation"
    " simulates aggregated serving only"
)
SKIP_PP = "pp_size {pp} > 1: pipeline parallelism is not modelled"
SKIP_SCRIPT_WORLD = (
    "attention_dp_size > 1 where the row's launch script starts tp_size GPUs"
    " (silicon_serve.py): the layout contradicts the script"
)


def default_data() -> Path:
    """``silicon_sample.csv`` of the installed aiconfigurator-core (beside ``systems/data``)."""
    from simulator.measured.package import TESTED_VERSION, data_source

    source = data_source()
    if source is None:
        raise SpecError(
            "(arguments)",
            "data",
            f"aiconfigurator-core is not installed (pip install '.[measured]', version"
            f" {TESTED_VERSION}); give --data PATH to {CSV_NAME}",
        )
    path = source.root.parent / CSV_NAME
    if not path.is_file():
        raise SpecError(path, "(file)", f"no {CSV_NAME} beside the measured tables; give --data")
    return path


def devices_by_system() -> dict[str, str]:
    """aiconfigurator system name (``h200_sxm``) -> hardware profile, from each profile's
    ``measured_tables``."""
    out: dict[str, str] = {}
    for name in catalog.device_names():
        system = catalog.hardware_profile(name).measured_tables
        if system:
            out[system] = name
    return out


@dataclass(frozen=True)
class SiliconPoint:
    """One mappable CSV row and the scenario parameters it maps to."""

    row: int  # 1-based data row of the CSV
    id: str
    model_path: str
    card: str
    system: str
    device: str
    backend_version: str
    precision: str
    gemm_quant_mode: str
    moe_quant_mode: str
    weight_precision: tuple[tuple[ModuleGroup, WeightPrecision], ...]
    isl: int
    osl: int
    batch_size: int
    conc: int  # batch_size x attention_dp_size
    tp: int
    dp: int
    ep: int
    ttft_ms: float  # measured
    tpot_ms: float  # measured
    measured: str | None = None  # the silicon_data_source's measured= date
    moe_kernel: MoEKernel = "auto"  # forced by the row's launch script (silicon_flags.py)
    # the launch script turned on expert parallelism where the CSV says moe_ep_size 1: the
    # run's experts are over all tp x dp GPUs (`ep` stays the CSV's layout)
    expert_parallel: bool = False
    # ... and the other way: the script never turned it on where the CSV says moe_ep_size > 1
    tp_sharded_experts: bool = False
    # engine knobs its launch script set (silicon_serve.py); None / "auto": vLLM's default
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    kv_cache_dtype: KvCacheDtype = "auto"
    block_size_tokens: int | None = None
    gpu_memory_utilization: float | None = None

    @property
    def served_ep(self) -> int:
        """The expert-parallel size the run's server had: its script's flags over the CSV."""
        if self.expert_parallel:
            return self.tp * self.dp
        return 1 if self.tp_sharded_experts else self.ep

    @property
    def router(self) -> Router:
        # vLLM's DP coordinator sends each request to the engine with the fewest requests
        return "least_loaded" if self.dp > 1 else "session_affinity"

    @property
    def cost(self) -> float:
        return float(self.conc * (self.isl + self.osl))


@dataclass
class LoadedSilicon:
    points: list[SiliconPoint]
    skipped: Counter[str] = field(default_factory=Counter)
    rows: int = 0


def _cell(rec: dict[str, str | None], column: str) -> str:
    return (rec.get(column) or "").strip()


def _float(
    file: Path, row: int, column: str, text: str, maximum: float = math.inf, minimum: float = 0.0
) -> float:
    if not text:
        raise SpecError(file, f"row {row}, column {column}", "empty cell")
    try:
        value = float(text)
    except ValueError:
        raise SpecError(file, f"row {row}, column {column}", f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise SpecError(file, f"row {row}, column {column}", f"must be positive, got {text!r}")
    if value > maximum:
        raise SpecError(
            file, f"row {row}, column {column}",
            f"{text} exceeds {maximum:,g} (simulator/specs/limits.py)",
        )  # fmt: skip
    if value < minimum:
        raise SpecError(
            file, f"row {row}, column {column}", f"{text} is below {minimum:g} (simulator/"
            "validation/silicon.py: MIN_LATENCY_MS)",
        )  # fmt: skip
    return value


def _int(
    file: Path, row: int, column: str, text: str, empty: int | None = None,
    maximum: float = math.inf,
) -> int:  # fmt: skip
    """A positive integer cell (``4.0`` is 4); ``empty`` is the value of an empty cell, None =
    an empty cell is an error."""
    if not text and empty is not None:
        return empty
    value = _float(file, row, column, text, maximum)
    if not value.is_integer():
        raise SpecError(file, f"row {row}, column {column}", f"{text!r} is not an integer")
    return int(value)


def parallelism(
    is_moe: bool, tp: int, pp: int, adp: int, moe_tp: int, moe_ep: int
) -> tuple[int, int, int] | str:
    """(tp, dp, ep) of the ServingConfig, or why the layout cannot be expressed.

    The CSV's world is tp_size x attention_dp_size GPUs; its MoE layers are sharded
    moe_tp_size x moe_ep_size ways (their product must be that world). The planner's vLLM
    layouts: experts TP-sharded inside one replica (ep 1), or expert parallelism over all
    tp x dp GPUs (``--enable-expert-parallel``, ep = tp x dp).
    """
    if pp != 1:
        return SKIP_PP.format(pp=pp)
    world = tp * adp
    if not is_moe:
        return tp, adp, 1  # dense: attention_dp_size replicas; the moe columns do not apply
    if moe_tp * moe_ep != world:
        return (
            f"moe_tp_size x moe_ep_size ({moe_tp} x {moe_ep}) differs from tp_size x"
            f" attention_dp_size ({tp} x {adp}): not a consistent vLLM layout"
        )
    if moe_ep == 1:
        if adp > 1:
            return (
                "attention_dp_size > 1 with TP-sharded experts (moe_ep_size 1): the planner's"
                " data parallelism shares experts only through expert parallelism"
            )
        return tp, 1, 1
    if moe_ep == world:
        return tp, adp, world
    return (
        f"experts split both ways (moe_tp_size {moe_tp} x moe_ep_size {moe_ep}): the planner"
        " has EP over all GPUs or none"
    )


_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")


def map_row(
    file: Path, row: int, rec: dict[str, str | None], devices: dict[str, str]
) -> SiliconPoint | str:
    """One CSV record as a point, or the reason it is skipped (a SpecError if malformed)."""
    backend = _cell(rec, "backend")
    if backend != "vllm":
        return SKIP_BACKEND.format(backend=backend)
    mode = _cell(rec, "mode")
    if mode != "agg":
        return SKIP_DISAGG if mode == "disagg" else f"mode {mode!r}: not aggregated serving"
    model_path = _cell(rec, "model_path")
    card_name = MODELS.get(model_path)
    if card_name is None:
        return f"no model card for model_path {model_path!r}"
    system = _cell(rec, "system")
    device = devices.get(system)
    if device is None:
        return f"no hardware profile for system {system!r}"
    quant = (_cell(rec, "precision"), _cell(rec, "gemm_quant_mode"), _cell(rec, "moe_quant_mode"))
    mapping = PRECISIONS.get((card_name, *quant))
    if mapping is None:
        return (
            f"no precision mapping for {card_name} precision/gemm/moe"
            f" {'/'.join(q or '-' for q in quant)}"
        )
    profile = catalog.hardware_profile(device)
    if mapping.needs_fp4 and profile.peak_flops_per_s.fp4 is None:
        return f"NVFP4 checkpoint on {device}, which has no FP4 tensor cores"
    card = catalog.model_card(card_name)
    is_moe = card.moe is not None and bool(card.layers.moe_layers)

    def num(col: str) -> int:
        return _int(file, row, col, _cell(rec, col))

    tp, batch = num("tp_size"), num("batch_size")
    pp = _int(file, row, "pp_size", _cell(rec, "pp_size"), empty=1)
    adp = _int(file, row, "attention_dp_size", _cell(rec, "attention_dp_size"), empty=1)
    moe_tp = moe_ep = 1
    if is_moe:
        moe_tp = _int(file, row, "moe_tp_size", _cell(rec, "moe_tp_size"), empty=1)
        moe_ep = _int(file, row, "moe_ep_size", _cell(rec, "moe_ep_size"), empty=1)
    layout = parallelism(is_moe, tp, pp, adp, moe_tp, moe_ep)
    if isinstance(layout, str):
        return layout
    conc = batch * adp
    recorded = _CONCURRENCY.search(_cell(rec, "silicon_data_source"))
    if recorded is not None and int(recorded.group(1)) != conc:
        return "recorded silicon_concurrency differs from batch_size x attention_dp_size"
    isl = _int(file, row, "isl", _cell(rec, "isl"), maximum=limits.MAX_GENERATED_TOKENS)
    osl = _int(file, row, "osl", _cell(rec, "osl"), maximum=limits.MAX_GENERATED_TOKENS)
    if osl < 2:
        return "osl < 2: no TPOT"
    # a measured latency past 10^9 s is no measurement (1e300 ms was accepted)
    ttft = _float(
        file, row, "silicon_ttft_ms", _cell(rec, "silicon_ttft_ms"), MAX_LATENCY_MS, MIN_LATENCY_MS
    )
    tpot = _float(
        file, row, "silicon_tpot_ms", _cell(rec, "silicon_tpot_ms"), MAX_LATENCY_MS, MIN_LATENCY_MS
    )
    measured = measured_date(_cell(rec, "silicon_data_source"))
    flag = script_flag(model_path, system, quant[0], measured)
    serve = serve_flags(model_path, system, quant[0], measured)
    return SiliconPoint(
        row=row,
        id=_cell(rec, "id"),
        model_path=model_path,
        card=card_name,
        system=system,
        device=device,
        backend_version=_cell(rec, "backend_version"),
        precision=quant[0],
        gemm_quant_mode=quant[1],
        moe_quant_mode=quant[2],
        weight_precision=tuple(sorted(mapping.overrides.items())),
        isl=isl,
        osl=osl,
        batch_size=batch,
        conc=conc,
        tp=layout[0],
        dp=layout[1],
        ep=layout[2],
        ttft_ms=ttft,
        tpot_ms=tpot,
        measured=measured,
        moe_kernel=flag.moe_kernel if flag is not None else "auto",
        expert_parallel=flag is not None and flag.expert_parallel,
        tp_sharded_experts=serve is not None and serve.no_expert_parallel and layout[2] > 1,
        **(serve.settings(isl, conc) if serve is not None else {}),
    )


def load_silicon(path: str | Path) -> LoadedSilicon:
    """Read the CSV; map every row or count it as skipped (with its reason)."""
    file = Path(path)
    raw = read_records(file, REQUIRED_COLUMNS, f" (give {CSV_NAME})")
    out = LoadedSilicon(points=[], rows=len(raw))
    devices = devices_by_system()
    for i, rec in enumerate(raw, start=1):
        mapped = map_row(file, i, rec, devices)
        if isinstance(mapped, str):
            out.skipped[mapped] += 1
        else:
            out.points.append(mapped)
    untrusted = untrusted_layouts(out.points)  # simulator/validation/silicon_rows.py
    out.skipped.update(untrusted.values())
    out.points = [p for p in out.points if p.row not in untrusted]
    repeated = repeated_rows(out.points)  # one run listed twice: counted once
    out.skipped.update(repeated.values())
    out.points = [p for p in out.points if p.row not in repeated]
    # every launch script of silicon_serve.py starts tp_size GPUs
    wider = {p.row for p in out.points if p.dp > 1 and serve_flags(*_script_key(p)) is not None}
    if wider:
        out.skipped[SKIP_SCRIPT_WORLD] += len(wider)
    out.points = [p for p in out.points if p.row not in wider]
    return out


def _script_key(p: SiliconPoint) -> tuple[str, str, str, str | None]:
    return p.model_path, p.system, p.precision, p.measured


def select(
    points: Sequence[SiliconPoint], models: Iterable[str] = (), limit: int | None = None
) -> list[SiliconPoint]:
    """Filter by card names; keep at most ``limit`` points, evenly spaced in file order (first
    and last kept)."""
    wanted = set(models)
    bad = wanted - set(MODELS.values())
    if bad:
        raise SpecError(
            "(arguments)", "models", f"unknown {sorted(bad)}; known: {sorted(MODELS.values())}"
        )
    if limit is not None and limit < 1:
        raise SpecError("(arguments)", "limit", f"must be >= 1, got {limit}")
    kept = [p for p in points if not wanted or p.card in wanted]
    n = len(kept)
    if limit is None or n <= limit:
        return kept
    if limit == 1:
        return kept[:1]
    picks = sorted({round(k * (n - 1) / (limit - 1)) for k in range(limit)})
    return [kept[k] for k in picks]
