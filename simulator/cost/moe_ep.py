"""The MoE layer of one step: router, latent projections, routed and shared experts, and how
the ranks join their outputs (a TP all-reduce, or the EP dispatch / combine all-to-alls).

What each knob does (formulas and sources: docs/rack-scale.md):

* expert parallelism (``serving.ep = tp x dp``): one rank holds ``(E + R) / ep`` whole
  physical experts (``R`` = ``eplb_redundant_experts``) and receives ``T k / ep`` (token,
  expert) pairs on the mean, ``T`` the tokens of all DP ranks; the step pays the busiest
  rank, ``moe_load_imbalance`` times the mean: its grouped GEMMs run at ``imbalance x T``;
* dispatch and combine (EP with DP attention): each rank sends ``t k D_r x 2`` bytes (its
  ``t`` tokens, one copy per chosen expert, bf16) and the busiest receives ``imbalance`` times
  that; ``all2all_backend`` "generic" prices two all-to-alls of those bytes (NCCL's table or
  the alpha-beta prior), "deepep_*" vLLM's DeepEP kernels from the measured ``moe_a2a``
  table. Past the scale-up domain ``D`` the bytes for the ``ep - D`` ranks of other domains
  leave over the scale-out NIC: the step pays the slower of the two links;
* latent MoE ``latent_moe_projection`` "rank_split": each TP rank computes latent / tp
  columns of the down projection (hidden -> latent) and an all-gather joins them (the
  routed experts need the whole latent); the up projection (latent -> hidden) takes the
  rank's latent / tp rows, so the experts' output is first reduce-scattered over the latent
  (TP experts: each rank holds a partial sum) and the existing MoE all-reduce over the hidden
  state sums the partial results (with EP dispatch the combined latent is whole on each
  rank: no reduce-scatter, but the partial hidden states now need a TP all-reduce).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.cost import ops
from simulator.expert_parallel import physical_experts, scale_up_domain
from simulator.measured.lookup import TRANSFERRED
from simulator.weights import precision_of

if TYPE_CHECKING:
    from simulator.cost.layers import StepOps
    from simulator.measured.lookup import Curve
    from simulator.specs.hardware import HardwareProfile


class AllToAllCurve:
    """One rank's all-to-all over an EP group of ``ep`` ranks, ``domain`` of them per
    scale-up domain, as a curve of the bytes it sends (the step model's collective lines
    take it like a measured curve).

    The rank's bytes split evenly over the ep ranks: ``s (min(ep, D) - 1) / ep`` cross the
    scale-up link, ``s (ep - D) / ep`` the scale-out NIC (when ep > D); the two run at once,
    so the time is the larger. The scale-up part is ``inner`` (a measured DeepEP curve at EP
    size ``inner_world``, read at the bytes that send as much to each peer set:
    ``x = up_bytes w / (w - 1)``) where given, else alpha + bytes / (bw x link_efficiency)."""

    def __init__(
        self,
        device: HardwareProfile,
        ep: int,
        inner: Curve | None = None,
        inner_world: float = 0.0,
    ) -> None:
        self.ep, self.domain = float(ep), float(min(ep, scale_up_domain(device)))
        eff = device.roofline.link_efficiency
        up = device.scale_up or device.host_link
        self.up_alpha, self.up_bw = up.latency_s, up.bw_bytes_per_s * eff
        out = device.scale_out
        self.out_alpha = out.latency_s if out is not None else 0.0
        self.out_bw = out.bw_bytes_per_s * eff if out is not None else 0.0
        self.inner, self.inner_world = inner, float(inner_world)
        self.prior = inner is None  # tallied as the roofline prior
        exact = inner is not None and self.inner_world == self.ep
        self.status = inner.status if exact and inner is not None else TRANSFERRED
        self.queries = self.outside = 0
        self.last_outside = False

    def up_seconds(self, bytes_per_rank: float) -> float:
        up = bytes_per_rank * (self.domain - 1.0) / self.ep
        if self.inner is None:
            return self.up_alpha + up / self.up_bw if up > 0 else 0.0
        w = self.inner_world
        x = bytes_per_rank if w == self.ep else up * w / (w - 1.0)
        t = self.inner.seconds(x)
        self.last_outside = self.inner.last_outside
        return t

    def out_seconds(self, bytes_per_rank: float) -> float:
        if self.ep <= self.domain:
            return 0.0
        return self.out_alpha + bytes_per_rank * (self.ep - self.domain) / self.ep / self.out_bw

    def seconds(self, bytes_per_rank: float) -> float:
        self.queries += 1
        self.last_outside = False
        t = max(self.up_seconds(bytes_per_rank), self.out_seconds(bytes_per_rank))
        if self.last_outside:
            self.outside += 1
        return t


def record_moe(so: StepOps, n: float) -> None:
    """The MoE lines of ``n`` layers (``StepOps._moe``)."""
    m, t = so.m, so.t
    card, serving = m.card, m.serving
    moe = card.moe
    assert moe is not None
    tp, ep = serving.tp, serving.ep
    d = float(card.hidden_size)
    dr = float(moe.routed_hidden_size or card.hidden_size)
    bf16 = m.device.peak_flops_per_s.bf16
    a2a = ep > 1 and serving.dp > 1
    split = bool(moe.routed_hidden_size) and serving.latent_moe_projection == "rank_split"
    so.gemm("moe.router", "moe", n, t, moe.num_experts, d, "router")
    if moe.routed_hidden_size:
        if split and tp > 1:
            so.gemm("moe.latent_down", "moe", n, t, dr / tp, d, "moe_latent")
            so.gemm("moe.latent_up", "moe", n, t, d, dr / tp, "moe_latent")
            so.collective("moe.latent_allgather", "allgather", n, t * dr / tp * ops.ACT_BYTES, tp)
            if a2a:  # the combined latent is whole: the partial hidden states are summed
                so.collective("moe.latent_up_allreduce", "allreduce", n, t * d * ops.ACT_BYTES, tp)
            else:  # the experts' partial latent sums, reduced to each rank's latent / tp
                out = t * dr * ops.ACT_BYTES
                so.collective("moe.latent_reducescatter", "reducescatter", n, out, tp)
        else:
            so.gemm("moe.latent_down", "moe", n, t, dr, d, "moe_latent")
            so.gemm("moe.latent_up", "moe", n, t, d, dr, "moe_latent")
    # with EP every rank sees the tokens of all DP ranks (same batch assumed on each); the
    # busiest rank gets moe_load_imbalance x the mean (token, expert) pairs
    imbalance = serving.moe_load_imbalance if ep > 1 else 1.0
    tokens = (t * serving.dp if ep > 1 else t) * imbalance
    experts = physical_experts(card, serving)
    work = ops.moe(
        tokens, dr, moe.expert_intermediate_size, experts, moe.top_k,
        ep, 1 if ep > 1 else tp, so.wbytes("routed_experts"), float(card.mlp_matrices),
    )  # fmt: skip
    precision = precision_of(card, serving, "routed_experts")
    curve = so.look.moe(so.prefix + "moe.routed_experts", precision, dr, tp, ep, experts)
    so.add("moe.routed_experts", "moe", "moe", n, work, so.peak("routed_experts"), curve, (tokens,))
    if moe.num_shared_experts:
        si = (
            moe.num_shared_experts
            * (moe.shared_intermediate_size or moe.expert_intermediate_size)
            / tp
        )
        if card.gated_mlp:
            so.gemm("moe.shared_gate_up", "moe", n, t, 2 * si, d, "shared_experts")
        else:
            so.gemm("moe.shared_up", "moe", n, t, si, d, "shared_experts")
        so.gemm("moe.shared_down", "moe", n, t, d, si, "shared_experts")
    if curve is None:  # the measured MoE includes the activation and the weighted sum
        so.add(
            "moe.act_sum", "elementwise", "moe", n,
            ops.elementwise(t * moe.top_k * dr, 4.0), bf16,
        )  # fmt: skip
    if a2a:
        _dispatch_combine(so, n, t * moe.top_k * dr * ops.ACT_BYTES * imbalance)
    else:
        so.collective("moe_allreduce", "allreduce", n, t * d * ops.ACT_BYTES, tp)


def _dispatch_combine(so: StepOps, n: float, bytes_per_rank: float) -> None:
    """EP dispatch and combine of ``bytes_per_rank`` each (see the module docstring)."""
    serving, device = so.m.serving, so.m.device
    ep, backend = serving.ep, serving.all2all_backend
    wide = ep > scale_up_domain(device)
    curves = so.m.alltoall_curves  # made once per step model
    for phase, name in (("dispatch", "moe.dispatch_alltoall"), ("combine", "moe.combine_alltoall")):
        key = f"{so.prefix}{name}:{backend}"
        curve = curves.get(key)
        if curve is None and key not in curves:
            inner, world = (None, 0.0)
            if backend != "generic":
                inner, world = so.look.moe_alltoall(key, backend, phase, float(ep))
            if inner is not None:
                curve = AllToAllCurve(device, ep, inner, world)
            elif wide:  # beyond the scale-up domain: the two-link prior
                curve = AllToAllCurve(device, ep)
            curves[key] = curve
        if curve is not None:
            so.collective_curve(name, "alltoall", n, bytes_per_rank, ep, curve)
        else:
            so.collective(name, "alltoall", n, bytes_per_rank, ep)
