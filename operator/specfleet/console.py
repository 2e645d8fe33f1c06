"""Rich consoles that wrap only where a person reads them.

rich wraps at 80 columns whenever it finds no terminal size, and it looks for one on stdin, stdout and
stderr, not on the stream it writes to: `specfleet demo | tee log` broke every timeline line in two, and
in a terminal the pipe got the terminal's width. Here the stream itself decides: a terminal gets its own
width (rich measures it, and follows a resize), a pipe or a file gets lines that are never wrapped
(`soft_wrap`) and tables laid out on `COLUMNS` or, without it, `PIPE_WIDTH` columns.
"""

import os
import sys
from collections.abc import Mapping
from typing import IO

from rich.console import Console

PIPE_WIDTH = 200
"""Layout width of tables and rules in a pipe or file; text lines are not wrapped at all."""


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):  # a closed or fake stream
        return False


def pipe_width(environ: Mapping[str, str] | None = None) -> int:
    """`COLUMNS` when it is set to a number (someone asked for that width), else `PIPE_WIDTH`."""
    columns = (os.environ if environ is None else environ).get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH


def make_console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A console for standard output (or error, or `file`) that wraps at the terminal's width or not at all."""
    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    if _is_terminal(stream):
        return Console(stderr=stderr, file=file)
    return Console(stderr=stderr, file=file, width=pipe_width(), soft_wrap=True)
