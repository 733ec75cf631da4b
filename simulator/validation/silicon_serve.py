"""The engine settings the silicon rows' launch scripts gave ``vllm serve``.

The CSV records the parallel layout and the lengths of a run, not how its server was
started. Its rows match SemiAnalysis InferenceX records, whose launch scripts are public
(github.com/SemiAnalysisAI/InferenceX, ``benchmarks/``), so where a script set an engine
knob the planner models, the rows measured while that revision was in effect run with it:

- ``--max-num-batched-tokens`` (a number, or ``$((ISL * 2))``: twice the row's ISL),
- ``--max-num-seqs`` (a number, or ``$CONC``),
- ``--kv-cache-dtype``, ``--block-size`` and ``--gpu-memory-utilization``.

Every script here starts ``TP`` GPUs (``--tensor-parallel-size=$TP``, or with ``dp-attn``
``--tensor-parallel-size=1 --data-parallel-size=$TP``), so a row it covers whose CSV world
(``tp_size x attention_dp_size``) is larger contradicts it and is skipped (``silicon.py``).
Where a script never passes ``--enable-expert-parallel`` (Kimi-K2.5, gpt-oss, Llama), a row
whose CSV says ``moe_ep_size`` > 1 (the config's ``ep:`` label, which the script ignores)
runs with TP-sharded experts.

A knob a script leaves unset keeps the planner's vLLM default (``ServingConfig``). A row is
matched by model, system, precision and its ``measured=`` date, against windows of script
revisions: from the commit date of the revision that set the flags (inclusive: a benchmark
sweep of a changed config runs the day its change lands) to that of the next revision that
changed them (exclusive). The revisions were read from the repository's history, never
chosen by the error; a row whose date no revision on the main history covers, or that has no
date, keeps the defaults (docs/validation-silicon.md lists which). Flags with no effect on
what the planner models are not here: prefix caching (the validation runs without it, and
random prompts share no prefix), ``--stream-interval`` (vLLM sends the first token at once
whatever the interval), CUDA-graph capture sizes, compilation passes, async scheduling.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from simulator.specs.precision import KvCacheDtype
from simulator.validation.silicon_flags import applied, in_window, window_text


@dataclass(frozen=True)
class ServeFlags:
    """The engine knobs one launch-script revision set, and the rows it applies to."""

    model_path: str
    system: str
    precision: str
    since: str  # commit date of the revision that set them (ISO, inclusive)
    until: str | None  # commit date of the next revision that changed them (exclusive)
    script: str  # path@commit (image)
    gpu_memory_utilization: float | None = None
    max_num_batched_tokens: int | None = None
    batched_tokens_per_isl: int | None = None  # `$((ISL * k))`
    max_num_seqs: int | None = None
    seqs_from_conc: bool = False  # `--max-num-seqs $CONC`
    kv_cache_dtype: KvCacheDtype | None = None
    block_size_tokens: int | None = None
    # the script never passes --enable-expert-parallel: a row whose CSV says moe_ep_size > 1
    # (its config's `ep:` label, which the script ignores) ran with TP-sharded experts
    no_expert_parallel: bool = False

    def _knobs(self, isl: int, conc: int) -> list[tuple[str, Any, str]]:
        """(ServingConfig field, its value at this ISL and concurrency, the script's words)."""
        out: list[tuple[str, Any, str]] = []
        if self.gpu_memory_utilization is not None:
            gmu = self.gpu_memory_utilization
            out.append(("gpu_memory_utilization", gmu, f"--gpu-memory-utilization {gmu:.2f}"))
        if self.batched_tokens_per_isl is not None:
            k = self.batched_tokens_per_isl
            words = f"--max-num-batched-tokens $((ISL * {k}))"
            out.append(("max_num_batched_tokens", k * isl, words))
        elif self.max_num_batched_tokens is not None:
            n = self.max_num_batched_tokens
            out.append(("max_num_batched_tokens", n, f"--max-num-batched-tokens {n}"))
        if self.seqs_from_conc:
            out.append(("max_num_seqs", conc, "--max-num-seqs $CONC"))
        elif self.max_num_seqs is not None:
            out.append(("max_num_seqs", self.max_num_seqs, f"--max-num-seqs {self.max_num_seqs}"))
        if self.kv_cache_dtype is not None:
            kv = self.kv_cache_dtype
            out.append(("kv_cache_dtype", kv, f"--kv-cache-dtype {kv}"))
        if self.block_size_tokens is not None:
            b = self.block_size_tokens
            out.append(("block_size_tokens", b, f"--block-size {b}"))
        return out

    def settings(self, isl: int, conc: int) -> dict[str, Any]:
        """The ``ServingConfig`` fields these flags set for a row of this ISL and concurrency."""
        return {name: value for name, value, _ in self._knobs(isl, conc)}

    def text(self) -> str:
        """The flags in the script's words."""
        words = [w for _, _, w in self._knobs(0, 0)]
        return " ".join(
            words + (["(no --enable-expert-parallel)"] if self.no_expert_parallel else [])
        )


_MINIMAX = "MiniMaxAI/MiniMax-M2.5"
_KIMI = "moonshotai/Kimi-K2.5"
_GPTOSS = "openai/gpt-oss-120b"
_LLAMA = "meta-llama/Llama-3.1-70B"
_SINGLE = "benchmarks/single_node/"
# MiniMax-M2.5's recipe of 2026-04-03 on (bddbf4031), copied to the FP4 and B300 scripts
_MINIMAX_NEW: dict[str, Any] = {
    "gpu_memory_utilization": 0.90, "kv_cache_dtype": "fp8", "batched_tokens_per_isl": 2
}  # fmt: skip
# gpt-oss and Llama: a config.yaml beside the script (`--config config.yaml`)
_YAML: dict[str, Any] = {"gpu_memory_utilization": 0.9, "max_num_batched_tokens": 8192}

SERVE_FLAGS: tuple[ServeFlags, ...] = (
    ServeFlags(_MINIMAX, "b200_sxm", "fp8", "2026-03-11", "2026-04-03",
               f"{_SINGLE}minimaxm2.5_fp8_b200.sh@f342df18e (v0.17.0-cu130)",
               gpu_memory_utilization=0.95, block_size_tokens=32),
    ServeFlags(_MINIMAX, "b200_sxm", "fp8", "2026-04-03", None,
               f"{_SINGLE}minimaxm2.5_fp8_b200.sh@bddbf4031 (v0.19.0-cu130)",
               block_size_tokens=32, **_MINIMAX_NEW),
    ServeFlags(_MINIMAX, "b200_sxm", "fp4", "2026-04-08", None,
               f"{_SINGLE}minimaxm2.5_fp4_b200.sh@79bd988e9 (v0.19.0-cu130)", **_MINIMAX_NEW),
    ServeFlags(_MINIMAX, "b300_sxm", "fp8", "2026-04-17", None,
               f"{_SINGLE}minimaxm2.5_fp8_b300.sh@340d7854c (v0.19.0-cu130)",
               block_size_tokens=32, **_MINIMAX_NEW),
    ServeFlags(_MINIMAX, "b300_sxm", "fp4", "2026-04-17", None,
               f"{_SINGLE}minimaxm2.5_fp4_b300.sh@22d0f12f7 (v0.19.0-cu130)", **_MINIMAX_NEW),
    ServeFlags(_MINIMAX, "h100_sxm", "fp8", "2026-03-02", None,
               f"{_SINGLE}minimaxm2.5_fp8_h100.sh@ac0d2a853 (v0.16.0; v0.18.0 from 1d5cae141)",
               gpu_memory_utilization=0.90, max_num_seqs=256),
    ServeFlags(_MINIMAX, "h200_sxm", "fp8", "2026-03-01", None,
               f"{_SINGLE}minimaxm2.5_fp8_h200.sh@a36346339 (v0.16.0; v0.18.0 from 1d5cae141)",
               gpu_memory_utilization=0.95),
    ServeFlags(_KIMI, "b200_sxm", "fp4", "2026-03-11", "2026-04-20",
               f"{_SINGLE}kimik2.5_fp4_b200.sh@a58dedd5a (v0.17.0)",
               gpu_memory_utilization=0.90, seqs_from_conc=True, no_expert_parallel=True),
    ServeFlags(_KIMI, "b200_sxm", "fp4", "2026-04-20", None,
               f"{_SINGLE}kimik2.5_fp4_b200.sh@6c3acebfa (v0.17.0)",
               seqs_from_conc=True, no_expert_parallel=True, **_MINIMAX_NEW),
    ServeFlags(_KIMI, "b200_sxm", "int4", "2026-02-23", None,
               f"{_SINGLE}kimik2.5_int4_b200.sh@eb02101ef (v0.15.1)",
               gpu_memory_utilization=0.95, seqs_from_conc=True, no_expert_parallel=True),
    ServeFlags(_KIMI, "b300_sxm", "fp4", "2026-04-17", None,
               f"{_SINGLE}kimik2.5_fp4_b300.sh@a35e53694 (v0.19.0-cu130)",
               gpu_memory_utilization=0.90, seqs_from_conc=True, no_expert_parallel=True),
    ServeFlags(_KIMI, "h200_sxm", "int4", "2026-03-02", None,
               f"{_SINGLE}kimik2.5_int4_h200.sh@749096c4c (v0.16.0)",
               gpu_memory_utilization=0.95, seqs_from_conc=True, no_expert_parallel=True),
    ServeFlags(_GPTOSS, "b200_sxm", "fp4", "2025-09-27", "2025-12-05",
               "benchmarks/gptoss_fp4_b200_docker.sh@eb282d8f6 (v0.10.2; v0.11.0 from 7103d6608)",
               max_num_seqs=512, no_expert_parallel=True, **_YAML),
    ServeFlags(_GPTOSS, "b200_sxm", "fp4", "2025-12-05", None,
               "benchmarks/gptoss_fp4_b200_docker.sh@25506e87c (v0.11.2; later"
               f" {_SINGLE}gptoss_fp4_b200.sh, v0.15.1 from d2c2acb19)",
               max_num_seqs=512, kv_cache_dtype="fp8", no_expert_parallel=True, **_YAML),
    ServeFlags(_GPTOSS, "h100_sxm", "fp4", "2025-09-23", None,
               "benchmarks/gptoss_fp4_h100_{docker,slurm}.sh@af4ccd03f (v0.10.2; later"
               f" {_SINGLE}gptoss_fp4_h100.sh, v0.18.0 from cec542a9a)",
               seqs_from_conc=True, no_expert_parallel=True, **_YAML),
    ServeFlags(_GPTOSS, "h200_sxm", "fp4", "2025-09-27", None,
               "benchmarks/gptoss_fp4_h200_slurm.sh@eb282d8f6 (v0.10.2; later"
               f" {_SINGLE}gptoss_fp4_h200.sh, v0.18.0 from cec542a9a)",
               seqs_from_conc=True, no_expert_parallel=True, **_YAML),
    # the Llama scripts were deleted on 2025-10-29/30 (after the rows' runs); the H100 ones
    # passed `--config=config.yaml` as one token, which vLLM 0.10.2 does not read: unknown
    ServeFlags(_LLAMA, "b200_sxm", "fp8", "2025-09-24", "2025-10-30",
               "benchmarks/70b_fp8_b200_docker.sh@5e92867f4 (v0.10.2)",
               max_num_seqs=512, kv_cache_dtype="fp8", no_expert_parallel=True, **_YAML),
    ServeFlags(_LLAMA, "b200_sxm", "fp4", "2025-09-27", "2025-10-30",
               "benchmarks/70b_fp4_b200_docker.sh@eb282d8f6 (v0.10.2)",
               max_num_seqs=512, kv_cache_dtype="fp8", no_expert_parallel=True, **_YAML),
    ServeFlags(_LLAMA, "h200_sxm", "fp8", "2025-09-27", "2025-10-30",
               "benchmarks/70b_fp8_h200_slurm.sh@eb282d8f6 (v0.10.2)",
               seqs_from_conc=True, kv_cache_dtype="fp8", no_expert_parallel=True, **_YAML),
)  # fmt: skip


def serve_flags(
    model_path: str, system: str, precision: str, measured: str | None
) -> ServeFlags | None:
    """The launch-script revision's engine flags for a row, if known (no date: none)."""
    return in_window(SERVE_FLAGS, model_path, system, precision, measured)


def serve_rows(points: Iterable[Any]) -> list[list[str]]:
    """The document's table: every revision's flags with the simulated points they set."""
    return [
        [f"`{f.model_path}`", f"`{f.system}`", f.precision, window_text(f), f"`{f.text()}`",
         f.script, str(n)]
        for f, n in applied(SERVE_FLAGS, serve_flags, points)
    ]  # fmt: skip
