"""`runs/wait` and `join` answered as soon as their run ends on Aegra, not on Aegra's 2 s poll (issue 27, "Figures":
the client's time per turn ≤ 0.5× `langgraph dev` at p50, "no polling delay"; docs/benchmarks/2026-11-28-poll.md).

Aegra 0.11's `WorkerExecutor.wait_for_completion` (`aegra_api/services/worker_executor.py`), which `runs/wait`,
`join` (`run_waiters.heartbeat_wait_body`) and the stateless runs' clean-up wait through, learns that a run ended by
polling the Redis key `{REDIS_CHANNEL_PREFIX}done:{run_id}` every 2.0 s (a hard-coded `asyncio.sleep(2.0)`) and the
run's row every second poll: every answer came at least 2 s after it was asked, whatever the graph took.

Aegra already says when a run ends, on the run's own pub/sub channel `{REDIS_CHANNEL_PREFIX}{run_id}` (its broker,
`redis_broker.RedisRunBroker`): an `end` event, published by the worker after the run's final status is committed
(`run_executor.execute_run`: `finalize_run`, then `_signal_end_event` / `signal_run_error` /
`signal_run_cancelled`), then the done key (`_signal_run_done`). `wait_for_completion` here subscribes to that
channel first, then checks the done key (a run that ended before the subscription), then waits for the `end` event
and confirms it in the run's row (the answer is read from that row). A run that ends without an `end` event (one that
was terminal before it started, a timeout or a cancel finalized by the worker loop, one the lease reaper gave up on)
is still seen: the done key every `FALLBACK_TICK_S`, the row every `DB_EVERY_TICKS`-th tick, as Aegra did, only more
often. Redis refusing the subscription (or losing it) falls back to those ticks alone. The timeout, the cancellation
(the caller's task cancelled: the subscription is closed) and the `TimeoutError` are Aegra's.

`install()` puts this wait in place of Aegra's, after `check_aegra()` found the Aegra internals it relies on; a
different Aegra fails at start-up with one line (`AegraMismatch`), never silently back on the 2 s poll.
`python -m personalab.graph.serving.aegra_wait` runs the check alone (serve-production runs it before starting).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.metadata
import inspect
import json
import sys
from typing import Any

AEGRA_SERIES = (0, 11)
"""The Aegra release series whose internals this wait was written against (the `serve` extra pins `>=0.11,<0.12`)."""
FALLBACK_TICK_S = 0.5
"""How long the wait listens for the `end` event before it checks the done key itself (a run ended without one)."""
DB_EVERY_TICKS = 4
"""The run's row is read every this many ticks (2 s; Aegra: every second poll of 2 s, 4 s)."""
WAIT_MODE = "end event (Redis pub/sub), done key every 0.5 s, run row every 2 s"
"""What `install()` reports: the wait each worker uses (printed by serve-production and by every worker)."""


class AegraMismatch(RuntimeError):
    """The installed Aegra is not the one this wait was written against (its message is one line)."""


def check_aegra() -> None:
    """Raise `AegraMismatch` naming what differs when the installed Aegra's run wait, done key, `end` event or
    run channel are not the ones read in Aegra 0.11 (module docstring)."""
    try:
        version = importlib.metadata.version("aegra-api")
    except importlib.metadata.PackageNotFoundError:
        raise AegraMismatch("Aegra (aegra-api) is not installed") from None
    series = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if series != AEGRA_SERIES:
        wanted = ".".join(map(str, AEGRA_SERIES))
        raise AegraMismatch(f"aegra-api {version} is installed; PersonaLab's run wait is written for {wanted}.x")
    try:
        worker = importlib.import_module("aegra_api.services.worker_executor")
        runs = importlib.import_module("aegra_api.services.run_executor")
        broker = importlib.import_module("aegra_api.services.redis_broker")
        waiters = importlib.import_module("aegra_api.services.run_waiters")
    except ImportError as exc:
        raise AegraMismatch(f"aegra-api {version}: {exc}") from None
    executor = getattr(worker, "WorkerExecutor", None)
    if executor is None or not callable(getattr(executor, "wait_for_completion", None)):
        raise AegraMismatch(f"aegra-api {version}: no WorkerExecutor.wait_for_completion")
    if _signature(executor.wait_for_completion) != _signature(wait_for_completion):
        raise AegraMismatch(
            f"aegra-api {version}: WorkerExecutor.wait_for_completion{inspect.signature(executor.wait_for_completion)}"
            " is not (self, run_id, *, timeout)"
        )
    for name in ("_is_run_terminal", "redis_manager", "settings"):
        if not hasattr(worker, name):
            raise AegraMismatch(f"aegra-api {version}: worker_executor has no {name}")
    prefix = getattr(getattr(worker.settings, "redis", None), "REDIS_CHANNEL_PREFIX", None)
    if not isinstance(prefix, str):
        raise AegraMismatch(f"aegra-api {version}: no settings.redis.REDIS_CHANNEL_PREFIX")
    # the two signals this wait listens for, where Aegra sends them
    sources = {
        "run_executor._signal_run_done": (getattr(runs, "_signal_run_done", None), "done:{run_id}"),
        "run_executor._signal_end_event": (getattr(runs, "_signal_end_event", None), '("end",'),
        "run_waiters.heartbeat_wait_body": (
            getattr(waiters, "heartbeat_wait_body", None),
            "executor.wait_for_completion(",
        ),
    }
    for where, (function, expected) in sources.items():
        try:
            source = inspect.getsource(function) if function is not None else ""
        except (OSError, TypeError):
            source = ""
        if expected not in source:
            raise AegraMismatch(f"aegra-api {version}: {where} no longer has {expected!r}")
    try:
        channel = broker.RedisBrokerManager()._make_broker("RUN")._channel
    except Exception as exc:  # any failure here is a mismatch, named in the one line
        raise AegraMismatch(f"aegra-api {version}: its Redis broker's run channel cannot be read ({exc})") from None
    if channel != f"{prefix}RUN":
        raise AegraMismatch(f"aegra-api {version}: a run's channel is {channel!r}, not {prefix!r} + run id")


