"""Run by tests/test_aegra_wait.py with the Python 3.12 venv (Aegra is installed there only): the run wait of
`personalab.graph.serving.aegra_wait` driven against a real Redis, with Aegra's `WorkerExecutor` and its own
channel names; the run's row is a stand-in (`_is_run_terminal` replaced), so no database is needed.

`python aegra_wait_cases.py REDIS_URL` prints one JSON object, a result per case. `--stock` leaves Aegra's own
2 s poll in place (the cases the wait fixes then fail: `end_event_wakes_the_wait`)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any

STOCK = "--stock" in sys.argv
REDIS_URL = next(arg for arg in sys.argv[1:] if not arg.startswith("--"))
PREFIX = f"aegra:run:waittest{uuid.uuid4().hex[:8]}:"
os.environ.update(REDIS_BROKER_ENABLED="true", REDIS_URL=REDIS_URL, REDIS_CHANNEL_PREFIX=PREFIX)

from aegra_api.core.redis_manager import redis_manager  # noqa: E402
from aegra_api.services import worker_executor  # noqa: E402
from personalab.graph.serving import aegra_wait  # noqa: E402

REAL_SLEEP = asyncio.sleep
TERMINAL: set[str] = set()
ROW_READS: list[str] = []


async def _is_run_terminal(run_id: str) -> bool:
    """The run's row, as Aegra reads it (terminal or not)."""
    ROW_READS.append(run_id)
    return run_id in TERMINAL


def _end(status: str = "success") -> str:
    # Aegra's broker message, as `RedisRunBroker.put` publishes the `end` event
    return json.dumps({"event_id": "7_event", "payload": ["end", {"status": status}]})


async def _finish(client: Any, run_id: str) -> None:
    """What Aegra's worker does when a run ends: the row committed, the `end` event published, the done key set."""
    TERMINAL.add(run_id)
    await client.publish(f"{PREFIX}{run_id}", json.dumps({"event_id": "6_event", "payload": ["values", {"a": 1}]}))
    await client.publish(f"{PREFIX}{run_id}", _end())
    await client.set(f"{PREFIX}done:{run_id}", "1", ex=60)


async def _subscribers(client: Any, run_id: str) -> int:
    return int(dict(await client.pubsub_numsub(f"{PREFIX}{run_id}")).get(f"{PREFIX}{run_id}", 0))


async def _until_listening(client: Any, run_id: str, asleep: list[float] | None = None) -> None:
    """Until the wait has subscribed to the run's channel (or, given `asleep`, has gone to sleep), at most ~4 s."""
    for _ in range(200):
        if await _subscribers(client, run_id) or asleep:
            return
        await REAL_SLEEP(0.02)


async def end_event_wakes_the_wait(executor: Any, client: Any) -> dict[str, Any]:
    """The run ends after the wait began; no timer of the wait's ever fires (asyncio.sleep never returns): the wait
    must return on the run's own signal. Aegra's poll sleeps 2 s between looks and never looks again here."""
    run_id = str(uuid.uuid4())
    sleeps: list[float] = []

    async def never(delay: float, result: Any = None) -> Any:
        sleeps.append(delay)
        await asyncio.get_running_loop().create_future()  # a timer that never fires

    asyncio.sleep = never  # type: ignore[assignment]
    try:
        task = asyncio.create_task(executor.wait_for_completion(run_id, timeout=120.0))
        await _until_listening(client, run_id, sleeps)
        await _finish(client, run_id)
        try:
            await asyncio.wait_for(task, timeout=20.0)
            returned = True
        except TimeoutError:
            returned = False
        left = await _subscribers(client, run_id)
    finally:
        asyncio.sleep = REAL_SLEEP  # type: ignore[assignment]
    return {"returned": returned, "sleeps": sleeps, "subscribers_left": left}


async def done_before_the_wait(executor: Any, client: Any) -> dict[str, Any]:
    """The run ended before the wait began (its `end` event already gone): the done key answers at once."""
    run_id = str(uuid.uuid4())
    await _finish(client, run_id)
    await asyncio.wait_for(executor.wait_for_completion(run_id, timeout=30.0), timeout=20.0)
    return {"returned": True, "subscribers_left": await _subscribers(client, run_id)}


