"""The ops of one engine step, layer kind by layer kind, and their pricing.

``StepOps`` records every op of a step once per layer kind (with its layer count) and then
prices them together: lines with a measured-table curve (``simulator.cost.lookups``) read
it, the rest go through the latency models' roofline / fitted forms in one vectorised call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from simulator.cost import dense_lines, mixers, moe_ep, ops, sparse_ops
from simulator.cost.mamba2 import add_mamba2_lines
from simulator.cost.ops import OpClass, Work
from simulator.cost.shapes import CAT_INDEX, CATEGORIES, Category, OpLine, StepCost, StepShape
from simulator.specs.model import ModuleGroup
from simulator.weights import precision_of

if TYPE_CHECKING:
    from simulator.cost.step import StepCostModel
    from simulator.measured.lookup import Curve

# Kernels per layer that survive when decode kernels are fused (attention, MoE, communication)
FUSED_KERNELS_PER_LAYER = 3.0


class StepOps:
    """Collects the ops of one step as parallel lists, then prices them in one pass."""

    def __init__(self, model: StepCostModel, shape: StepShape) -> None:
        self.cat_index = CAT_INDEX
        self.m, self.s = model, shape
        self.look = model.lookups
        # (name, op class, category index, count, flops, bytes, kernels, peak FLOP/s)
        self.rows: list[tuple[str, OpClass, int, float, float, float, float, float]] = []
        # row index -> (curve, axis values): lines answered by a measured table
        self.curves: dict[int, tuple[Curve, tuple[float, ...]]] = {}
        # row index -> (m, n, k, weight bytes per element) of plain GEMM rows, kept only
        # when the device has calibrated GEMM shape tables
        self.want_shapes = model.latency.has_tables("gemm")
        self.shapes: dict[int, tuple[float, float, float, float]] = {}
        # (name, op class, count, bytes per rank, world size, curve)
        self.colls: list[tuple[str, OpClass, float, float, float, Curve | None]] = []
        self.fused = (
            model.serving.fused_decode_kernels and shape.num_prefills == 0 and shape.num_decodes > 0
        )
        self.t = float(model.padded(shape))
        self.prefix = ""  # "draft." while the drafter's passes are recorded
        self.drafting: Category | None = None
        # rows and collectives whose numbers depend on the step's context sums (attention
        # cores), not only on its token counts: ``simulator.cost.compiled`` prices the rest
        # once per token-count key. ``static_off``: record only those (a template holds the rest)
        self.dyn: list[bool] = []
        self.dyn_colls: list[bool] = []
        self.static_off = False

    # ---------------------------------------------------------------- recording

    def add(
        self,
        name: str,
        cls: OpClass,
        cat: Category,
        count: float,
        work: Work,
        peak: float,
        curve: Curve | None = None,
        at: tuple[float, ...] = (),
        dynamic: bool = False,
    ) -> None:
        if count > 0 and (dynamic or not self.static_off):
            b = float(work.bytes)
            k = work.kernels if b > 0 else 0.0
            cat_i = self.cat_index[self.drafting or cat]
            self.rows.append((self.prefix + name, cls, cat_i, count, float(work.flops), b, k, peak))
            self.dyn.append(dynamic)
            if curve is not None:
                self.curves[len(self.rows) - 1] = (curve, at)

    def collective(
        self,
        name: str,
        cls: OpClass,
        count: float,
        bytes_per_rank: float,
        world: int,
        dynamic: bool = False,
    ) -> None:
        if self.static_off and not dynamic:
            return
        if count > 0 and world > 1 and bytes_per_rank > 0:
            curve = self.look.collective(self.prefix + name, cls, float(world))
            self.colls.append((self.prefix + name, cls, count, bytes_per_rank, float(world), curve))
            self.dyn_colls.append(dynamic)

    def collective_curve(
        self, name: str, cls: OpClass, count: float, bytes_per_rank: float, world: int, curve: Any
    ) -> None:
        """A collective priced by ``curve`` (``seconds(bytes)``, ``status``, query counts:
        ``moe_ep.AllToAllCurve``) instead of the device's table or prior."""
        if self.static_off or count <= 0 or world <= 1 or bytes_per_rank <= 0:
            return
        self.colls.append((self.prefix + name, cls, count, bytes_per_rank, float(world), curve))
        self.dyn_colls.append(False)

    def gemm(
        self,
        name: str,
        cat: Category,
        count: float,
        m: float,
        n: float,
        k: float,
        group: ModuleGroup,
        dynamic: bool = False,
    ) -> None:
        """A plain GEMM of ``group``'s weights: the measured GEMM table where there is one."""
        if self.static_off and not dynamic:
            return
        if count > 0 and m > 0:
            full = self.prefix + name
            # what a line's name fixes (its weights' width and peak, its measured curve: the
            # lookups bind a curve by name), found once per model
            line = self.m.gemm_lines.get((full, group))
            if line is None:
                precision = precision_of(self.m.card, self.m.serving, group)
                curve = self.look.gemm(full, precision, n, k)
                line = (self.wbytes(group), self.peak(group), curve)
                self.m.gemm_lines[full, group] = line
            w, peak, curve = line
            self.add(name, "gemm", cat, count, ops.gemm(m, n, k, w), peak, curve, (m,), dynamic)
            if self.want_shapes:
                self.shapes[len(self.rows) - 1] = (m, n, k, w)

    def peak(self, group: ModuleGroup) -> float:
        return self.m.group_peak[group]

    def wbytes(self, group: ModuleGroup) -> float:
        return self.m.group_weight_bytes[group]

    # ---------------------------------------------------------------- the model

    def build(self) -> None:
        m, s = self.m, self.s
        card, serving = m.card, m.serving
        tp = serving.tp
        d = float(card.hidden_size)
        t = self.t
        bf16_peak = m.device.peak_flops_per_s.bf16
        if s.num_tokens == 0:
            return
        static = not self.static_off  # static_off: only the context lines (a template's)
        if static:
            # every layer: two RMSNorms (+ residual add) over the hidden state (one per
            # Nemotron-H block: m.n_norms counts mixers + MLPs)
            self.add(
                "rmsnorm", "elementwise", "dense", m.n_norms, ops.elementwise(t * d, 8.0),
                bf16_peak,
            )  # fmt: skip
        if "mla" in m.counts:
            mixers.record_mla(self, m.counts["mla"])
        for kind in ("gqa", "swa", "sparse_gqa"):
            if kind in m.counts:
                mixers.record_gqa(self, kind, m.counts[kind])
        for kind in sparse_ops.KINDS:  # simulator/cost/sparse_ops.py
            if kind in m.counts:
                sparse_ops.record(self, kind, m.counts[kind])
        if static:
            for kind in ("kda", "gdn"):
                if kind in m.counts:
                    mixers.record_linear(self, m.counts[kind])
            if "mamba2" in m.counts:
                add_mamba2_lines(self, m.counts["mamba2"])
            n_attn = sum(v for k, v in m.counts.items() if k != "none")  # none: MLP-only
            self.collective("attn_allreduce", "allreduce", n_attn, t * d * ops.ACT_BYTES, tp)
            if m.n_dense_mlp:
                dense_lines.record_dense_mlp(self, m.n_dense_mlp)
            if m.n_moe:
                moe_ep.record_moe(self, m.n_moe)  # experts, EP, latent MoE
            dense_lines.record_head(self)
        if serving.num_speculative_tokens and s.num_decodes:
            dense_lines.record_draft(self, serving.num_speculative_tokens)

    # ---------------------------------------------------------------- pricing

    def row_totals(self, static_only: bool = False) -> NDArray[np.float64]:
        """Seconds x count of every recorded row (tallied by source). ``static_only``: the
        context rows are left at 0, unpriced and untallied (a template's share)."""
        lat = self.m.latency
        if not self.want_shapes:  # the vectorised pass: GEMM shape tables need it
            return self._row_totals_scalar(static_only)
        _, classes, _, counts, flops, bytes_, kernels, peaks = zip(*self.rows, strict=True)
        kern = np.zeros(len(kernels)) if self.fused else np.array(kernels)
        shapes = np.full((len(classes), 4), np.nan)
        for i, shape in self.shapes.items():
            shapes[i] = shape
        skip = self.dyn if static_only else [False] * len(classes)
        curves = {i: c for i, c in self.curves.items() if not skip[i]}
        rest = [i for i in range(len(classes)) if i not in self.curves and not skip[i]]
        secs = np.zeros(len(classes)) if static_only else np.empty(len(classes))
        if rest:
            idx = np.array(rest)
            secs[idx] = lat.compute_seconds_mixed(
                [classes[i] for i in rest], np.array(flops)[idx], np.array(bytes_)[idx],
                np.array(peaks)[idx], kern[idx], shapes[idx],
            )  # fmt: skip
        asked = []
        for i, (curve, at) in curves.items():
            secs[i] = curve.seconds(*at)
            asked.append((i, curve, curve.last_outside))
        total: NDArray[np.float64] = secs * np.array(counts)
        self._account(total, [(i, classes[i]) for i in rest], asked)
        return total

    def _row_totals_scalar(self, static_only: bool) -> NDArray[np.float64]:
        """``row_totals`` in scalar arithmetic (``compute_seconds_one``, the same floats):
        most rows of a step are answered by measured curves one at a time anyway, and for the
        few left numpy's per-call cost would be most of the price."""
        lat = self.m.latency
        secs: list[float] = []
        rest: list[tuple[int, str]] = []
        asked: list[tuple[int, Any, bool]] = []
        for i, (_, cls, _, count, flops, b, kernels, peak) in enumerate(self.rows):
            if static_only and self.dyn[i]:
                secs.append(0.0)
                continue
            entry = self.curves.get(i)
            if entry is not None:
                curve = entry[0]
                sec = curve.seconds(*entry[1])
                asked.append((i, curve, curve.last_outside))
            else:
                rest.append((i, cls))
                sec = lat.compute_seconds_one(cls, flops, b, peak, 0.0 if self.fused else kernels)
            secs.append(sec * count)
        total = np.array(secs)
        self._account(total, rest, asked)
        return total

    def finish(self, detail: bool) -> StepCost:
        m = self.m
        per_cat = np.zeros(len(CATEGORIES))
        lines: list[OpLine] = []
        gpu = 0.0
        if self.rows:
            total = self.row_totals()
            cats = [r[2] for r in self.rows]
            per_cat += np.bincount(cats, weights=total, minlength=len(CATEGORIES))
            gpu += float(total.sum())
            if detail:
                lines += [
                    OpLine(name, cls, CATEGORIES[cat], count, flops, b, sec)
                    for (name, cls, cat, count, flops, b, _, _), sec in zip(
                        self.rows, total.tolist(), strict=True
                    )
                ]
        if self.fused:
            launches = self.fused_launch_s()
            per_cat[self.cat_index["overhead"]] += launches
            gpu += launches
        if self.colls:
            coll = self.collective_totals()
            comm = float(coll.sum())
            if detail:
                lines += [
                    OpLine(nm, cl, "communication", c, 0.0, b, sec)
                    for (nm, cl, c, b, _, _), sec in zip(self.colls, coll.tolist(), strict=True)
                ]
            per_cat[self.cat_index["communication"]] += comm
            gpu += comm
        cpu = m.cpu_seconds(self.s) if self.rows else 0.0
        return self.cost(gpu, cpu, per_cat, tuple(lines))

    def fused_launch_s(self) -> float:
        m = self.m
        return FUSED_KERNELS_PER_LAYER * m.card.layers.count * m.device.roofline.kernel_launch_s

    def cost(
        self, gpu: float, cpu: float, per_cat: NDArray[np.float64], lines: tuple[OpLine, ...]
    ) -> StepCost:
        step = max(gpu, cpu)
        per_cat[self.cat_index["overhead"]] += step - gpu
        return StepCost(
            seconds=step,
            gpu_s=gpu,
            cpu_s=cpu,
            breakdown_s=dict(zip(CATEGORIES, per_cat.tolist(), strict=True)),
            padded_tokens=int(self.t),
            lines=lines,
        )

    def _account(
        self,
        total: NDArray[np.float64],
        rest: list[tuple[int, str]],
        asked: list[tuple[int, Any, bool]],
    ) -> None:
        """Add this step's GPU seconds to the latency models' tally by source: measured
        (a table inside its grid), fitted (a table outside it, transferred, or a fitted
        model), calibrated, prior. ``asked``: (line, its curve, whether that line's own
        query fell outside the grid: lines can share a curve)."""
        lat = self.m.latency
        tally = lat.seconds_by_source
        measured = self.look.tables is not None and self.look.tables.measured
        for i, curve, outside in asked:
            if getattr(curve, "prior", False):  # a roofline in a curve's clothes (moe_ep)
                tally["prior"] += float(total[i])
                continue
            inside = measured and curve.status == 0 and not outside
            tally["measured" if inside else "fitted"] += float(total[i])
        for i, cls in rest:
            label = (
                "calibrated"
                if cls in lat.calibrated
                else ("fitted" if cls in lat.fitted else "prior")
            )
            tally[label] += float(total[i])

    def collective_totals(self, static_only: bool = False) -> NDArray[np.float64]:
        """Seconds x count of every recorded collective (tallied by source); ``static_only``
        as in ``row_totals``."""
        lat = self.m.latency
        colls = self.colls
        skip = self.dyn_colls if static_only else None
        secs = [0.0] * len(colls)
        rest: list[int] = []
        asked: list[int] = []
        for i, c in enumerate(colls):
            if skip is None or not skip[i]:
                (rest if c[5] is None else asked).append(i)
        if rest:
            priced = lat.collective_seconds_mixed(
                [colls[i][1] for i in rest], [colls[i][3] for i in rest],
                [colls[i][4] for i in rest],
            )  # fmt: skip
            for i, t in zip(rest, priced, strict=True):
                secs[i] = t
        zero: dict[int, float] = {}
        if self.fused:  # fused kernels hide the latency term of small collectives
            keep = sorted(rest + asked)
            at_zero = lat.collective_seconds_mixed(
                [colls[i][1] for i in keep], [0.0] * len(keep), [colls[i][4] for i in keep]
            )
            for i, z in zip(keep, at_zero, strict=True):
                curve = colls[i][5]
                zero[i] = z if curve is None else curve.seconds(1.0)
            for i in rest:
                secs[i] = max(secs[i] - zero[i], 0.0)
        tally = []
        for i in asked:
            curve = colls[i][5]
            assert curve is not None
            t = curve.seconds(colls[i][3])
            secs[i] = max(t - zero[i], 0.0) if self.fused else t
            tally.append((i, curve, curve.last_outside))
        total: NDArray[np.float64] = np.array(secs) * np.array([c[2] for c in colls])
        self._account(total, [(i, colls[i][1]) for i in rest], tally)
        return total
