"""Rich tables that wrap to the terminal instead of truncating: never an ellipsis, the names
and numbers whole on their line while there is room for them."""

import io
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table


def _cell_width(cell: Any) -> int:
    text = cell if isinstance(cell, str) else getattr(cell, "plain", None)
    if text is None:  # another renderable: its natural width
        return Measurement.get(_MEASURE, _MEASURE.options, cell).maximum
    return max((cell_len(line) for line in text.split("\n")), default=0)


def _longest_word(cell: Any) -> int:
    text = cell if isinstance(cell, str) else getattr(cell, "plain", "")
    return max((len(w) for w in str(text).split()), default=0)


_MEASURE = Console(width=10_000, file=io.StringIO(), highlight=False)
# kept on one line: a first column (the rows' names) this wide at most, a right-justified one
# (numbers), a column of single words (names, states, yes/no)
KEY_WIDTH, WHOLE_WIDTH, WORD_WIDTH = 30, 24, 12


def _overhead(table: Table) -> int:
    """Borders and padding: what the table adds to its columns' widths."""
    n = len(table.columns)
    borders = (n - 1 + (2 if table.show_edge else 0)) if table.box else 0
    left, right = table.padding[3], table.padding[1]
    padding = n * (left + right) - (0 if table.pad_edge else left + right)
    return borders + padding


def fit_table(table: Table, width: int) -> Table:
    """``table`` (changed in place) made to wrap instead of truncating in ``width`` columns,
    never an ellipsis: the first column (the rows' names), numbers (right justified), columns
    of single words and columns made ``no_wrap`` stay whole on one line (up to
    :data:`KEY_WIDTH`, :data:`WHOLE_WIDTH`, :data:`WORD_WIDTH` wide); the other columns wrap
    at words (a word longer than the column folds).

    When the whole columns do not fit beside the others at their longest word (8 characters
    at most), their headers take one word per line and the outer edge goes; if even then they
    do not fit, they may wrap and fold, one by one until the table fits: columns of words
    first, then the names, numbers last."""
    whole = []
    for i, column in enumerate(table.columns):
        cells = list(column.cells)
        widest = max((_cell_width(c) for c in cells), default=0)
        words = all(_longest_word(c) == _cell_width(c) for c in cells)
        if (
            column.no_wrap
            or (i == 0 and widest <= KEY_WIDTH)  # the row's name
            or (column.justify == "right" and widest <= WHOLE_WIDTH)  # numbers
            or (words and widest <= WORD_WIDTH)  # names, states, yes/no
        ):
            column.no_wrap = True
            whole.append(column)
        column.overflow = "fold"
    if natural_width(table) <= width:
        return table
    if _needed(table) > width:
        for column in whole:
            if isinstance(column.header, str):
                column.header = column.header.replace(" ", "\n")
        table.show_edge = False
    # still too wide: let columns wrap, words first, then the names, numbers last
    first = table.columns[0]
    order = sorted(whole, key=lambda c: (c.justify == "right", c is first))
    for column in order:
        if _needed(table) <= width:
            break
        column.no_wrap = False
    return table


def _needed(table: Table) -> int:
    """The narrowest ``table`` renders without folding a whole column: its whole columns'
    widths, the others' longest words (8 characters at most), borders and padding."""
    needed = _overhead(table)
    for column in table.columns:
        cells = [column.header, *column.cells]
        if column.no_wrap:
            needed += max(_cell_width(c) for c in cells)
        else:
            needed += min(max(_longest_word(c) for c in cells), 8)
    return needed


def natural_width(table: Table) -> int:
    """The width ``table`` takes when nothing has to wrap."""
    return Measurement.get(_MEASURE, _MEASURE.options, table).maximum


class PlanConsole(Console):
    """A console whose tables wrap to its width instead of truncating (:func:`fit_table`)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        fitted = [fit_table(o, self.width) if isinstance(o, Table) else o for o in objects]
        super().print(*fitted, **kwargs)
