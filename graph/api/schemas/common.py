"""Bounds every door checks numbers against: an id or a stored whole number is an INTEGER column (PostgreSQL's 4
bytes), so a larger one is refused naming the field before it reaches the database (issue 16). The same numbers
as `stores.db` (a test holds them equal); written out so that parsing a command line loads no database library."""

from __future__ import annotations

INTEGER_MIN, INTEGER_MAX = -(2**31), 2**31 - 1

__all__ = ["INTEGER_MAX", "INTEGER_MIN"]
