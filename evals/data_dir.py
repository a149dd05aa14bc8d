"""Where a benchmark or evaluation keeps its stores: `--data-dir`, or a temporary folder."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def data_folder(data_dir: str | None, prefix: str) -> Iterator[Path]:
    """`data_dir` (created if missing, kept afterwards), or a new temporary folder named `prefix…` that is
    removed afterwards."""
    if data_dir:
        path = Path(data_dir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)
