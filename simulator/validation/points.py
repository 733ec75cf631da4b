"""InferenceMAX dashboard points: reading, mapping to our cards/devices/precisions, scenarios."""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from simulator.specs import limits
from simulator.specs.loading import SpecError
from simulator.specs.model import ModuleGroup
from simulator.specs.precision import WeightPrecision
from simulator.specs.scenario import RandomPromptWorkload, Scenario
from simulator.specs.serving import ServingConfig
from simulator.validation.silicon_serve import serve_flags

DEFAULT_DATA = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "data"
    / "inferencemax"
    / "inferencemax_v1_dashboard_20251025.csv"
)

REQUIRED_COLUMNS = (
    "model",
    "sequence",
    "hwKey",
    "precision",
    "tp",
    "conc",
    "interactivity_tok_s_user",
    "e2e_latency_s",
    "tput_per_gpu",
)

# dashboard model name -> model card
MODELS: dict[str, str] = {
    "DeepSeek R1 0528": "deepseek-v3",  # R1-0528 has the DeepSeek-V3 architecture
    "Llama 3.3 70B Instruct": "llama-3.3-70b",
    "gpt-oss 120B": "gpt-oss-120b",
}

# dashboard model name -> the model_path the launch-script windows name (silicon_serve.py)
SCRIPT_MODELS: dict[str, str] = {
    "Llama 3.3 70B Instruct": "meta-llama/Llama-3.1-70B",
    "gpt-oss 120B": "openai/gpt-oss-120b",
}
# the runs behind the dashboard: the scripts in effect when it was scraped (2025-10-23..25;
# the vLLM knobs of these scripts did not change from 2025-09-27 to 2025-10-29)
DASHBOARD_RUNS = "2025-10-23"

# dashboard hwKey -> hardware profile
DEVICES: dict[str, str] = {
    "b200": "b200",
    "h100": "h100",
    "h200": "h200",
    "mi300x": "mi300x",
    "mi325x": "mi325x",
    "mi355x": "mi355x",
}
AMD_DEVICES = frozenset({"mi300x", "mi325x", "mi355x"})

SKIP_TRT = "TensorRT-LLM (hwKey *_trt): not vLLM"
SKIP_DISAGG = (
    "Dynamo disaggregated prefill/decode (gb200, gb200_mtp; tp = GPU count): "
    "disaggregation is a later issue"
)

SEQUENCES: dict[str, tuple[int, int]] = {
    "1K/1K": (1024, 1024),
    "1K/8K": (1024, 8192),
    "8K/1K": (8192, 1024),
}

Overrides = dict[ModuleGroup, WeightPrecision]
Router = Literal["round_robin", "least_loaded", "session_affinity"]


def weight_overrides(card: str, precision: str, device: str) -> Overrides | None:
    """Serving ``weight_precision`` overrides for a dashboard precision (None: no mapping).

    From the public checkpoints InferenceMAX v1 served (stated in docs/validation.md):
    - DeepSeek-R1-0528 fp8: the native checkpoint (fp8 e4m3, 128x128 block scales) = the
      card's precisions, no override.
    - DeepSeek-R1-0528 fp4: nvidia/DeepSeek-R1-0528-FP4 (NVFP4) on NVIDIA, amd/DeepSeek-R1-
      0528-MXFP4 on AMD. Assumption: the MoE (routed + shared experts) and the dense MLP of
      layers 1-3 are FP4, attention stays at the native fp8_block, embedding / lm_head /
      router bf16 (the checkpoints' exclude lists keep attention and lm_head out of FP4).
    - gpt-oss-120b fp4: the native checkpoint (MXFP4 routed experts, the rest bf16) = card.
    - Llama-3.3-70B fp8: the ModelOpt (NVIDIA) / Quark (AMD) FP8 checkpoints: every linear
      layer fp8, embedding and lm_head bf16.
    - Llama-3.3-70B fp4: nvidia/Llama-3.3-70B-Instruct-FP4 (NVFP4) on NVIDIA, amd/Llama-3.3-
      70B-Instruct-MXFP4-Preview (MXFP4) on AMD: every linear layer, embedding / lm_head bf16.
    - bf16: everything bf16.
    """
    fp4: WeightPrecision = "mxfp4" if device in AMD_DEVICES else "nvfp4"
    if card == "deepseek-v3":
        if precision == "fp8":
            return {}
        if precision == "fp4":
            return {"routed_experts": fp4, "shared_experts": fp4, "dense_mlp": fp4}
        if precision == "bf16":
            groups: tuple[ModuleGroup, ...] = (
                "attention", "dense_mlp", "shared_experts", "routed_experts", "mtp",
            )  # fmt: skip
            return dict.fromkeys(groups, "bf16")
        return None
    if card == "gpt-oss-120b":
        return {} if precision == "fp4" else None
    if card == "llama-3.3-70b":
        if precision == "fp8":
            return {"attention": "fp8", "dense_mlp": "fp8"}
        if precision == "fp4":
            return {"attention": fp4, "dense_mlp": fp4}
        if precision == "bf16":
            return {}
        return None
    return None


