"""How TTFT falls with TP, measured and simulated, where the file has one configuration at
three or more TP degrees.

A GPU's share of a prefill shrinks with TP, so a simulator that prices only GPU work
predicts a TTFT that falls with TP; host work (the API server, the scheduler, launch and
output paths) does not shrink. Where the measured TTFT falls much less than the simulated
one, the gap is a cost outside the op tables, not a kernel's. A diagnostic, not a fit:
nothing is changed by it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.validation.silicon_sim import SiliconResult

HEADER = [
    "model", "system", "precision", "vLLM", "ISL/OSL", "conc", "TP",
    "measured TTFT ms", "simulated TTFT ms", "measured largest / smallest TP",
    "simulated largest / smallest TP",
]  # fmt: skip
MIN_TPS = 3
SHORT_PROMPT = 1024  # prompts this long or shorter: where a fixed cost shows most
LOW_CONC = 8  # at most this many requests in flight: little queueing, so fixed costs show


Family = tuple[str, str, str, str, int, int]
ByTp = dict[int, tuple[float, float]]


def families(results: Sequence[SiliconResult]) -> dict[Family, tuple[int, ByTp]]:
    """Per (card, device, precision, vLLM version, ISL, OSL) with ``MIN_TPS`` TP degrees or
    more at its lowest concurrency, when that is at most ``LOW_CONC``: that concurrency, and
    TP -> (measured, simulated) mean TTFT in ms (the median over repeated rows)."""
    by: dict[Family, dict[int, dict[int, list[tuple[float, float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for r in results:
        p = r.point
        if r.ok and r.sim_ttft_ms is not None:
            fam = (p.card, p.device, p.precision or "-", p.backend_version or "-", p.isl, p.osl)
            by[fam][p.conc][p.tp].append((p.ttft_ms, r.sim_ttft_ms))
    out: dict[Family, tuple[int, ByTp]] = {}
    for fam, concs in sorted(by.items()):
        conc = min(concs)
        if conc <= LOW_CONC and len(concs[conc]) >= MIN_TPS:
            out[fam] = (
                conc,
                {
                    tp: (
                        statistics.median(m for m, _ in pairs),
                        statistics.median(s for _, s in pairs),
                    )
                    for tp, pairs in sorted(concs[conc].items())
                },
            )
    return out


def ratios(tps: ByTp) -> tuple[float, float]:
    """Measured and simulated TTFT at the largest TP over that at the smallest."""
    first, last = tps[min(tps)], tps[max(tps)]
    return last[0] / first[0], last[1] / first[1]


def scaling_rows(fams: dict[Family, tuple[int, ByTp]]) -> list[list[str]]:
    """The document's table: a row per family (``families``)."""
    rows = []
    for (card, device, precision, version, isl, osl), (conc, tps) in fams.items():
        measured, simulated = ratios(tps)
        rows.append(
            [
                card, device, precision, version, f"{isl}/{osl}", str(conc),
                "/".join(str(tp) for tp in tps),
                "/".join(f"{m:.0f}" for m, _ in tps.values()),
                "/".join(f"{s:.0f}" for _, s in tps.values()),
                f"{measured:.2f}", f"{simulated:.2f}",
            ]
        )  # fmt: skip
    return rows


def scaling_summary(fams: dict[Family, tuple[int, ByTp]]) -> str:
    """One sentence per system: the median ratios over its short-prompt families."""
    per: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for fam, (_, tps) in fams.items():
        if fam[4] <= SHORT_PROMPT:
            per[fam[1]].append(ratios(tps))
    if not per:
        return (
            f"No configuration is in the file at {MIN_TPS} or more TP degrees at {LOW_CONC} or"
            " fewer requests in flight."
        )
    parts = [
        f"{device}: measured {statistics.median(m for m, _ in rs):.2f}, simulated "
        f"{statistics.median(s for _, s in rs):.2f} ({len(rs)} famil"
        f"{'y' if len(rs) == 1 else 'ies'})"
        for device, rs in sorted(per.items())
    ]
    return (
        f"TTFT at the largest TP over that at the smallest, median over the families with"
        f" prompts of at most {SHORT_PROMPT:,} tokens: " + "; ".join(parts) + "."
    )
