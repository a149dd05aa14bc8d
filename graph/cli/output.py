"""What the CLI prints: stored and model text with its control characters made visible (issue 16).

A reply, a line, a memory or a world-book entry can hold any character, including ESC sequences that would
recolour, move the cursor in or retitle the user's terminal. Every print of such text goes through `echo` (or
`safe`), which writes C0 controls (but newline and tab), DEL and C1 controls as `\\xNN` (and a lone surrogate,
which no terminal could be sent, as its byte or code point). `--json` output is
`json_text`: JSON escapes C0 itself; C1 and DEL, which `json.dumps` leaves raw with `ensure_ascii=False`,
become `\\u00NN` (the same JSON value).
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
_TERMINAL = {code: f"\\x{code:02x}" for code in _CONTROLS if chr(code) not in "\n\t"}
# Lone surrogates cannot be written as UTF-8 at all: a byte that was not UTF-8 in a file name (Python's
# surrogateescape, U+DC80..U+DCFF) is shown as that byte, any other surrogate by its code point.
_TERMINAL |= {code: f"\\u{code:04x}" for code in range(0xD800, 0xE000)}
_TERMINAL |= {0xDC00 + byte: f"\\x{byte:02x}" for byte in range(0x80, 0x100)}
_JSON = {code: f"\\u{code:04x}" for code in (0x7F, *range(0x80, 0xA0), *range(0xD800, 0xE000))}


def safe(text: object) -> str:
    """`text` with every C0 control but newline and tab, DEL and every C1 control written as `\\xNN`."""
    return str(text).translate(_TERMINAL)


def echo(text: object = "", *, file: TextIO | None = None, end: str = "\n") -> None:
    """`print` for text that may hold stored or model text: its controls escaped by `safe`."""
    print(safe(text), file=file or sys.stdout, end=end)


def json_text(data: Any, *, indent: int | None = 2, default: Any = None) -> str:
    """`json.dumps(data, ensure_ascii=False)` with C1 controls, DEL and lone surrogates escaped too: still the same
    JSON value."""
    return json.dumps(data, ensure_ascii=False, indent=indent, default=default).translate(_JSON)
