"""The first-wave diagnostic of the silicon validation: which requests form the burst, its
share of the simulated mean, and the factor the measured mean would imply."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from simulator.validation.silicon_report import wave_paragraph
from simulator.validation.silicon_sim import SiliconResult
from simulator.validation.silicon_waves import first_wave_ttft_s
from tests.simulator.test_silicon_spread import BASE


def test_the_first_wave_is_the_earliest_arrivals() -> None:
    done = pd.DataFrame(
        {"request_id": [5, 1, 2, 3, 4], "arrival_s": [0.0, 0.0, 3.0, 0.0, 5.0],
         "ttft_s": [0.3, 0.1, 9.0, 0.2, 9.0]}
    )  # fmt: skip
    assert first_wave_ttft_s(done, 3) == pytest.approx(0.2)  # requests 1, 3, 5


def result(measured_ms: float, mean_ms: float, first_ms: float) -> SiliconResult:
    point = dataclasses.replace(BASE, conc=4, ttft_ms=measured_ms)
    return SiliconResult(point, 40, "ok", 40, mean_ms, 10.0, mean_ms, 10.0, first_ms)


@pytest.mark.parametrize(
    ("measured", "mean", "first", "share", "factor"),
    [
        (100.0, 100.0, 250.0, "25%", "1.00x"),  # exact: no factor needed
        (130.0, 100.0, 300.0, "30%", "2.00x"),  # 40 x 30 ms more = 120 ms on 4 requests
    ],
)
def test_share_and_implied_factor(
    measured: float, mean: float, first: float, share: str, factor: str
) -> None:
    text = " ".join(wave_paragraph([result(measured, mean, first)] * 4).split())  # unwrapped
    assert f"median {share} of the summed TTFT" in text
    assert f"need the first wave {factor} the simulated one" in text


def test_too_few_points_or_failed_ones_say_nothing() -> None:
    assert wave_paragraph([result(100.0, 100.0, 250.0)] * 3) == ""
    failed = dataclasses.replace(result(100.0, 100.0, 250.0), status="not simulated: x")
    assert wave_paragraph([failed] * 8) == ""


def test_rows_before_and_after_the_clients_warm_up_are_told_apart() -> None:
    def dated(day: str, measured: float, model: str = "llama-3.3-70b") -> SiliconResult:
        r = result(measured, 100.0, 250.0)
        return dataclasses.replace(r, point=dataclasses.replace(r.point, measured=day, card=model))

    rows = [dated("2025-12-01", 150.0)] * 3 + [dated("2026-02-01", 110.0)] * 2
    rows += [dated("2026-03-01", 125.0, "minimax-m2.5")] * 2
    text = " ".join(wave_paragraph(rows).split())
    assert "before: 33.3 % (bias -33.3 %, 3 points)" in text  # 100 simulated vs 150 measured
    assert "on or after: 14.5 % (bias -14.5 %, 4 points)" in text  # 9.1 % and 20 %: median
    assert "llama-3.3-70b: 33.3 % (bias -33.3 %, 3 points) before, 9.1 %" in text
    assert "minimax-m2.5:" not in text  # measured after only
