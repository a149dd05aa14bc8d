"""`personalab bench history`: the recursive path query against the seed's load-all-then-walk.

A save of `--lines` lines whose current branch is `--depth` lines deep (the rest are swipes hanging
off the branch, as regenerations make them). Both approaches run in the same process on the same data,
on SQLite and, when reachable, on PostgreSQL.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from personalab.nodes.rules.errors import InvalidInput
from personalab.stores.db import get_engine
from personalab.stores.history import get_chat_history
from personalab.stores.tables import Background, Line, Role, Save
from sqlalchemy import insert
from sqlmodel import Session, select


def seed_walk(session: Session, save_id: int) -> list[Line]:
    """The seed's get_chat_history (seed 000): every line of the save, then a walk in Python."""
    save = session.get(Save, save_id)
    if not save or not save.last_message_id:
        return []
    lines = session.exec(select(Line).where(Line.save_id == save_id)).all()
    lines_map = {line.id: line for line in lines}
    history = []
    current_id: int | None = save.last_message_id
    while current_id:
        line = lines_map.get(current_id)
        if not line:
            break
        history.append(line)
        current_id = line.parent_line_id
    return list(reversed(history))


def build_save(url: str, total: int, depth: int) -> int:
    engine = get_engine(url)
    rng = random.Random(3)
    with Session(engine) as session:
        role = Role(name="钦灵")
        background = Background(name="bench")
        session.add_all([role, background])
        session.flush()
        save = Save(role_id=role.id, background_id=background.id)
        session.add(save)
        session.flush()
        first = session.exec(select(Line.id).order_by(Line.id.desc())).first() or 0  # type: ignore[union-attr]
        rows = []
        next_id = first + 1
        trunk: list[int] = []
        for i in range(total):
            if i < depth:
                parent = trunk[-1] if trunk else None
                trunk.append(next_id)
            else:
                parent = trunk[rng.randrange(len(trunk))]
            rows.append(
                {
                    "id": next_id,
                    "save_id": save.id,
                    "parent_line_id": parent,
                    "attribute": "user" if i % 2 else "assistant",
                    "content": f"第{i}句台词",
                }
            )
            next_id += 1
        for start in range(0, len(rows), 5000):
            session.execute(insert(Line), rows[start : start + 5000])
        save.last_message_id = trunk[-1]
        session.add(save)
        session.commit()
        return save.id  # type: ignore[return-value]


def _best_of(repeats: int, url: str, fn: Callable[[Session, int], Sequence[Any]], save_id: int) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(repeats):
        with Session(get_engine(url)) as session:
            start = time.perf_counter()
            count = len(fn(session, save_id))
            best = min(best, time.perf_counter() - start)
    return best, count


def measure(label: str, url: str, total: int, depth: int, repeats: int) -> None:
    save_id = build_save(url, total, depth)
    recursive, n_rec = _best_of(repeats, url, get_chat_history, save_id)
    walk, n_walk = _best_of(repeats, url, seed_walk, save_id)
    if n_rec != n_walk or n_rec != depth:
        raise RuntimeError(f"{label}: the two approaches disagree ({n_rec} vs {n_walk} lines, expected {depth})")
    print(f"{label}: save of {total:,} lines, path of {depth:,} lines (best of {repeats})")
    print(f"  seed load-all-then-walk: {walk * 1000:9.2f} ms")
    print(f"  recursive query:         {recursive * 1000:9.2f} ms")
    print(f"  speed-up: {walk / recursive:.1f}x  (goal: at least 50x on SQLite)")


def run(args: argparse.Namespace) -> int:
    if args.lines < args.depth or args.depth < 1:
        raise InvalidInput(f"--depth must be between 1 and --lines ({args.lines}), got {args.depth}")
    with tempfile.TemporaryDirectory() as tmp:
        measure("SQLite", f"sqlite:///{Path(tmp) / 'bench.db'}", args.lines, args.depth, args.repeats)
    if args.postgres_url:
        import psycopg

        plain = args.postgres_url.replace("+psycopg", "")
        schema = f"bench_{random.randrange(16**8):08x}"
        try:
            with psycopg.connect(plain, autocommit=True, connect_timeout=3) as conn:
                conn.execute(f"CREATE SCHEMA {schema}")
        except psycopg.OperationalError as exc:
            print(f"PostgreSQL: skipped ({str(exc).splitlines()[0]})")
            return 0
        url = (
            f"{args.postgres_url.replace('postgresql://', 'postgresql+psycopg://', 1)}?options=-csearch_path%3D{schema}"
        )
        try:
            measure("PostgreSQL", url, args.lines, args.depth, args.repeats)
        finally:
            get_engine(url).dispose()
            with psycopg.connect(plain, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return 0
