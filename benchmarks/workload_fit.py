"""Fit the built-in generators' tables from the shared traces and print them as Python.

    .venv/bin/python benchmarks/workload_fit.py [--shared ../shared/data] [--write] [--check N]

Reads ``agentic_cc_traces_weka/cc_traces_weka_requests.csv`` (710 WEKA Claude Code traces,
49,334 requests) and ``azure_llm_2023/AzureLLMInferenceTrace_conv.csv``; prints the
``AGENTIC`` and Azure tables of ``simulator/workload/fitted.py`` (``--write`` rewrites its
generated section). With ``--check N`` it generates N agentic sessions with the fitted
parameters and prints the generator's percentiles next to the traces' (the bar: 10 % on each).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.workload.fitted import AgenticParams, SessionClass
from simulator.workload.quantiles import QuantileTable

BIG_CONTEXT_TOKENS = 250_000
AUTO_COMPACT_MIN_TOKENS = 100_000  # a session is "1M-context" when its prompt grows past this


FRESH_BELOW_TOKENS = 40_000  # a first prompt below this is a fresh session
BIG_CONTEXT_TOKENS = 250_000  # a session whose prompt passes this runs a 1M-context model
AUTO_COMPACT_MIN_TOKENS = 100_000  # compactions below this are manual (/compact): not modelled
CALIBRATION_SESSIONS = 20_000
FITTED = Path(__file__).parents[1] / "simulator" / "workload" / "fitted.py"


def fit_agentic(csv: Path) -> AgenticParams:
    """The generator's tables from the per-request CSV, then the prompt calibration map."""
    d = pd.read_csv(csv, dtype={"subagent_id": str})
    p = d[d.depth == 0].copy()
    g = p.groupby("trace_id", sort=False)
    p["prev_in"] = g.input_tokens.shift()
    p["prev_blocks"] = g.n_blocks64.shift()
    p["growth"] = (p.input_tokens - p.prev_in).clip(lower=0).fillna(0)
    x = p.dropna(subset=["prev_in"])
    delta = x.input_tokens - x.prev_in
    compaction = delta < -0.3 * x.prev_in
    normal = x[delta >= 0]
    lost = (normal.prev_blocks - normal.prefix_hit_blocks64).clip(lower=0)
    sessions = pd.DataFrame(
        {
            "turns": g.size(),
            "first": g.input_tokens.first(),
            "growth": p.groupby("trace_id", sort=False).growth.sum(),
            "big": g.input_tokens.max() > BIG_CONTEXT_TOKENS,
        }
    )

    def session_class(s: pd.DataFrame) -> SessionClass:
        rho = s[["turns", "first", "growth"]].corr(method="spearman")
        return SessionClass(
            share=round(len(s) / len(sessions), 4),
            turns=QuantileTable.fit(s.turns.to_numpy()),
            first_prompt=QuantileTable.fit(s["first"].to_numpy()),
            total_growth=QuantileTable.fit(s.growth.to_numpy()),
            rank_correlation=(
                round(float(rho.loc["turns", "first"]), 3),
                round(float(rho.loc["turns", "growth"]), 3),
                round(float(rho.loc["first", "growth"]), 3),
            ),
            big_context_share=round(float(s.big.mean()), 4),
        )

    at = x[compaction].prev_in
    per_trace = d.groupby("trace_id").first()
    params = AgenticParams(
        fresh=session_class(sessions[sessions["first"] < FRESH_BELOW_TOKENS]),
        resumed=session_class(sessions[sessions["first"] >= FRESH_BELOW_TOKENS]),
        growth_tokens=QuantileTable.fit(delta[delta >= 0].to_numpy()),
        compact_at=QuantileTable.fit(at[at >= AUTO_COMPACT_MIN_TOKENS].to_numpy()),
        big_context_compact_at=float(d.input_tokens.max()),
        compacted_prompt=QuantileTable.fit(x[compaction].input_tokens.to_numpy()),
        system_tokens=QuantileTable.fit(per_trace.tool_tokens + per_trace.system_tokens),
        prefix_break_share=round(float((lost > 0).sum() / len(x)), 4),
        prefix_break_blocks=QuantileTable.fit(lost[lost > 0].to_numpy()),
        output_tokens=QuantileTable.fit(d.output_tokens.to_numpy()),
        think_time_s=QuantileTable.fit(d.think_time_s.dropna().to_numpy()),
    )
    return calibrate(params, d.input_tokens.to_numpy())


def calibrate(params: AgenticParams, trace_prompts: np.ndarray) -> AgenticParams:
    """Add the monotone map from the session model's prompt quantiles to the traces'."""
    from simulator.workload.generators import agentic_prompts

    latent = np.concatenate(
        [
            agentic_prompts(np.random.default_rng([12345, k]), params)[0]
            for k in range(CALIBRATION_SESSIONS)
        ]
    )
    return dataclasses.replace(
        params,
        prompt_map_from=QuantileTable.fit(latent),
        prompt_map_to=QuantileTable.fit(trace_prompts),
    )