def serving_engine(card: str) -> str:
    """The framework InferenceMAX v1 ran for a non-TRT point (its public launch scripts):
    DeepSeek-R1 on SGLang everywhere, Llama and gpt-oss on vLLM."""
    return "sglang" if card == "deepseek-v3" else "vllm"


@dataclass(frozen=True)
class Point:
    """One mappable dashboard point and the scenario parameters it maps to."""

    row: int  # 1-based data row of the CSV
    model_name: str
    card: str
    sequence: str
    hw_key: str
    device: str
    precision: str
    weight_precision: tuple[tuple[ModuleGroup, WeightPrecision], ...]
    engine: str
    tp: int
    conc: int
    isl: int
    osl: int
    interactivity: float
    e2e_s: float
    tput_per_gpu: float

    @property
    def curve(self) -> tuple[str, str, str, int, str]:
        return (self.card, self.hw_key, self.precision, self.tp, self.sequence)


@dataclass
class LoadedPoints:
    points: list[Point]
    skipped: Counter[str] = field(default_factory=Counter)
    rows: int = 0


def _number(
    file: Path,
    row: int,
    column: str,
    text: str,
    kind: type[float] | type[int],
    maximum: float = math.inf,
    minimum: float = 0.0,
) -> Any:
    try:
        value = kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise SpecError(file, f"row {row}, column {column}", f"{text!r} is not {what}") from None
    if not math.isfinite(value) or value <= 0:
        raise SpecError(file, f"row {row}, column {column}", f"must be positive, got {text!r}")
    if value > maximum:
        raise SpecError(
            file, f"row {row}, column {column}",
            f"{text} exceeds {maximum:,.0f} (simulator/specs/limits.py)",
        )  # fmt: skip
    if value < minimum:
        raise SpecError(
            file, f"row {row}, column {column}",
            f"{text} is below {minimum:g} (simulator/specs/limits.py)",
        )  # fmt: skip
    return value


_MEASURED_BOUNDS = {
    "interactivity_tok_s_user": limits.BENCHMARK_TOK_PER_S,
    "e2e_latency_s": limits.BENCHMARK_LATENCY_S,
    "tput_per_gpu": limits.BENCHMARK_TOK_PER_S,
}


def _measured(file: Path, row: int, cells: dict[str, str], column: str) -> float:
    """A measured rate or latency of the point, within ``_MEASURED_BOUNDS``."""
    value: float = _number(file, row, column, cells[column], float, *_MEASURED_BOUNDS[column])
    return value


def read_records(
    file: Path, required: Sequence[str], directory_hint: str = ""
) -> list[dict[str, str | None]]:
    """The rows of a validation CSV as dicts (header cells stripped); a missing required
    column, an empty, missing, unreadable or non-UTF-8 file is one SpecError."""
    if file.is_dir():
        raise SpecError(file, "(file)", f"is a directory, not a CSV file{directory_hint}")
    try:
        with file.open(newline="") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in (reader.fieldnames or [])]
            if not header:
                raise SpecError(file, "(file)", "empty file")
            for col in required:
                if col not in header:
                    raise SpecError(file, f"column {col}", "missing from the header")
            reader.fieldnames = header
            return list(reader)
    except FileNotFoundError:
        raise SpecError(file, "(file)", "no such file") from None
    except UnicodeDecodeError as exc:
        raise SpecError(file, "(file)", f"not a readable CSV: {exc}") from None
    except OSError as exc:
        raise SpecError(file, "(file)", f"cannot read: {exc.strerror or exc}") from None


def load_points(path: str | Path) -> LoadedPoints:
    """Read the flattened dashboard CSV; map every row or count it as skipped (with reason)."""
    file = Path(path)
    raw = read_records(file, REQUIRED_COLUMNS)
    out = LoadedPoints(points=[], rows=len(raw))
    for i, rec in enumerate(raw, start=1):
        cells = {c: (rec.get(c) or "").strip() for c in REQUIRED_COLUMNS}
        for col, text in cells.items():
            if not text:
                raise SpecError(file, f"row {i}, column {col}", "empty cell")
        hw = cells["hwKey"]
        if hw.endswith("_trt"):
            out.skipped[SKIP_TRT] += 1
            continue
        if hw.startswith("gb200"):
            out.skipped[SKIP_DISAGG] += 1
            continue
        card = MODELS.get(cells["model"])
        if card is None:
            out.skipped[f"unknown model {cells['model']!r}"] += 1
            continue
        device = DEVICES.get(hw)
        if device is None:
            out.skipped[f"no device profile for hwKey {hw!r}"] += 1
            continue
        overrides = weight_overrides(card, cells["precision"], device)
        if overrides is None:
            out.skipped[f"no precision mapping for {card} {cells['precision']!r}"] += 1
            continue
        seq = SEQUENCES.get(cells["sequence"])
        if seq is None:
            raise SpecError(
                file,
                f"row {i}, column sequence",
                f"{cells['sequence']!r} is not one of {', '.join(SEQUENCES)}",
            )
        out.points.append(
            Point(
                row=i,
                model_name=cells["model"],
                card=card,
                sequence=cells["sequence"],
                hw_key=hw,
                device=device,
                precision=cells["precision"],
                weight_precision=tuple(sorted(overrides.items())),
                engine=serving_engine(card),
                tp=_number(file, i, "tp", cells["tp"], int),
                conc=_number(file, i, "conc", cells["conc"], int, limits.MAX_BENCHMARK_CONCURRENCY),
                isl=seq[0],
                osl=seq[1],
                interactivity=_measured(file, i, cells, "interactivity_tok_s_user"),
                e2e_s=_measured(file, i, cells, "e2e_latency_s"),
                tput_per_gpu=_measured(file, i, cells, "tput_per_gpu"),
            )
        )
    return out


