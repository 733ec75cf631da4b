"""Collective timing with torch.distributed: two CPU ranks over gloo (NCCL/RCCL on GPUs)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the calibration extra (torch CPU + triton) is not installed")

from kernels_calibration import collectives


def test_two_gloo_ranks_time_allreduce_and_allgather() -> None:
    work = [("allreduce", 4096), ("allreduce", 1 << 20), ("allgather", 4096)]
    stats = collectives.measure(2, work, backend="gloo", reps=5)
    assert set(stats) == set(work)
    for s in stats.values():
        assert s.n_reps == 5
        assert 0 < s.p20_us <= s.median_us <= s.p80_us


def test_jobs_cover_every_world_size_op_and_size() -> None:
    jobs = collectives.jobs([2, 4], [4096, 8192], collectives.ALL_OPS)
    assert len(jobs) == 2 * 4 * 2
    assert {j.dims()["world_size"] for j in jobs} == {2, 4}
    assert all(j.kernel == "torch.distributed" for j in jobs)
