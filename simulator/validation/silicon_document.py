"""docs/validation-silicon.md from a silicon validation report (``plan validate silicon``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path

from simulator.validation import silicon_scaling
from simulator.validation.document import _md_table, _pct
from simulator.validation.silicon import devices_by_system
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
from simulator.validation.silicon_sim import SiliconResult
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

# the page's text, with ``str.format`` fields that ``render_markdown`` fills
TEMPLATE = (
    resources.files("simulator.validation").joinpath("silicon_template.md").read_text("utf-8")
)

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