def select(
    points: Sequence[Point],
    models: Iterable[str] = (),
    devices: Iterable[str] = (),
    limit_per_curve: int | None = None,
) -> list[Point]:
    """Filter by card / device names; keep at most ``limit_per_curve`` concurrencies of each
    curve (model, hwKey, precision, TP, sequence), evenly spaced with the lowest and highest."""
    models, devices = set(models), set(devices)
    bad_models = models - set(MODELS.values())
    if bad_models:
        raise SpecError(
            "(arguments)",
            "models",
            f"unknown {sorted(bad_models)}; known: {sorted(MODELS.values())}",
        )
    bad_devices = devices - set(DEVICES.values())
    if bad_devices:
        raise SpecError(
            "(arguments)", "devices", f"unknown {sorted(bad_devices)}; known: {sorted(DEVICES)}"
        )
    if limit_per_curve is not None and limit_per_curve < 1:
        raise SpecError("(arguments)", "limit_per_curve", f"must be >= 1, got {limit_per_curve}")
    kept = [
        p
        for p in points
        if (not models or p.card in models) and (not devices or p.device in devices)
    ]
    if limit_per_curve is None:
        return kept
    curves: dict[tuple[str, str, str, int, str], list[Point]] = {}
    for p in kept:
        curves.setdefault(p.curve, []).append(p)
    chosen: set[int] = set()
    for curve in curves.values():
        curve.sort(key=lambda p: p.conc)
        n = len(curve)
        picks: Iterable[int]
        if n <= limit_per_curve:
            picks = range(n)
        elif limit_per_curve == 1:
            picks = range(1)
        else:
            picks = {round(k * (n - 1) / (limit_per_curve - 1)) for k in range(limit_per_curve)}
        chosen.update(curve[k].row for k in picks)
    return [p for p in kept if p.row in chosen]


def benchmark_scenario(
    name: str,
    card: str,
    device: str,
    serving: ServingConfig,
    isl: int,
    osl: int,
    conc: int,
    requests_per_conc: int = 10,
    seed: int = 0,
    router: Router = "session_affinity",
) -> Scenario:
    """The InferenceX benchmark client as a scenario: random prompts of ISL/OSL uniform in
    [0.8 x len, len], closed loop at ``conc`` in flight, ``requests_per_conc x conc``
    requests, no warm-up and no time limit (the run lasts until every request finished)."""
    if requests_per_conc * conc > limits.MAX_GENERATED_REQUESTS:
        raise SpecError(
            "(arguments)", "requests-per-conc",
            f"{requests_per_conc:,} x concurrency {conc:,} = {requests_per_conc * conc:,}"
            f" requests exceeds {limits.MAX_GENERATED_REQUESTS:,} (simulator/specs/limits.py)",
        )  # fmt: skip
    workload = RandomPromptWorkload(
        input_tokens=isl,
        output_tokens=osl,
        range_ratio=0.8,
        num_requests=requests_per_conc * conc,
        concurrency=conc,
    )
    return Scenario(
        name=name,
        model=card,
        device=device,
        serving=serving,
        workload=workload,
        seed=seed,
        warmup_s=0.0,
        duration_s=None,
        router=router,
    )


def script_knobs(point: Point) -> dict[str, Any]:
    """The engine knobs the point's InferenceX launch script set (none where unknown: the
    windows name NVIDIA systems only, so an AMD point finds none)."""
    model_path = SCRIPT_MODELS.get(point.model_name)
    if model_path is None:
        return {}
    flags = serve_flags(model_path, f"{point.hw_key}_sxm", point.precision, DASHBOARD_RUNS)
    return flags.settings(point.isl, point.conc) if flags is not None else {}


def scenario_for(point: Point, requests_per_conc: int = 10, seed: int = 0) -> Scenario:
    serving = ServingConfig(
        tp=point.tp,
        ep=1,
        weight_precision=dict(point.weight_precision),
        enable_prefix_caching=False,
        **script_knobs(point),
    )
    return benchmark_scenario(
        f"inferencemax row {point.row}",
        point.card,
        point.device,
        serving,
        point.isl,
        point.osl,
        point.conc,
        requests_per_conc,
        seed,
    )
