"""`personalab bench web` (issue 24's figures) runs end to end on a small fixture: the bulk-SQL fixture is an
instance list, chats and history pages the app serves (every page answers 200), on SQLite and PostgreSQL. The
figures themselves go to docs/benchmarks/, never into an assertion."""

from __future__ import annotations

from pathlib import Path

import pytest
from personalab.evals.__main__ import main


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_bench_web_times_every_page_of_its_fixture(
    backend: str, data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (
        ("PERSONALAB_LLM", "scripted"),
        ("PERSONALAB_AUTH", "none"),
        ("PERSONALAB_DATA_DIR", str(data_dir)),
    ):
        monkeypatch.setenv(name, value)  # the bench sets these for its run: put back afterwards
    argv = [
        "bench",
        "web",
        "--instances",
        "4",
        "--lines",
        "60",
        "--requests",
        "2",
        "--turns",
        "0",
        "--characters",
        "5",
        "--avatar-kb",
        "4",
    ]
    if backend == "postgres":
        from conftest import PG_BASE, _pg_reachable

        if _pg_reachable():
            pytest.skip("PostgreSQL unreachable")
        argv += ["--postgres-url", PG_BASE]
    argv += ["--data-dir", str(data_dir)]
    try:
        assert main(argv) == 0
    finally:
        from personalab.stores.db import dispose_engines

        dispose_engines()  # the bench's PostgreSQL schema is gone
    out = capsys.readouterr().out
    assert "seeded 4 instances, 60 lines, 5 characters" in out
    for page in ("instances list, page 1", "chat, 30 lines on the branch", "older lines, the first 40", "backgrounds"):
        assert f"| {page}" in out, out
    assert "chat page weight" in out
