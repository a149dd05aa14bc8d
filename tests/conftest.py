"""Shared fixtures: a fresh data directory and a database per test, on SQLite and on PostgreSQL.

PostgreSQL is the local server at 127.0.0.1:5432 (trust auth, database `test`); each test gets its own
schema so parallel runs never see each other's rows. Without a reachable server the PostgreSQL cases
skip, except on CI (`CI=true`), where they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PG_BASE = os.environ.get("PERSONALAB_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _pg_reachable() -> str | None:
    import psycopg

    try:
        with psycopg.connect(PG_BASE.replace("+psycopg", ""), connect_timeout=3):
            return None
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        return str(exc).splitlines()[0]


@pytest.fixture(autouse=True)
def _offline_by_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests use the scripted model unless they start the OpenAI stub; queued event writes finish in their test.

    The retrieval's 1.5 s cap (seed 002) is a wall-clock limit: on a loaded CI machine an ordinary search can overrun
    it, and a test asserting what the prompt holds would then check the machine's load. Tests get a 30 s cap (for the
    processes they start too); the tests of the cap itself set a small one, and `test_settings` checks the default."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PERSONALAB_LLM", "PERSONALAB_MODEL", "PERSONALAB_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PERSONALAB_RAG_TIMEOUT", "30")
    # a model server's measured speed is kept in the data dir between processes; in this one process a stub on a
    # port an earlier run used must not inherit that run's speed (`test_slow_model` turns it on where it is tested)
    monkeypatch.setattr("personalab.nodes.llm.KEEP_SERVER_STATE", False)
    yield
    from personalab.stores.background import flush_event_writes

    flush_event_writes()


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty `PERSONALAB_DATA_DIR`; the database URL falls back to its embedded SQLite file."""
    monkeypatch.setenv("PERSONALAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PERSONALAB_DATABASE_URL", raising=False)
    (tmp_path / "data").mkdir()
    yield tmp_path / "data"
    _dispose("")


@pytest.fixture
def sqlite_url(data_dir: Path) -> Iterator[str]:
    url = f"sqlite:///{data_dir / 'test.db'}"
    yield url
    _dispose(url)


@contextmanager
def postgres_test_schema() -> Iterator[str]:
    """A new PostgreSQL schema for a test (or a module), dropped afterwards; PostgreSQL unreachable fails on CI and
    skips elsewhere."""
    problem = _pg_reachable()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL at {PG_BASE} is unreachable on CI: {problem}")
        pytest.skip(f"PostgreSQL unreachable: {problem}")
    from personalab.evals.data_dir import postgres_schema

    with postgres_schema(PG_BASE, prefix="t_") as url:
        yield url
        _dispose(url)  # before the schema is dropped


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with postgres_test_schema() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Run the test once on SQLite and once on PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_url")


def _dispose(_url: str) -> None:
    """Close the test's connections before its PostgreSQL schema is dropped or its SQLite file removed."""
    from personalab.stores.db import dispose_engines
    from personalab.stores.outbox import cancel_retries

    cancel_retries()  # a queued write's retry must not reach the next test's database
    dispose_engines()


# --- markers: the quick tests and the rest (registered in pyproject.toml; docs/testing.md) -------------------------
# `./run test-quick` = `./run test -m "not (postgres or served or faults or browser or slow)"`. Applied here, from
# the fixtures a test uses and from the lists below, so no test file needs to name them.

