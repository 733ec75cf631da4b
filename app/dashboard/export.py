"""A page's current scenario (or search space) as the YAML the CLI reads, and as a command:
``plan run FILE`` for the downloaded file, or the shipped example with ``--set KEY=VALUE``
overrides (``simulator.specs.overrides``: dotted keys, YAML values) that turn it into the
same scenario.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import streamlit as st
import yaml

import simulator
from simulator.planner.space import SearchSpace
from simulator.specs import Scenario
from simulator.specs.loading import read_yaml

# the shipped example the --set form starts from (the What-if page's deployment and traffic);
# `plan examples copy NAME` puts it in the current folder
BASE_EXAMPLE = "kimi-k3-mi355x-agentic"
EXAMPLES_DIR = Path(simulator.__file__).resolve().parent / "examples"


def to_yaml(spec: Scenario | SearchSpace) -> str:
    """The spec as YAML that ``plan run`` / ``plan search`` read back to the same spec."""
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)


def file_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") + ".yaml"


def yaml_value(value: Any) -> str:
    """A value as ``--set`` takes it: bare when YAML reads the text back as that value
    (``8``, ``b300``, ``null``), else JSON (which YAML reads too)."""
    if value is None:
        return "null"
    scalar = isinstance(value, str | int | float) and not isinstance(value, bool)
    text = str(value) if scalar else ""
    if text and yaml.safe_load(text) == value and "\n" not in text:
        return text
    return json.dumps(value)


def overrides(base: dict[str, Any], target: dict[str, Any], prefix: str = "") -> list[str]:
    """``key=value`` settings that turn ``base`` into ``target`` (both full dumps of one spec
    type): nested mappings with the same keys are followed down, anything else that differs
    (a leaf, a list, a workload of another kind) is set whole."""
    sets: list[str] = []
    for key, value in target.items():
        dotted = f"{prefix}{key}"
        old = base.get(key)
        if isinstance(value, dict) and isinstance(old, dict) and value.keys() == old.keys():
            sets += overrides(old, value, f"{dotted}.")
        elif key not in base or old != value:
            sets.append(f"{dotted}={yaml_value(value)}")
    return sets


def base_scenario() -> dict[str, Any] | None:
    """The shipped base scenario, fully dumped (None when this installation lacks it)."""
    path = EXAMPLES_DIR / f"{BASE_EXAMPLE}.yaml"
    if not path.is_file():
        return None
    return Scenario.model_validate(read_yaml(path)).model_dump(mode="json")


def run_command(scenario: Scenario, name: str) -> str:
    """``plan run NAME`` for the downloaded file, then the same scenario from the shipped base
    with ``--set`` overrides."""
    lines = [f"plan run {shlex.quote(name)}"]
    base = base_scenario()
    if base is not None:
        sets = overrides(base, scenario.model_dump(mode="json"))
        flags = [f"--set {shlex.quote(s)}" for s in sets]
        lines += ["", f"# or from the shipped example (plan examples copy {BASE_EXAMPLE}):"]
        lines.append(" \\\n    ".join([f"plan run {BASE_EXAMPLE}.yaml", *flags]))
    return "\n".join(lines)


def scenario_export(scenario: Scenario, key: str) -> None:
    """Download button, the YAML and the ``plan run`` command of the scenario shown."""
    name = file_name(scenario.name)
    text = to_yaml(scenario)
    st.download_button(
        "Download scenario YAML", text, file_name=name, mime="application/yaml",
        on_click="ignore", icon=":material/download:", key=f"{key}_download",
        help="The Scenario that `plan run` reads: exactly what this page simulated",
    )  # fmt: skip
    st.caption("As a plan command:")
    st.code(run_command(scenario, name), language="bash")
    with st.expander(f"The scenario YAML ({name})"):
        st.code(text, language="yaml")


def space_export(space: SearchSpace, key: str, cache: Path) -> None:
    """Download button, the YAML and the ``plan search`` command of a comparison: its runs
    are the same as the page's, so ``OUT/cache`` and the page's run cache answer for each
    other."""
    name = file_name(space.name)
    text = to_yaml(space)
    st.download_button(
        "Download search space YAML", text, file_name=name, mime="application/yaml",
        on_click="ignore", icon=":material/download:", key=f"{key}_download",
        help="The search space `plan search` reads: the same runs as this page",
    )  # fmt: skip
    command = f"plan search {shlex.quote(name)} --out OUT"
    st.caption(
        "The same runs from the command line; give `OUT/cache` as this page's run cache to"
        f" reuse them here (this page keeps its runs in `{cache}`)."
    )
    st.code(command, language="bash")
    with st.expander(f"`{name}`"):
        st.code(text, language="yaml")
