"""Server flags of the silicon rows' launch scripts that change which kernels vLLM runs.

The CSV does not record how each server was started. Its rows match SemiAnalysis InferenceX
records, whose launch scripts are public (github.com/SemiAnalysisAI/InferenceX,
``benchmarks/``). Where a script forced a MoE kernel the planner prices from its own
measured rows (``ServingConfig.moe_kernel``), the rows measured while that script revision
was in effect are simulated with that kernel; where it turned expert parallelism on
(``--enable-expert-parallel``) while the CSV records ``moe_ep_size`` 1, with experts over
all ``tp x dp`` GPUs. A row is matched by model, system, precision
and its ``measured=`` date (``silicon_data_source``); the window is the script's history,
with the image (vLLM version) of its config in ``.github/configs/nvidia-master.yaml``.

Read from the scripts, never chosen by the error: every flag here is one a script sets, and
every MoE-kernel flag of these models' vLLM scripts whose kernel the tables time for the
experts' format is here. Expert parallelism: the MiniMax-M2.5 FP8 scripts for H200 and
B200 tested ``[ "$EP_SIZE" -ge 1 ]`` for a while, which the configs' default EP_SIZE of 1
passes, so those servers ran with ``--enable-expert-parallel`` although the result (and the
CSV) is labelled EP 1; the other scripts test ``-gt 1``. Not expressible: gpt-oss on B200 sets
VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 (MXFP8 activations, another format than the card's
W4A16 experts) and Kimi-K2.5 INT4 on B200 VLLM_USE_FLASHINFER_MOE_INT4=1 (no such rows).
The engine knobs of the same scripts (batched tokens, sequences, KV cache dtype, block
size, memory fraction) are in ``silicon_serve.py``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from simulator.specs.serving import MoEKernel


@dataclass(frozen=True)
class ScriptFlag:
    """A MoE kernel a launch script forced and / or expert parallelism it turned on, and the
    rows it applies to."""

    model_path: str
    system: str
    precision: str
    since: str  # first measured= date the flag applies to (ISO, inclusive)
    until: str | None  # first date it no longer does (exclusive); None: still set
    moe_kernel: MoEKernel  # "auto": the script forced none
    flags: str  # the script's words
    script: str  # path@commit of the first revision with the flag (and the one removing it)
    expert_parallel: bool = False  # --enable-expert-parallel: experts over all tp x dp GPUs


def _marlin(system: str, gpu: str) -> ScriptFlag:
    return ScriptFlag(
        "openai/gpt-oss-120b",
        system,
        "fp4",
        "2026-01-02",
        None,
        "marlin",
        "VLLM_MXFP4_USE_MARLIN=1",
        f"benchmarks/gptoss_fp4_{gpu}_slurm.sh@4e52ed4c6 (image vllm-openai v0.13.0; the flag is"
        f" in every later revision, benchmarks/single_node/gptoss_fp4_{gpu}.sh)",
    )


SCRIPT_FLAGS: tuple[ScriptFlag, ...] = (
    _marlin("h100_sxm", "h100"),
    _marlin("h200_sxm", "h200"),
    ScriptFlag(
        "MiniMaxAI/MiniMax-M2.5",
        "b200_sxm",
        "fp8",
        "2026-03-11",
        "2026-04-03",
        "triton",
        "VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0; --enable-expert-parallel"
        ' (`[ "$EP_SIZE" -ge 1 ]`, EP_SIZE 1)',
        "benchmarks/single_node/minimaxm2.5_fp8_b200.sh@f342df18e (image vllm-openai"
        " v0.17.0-cu130); both removed at bddbf4031 (2026-04-03, image v0.19.0-cu130; its"
        " test is `-gt 1`)",
        expert_parallel=True,
    ),
    ScriptFlag(
        "MiniMaxAI/MiniMax-M2.5",
        "h200_sxm",
        "fp8",
        "2026-03-13",
        "2026-05-26",
        "auto",
        '--enable-expert-parallel (`[ "$EP_SIZE" -ge 1 ]`, EP_SIZE 1)',
        "benchmarks/single_node/minimaxm2.5_fp8_h200.sh@5e2c705d3 (image vllm-openai v0.16.0;"
        " v0.18.0 from 1d5cae141); removed at 8014ee637 (2026-05-26: `-gt 1`)",
        expert_parallel=True,
    ),
)

_MEASURED = re.compile(r"measured=(\d{4}-\d{2}-\d{2})")


def measured_date(data_source: str) -> str | None:
    """The ``measured=`` date of a row's ``silicon_data_source`` (None: not recorded)."""
    found = _MEASURED.search(data_source)
    return found.group(1) if found else None


class Windowed(Protocol):
    """A launch-script setting and the rows it applies to: model, system, precision, and a
    window of ``measured=`` dates."""

    @property
    def model_path(self) -> str: ...
    @property
    def system(self) -> str: ...
    @property
    def precision(self) -> str: ...
    @property
    def since(self) -> str: ...
    @property
    def until(self) -> str | None: ...


W = TypeVar("W", bound=Windowed)


def in_window(
    records: Iterable[W], model_path: str, system: str, precision: str, measured: str | None
) -> W | None:
    """The record whose model, system, precision and date window hold the row (a row with no
    date gets none)."""
    if measured is None:
        return None
    for f in records:
        if (f.model_path, f.system, f.precision) != (model_path, system, precision):
            continue
        if f.since <= measured and (f.until is None or measured < f.until):
            return f
    return None


def window_text(f: Windowed) -> str:
    return f"{f.since} to {f.until or 'now'}" + (" (excl.)" if f.until else "")


def applied(
    records: Sequence[W],
    lookup: Callable[[str, str, str, str | None], W | None],
    points: Iterable[Any],
) -> list[tuple[W, int]]:
    """Every record with the number of points it applies to."""
    hits = Counter(id(lookup(p.model_path, p.system, p.precision, p.measured)) for p in points)
    return [(f, hits[id(f)]) for f in records]


def script_flag(
    model_path: str, system: str, precision: str, measured: str | None
) -> ScriptFlag | None:
    """The launch-script flag in effect for a row, if any (a row without a date gets none)."""
    return in_window(SCRIPT_FLAGS, model_path, system, precision, measured)


def flag_rows(points: Iterable[Any]) -> list[list[str]]:
    """The document's table: every flag with the simulated points it applied to."""
    return [
        [f"`{f.model_path}`", f"`{f.system}`", f.precision, window_text(f), f"`{f.moe_kernel}`",
         "tp x dp" if f.expert_parallel else "as the CSV", f"`{f.flags}`", f.script, str(n)]
        for f, n in applied(SCRIPT_FLAGS, script_flag, points)
    ]  # fmt: skip
