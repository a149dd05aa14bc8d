"""A turn's events read from its worker thread (graph/api/worker_events.py): the web app's streamed turn and a turn
handed to the running server both read them this way."""

from __future__ import annotations

import threading

import pytest
from personalab.graph.api.worker_events import END, WorkerEvents


def test_events_come_in_order_and_end_when_the_work_returns() -> None:
    def work(put):  # type: ignore[no-untyped-def]
        for token in ("雷", "娜", "：", "走吧"):
            put({"token": token})
        put({"state": {"turn": 3}})

    assert list(WorkerEvents(work, "test-turn")) == [
        {"token": "雷"},
        {"token": "娜"},
        {"token": "："},
        {"token": "走吧"},
        {"state": {"turn": 3}},
    ]


# the exception reaches the thread's excepthook (a bug's traceback in the server's log), as it should
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_work_that_raises_still_ends_the_events_and_runs_in_its_own_thread() -> None:
    names: list[str] = []

    def work(put):  # type: ignore[no-untyped-def]
        names.append(threading.current_thread().name)
        put("first")
        raise RuntimeError("the store went away")

    events = WorkerEvents(work, "test-failing-turn")
    assert events.next() == "first"
    assert events.next() is END  # no hang: the reader is told the worker is done
    assert names == ["test-failing-turn"]
    for thread in threading.enumerate():  # the traceback is reported before this test ends
        if thread.name == "test-failing-turn":
            thread.join(5)


def test_a_reader_that_goes_away_does_not_stop_the_turn() -> None:
    finished = threading.Event()
    release = threading.Event()

    def work(put):  # type: ignore[no-untyped-def]
        put("token")
        release.wait(5)
        put("more")  # nobody reads it any more
        finished.set()

    events = WorkerEvents(work, "test-abandoned-turn")
    for event in events:
        assert event == "token"
        break  # the page was closed
    release.set()
    assert finished.wait(5), "the worker did not finish its turn"


@pytest.mark.parametrize("count", [0, 1, 50])
def test_every_event_put_is_read(count: int) -> None:
    assert list(WorkerEvents(lambda put: [put(n) for n in range(count)] and None, "test-count")) == list(range(count))
