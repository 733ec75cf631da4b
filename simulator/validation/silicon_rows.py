"""Rows of the silicon sample whose parallel layout cannot be trusted, and why.

Some rows name their layout in their ``id`` (``..._c4_tp4_ep4_1294``, ``..._tp4_0_ep4_0_572``)
and some of those give another one in their columns: in the 0.12.0 file, 40 vLLM rows named
``tp4_ep4`` have ``tp_size`` 4, ``attention_dp_size`` 4 and ``moe_ep_size`` 16, i.e. 16 GPUs
instead of 4. Their measured TTFT and TPOT are, to the hundredth of a millisecond, those of
rows whose id and columns agree on TP4 with EP4 (Kimi-K2.5 on B200: the "gap analysis" rows);
other rows without a layout in their id repeat the same measurements under the 16-GPU
layout. Simulated as 16 GPUs they are 4x too cheap per GPU in decode and pay an all-to-all
across two HGX boxes that the 4-GPU run never did.

Two rules, applied to every mappable point before any is chosen:

1. a row whose id names a (tp, ep) other than its columns' contradicts itself: skipped;
2. one measurement (model, system, precisions, lengths, concurrency, TTFT and TPOT to 0.01 ms)
   under two or more layouts: when exactly one of those layouts is confirmed by an id that
   names it, the rows of the other layouts are skipped; when none or several are, every row
   of the measurement is skipped (which run it was cannot be told).

And one more on the rows left (``repeated_rows``): the same measurement under the same layout
and engine version in two or more rows (the 0.12.0 file lists whole sweeps twice, e.g.
MiniMax-M2.5 NVFP4 on B200 ``..._ep1_0_121`` and ``..._ep1_0_1346``, equal to the last digit)
is one run: the first row is kept, the others are skipped, so that no run counts twice in a
median. Two runs of one configuration agree to 0.01 ms in both TTFT and TPOT essentially
never (repeat runs differ by 3.5 % median in TTFT, 137 pairs: silicon_spread.py).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # silicon.py imports this module
    from simulator.validation.silicon import SiliconPoint

LAYOUT_IN_ID = re.compile(r"_tp(\d+)(?:_0)?_ep(\d+)(?:_0)?_")
SKIP_ID_LAYOUT = "its id names another (tp, ep) than its columns give: the row contradicts itself"
SKIP_TWO_LAYOUTS = (
    "its measured TTFT and TPOT are another row's under another parallel layout, and the"
    " layout an id confirms is the other one (or none is): which run it was is unclear"
)

SKIP_REPEATED = (
    "its measured TTFT and TPOT are an earlier row's, to 0.01 ms, under the same layout and"
    " engine version: the same run listed again, counted once"
)

Layout = tuple[int, int, int]  # tp, dp, ep


def named_layout(point: SiliconPoint) -> tuple[int, int] | None:
    """The (tp, ep) the row's id names, if it names one."""
    m = LAYOUT_IN_ID.search(point.id)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _layout(p: SiliconPoint) -> Layout:
    return (p.tp, p.dp, p.ep)


def _measurement(p: SiliconPoint) -> tuple[object, ...]:
    return (
        p.model_path, p.system, p.precision, p.gemm_quant_mode, p.moe_quant_mode,
        p.isl, p.osl, p.conc, round(p.ttft_ms, 2), round(p.tpot_ms, 2),
    )  # fmt: skip


def untrusted_layouts(points: Sequence[SiliconPoint]) -> dict[int, str]:
    """Row -> the reason its layout is not trusted (rules 1 and 2 of the module docstring)."""
    out: dict[int, str] = {}
    groups: dict[tuple[object, ...], list[SiliconPoint]] = defaultdict(list)
    for p in points:
        named = named_layout(p)
        if named is not None and named != (p.tp, p.ep):
            out[p.row] = SKIP_ID_LAYOUT
        else:
            groups[_measurement(p)].append(p)
    for group in groups.values():
        if len({_layout(q) for q in group}) < 2:
            continue
        confirmed = {_layout(q) for q in group if named_layout(q) is not None}
        kept = confirmed.pop() if len(confirmed) == 1 else None
        for q in group:
            if _layout(q) != kept:
                out[q.row] = SKIP_TWO_LAYOUTS
    return out


def repeated_rows(points: Sequence[SiliconPoint]) -> dict[int, str]:
    """Row -> ``SKIP_REPEATED`` for every row after the first of one run listed again."""
    out: dict[int, str] = {}
    seen: set[tuple[object, ...]] = set()
    for p in points:
        key = (*_measurement(p), _layout(p), p.backend_version)
        if key in seen:
            out[p.row] = SKIP_REPEATED
        seen.add(key)
    return out
