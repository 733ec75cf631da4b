"""A scenario or search-space file as data, its paths made the file's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.specs.loading import read_yaml


def read_spec_file(path: str | Path) -> Any:
    """A scenario or search-space file's YAML, its card and device paths (``model``,
    ``device``, ``devices``: a name ending in .yaml / .yml or holding a ``/``) made absolute
    against the file's folder, as its trace path is: a relative one named a file in the
    current folder (another file of the same name there was read without a word)."""
    p = Path(path)
    data = read_yaml(p)
    if not isinstance(data, dict):
        return data

    def resolved(ref: Any) -> Any:
        if not isinstance(ref, str) or not (ref.endswith((".yaml", ".yml")) or "/" in ref):
            return ref
        q = Path(ref).expanduser()
        return str(q if q.is_absolute() else p.resolve().parent / q)

    out = dict(data)
    for key in ("model", "device"):
        if key in out:
            out[key] = resolved(out[key])
    if isinstance(out.get("devices"), list):
        out["devices"] = [resolved(d) for d in out["devices"]]
    return out
