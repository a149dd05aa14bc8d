"""Bounds every door checks numbers against: an id or a stored whole number is an INTEGER column (PostgreSQL's 4
bytes), so a larger one is refused naming the field before it reaches the database (issue 16)."""

from __future__ import annotations

from personalab.stores.db import INTEGER_MAX, INTEGER_MIN

__all__ = ["INTEGER_MAX", "INTEGER_MIN"]
