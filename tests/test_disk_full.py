"""A full disk (issue 14 fault tests): the embedded stores on a small tmpfs that a test fills up.

A turn played on a full disk fails with one `StoreUnavailable` line naming the store and the disk (not a driver's
traceback), stores nothing half-written and uses no turn number; once there is room again the instance plays on,
and every line and write of the turns before is there once. Mounting a tmpfs needs root (as CI runs); elsewhere the
test is skipped.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import StoreUnavailable
from personalab.stores.background import flush_event_writes
from personalab.stores.db import dispose_engines, session_scope
from personalab.stores.tables import Line
from personalab.stores.turn_tables import TurnRecord
from sqlmodel import col, select
from test_outbox import assert_each_write_once


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 48 MB tmpfs as the data directory."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48M", "tmpfs", str(mount)], check=True)
    data = mount / "data"
    data.mkdir()
    monkeypatch.setenv("PERSONALAB_DATA_DIR", str(data))
    monkeypatch.delenv("PERSONALAB_DATABASE_URL", raising=False)
    try:
        yield mount
    finally:
        flush_event_writes()
        dispose_engines()
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path) -> Path:
    filler = mount / "filler"
    # unbuffered: a buffered file kept the block that did not fit and failed again when closed (ENOSPC, seen in CI)
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def lines_and_turns(url: str, instance: int) -> tuple[list[tuple[int | None, str, str]], list[int]]:
    with session_scope(url) as session:
        lines = session.exec(select(Line).where(col(Line.save_id) == instance)).all()
        turns = session.exec(select(TurnRecord.turn).where(col(TurnRecord.save_id) == instance)).all()
        return [(line.parent_line_id, line.attribute, line.content) for line in lines], [int(t) for t in turns]


@pytest.mark.parametrize("when", ["before the graph opens", "while the graph is open"])
def test_a_turn_on_a_full_disk_fails_in_one_line_and_the_instance_plays_on_once_there_is_room(
    small_disk: Path, when: str
) -> None:
    url = f"sqlite:///{small_disk / 'data' / 'personalab.db'}"
    instance = create_sample_instance(url)
    with turn_graph(Context(database_url=url)) as (graph, ctx):
        for message in ("你好，雷娜。", "我妹妹今年十二岁。"):
            assert run_turn(graph, ctx, instance, message)["error"] is None
    flush_event_writes()
    before, turns_before = lines_and_turns(url, instance)

    filler = None
    with pytest.raises(StoreUnavailable, match="disk"):
        if when == "before the graph opens":
            filler = fill(small_disk)
            with turn_graph(Context(database_url=url)) as (graph, ctx):
                run_turn(graph, ctx, instance, "磁盘满了，你还在吗？")
        else:
            with turn_graph(Context(database_url=url)) as (graph, ctx):
                filler = fill(small_disk)
                run_turn(graph, ctx, instance, "磁盘满了，你还在吗？")
    assert filler is not None
    flush_event_writes()
    filler.unlink()  # room again

    with turn_graph(Context(database_url=url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "现在好了吗？")
    flush_event_writes()
    assert state["error"] is None and state["reply"]
    after, turns_after = lines_and_turns(url, instance)
    # nothing of before is lost; the failed turn answered nothing and used no turn number
    assert Counter(before) - Counter(after) == Counter()
    assert sorted(set(turns_after)) == sorted(turns_after) and state["turn"] == max(turns_before) + 1
    assert not [line for line in after if line[1] != "user" and line[2].startswith("磁盘满了")]
    assert_each_write_once(url, instance)
