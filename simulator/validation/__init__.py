"""End-to-end validation against the public InferenceMAX v1 results.

Each dashboard point (model, ISL/OSL, hardware, precision, TP, concurrency) becomes a
``random``-workload scenario: ISL/OSL uniform in [0.8 x len, len] (``--random-range-ratio
0.8``), closed loop at ``conc`` requests in flight, ``requests_per_conc x conc`` requests
(InferenceMAX: ``--num-prompts $((CONC * 10))``), prefix caching off (``--no-enable-prefix-
caching`` / ``--disable-radix-cache``), TP = the point's TP, no expert parallelism.

Metrics as InferenceMAX defines them (``bench_serving/benchmark_serving.py`` + its
``process_result``):

- throughput per GPU = (input + output tokens of all requests) / benchmark duration / GPUs;
  the simulator's summary over the whole run (warm-up 0, window = first arrival .. last
  finish) is the same quantity;
- interactivity = 1 / median TPOT, TPOT = (E2E - TTFT) / (output tokens - 1) per request
  (``median_intvty = 1000 / median_tpot_ms``).

Errors: APE = |sim - measured| / measured x 100; signed error (bias) = (sim - measured) /
measured x 100, so a positive bias means the simulator is optimistic. Aggregated per (model,
device, ISL/OSL) as medians over that group's points.

Rows that cannot be simulated as vLLM aggregated serving are skipped and counted with a
reason (TensorRT-LLM ``*_trt``; Dynamo disaggregated ``gb200*``; unknown model, device or
precision). Malformed files or rows are a :class:`SpecError` naming file, row and column.
"""

from simulator.validation.document import GROUP_HEADER, group_rows, render_markdown
from simulator.validation.points import (
    DEFAULT_DATA,
    REQUIRED_COLUMNS,
    SKIP_DISAGG,
    SKIP_TRT,
    load_points,
    scenario_for,
    select,
    weight_overrides,
)
from simulator.validation.run import (
    PointResult,
    aggregate,
    median_tpot_s,
    not_simulated,
    overall,
    run_points,
    validate,
    write_points_csv,
)

__all__ = [
    "DEFAULT_DATA",
    "GROUP_HEADER",
    "REQUIRED_COLUMNS",
    "SKIP_DISAGG",
    "SKIP_TRT",
    "PointResult",
    "aggregate",
    "group_rows",
    "load_points",
    "median_tpot_s",
    "not_simulated",
    "overall",
    "render_markdown",
    "run_points",
    "scenario_for",
    "select",
    "validate",
    "weight_overrides",
    "write_points_csv",
]