def _signature(function: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


def install() -> str:
    """Check the installed Aegra (`check_aegra`), then make every `WorkerExecutor` (the one Aegra made at import
    included: the method is the class's) wait with `wait_for_completion` below. Returns `WAIT_MODE`."""
    check_aegra()
    worker = importlib.import_module("aegra_api.services.worker_executor")
    worker.WorkerExecutor.wait_for_completion = wait_for_completion
    return WAIT_MODE


async def wait_for_completion(self: Any, run_id: str, *, timeout: float = 300.0) -> None:
    """Return once run `run_id` has ended (its row terminal, or Aegra's done key set); `TimeoutError` after
    `timeout` s, as Aegra's. See the module docstring."""
    worker = importlib.import_module("aegra_api.services.worker_executor")
    redis_error: type[BaseException] = importlib.import_module("redis").RedisError
    prefix: str = worker.settings.redis.REDIS_CHANNEL_PREFIX
    done_key = f"{prefix}done:{run_id}"
    client = worker.redis_manager.get_client()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    # subscribed before the first look at the done key: an `end` published after that look is not missed
    pubsub = await _subscribe(client, f"{prefix}{run_id}")
    ticks = 0
    try:
        while loop.time() < deadline:
            try:
                if await client.exists(done_key):
                    return
            except redis_error:
                pass  # as Aegra: the run's row below still answers
            ticks += 1
            if ticks % DB_EVERY_TICKS == 0 and await worker._is_run_terminal(run_id):
                return
            within = min(FALLBACK_TICK_S, max(0.0, deadline - loop.time()))
            if pubsub is None:
                await asyncio.sleep(within)
                continue
            try:
                ended = await _end_event(pubsub, within)
            except Exception:  # the subscription lost (a Redis error, or redis-py's own): never the wait's failure
                await _close(pubsub)
                pubsub = None  # the ticks alone from here
                continue
            # the `end` follows the committed final status; the row is what the answer is read from
            if ended and await worker._is_run_terminal(run_id):
                return
        raise TimeoutError(f"Run {run_id} did not complete within {timeout}s")
    finally:
        if pubsub is not None:
            await _close(pubsub)


async def _subscribe(client: Any, channel: str) -> Any:
    """The run's channel subscribed to, or None when Redis refused (the wait then looks at the key and the row)."""
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(channel)
    except Exception:  # a Redis error, or redis-py's own: the looks alone, as Aegra's wait with Redis away
        await _close(pubsub)
        return None
    return pubsub


async def _end_event(pubsub: Any, within: float) -> bool:
    """True when an `end` event arrives on the run's channel within `within` s (every other event is passed over)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + within
    while (left := until - loop.time()) > 0:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
        if message is not None and message.get("type") == "message" and _is_end(message.get("data")):
            return True
    return False


def _is_end(data: Any) -> bool:
    """Whether a message of Aegra's broker (`{"event_id": …, "payload": [event, data]}`) is the run's `end`."""
    try:
        payload = json.loads(data).get("payload")
    except (TypeError, ValueError, AttributeError):
        return False
    return isinstance(payload, list) and bool(payload) and payload[0] == "end"


async def _close(pubsub: Any) -> None:
    # aclose disconnects the subscribed connection (its subscription goes with it) and returns it to the pool
    with contextlib.suppress(Exception):
        await pubsub.aclose()


def main() -> int:
    """`python -m personalab.graph.serving.aegra_wait`: the start-up check alone, one line, exit 2 on a mismatch."""
    try:
        check_aegra()
    except AegraMismatch as exc:
        sys.stderr.write(f"{exc}: not serving on Aegra's 2 s poll (pin aegra-api to the serve extra's range)\n")
        return 2
    print(f"run wait: {WAIT_MODE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