# files whose every test starts `langgraph dev` (or another server process)
SERVED_FILES = {
    "test_served.py",
    "test_auth_http.py",
    "test_dialogue_served.py",
    "test_outbox_served.py",
    "test_bench_load.py",
}
# fixtures that start one
SERVED_FIXTURES = {"server", "served"}
# files of the fault campaign: kill -9, the database taken away, a full disk
FAULT_FILES = {"test_bench_faults.py", "test_database_down.py", "test_disk_full.py"}
# files and tests that take more than about 5 s on the 2-core development machine: measured 2026-11-26 (per-test
# setup + call + teardown of every non-postgres, non-served, non-fault test) at load average 12-16 under `nice -n 10`,
# where they took over 10 s; a whole file when most of its tests do. Four test_eval_run.py tests that play scenario
# processes were listed by hand (that part of the run was cut short).
SLOW_FILES: set[str] = {
    "test_packaging.py",
    "test_english_card_cli.py",  # a dozen `personalab` processes per database (about 5 min each at load 12)
    "test_maintenance_summary_slow.py",  # a slow model server's real seconds (9-12 s a test)
}
SLOW_TESTS: set[str] = {
    "test_eval_conditions.py::test_a_missed_goal_exits_1_and_probes_name_their_instance_and_sitting",
    "test_eval_conditions.py::test_conditions_through_one_shot_cli_turns",
    "test_eval_conditions.py::test_full_memory_answers_a_fact_40_turns_back_and_the_recent_window_does_not",
    "test_bench_retrieval.py::test_bench_retrieval_reports_latency_steps_memory_growth_and_the_goals",
    "test_bench_turn.py::test_bench_turn_reports_nodes_totals_and_the_goal",
    "test_cli.py::test_console_script_exit_code",
    "test_cli.py::test_demo_session_shows_director_fallback_and_maintenance",
    "test_db_concurrency.py::test_six_first_starts_at_once_all_succeed",
    "test_dialogue.py::test_a_pause_or_new_session_starts_a_session_whose_first_turn_gets_a_recap",
    "test_dialogue.py::test_event_log_summaries_of_two_branches_stay_on_their_own_branch",
    "test_dialogue_cli.py::test_ctrl_c_during_a_reply_frees_the_instance_at_once",
    "test_dialogue_cli.py::test_history_regen_swipe_edit_rewind_and_sessions_from_the_cli",
    "test_docs.py::test_docstrings_and_comments_name_modules_that_exist",
    "test_embeddings.py::test_numpy_runs_one_blas_thread_in_every_entry_point",
    "test_eval_run.py::test_a_failed_scenario_shows_its_error_in_the_report_and_on_the_console",
    "test_eval_run.py::test_a_scenario_process_that_dies_is_reported_with_the_end_of_its_log",
    "test_eval_run.py::test_convert_locomo_and_play_the_result",
    "test_eval_run.py::test_ctrl_c_keeps_the_finished_scenarios_and_the_printed_resume_plays_the_rest",
    "test_eval_run.py::test_failed_turn_fails_its_scenario_and_the_others_go_on",
    "test_eval_run.py::test_openai_model_and_judge_use_the_endpoint",
    "test_eval_run.py::test_parallel_scenarios_are_isolated_and_score_like_a_serial_run",
    "test_eval_run.py::test_resume_keeps_finished_results",
    "test_eval_run.py::test_scenario_runs_end_to_end_with_the_same_scores_twice",
    "test_eval_run.py::test_secrets_that_reach_another_instance_are_counted",
    "test_history.py::test_get_lines_reads_whole_lines_in_the_order_asked",
    "test_history.py::test_kept_paths_follow_every_change_of_the_tree",
    "test_integrity_cli.py::test_a_host_character_by_its_role_id_is_stored",
    "test_integrity_cli.py::test_a_read_only_database_is_one_line_and_exit_2",
    "test_integrity_cli.py::test_bad_host_lines_are_one_line_and_store_nothing",
    "test_integrity_cli.py::test_ids_and_numbers_past_the_databases_range_are_one_usage_line",
    "test_integrity_cli.py::test_turn_json_into_head_and_a_closed_pipe_end_quietly",
    "test_library_http.py::test_the_http_app_imports_no_evaluation_code",
    "test_memory_lasts.py::test_one_shot_cli_turns_in_sequence_read_each_others_memories",
    "test_record.py::test_a_fact_told_at_turn_2_is_in_the_prompt_after_60_turns",
    "test_settings.py::test_the_cli_reports_a_bad_variable_in_one_line_and_exits_2",
    "test_turn_graph.py::test_state_survives_a_process_restart",
    "test_turn_integrity.py::test_threads_playing_one_instance_never_lose_a_turn",
    "test_warmup.py::test_the_served_graph_starts_the_warm_up_when_it_is_built",
}


def _has_param(item: pytest.Item, value: str) -> bool:
    """The test runs with a parameter of this value (`db_url`'s "postgres", `eval run`'s way "served")."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(isinstance(param, str) and param == value for param in callspec.params.values())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test `postgres`, `served`, `faults`, `browser` or `slow` from what it uses (see the lists above)."""
    for item in items:
        file = item.path.name
        name = getattr(item, "originalname", item.name)
        fixtures = set(getattr(item, "fixturenames", ()))
        if "postgres_url" in fixtures or _has_param(item, "postgres") or file == "test_bench_load.py":
            item.add_marker(pytest.mark.postgres)
        if file in SERVED_FILES or fixtures & SERVED_FIXTURES or "langgraph_dev" in name or _has_param(item, "served"):
            item.add_marker(pytest.mark.served)
        if file in FAULT_FILES or "killed" in name:
            item.add_marker(pytest.mark.faults)
        if file.startswith("test_browser") or fixtures & {"page", "browser"}:
            item.add_marker(pytest.mark.browser)
        if file in SLOW_FILES or f"{file}::{name}" in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
