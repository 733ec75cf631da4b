"""``--set KEY=VALUE``: a spec's fields changed from the command line before it is validated.

``KEY`` is a dotted path into the spec (``serving.tp``, ``workload.sessions``,
``slo.interactivity_tok_per_s_p90``; a list item by its index, ``devices.0``); ``VALUE`` is
read as YAML, so ``4`` is a number, ``[b300, h200]`` a list, ``null`` none and ``true`` a
boolean. Mappings missing on the way are created. A path the spec does not have is not
refused here: the spec's own validation refuses it (``unknown field``), as it would in the file.

A malformed item (no ``=``, an empty key or part, no value, a value that is not YAML, the same
key twice, a path through a value that is not a mapping) is a :class:`SpecError` of field
``set`` naming the item.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from simulator.specs.loading import SpecError, parse, parse_yaml

M = TypeVar("M", bound=BaseModel)


def parse_set(item: str, source: str) -> tuple[list[str], Any]:
    """``KEY=VALUE`` -> (the key's parts, the value read as YAML)."""
    key, eq, text = item.partition("=")
    key = key.strip()
    if not eq:
        raise SpecError(source, "set", f"{item!r} has no '=': give KEY=VALUE, e.g. serving.tp=4")
    if not key:
        raise SpecError(source, "set", f"{item!r} has an empty key: give KEY=VALUE")
    parts = key.split(".")
    if any(not p.strip() for p in parts):
        raise SpecError(source, "set", f"{item!r}: the key {key!r} has an empty part")
    if not text.strip():
        raise SpecError(
            source, "set", f"{item!r} has no value: give one (null for none, '' for empty text)"
        )
    try:
        value = parse_yaml(text, source)
    except SpecError as exc:
        raise SpecError(source, "set", f"{item!r}: the value is not YAML ({exc.reason})") from None
    return [p.strip() for p in parts], value


def check_not_owned(sets: list[str], owned: dict[str, str], source: str = "(arguments)") -> None:
    """No ``--set`` item names (or contains, or lies in) a field an option of the command
    sets (``owned``: dotted field -> option): one of the two was dropped without a word
    (``--set seeds=3`` beside ``--seeds 2``; ``--set slo={...}`` dropped ``--slo-...``)."""
    for item in sets:
        parts, _ = parse_set(item, source)
        for field, option in owned.items():
            key = field.split(".")
            n = min(len(key), len(parts))
            if parts[:n] == key[:n]:
                raise SpecError(
                    source, "set", f"{item!r} sets {field}, which {option} sets: give it once"
                )


def apply_overrides(data: dict[str, Any], sets: list[str], source: str) -> dict[str, Any]:
    """A copy of ``data`` with every ``KEY=VALUE`` of ``sets`` applied in order (``data`` is
    left as it was). Errors name ``source`` (``(arguments)`` for the command line)."""
    if not isinstance(data, dict):
        raise SpecError(source, "set", f"the spec is {type(data).__name__}, not a mapping")
    out = copy.deepcopy(data)
    seen: dict[tuple[str, ...], str] = {}
    for item in sets:
        parts, value = parse_set(item, source)
        key = tuple(parts)
        for other, given in seen.items():
            n = min(len(key), len(other))
            if key[:n] == other[:n]:
                what = "given twice" if key == other else f"overlaps {given!r}"
                raise SpecError(source, "set", f"{item!r}: {'.'.join(key)} {what}; give it once")
        seen[key] = item
        _assign(out, parts, copy.deepcopy(value), item, source)
    return out


def _assign(data: dict[str, Any], parts: list[str], value: Any, item: str, source: str) -> None:
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        where = ".".join(parts[:i]) or "the spec"
        if isinstance(node, dict):
            if last:
                node[part] = value
            elif not isinstance(node.get(part), dict | list):
                if node.get(part) is not None:  # a number or text where a mapping is wanted
                    raise SpecError(
                        source, "set",
                        f"{item!r}: {'.'.join(parts[: i + 1])} is {node[part]!r}, not a mapping",
                    )  # fmt: skip
                node[part] = {}
            if not last:
                node = node[part]
        elif isinstance(node, list):
            if not part.lstrip("-").isdigit() or not -len(node) <= int(part) < len(node):
                raise SpecError(
                    source, "set",
                    f"{item!r}: {where} is a list of {len(node)}; {part!r} is not an index of it",
                )  # fmt: skip
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        else:
            raise SpecError(source, "set", f"{item!r}: {where} is {node!r}, not a mapping")


def _data_path(field: str, data: Any) -> tuple[str, ...]:
    """The path in ``data`` that an error's dotted ``field`` names, without the parts that
    pydantic adds and the data does not have (a tagged union's tag: ``workload.agentic.x``)."""
    path: list[str] = []
    node = data
    for part in field.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            continue
        path.append(part)
    return tuple(path)


def blame(
    exc: SpecError, data: dict[str, Any], sets: list[str], file: str | Path, source: str
) -> SpecError:
    """``exc`` (met checking ``data``, read from ``file`` with ``sets`` applied) with each of
    its errors of ``file`` whose field a ``--set`` gave (at or under its key) naming
    ``source`` instead: the value came from the command line, not from the file. An error
    left on ``file`` says the ``--set`` items it was checked with: a check across fields
    (fewer requests than the concurrency a ``--set`` gave) names a field of the file."""
    keys = [tuple(parse_set(item, source)[0]) for item in sets]
    given = ", ".join(sets)

    def one(err: SpecError) -> SpecError:
        if err.file != str(file):
            return err
        path = _data_path(err.field, data)
        if any(path[: len(k)] == k for k in keys):
            return SpecError(source, err.field, err.reason)
        return SpecError(err.file, err.field, f"{err.reason} (with --set {given})")

    return exc.remapped(one)


@contextmanager
def blamed(
    data: Any, sets: list[str] | None, file: str | Path, source: str = "(arguments)"
) -> Iterator[None]:
    """Errors met in the block, of fields that ``sets`` gave, named ``source`` (:func:`blame`)."""
    try:
        yield
    except SpecError as exc:
        if not sets or not isinstance(data, dict):
            raise
        raise blame(exc, data, sets, file, source) from None


def parse_with_overrides(
    cls: type[M], data: Any, file: str | Path, sets: list[str] | None, source: str = "(arguments)"
) -> M:
    """``data`` (read from ``file``) with ``sets`` applied, validated as ``cls``; an error of a
    field that a ``--set`` gave names ``source``, the others ``file``."""
    if not sets or not isinstance(data, dict):
        return parse(cls, data, file)  # not a mapping: that error, of the file
    merged = apply_overrides(data, sets, source)
    with blamed(merged, sets, file, source):
        return parse(cls, merged, file)
