"""How numbers and names are written, for every layer that prints or names a file: a number in a
fixed format (``fmt``; outputs are byte-identical for the same inputs), a file-name-safe form of a
name (``file_slug``) and text from users or data as a terminal shows it literally (``terminal_text``).
Foundation: imports nothing of the pipeline."""

from __future__ import annotations

import math
import re


def fmt(value: float | None, spec: str = ".4f", missing: str = "n/a") -> str:
    """A number in a fixed format; ``missing`` for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return format(value, spec)


# C0 and C1 controls and DEL (ANSI CSI and OSC sequences start with ESC or their C1 forms), and the
# bidirectional overrides and isolates, which reorder what a terminal shows.
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_text(text: object) -> str:
    """Text from a user or a data file as a terminal shows it literally, on one line: every control
    character (an escape sequence's ESC, a line break, a bidirectional override) written as its Python
    escape (``\\x1b``, ``\\n``, ``\\u202e``), so that no title, evidence or path can clear the screen, set
    the window's title or the clipboard (OSC 52). Plain text is unchanged."""
    return CONTROLS.sub(lambda m: repr(m.group())[1:-1], str(text))


def file_slug(name: str, fallback: str) -> str:
    """A file-name-safe form of a name (letters, digits, ``.``, ``_``, ``-``); ``fallback`` if none."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_.") or fallback
