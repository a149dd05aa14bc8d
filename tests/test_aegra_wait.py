"""On Aegra a `runs/wait` (and `join`) is answered when its run ends, not on Aegra's 2 s poll (issue 27, "Figures":
p50 ≤ 0.5× `langgraph dev`, no polling delay; graph/serving/aegra_wait.py).

Aegra 0.11's own wait looks at the run's done key, then sleeps 2 s, and so on: with a timer that never fires, it never
looks again and never returns. PersonaLab's wait returns on the run's `end` event (Redis pub/sub) and keeps Aegra's
semantics: the done key, the run's row as the fallback, the timeout, the caller's cancellation. The cases run with
the Python 3.12 venv (`tests/aegra_wait_cases.py`, Aegra's `WorkerExecutor` and channel names on the real Redis;
`--stock` runs them on Aegra's own wait, where `end_event_wakes_the_wait` fails). Needs Redis (127.0.0.1:6379)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from personalab.evals.served import fresh_postgres_database, python312_venv

REPO = Path(__file__).resolve().parents[1]
REDIS_URL = os.environ.get("PERSONALAB_TEST_REDIS", "redis://127.0.0.1:6379/0")
PG_BASE = os.environ.get("PERSONALAB_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

pytestmark = pytest.mark.served


@pytest.fixture(scope="module")
def python312() -> Path:
    return python312_venv(REPO)


@pytest.fixture(scope="module")
def cases(python312: Path) -> dict[str, Any]:
    done = subprocess.run(
        [str(python312), str(REPO / "tests" / "aegra_wait_cases.py"), REDIS_URL],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_wait_returns_on_the_runs_end_event_with_no_timer_firing(cases: dict[str, Any]) -> None:
    case = cases["end_event_wakes_the_wait"]
    assert case.get("returned") is True, case
    assert case["sleeps"] == []  # never slept: woken by the run's own signal
    assert case["subscribers_left"] == 0


def test_a_run_already_done_is_answered_at_once(cases: dict[str, Any]) -> None:
    assert cases["done_before_the_wait"] == {"returned": True, "subscribers_left": 0}


def test_an_end_event_before_the_runs_row_is_final_does_not_end_the_wait(cases: dict[str, Any]) -> None:
    # the answer is read from the row: returning on the event alone would answer "IncompleteRun"
    assert cases["end_before_row"] == {"returned_before_the_row": False, "returned": True}


def test_a_run_ended_without_any_redis_signal_is_seen_in_its_row(cases: dict[str, Any]) -> None:
    case = cases["row_only"]
    assert case.get("returned") is True and case["row_reads"] >= 1, case


def test_a_run_that_never_ends_times_out_as_on_aegra(cases: dict[str, Any]) -> None:
    case = cases["times_out"]
    assert case["error"] and "did not complete within 0.3s" in case["error"], case
    assert case["subscribers_left"] == 0


def test_a_cancelled_wait_closes_its_subscription(cases: dict[str, Any]) -> None:
    assert cases["cancelled"] == {"outcome": "cancelled", "subscribers_left": 0}


def test_redis_refusing_the_subscription_falls_back_to_looking(cases: dict[str, Any]) -> None:
    assert cases["no_subscription"] == {"returned": True}


def test_the_installed_aegra_is_checked_and_a_different_one_is_one_line(python312: Path) -> None:
    """serve-production runs this check before the workers start; a different Aegra is one line, exit 2."""
    ok = subprocess.run(
        [str(python312), "-m", "personalab.graph.serving.aegra_wait"], cwd=REPO, capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip().splitlines()[-1] == (
        "run wait: end event (Redis pub/sub), done key every 0.5 s, run row every 2 s"
    )
    script = (
        "import importlib.metadata, sys\n"
        "importlib.metadata.version = lambda name: '0.12.0'\n"
        "from personalab.graph.serving import aegra_wait\n"
        "sys.exit(aegra_wait.main())\n"
    )
    other = subprocess.run([str(python312), "-c", script], cwd=REPO, capture_output=True, text=True)
    assert other.returncode == 2
    assert other.stderr.strip().splitlines() == [
        "aegra-api 0.12.0 is installed; PersonaLab's run wait is written for 0.11.x: not serving on Aegra's 2 s poll "
        "(pin aegra-api to the serve extra's range)"
    ]


def test_the_served_app_is_aegras_with_the_wait_installed(python312: Path, tmp_path: Path) -> None:
    """What serve-production serves: Aegra's app object, every WorkerExecutor waiting with PersonaLab's wait."""
    script = (
        "import os\n"
        "os.environ.update(REDIS_BROKER_ENABLED='true', RUN_MIGRATIONS_ON_STARTUP='false')\n"
        "from personalab.graph.serving import aegra_app, aegra_wait\n"
        "import aegra_api.main\n"
        "from aegra_api.services.executor import executor\n"
        "from aegra_api.services.worker_executor import WorkerExecutor\n"
        "assert aegra_app.app is aegra_api.main.app\n"
        "assert type(executor) is WorkerExecutor\n"
        "assert WorkerExecutor.wait_for_completion is aegra_wait.wait_for_completion\n"
        "print('ok')\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("PERSONALAB_")}
    env.update(AEGRA_CONFIG=str(REPO / "langgraph.json"), PERSONALAB_DATA_DIR=str(tmp_path))
    done = subprocess.run([str(python312), "-c", script], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout[-3000:] + done.stderr[-3000:]
    assert "PersonaLab: run wait on Aegra" in done.stderr


def test_serve_production_refuses_another_aegra_in_one_line_before_migrating(
    python312: Path, tmp_path: Path, postgres_url: str
) -> None:
    """An Aegra of another series (its version reported as 0.12.0 through a sitecustomize): serve-production stops
    with one line and exit 2, before PersonaLab's migrations, rather than serving on a wait it does not know."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(
        "import importlib.metadata as m\n"
        "_version = m.version\n"
        "m.version = lambda name: '0.12.0' if name == 'aegra-api' else _version(name)\n",
        encoding="utf-8",
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("PERSONALAB_")}
    env.update(
        PYTHONPATH=str(tmp_path / "site"),
        PERSONALAB_DATA_DIR=str(tmp_path / "data"),
        PERSONALAB_DATABASE_URL=postgres_url,
        PERSONALAB_REDIS_URL=REDIS_URL,
    )
    # a fresh schema, --prepare-only and an engine database dropped after: without the check it would not serve
    with fresh_postgres_database(PG_BASE, create=False) as engine_url:
        done = subprocess.run(
            [str(python312.with_name("personalab")), "serve-production", "--prepare-only"]
            + ["--workers", "1", "--engine-database-url", engine_url],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        "personalab: error: Aegra's run wait: aegra-api 0.12.0 is installed; PersonaLab's run wait is written for "
        "0.11.x: not serving on Aegra's 2 s poll (pin aegra-api to the serve extra's range)"
    ]
    assert "PersonaLab database: revision" not in done.stdout
