"""`personalab eval all --out DIR` (placeholder)."""

from __future__ import annotations

import argparse


def register(kinds: argparse._SubParsersAction) -> None:
    return None