def trace_targets(csv: Path) -> dict[str, dict[str, float]]:
    d = pd.read_csv(csv, dtype={"subagent_id": str})
    q = (10, 50, 90, 99)

    def pct(v: object) -> dict[str, float]:
        return {f"p{k}": float(x) for k, x in zip(q, np.percentile(np.asarray(v), q), strict=True)}

    return {
        "prompt_tokens": pct(d.input_tokens),
        "output_tokens": pct(d.output_tokens),
        "think_time_s": pct(d.think_time_s.dropna()),
        "requests_per_session": pct(d.groupby("trace_id").size()),
        "block_reuse": {"all": float(d.prefix_hit_blocks64.sum() / d.n_blocks64.sum())},
    }


def compare(params: AgenticParams, csv: Path, sessions: int, seed: int) -> float:
    """Print generator vs trace percentiles; return the worst |difference| in %."""
    from simulator.workload import Source, workload_stats
    from simulator.workload.generators import agentic_sessions

    src = Source("agentic", "agentic", 64, lambda: agentic_sessions(sessions, seed, params),
                 timed=False, has_sessions=True, has_prefix=True)  # fmt: skip
    t0 = time.perf_counter()
    st = workload_stats(src).to_dict()
    took = time.perf_counter() - t0
    worst = 0.0
    print(f"| quantity | percentile | traces (710) | generator ({sessions} sessions) | diff |")
    print("|---|---|---|---|---|")
    for name, ref in trace_targets(csv).items():
        for k, v in ref.items():
            gen = st[name] if name == "block_reuse" else st[name][k]
            diff = 100.0 * (gen - v) / v if v else 0.0
            worst = max(worst, abs(diff))
            print(f"| {name} | {k} | {v:,.4g} | {gen:,.4g} | {diff:+.1f} % |")
    print(f"({st['requests']:,} requests in {took:.1f} s; worst {worst:.1f} %)")
    return worst


def py(obj: object, indent: int = 0) -> str:
    """Python source of a fitted parameter object, wrapped at 100 columns."""
    pad = " " * (indent + 4)
    if isinstance(obj, QuantileTable):
        body = textwrap.fill(", ".join(f"{v!r}" for v in obj.values) + ",", 100 - len(pad))
        return "QuantileTable((\n" + textwrap.indent(body, pad) + "\n" + " " * indent + "))"
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = [
            f"{pad}{f.name}={py(getattr(obj, f.name), indent + 4)},"
            for f in dataclasses.fields(obj)
        ]
        return f"{type(obj).__name__}(\n" + "\n".join(fields) + "\n" + " " * indent + ")"
    return repr(obj)


MARKER = "# ---- generated by benchmarks/workload_fit.py --write: do not edit by hand ----"
CHAT_SOURCE = """
# Chat (``chat_sessions``): per-turn message and output lengths from the Azure conversation
# trace above; a 512-token system prompt shared by every session (every request of the Mooncake
# FAST'25 conversation trace starts with the same 512-token block, hash id 0). Assumptions,
# not fitted (no public trace links the turns of a chat): 3 turns per conversation on average
# (geometric), think time lognormal with median 20 s and sigma 1.
CHAT = ChatParams(
    system_tokens=512,
    mean_turns=3.0,
    message_tokens=AZURE_CONV_CONTEXT,
    output_tokens=AZURE_CONV_GENERATED,
    think_time_median_s=20.0,
    think_time_sigma=1.0,
)
"""


def generated_section(params: AgenticParams, shared: Path) -> str:
    az = pd.read_csv(shared / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
    return (
        f"{MARKER}\n"
        f"# Fitted on {datetime.date.today().isoformat()} from "
        "../shared/data/agentic_cc_traces_weka/cc_traces_weka_requests.csv\n"
        "# (710 WEKA kv-cache-tester Claude Code traces, github.com/callanjfox/kv-cache-tester\n"
        "# snapshot 94f6046, Apache-2.0; 49,334 requests) and\n"
        "# ../shared/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv (Azure LLM inference\n"
        "# trace 2023, conversation, 19,366 requests; Patel et al., Splitwise, ISCA'24;\n"
        "# CC-BY 4.0).\n"
        "# Quantiles at quantiles.PROBS.\n"
        "# fmt: off\n"
        f"AGENTIC = {py(params)}\n\n"
        f"AZURE_CONV_CONTEXT = {py(QuantileTable.fit(az.ContextTokens.to_numpy()))}\n"
        f"AZURE_CONV_GENERATED = {py(QuantileTable.fit(az.GeneratedTokens.to_numpy()))}\n"
        "# fmt: on\n"
        f"{CHAT_SOURCE}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shared", type=Path, default=Path(__file__).parents[2] / "shared" / "data")
    ap.add_argument("--check", type=int, default=0, help="generate N sessions and compare")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true", help="rewrite simulator/workload/fitted.py")
    args = ap.parse_args()
    csv = args.shared / "agentic_cc_traces_weka" / "cc_traces_weka_requests.csv"
    params = fit_agentic(csv)
    section = generated_section(params, args.shared)
    if args.write:
        text = FITTED.read_text()
        FITTED.write_text(text[: text.index(MARKER)] + section)
        print(f"wrote {FITTED}")
    else:
        print(section)
    if args.check:
        compare(params, csv, args.check, args.seed)


if __name__ == "__main__":
    main()