async def row_only(executor: Any, client: Any) -> dict[str, Any]:
    """A run that ends without `end` event or done key (Aegra's lease reaper giving up on it): the row answers."""
    run_id = str(uuid.uuid4())
    task = asyncio.create_task(executor.wait_for_completion(run_id, timeout=60.0))
    await REAL_SLEEP(0.1)
    TERMINAL.add(run_id)
    await asyncio.wait_for(task, timeout=30.0)
    return {"returned": True, "row_reads": ROW_READS.count(run_id)}


async def end_before_row(executor: Any, client: Any) -> dict[str, Any]:
    """An `end` event whose run's row is not terminal yet is not taken for the end: the wait goes on until it is."""
    run_id = str(uuid.uuid4())
    task = asyncio.create_task(executor.wait_for_completion(run_id, timeout=60.0))
    await _until_listening(client, run_id)
    await client.publish(f"{PREFIX}{run_id}", _end())
    await REAL_SLEEP(0.3)
    early = task.done()
    TERMINAL.add(run_id)
    await asyncio.wait_for(task, timeout=30.0)
    return {"returned_before_the_row": early, "returned": True}


async def times_out(executor: Any, client: Any) -> dict[str, Any]:
    """A run that never ends: Aegra's TimeoutError after `timeout`, the subscription closed."""
    run_id = str(uuid.uuid4())
    try:
        await asyncio.wait_for(executor.wait_for_completion(run_id, timeout=0.3), timeout=20.0)
        error = None
    except TimeoutError as exc:
        error = str(exc)
    return {"error": error, "subscribers_left": await _subscribers(client, run_id)}


async def cancelled(executor: Any, client: Any) -> dict[str, Any]:
    """The client went away (`heartbeat_wait_body` cancels the wait): CancelledError, the subscription closed."""
    run_id = str(uuid.uuid4())
    task = asyncio.create_task(executor.wait_for_completion(run_id, timeout=60.0))
    await _until_listening(client, run_id)
    task.cancel()
    try:
        await task
        outcome = "returned"
    except asyncio.CancelledError:
        outcome = "cancelled"
    await REAL_SLEEP(0.1)
    return {"outcome": outcome, "subscribers_left": await _subscribers(client, run_id)}


async def no_subscription(executor: Any, client: Any) -> dict[str, Any]:
    """Redis refuses the subscription: the wait falls back to looking at the done key and the row."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    class Refusing:
        async def subscribe(self, *channels: str) -> None:
            raise RedisConnectionError("refused (test)")

        async def aclose(self) -> None:
            return None

    run_id = str(uuid.uuid4())
    original = client.pubsub
    client.pubsub = lambda: Refusing()
    try:
        task = asyncio.create_task(executor.wait_for_completion(run_id, timeout=60.0))
        await REAL_SLEEP(0.1)
        await _finish(client, run_id)
        await asyncio.wait_for(task, timeout=30.0)
    finally:
        client.pubsub = original
    return {"returned": True}


async def main() -> dict[str, Any]:
    mode = None if STOCK else aegra_wait.install()
    worker_executor._is_run_terminal = _is_run_terminal
    await redis_manager.initialize()
    client = redis_manager.get_client()
    executor = worker_executor.WorkerExecutor()
    results: dict[str, Any] = {"mode": mode}
    try:
        for case in (
            done_before_the_wait,
            end_event_wakes_the_wait,
            end_before_row,
            row_only,
            times_out,
            cancelled,
            no_subscription,
        ):
            try:
                results[case.__name__] = await case(executor, client)
            except Exception as exc:  # one case's failure is reported, the others still run
                results[case.__name__] = {"failed": f"{type(exc).__name__}: {exc}"}
    finally:
        keys = [key async for key in client.scan_iter(f"{PREFIX}*")]
        if keys:
            await client.delete(*keys)
        await redis_manager.close()
    return results


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
