"""Bad input as one inline line (file, field, reason), never a traceback on the page; what
the page showed before stays under the line."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import streamlit as st
from pydantic import ValidationError

from simulator.specs.loading import SpecError, first_error

LOG = logging.getLogger("dashboard")


def one_line(exc: SpecError | ValidationError, source: str) -> str:
    """The CLI's one-line message: ``file: field: reason``."""
    if isinstance(exc, ValidationError):
        return str(first_error(exc, source))
    return str(exc)


@contextmanager
def inline_errors(source: str, previous: Callable[[], None] | None = None) -> Iterator[None]:
    """Run a page body; a SpecError or ValidationError ends it with one ``st.error`` line.

    Anything else is a bug: the page says so in one line and the traceback goes to the server
    log. Either way ``previous`` then draws the last result this session was shown (kept in
    ``st.session_state`` by the page), so an error never wipes it. Streamlit's stop/rerun
    signals are BaseExceptions and pass through untouched.
    """
    try:
        yield
    except (SpecError, ValidationError) as exc:
        st.error(one_line(exc, source), icon=":material/block:")
    except Exception as exc:
        LOG.exception("dashboard page failed")
        st.error(
            f"internal problem ({type(exc).__name__}: {exc}); the traceback is in the log of"
            " the streamlit server",
            icon=":material/bug_report:",
        )
    else:
        return
    if previous is None:
        return
    try:
        previous()
    except Exception:  # the kept result of older code, say: the error line stays alone
        LOG.exception("dashboard: the previous result could not be drawn again")


def kept_result(
    state_key: str, what: str, show: Callable[[Any, Any, str], None], key: str
) -> Callable[[], None]:
    """The ``previous`` of :func:`inline_errors` for a page that keeps ``(spec, result)``
    under ``state_key``: it draws them again with ``show``, captioned as ``what``."""

    def previous() -> None:
        kept = st.session_state.get(state_key)
        if kept is not None:
            st.caption(f"{what}, unchanged:")
            spec, result = kept
            show(spec, result, key)

    return previous
