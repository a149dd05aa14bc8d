"""`personalab eval convert locomo|memorybank PATH`: public dialogue data as scenario files (placeholder)."""

from __future__ import annotations

import argparse


def register(kinds: argparse._SubParsersAction) -> None:
    return None
