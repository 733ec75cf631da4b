"""Python's full (oldest-generation) garbage collections paused while an engine runs.

A long run keeps everything it records alive (step records, requests, hit records, step
templates: millions of objects), and CPython's full collection walks all of them each time
the survivors grow by a quarter: the 710-session agentic replay spent ~1.9 s of ~24 s in 11
full collections. A run made no cyclic garbage for them to find: with collection off for the
whole replay, the one collection at exit found only the run's result (its step records,
requests and hit records, by count), dropped by then. The young generations still collect
as usual, so short-lived reference cycles are freed as before; a cycle that outlives them is
freed by the first full collection after the run. Results do not depend on it: collection
frees memory, it changes no number.

The threshold is process-wide, so overlapping runs (the dashboard's threads) count
themselves in and the last one out restores the threshold it found.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# the oldest generation's threshold while paused: collections of the middle generation
# before a full one (default 10); at 2^30 no run reaches it
PAUSED_THRESHOLD = 2**30

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def full_collections_paused() -> Iterator[None]:
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(_saved[0], _saved[1], PAUSED_THRESHOLD)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
