"""The committed scores of the table lookup (``scripts/measured_errors.py`` writes them to
``hardware_profiles/measured_errors.json``): the error the planner states, and the evidence
for which op classes a device of an unmeasured vendor takes from the transfer."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from hardware_profiles import PROFILES_DIR

ERRORS_FILE = PROFILES_DIR / "measured_errors.json"


@cache
def load_errors() -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(ERRORS_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return data


def new_vendor_classes() -> frozenset[str] | None:
    """Op classes where the transfer across GPU generations (leave-family-out) beat the
    roofline prior on the same rows; None when the scores are missing (no restriction).

    A vendor with no measured device at all (AMD, Intel today) is further from every source
    than Hopper is from Blackwell, so only these classes are transferred to it; the others
    keep the profile's roofline prior."""
    rows = load_errors().get("leave_family_out_pooled")
    if not rows:
        return None
    keep = set()
    for cls, r in rows.items():
        prior = r.get("prior_median_ape")
        if prior is None or r["median_ape"] < prior:
            keep.add(cls)
    return frozenset(keep)
