"""docs/validation-silicon.md from a silicon validation report (``plan validate silicon``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from simulator.validation import silicon_scaling
from simulator.validation.document import _md_table, _pct
from simulator.validation.silicon import SiliconResult, devices_by_system
from simulator.validation.silicon_flags import flag_rows
from simulator.validation.silicon_models import MODEL_ROWS, PRECISIONS
from simulator.validation.silicon_report import (
    LatencyError,
    SiliconReport,
    by_model,
    by_model_system,
    by_system,
    group_error,
    wave_paragraph,
)
from simulator.validation.silicon_serve import serve_rows
from simulator.validation.silicon_spread import Spread

FLAG_HEADER = [
    "model_path", "system", "precision", "measured", "moe_kernel", "experts over", "flags",
    "script", "points",
]  # fmt: skip
SERVE_HEADER = ["model_path", "system", "precision", "measured", "flags", "script", "points"]
HEADER = [
    "model",
    "system",
    "n",
    "median APE TTFT %",
    "median APE TPOT %",
    "bias TTFT %",
    "bias TPOT %",
]

# concurrency buckets of the trend table: (label, lowest, highest)
CONC_BUCKETS: list[tuple[str, int, int]] = [
    ("1-8", 1, 8),
    ("9-32", 9, 32),
    ("33-128", 33, 128),
    ("129-1024", 129, 1024),
    (">1024", 1025, 10**9),
]


def rows(groups: Iterable[LatencyError]) -> list[list[str]]:
    return [
        [
            g.model,
            g.system,
            str(g.points) + (f" (+{g.not_simulated} not sim.)" if g.not_simulated else ""),
            _pct(g.median_ape_ttft_pct),
            _pct(g.median_ape_tpot_pct),
            _pct(g.bias_ttft_pct, signed=True),
            _pct(g.bias_tpot_pct, signed=True),
        ]
        for g in groups
    ]


def _display_path(path: Path) -> str:
    """The default CSV as the package-relative path, any other as given."""
    parts = path.resolve().parts
    if "aiconfigurator_core" in parts:
        return "/".join(parts[parts.index("aiconfigurator_core") :])
    return str(path)


def _package_version() -> str:
    from simulator.measured.package import data_source

    source = data_source()
    return source.package_version if source is not None else "not installed"


def _lines(counts: Counter[str], unit: str) -> str:
    return (
        "\n".join(
            f"- {n} {unit}{'s' if n != 1 else ''}: {reason}"
            for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        or "- none"
    )


def _faster_counts(results: Sequence[SiliconResult]) -> str:
    ok = [r for r in results if r.ok]
    t = [e for r in ok if (e := r.err_ttft_pct) is not None]
    p = [e for r in ok if (e := r.err_tpot_pct) is not None]
    within_t = sum(abs(e) <= 25 for e in t)
    within_p = sum(abs(e) <= 25 for e in p)
    return (
        f"The simulated latency is lower than the measured one (simulator optimistic) on"
        f" {sum(e < 0 for e in t)} of {len(t)} points for TTFT and {sum(e < 0 for e in p)}"
        f" of {len(p)} for TPOT; within 25 %: {within_t} (TTFT) and {within_p} (TPOT)."
    )


def _replicates(report: SiliconReport) -> str:
    """The headline under every seed simulated (the load's lengths and arrivals are drawn)."""
    reps = report.replicates
    if len(reps) < 2:
        return (
            f"One seed ({report.seed}): each point's request lengths and arrivals are one draw;"
            " `--replicates N` simulates every point under N seeds and states the headline's"
            " range."
        )

    def spread(values: list[float | None], signed: bool = False) -> str:
        got = [v for v in values if v is not None]
        each = " / ".join(_pct(v, signed) for v in values)
        lo, hi = (_pct(min(got), signed), _pct(max(got), signed)) if got else ("-", "-")
        return f"{lo} % under every seed" if lo == hi else f"{lo} to {hi} % ({each})"

    seeds = ", ".join(str(k) for k, _ in reps)
    return (
        f"**Seeds**: every point simulated under seeds {seeds}; the headline's median APE"
        f" is {spread([g.median_ape_ttft_pct for _, g in reps])} for TTFT and"
        f" {spread([g.median_ape_tpot_pct for _, g in reps])} for TPOT; bias"
        f" {spread([g.bias_ttft_pct for _, g in reps], True)} and"
        f" {spread([g.bias_tpot_pct for _, g in reps], True)}. The tables below are seed"
        f" {reps[0][0]}'s."
    )


def _conc_groups(results: Sequence[SiliconResult]) -> list[LatencyError]:
    out = []
    for label, lo, hi in CONC_BUCKETS:
        chosen = [r for r in results if lo <= r.point.conc <= hi]
        if chosen:
            out.append(group_error(chosen, "all", label))
    return out


def _tp_groups(results: Sequence[SiliconResult]) -> list[LatencyError]:
    """Per system and tensor-parallel size (the trend the TTFT gap follows)."""
    keys = sorted({(r.point.device, r.point.tp) for r in results})
    return [
        group_error([r for r in results if (r.point.device, r.point.tp) == k], str(k[1]), k[0])
        for k in keys
    ]


def _seq_groups(results: Sequence[SiliconResult]) -> list[LatencyError]:
    keys = sorted({(r.point.isl, r.point.osl) for r in results})
    return [
        group_error(
            [r for r in results if (r.point.isl, r.point.osl) == k], "all", f"{k[0]}/{k[1]}"
        )
        for k in keys
    ]


def _quant_key(r: SiliconResult) -> tuple[str, str, str, str]:
    p = r.point
    return p.card, p.precision, p.gemm_quant_mode, p.moe_quant_mode


def precision_rows(results: Sequence[SiliconResult]) -> list[list[str]]:
    """Every mapping of PRECISIONS with the points that used it."""
    used = Counter(_quant_key(r) for r in results)
    out = []
    for key, m in PRECISIONS.items():
        card, precision, gemm, moe = key
        overrides = ", ".join(f"{g}={v}" for g, v in sorted(m.overrides.items())) or "none"
        systems = sorted({r.point.system for r in results if _quant_key(r) == key})
        out.append(
            [
                f"{card}: `{precision or '-'}` / `{gemm or '-'}` / `{moe or '-'}`",
                ", ".join(systems) or "-",
                str(used.get(key, 0)),
                f"`{overrides}`",
                m.checkpoint,
            ]
        )
    return out


def spread_rows(spread: Sequence[Spread]) -> list[list[str]]:
    return [
        [
            s.kind,
            str(s.pairs),
            str(s.configs),
            *map(_pct, (s.ttft_median_pct, s.ttft_p75_pct, s.tpot_median_pct, s.tpot_p75_pct)),
        ]
        for s in spread
    ]


def _worst(groups: Sequence[LatencyError]) -> str:
    ranked = sorted(
        (g for g in groups if g.median_ape_ttft_pct is not None),
        key=lambda g: -max(g.median_ape_ttft_pct or 0.0, g.median_ape_tpot_pct or 0.0),
    )[:5]
    return (
        "\n".join(
            f"- {g.model} on {g.system}: TTFT bias {_pct(g.bias_ttft_pct, True)} %,"
            f" TPOT bias {_pct(g.bias_tpot_pct, True)} % ({g.points} points)"
            for g in ranked
        )
        or "- none"
    )


def render_markdown(
    report: SiliconReport, command: str, date: str, wall_s: float, workers: int = 2
) -> str:
    results = report.results
    simulated = [r for r in results if r.ok]
    not_sim = Counter(r.status for r in results if not r.ok)
    subsample = []
    if report.models:
        subsample.append(f"models {', '.join(report.models)}")
    if report.limit is not None:
        subsample.append(
            f"`--limit {report.limit}` (at most {report.limit} points, evenly spaced in file"
            " order, first and last kept)"
        )
    a = report.overall
    systems = devices_by_system()
    used = Counter(r.point.system for r in results)
    system_rows = [[f"`{s}`", f"`{d}`", str(used.get(s, 0))] for s, d in sorted(systems.items())]
    groups = by_model_system(results)
    scaling = silicon_scaling.families(simulated)
    return TEMPLATE.format(
        command=command,
        date=date,
        wall_min=wall_s / 60.0,
        sim_min=sum(r.wall_s for r in results) / 60.0,
        first="first seed's " if len(report.replicates) > 1 else "",
        workers=workers,
        data=_display_path(report.data),
        version=_package_version(),
        rows=report.rows,
        skipped_total=sum(report.skipped.values()),
        skip_lines=_lines(report.skipped, "row"),
        mappable=len(results) + report.not_selected,
        subsample="; ".join(subsample) or "none: every mappable point",
        not_selected=report.not_selected,
        points=len(results),
        simulated=len(simulated),
        not_sim_lines=_lines(not_sim, "point"),
        requests_per_conc=report.requests_per_conc,
        seed=report.seed,
        ttft_ape=_pct(a.median_ape_ttft_pct),
        tpot_ape=_pct(a.median_ape_tpot_pct),
        ttft_bias=_pct(a.bias_ttft_pct, True),
        tpot_bias=_pct(a.bias_tpot_pct, True),
        faster=_faster_counts(results),
        replicates=_replicates(report),
        model_table=_md_table(["model_path", "card", "why"], [list(r) for r in MODEL_ROWS]),
        flag_table=_md_table(FLAG_HEADER, flag_rows(r.point for r in results)),
        serve_table=_md_table(SERVE_HEADER, serve_rows(r.point for r in results)),
        system_table=_md_table(["system", "hardware profile", "points"], system_rows),
        precision_table=_md_table(
            [
                "card: precision / gemm / moe",
                "systems",
                "points",
                "weight_precision overrides",
                "checkpoint served",
            ],
            precision_rows(results),
        ),
        overall_table=_md_table(HEADER, rows([a])),
        model_errors=_md_table(HEADER, rows(by_model(results))),
        system_errors=_md_table(HEADER, rows(by_system(results))),
        group_errors=_md_table(HEADER, rows(groups)),
        conc_errors=_md_table(
            ["concurrency", *HEADER[2:]], [r[1:] for r in rows(_conc_groups(results))]
        ),
        tp_errors=_md_table(["TP", *HEADER[1:]], rows(_tp_groups(results))),
        seq_errors=_md_table(["ISL/OSL", *HEADER[2:]], [r[1:] for r in rows(_seq_groups(results))]),
        worst=_worst(groups),
        spread_table=_md_table(
            ["pairs of", "pairs", "configs", "TTFT median", "TTFT P75", "TPOT median", "TPOT P75"],
            spread_rows(report.spread),
        ),
        first_wave=wave_paragraph(simulated),
        scaling_table=_md_table(silicon_scaling.HEADER, silicon_scaling.scaling_rows(scaling)),
        scaling_summary=silicon_scaling.scaling_summary(scaling),
    )


TEMPLATE = """\
# Validation: the simulator against aiconfigurator-core's measured vLLM serving points

Generated by

```sh
{command}
```

on {date} ({wall_min:.1f} min of wall time, {workers} worker processes; the {first}simulations
took {sim_min:.1f} min summed over points, a point kept in the cache keeping its own). Data:
`{data}` of the pip package aiconfigurator-core (installed version {version}; Apache-2.0),
its table of serving points measured on real GPUs. Per-point results (measured vs
simulated, with the simulated means and medians) are in the `--out` CSV (`points.csv`).

**This is a validation set.** Nothing in the planner (model cards, hardware profiles, cost
model, scheduler) was fitted or tuned to these points, and no number may be changed to
improve this table; a change made for other reasons is re-checked here. See "What was
tuned".

**Headline** over the {simulated} simulated points: median absolute percentage error
{ttft_ape} % for TTFT and {tpot_ape} % for TPOT; median bias {ttft_bias} % (TTFT) and
{tpot_bias} % (TPOT). Bias = median of (simulated - measured) / measured: **negative = the
simulator is faster than measured (optimistic)**, positive = slower. {faster}

{replicates}

## What was simulated

{rows} rows in the file; {skipped_total} skipped (not simulated, counted here):

{skip_lines}

{mappable} mappable points; subsampling: {subsample}; {not_selected} mappable points not
selected; {points} points run, {simulated} simulated. Points that could not be simulated:

{not_sim_lines}

### Reading of a point

A row is the steady state of a benchmark client against one vLLM server. From the package's
source (its silicon-sample tooling; the `silicon_data_source` column records the
concurrency of most rows):

- `batch_size x attention_dp_size` equals the benchmark client's max concurrency in every
  vLLM aggregated row (checked here against each row's recorded `silicon_concurrency=N`;
  a row whose record disagrees is skipped with a reason; in the 0.12.0 file none does, and
  its 3 rows from `h100_sxm/vllm/0.12.0/qwen3_32b.csv` record no concurrency and are read
  the same way);
- the rows match SemiAnalysis InferenceX records: the `random` dataset with
  `--random-range-ratio 0.8`, `--num-prompts CONC*10`, `--max-concurrency CONC`,
  `--ignore-eos`;
- `silicon_ttft_ms` / `silicon_tpot_ms` are **means** over the requests of a run: the CSV
  does not say so, but the package's end-to-end accuracy tooling (ai-dynamo/aisimulate,
  `scripts/e2e_accuracy/`) fills them from the InferenceX records' `mean_ttft` /
  `mean_tpot`. This validation compares them with the simulated means; `points.csv` also
  has the simulated medians (`sim_ttft_ms_median`, `sim_tpot_ms_median`). In a closed loop
  the first wave of requests (all sent at once) lifts the mean TTFT well above the median.

So each point is one `random`-workload scenario (the InferenceMAX validation's scenario
builder, `simulator/validation/points.py: benchmark_scenario`):

- closed loop with concurrency = `batch_size x attention_dp_size` requests in flight,
  {requests_per_conc} x concurrency requests, seed {seed}; the run lasts until every
  request has finished (no time limit, no warm-up cut);
- prompt and output lengths uniform integers in [0.8 x len, len] with len = `isl` / `osl`,
  every request generates its drawn length, no prefix reuse, prefix caching off;
- serving: `tp`, `dp`, `ep` as below; with `dp` > 1 the requests go to the least-loaded
  replica (vLLM's DP coordinator balances by queue length); the engine knobs the row's
  launch script set (below: `max_num_batched_tokens`, `max_num_seqs`, KV cache dtype, block
  size, `gpu_memory_utilization`); every other knob at the planner's vLLM defaults (KV
  cache dtype `auto` (bf16), `gpu_memory_utilization` 0.92, `max_num_batched_tokens` and
  `max_num_seqs` by device memory, block size 16, no speculative decoding);
- simulated TTFT = mean over requests of (first token - arrival); simulated TPOT = mean
  over requests of (E2E - TTFT) / (output tokens - 1).

## Mapping (every choice)

Models (cards built by `plan models import` from the config.json files the same package
ships under `aiconfigurator_core/model_configs/`; `tests/simulator/test_model_cards.py`
re-derives each card from its config):

{model_table}

Systems (each hardware profile's `measured_tables` names its aiconfigurator system; in the
0.12.0 file no vLLM aggregated row is on gb200 or gb300):

{system_table}

Precisions: every (card, `precision` / `gemm_quant_mode` / `moe_quant_mode`) combination of
the vLLM aggregated rows, with the `ServingConfig.weight_precision` overrides applied on top
of the card (`-` = empty cell). An NVFP4 mapping on a GPU without FP4 tensor cores would be
skipped; none occurs.

{precision_table}

Parallelism: the CSV's world is `tp_size x attention_dp_size` GPUs, its MoE layers split
`moe_tp_size x moe_ep_size` ways.

- `pp_size` > 1: skipped (pipeline parallelism is not modelled); empty `pp_size` and
  `attention_dp_size` cells read as 1 (165 vLLM rows of the 0.12.0 file leave
  `attention_dp_size` empty);
- dense models (Llama, Qwen3-32B): `tp = tp_size`, `dp = attention_dp_size`, `ep = 1`; their
  `moe_*` columns are ignored (the Qwen3-32B rows carry 0 or 1 there);
- MoE models: `moe_tp_size x moe_ep_size` must equal `tp_size x attention_dp_size` (else
  skipped: the Qwen3-235B rows with `tp_size` 1 and `moe_tp_size` 2 or 4, or `tp_size` 2
  and `moe_tp_size` 4, are not a vLLM layout; 235 GB of FP8 weights do not fit one H200);
  `moe_ep_size` 1 -> `ep = 1` (experts TP-sharded, `dp` must be 1);
  `moe_ep_size = tp_size x attention_dp_size` -> `dp = attention_dp_size`,
  `ep = tp x dp` (vLLM `--data-parallel-size` + `--enable-expert-parallel`: attention
  data-parallel, experts over all GPUs); experts split both ways: skipped (none occurs);
- layouts the file contradicts are skipped (`simulator/validation/silicon_rows.py`): a row
  whose `id` names a (tp, ep) other than its columns' (40 rows of the 0.12.0 file: ids
  `..._tp4_ep4_...` with `tp_size` 4, `attention_dp_size` 4, `moe_ep_size` 16, i.e. 16 GPUs
  for a 4-GPU run; their TTFT and TPOT are, to 0.01 ms, those of rows whose id and columns
  agree on TP4 with EP4), and a measurement found under two layouts when the layout an id
  confirms is the other one, or none is (15 rows).

Launch-script flags (`simulator/validation/silicon_flags.py`): where the row's InferenceX
launch script forced a MoE kernel, the rows measured while that revision was in effect run
with `ServingConfig.moe_kernel` set to it (the measured MoE rows of that kernel, from any
collection of the op tables; docs/measured.md); where it turned on expert parallelism
(`--enable-expert-parallel`) the row runs with experts over all `tp x dp` GPUs although its
`moe_ep_size` says 1 (two MiniMax-M2.5 FP8 scripts tested `[ "$EP_SIZE" -ge 1 ]` for a
while, true for the configs' default EP_SIZE 1; with `dp` 1 vLLM then all-reduces the
experts' output as under TP). Matched by model, system, precision and the row's `measured=`
date; the scripts are in github.com/SemiAnalysisAI/InferenceX.

{flag_table}

Engine knobs of the same scripts (`simulator/validation/silicon_serve.py`): where the
revision in effect on a row's `measured=` date set `--max-num-batched-tokens`,
`--max-num-seqs`, `--kv-cache-dtype`, `--block-size` or `--gpu-memory-utilization`, the row
runs with it (`$((ISL * 2))`: twice the row's ISL; `$CONC`: its concurrency). A window runs
from the commit date of the revision that set the flags (inclusive: a config's sweep runs
the day its change lands) to that of the next revision that changed them. Rows no revision
on the main history covers keep the defaults: rows without a `measured=` date (every
Qwen3 and Llama-3.1-8B row, some Kimi-K2.5 rows), Llama-3.3-70B on H100 (its scripts passed
`--config=config.yaml` as one token, which vLLM 0.10.2 does not read, so which settings
ran is unknown), and rows dated before their script existed on main (MiniMax-M2.5 FP4 on
B200 and every model on B300 dated 2026-04-03: runs of pull-request branches).
Every script in the table starts `tp_size` GPUs, so a row it covers whose
`tp_size x attention_dp_size` is larger is skipped (above); where it never passes
`--enable-expert-parallel` (the table says so), a row whose CSV says `moe_ep_size` > 1 (the
config's `ep:` label, which the script ignores) runs with TP-sharded experts.

{serve_table}

Flags of the same scripts the planner does not apply: `--max-cudagraph-capture-size`,
`--stream-interval` (vLLM sends a request's first token at once whatever the interval,
`vllm/v1/engine/output_processor.py`), the compilation config (CUDA-graph mode, fusion
passes), async scheduling on or off, FlashInfer all-reduce settings and `--max-model-len`
(longer than every request here).

## Results

Overall (medians over points):

{overall_table}

Per model (all systems, precisions and layouts of that model pooled):

{model_errors}

Per system:

{system_errors}

Per model and system:

{group_errors}

By concurrency (`batch_size x attention_dp_size`):

{conc_errors}

By system and TP (`tp_size`; all models, layouts and loads pooled):

{tp_errors}

By ISL/OSL:

{seq_errors}

Largest errors (model and system, by the larger of the two median APEs):

{worst}

## How TTFT falls with TP

Every configuration the file has at three or more TP degrees (same model, system,
precision, vLLM version and lengths), at its lowest concurrency where that is at most 8
requests in flight (`simulator/validation/silicon_scaling.py`; repeated rows: their
median). A GPU's share of a prefill shrinks with TP, host work does not: where the measured
TTFT falls much less than the simulated one, the gap is a cost outside the op tables (API
server, scheduling, launch and output paths, the benchmark host), not a kernel's. A
diagnostic: nothing was changed by it.

{scaling_summary}

{scaling_table}

## How far the data move on their own

Some configurations are in the file more than once (all {mappable} mappable points, not
only those simulated; `simulator/validation/silicon_spread.py`). *Repeat runs*: the same
configuration on the same `backend_version` with different results. *vLLM versions*: the
same configuration on two versions (each side the median of its repeats). Spread of a pair
= larger / smaller - 1, in %:

{spread_table}

A simulator that does not model the engine version cannot expect to be closer to one
version's TTFT than the versions are to each other. Most version pairs are MiniMax-M2.5 on
B200 and B300, so read the second row as an indication, not a bound for every model.

## What was tuned

Nothing was tuned to these points. The model cards are the importer's output of the models'
config.json files; the hardware profiles' priors and the step cost model were set without
looking at this table. Independence caveat: the step model reads the **op-level** latency
tables of the same package (`systems/data/<system>/...`, GEMM, attention, MoE, NCCL kernels
measured in isolation, `simulator/measured/`); those are kernel measurements, not these
end-to-end serving points, and nothing was fitted to the end-to-end points. The choices
made from public facts (checkpoint precision per module group, parallel layout, prefix
caching off, request counts) are listed above. Mechanisms were added after this table
showed their absence, each read from vLLM's code or from public measurements, never from
these points, and kept whichever way it moved the error: the q/k RMSNorm of MiniMax-M2 and
Qwen3, the launch scripts' flags and knobs, and the API server's prompt work
(`frontend_s_per_prompt_token` 2.5 us a token: ModelTC/LightLLM#1258 for tokenizing,
vllm#51281 and vllm#57330 for priming the detokenizer; docs/engine.md).

## Caveats and likely gaps

{first_wave}
- **Median or mean**: the means are read from the package's tooling, not from the CSV;
  against the simulated medians the TTFT error would be larger (the medians are in
  `points.csv`).
- **What TTFT covers**: the client measures from sending the HTTP request to the first
  streamed token. The simulator adds the API server's work per prompt token (tokenizing,
  priming the detokenizer: `frontend_s_per_prompt_token`, 2.5 us a token, an assumption
  from public measurements on other hosts and tokenizers, docs/engine.md); HTTP and request
  handling per request, and the InferenceX host CPUs' own speed, are not modelled.
- **Engine versions and flags**: the rows were measured on vLLM 0.10.2 to 0.19 and a
  nightly (`backend_version`, the scripts' images); the engine knobs are read from the
  launch scripts where a revision covers the row (above), the planner's defaults stand in
  elsewhere. Same-day ambiguity: where a revision landed on a row's measured date, the
  row is read as a run of the new revision; an earlier run that day would have had the
  previous flags (MiniMax-M2.5 FP8 on B200 on 2026-04-03, Kimi-K2.5 FP4 on B200 on
  2026-04-20). The dates' time zone is not recorded.
- **Data parallelism**: the `dp` attention replicas are simulated as independent replicas
  behind a least-loaded router; the expert-parallel MoE is priced with every rank holding
  the same batch; vLLM's DP ranks step in lockstep (idle ranks run dummy batches).
- **Kimi-K2.5 INT4**: the measured MoE tables name their INT4 weight-only rows
  `int4_g128` (`simulator/measured/tables.py`), while the card's routed experts are
  `int4_g32`; a table family must match the dtype, so those MoE layers are priced by the
  MoE tables' fitted baseline instead of the measured `int4_wo` rows (on 8x H200 at 64
  decodes the two differ by about 6 % of the MoE time).
- **Not on the cards**: partial RoPE, attention sinks of gpt-oss, the Kimi-K2.5 vision
  tower (unused by text prompts). (MiniMax-M2.5's q/k RMSNorm over all heads and Qwen3's
  per-head one are: `gqa.qk_norm`.)
- **Marlin MXFP4 is transferred**: the H100 / H200 tables time vLLM's Marlin MXFP4 MoE at
  another model's shape only (hidden 3,584, 896 experts, top-16); the gpt-oss rows whose
  script forces it are priced from there through the fitted roofline, which reads small
  batches 1.5x slower than the OAI Triton rows at gpt-oss's shape: their TPOT is
  pessimistic (docs/validation-guide.md).
"""
