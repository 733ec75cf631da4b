"""A built-tables cache file that is not this device's tables (bytes of a newer pickle
protocol, another device's tables copied over it) is rebuilt from the data, never used and
never an internal error."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

from simulator import catalog
from simulator.measured import device
from simulator.measured.device import tables_for
from simulator.measured.work import Device


def _other_devices(path: Path) -> None:
    tables = pickle.loads(path.read_bytes())
    other = Device.of(catalog.hardware_profile("b200"))
    path.write_bytes(pickle.dumps(dataclasses.replace(tables, device=other)))


@pytest.mark.parametrize(
    "spoil",
    [
        lambda p: p.write_bytes(b"\x80\x09"),  # "unsupported pickle protocol: 9" (ValueError)
        lambda p: p.write_bytes(pickle.dumps({"a": 1})),  # a pickle of something else
        _other_devices,  # another device's tables under this one's key
    ],
    ids=["protocol-9", "a-dict", "another-device"],
)
def test_a_spoiled_cache_file_is_rebuilt(
    fixture_tables: Path, spoil: Callable[[Path], None]
) -> None:
    profile = catalog.hardware_profile("h200")
    built = tables_for(profile)
    assert built is not None
    (path,) = device.cache_dir().glob("h200-*.pickle")
    spoil(path)
    device.reset()
    again = tables_for(profile)
    assert again is not None
    assert again.device == Device.of(profile)
    assert pickle.loads(path.read_bytes()).device == Device.of(profile)  # written back whole
