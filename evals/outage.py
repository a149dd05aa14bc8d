"""The database going away in the middle of a turn and coming back (issue 14 fault tests), for one test only; and
any TCP server (Redis, issue 27) going away the same way (`TcpLink`: stop listening, cut every connection).

PostgreSQL: a server that goes away and comes back for the test's connections. The shared server cannot be stopped (other work uses it), so the
processes under test reach it through `PostgresLink`, a TCP relay on loopback, and the outage is real at both
ends of their connections:
- `down()`: the relay stops listening (a new connection is refused, as by a stopped server), the server ends the
  backends of every relayed connection with `pg_terminate_backend` (the client reads what a shutting-down server
  sends: FATAL 57P01 "terminating connection due to administrator command", then the end of the connection);
- `up()`: the relay listens again on the same port; nothing else of the server changed.

SQLite, an embedded file, has no server to lose; the nearest real fault is another process holding the file's write
lock (a backup, a `sqlite3` shell's open transaction, a long `doctor --repair`) for longer than a turn waits for it
(`PERSONALAB_SQLITE_BUSY_TIMEOUT`): `SqliteWriteLock.down()` takes it (`BEGIN IMMEDIATE` in this process: reads go
on, as WAL allows, every write waits and then fails), `up()` gives it back.
"""

from __future__ import annotations

import random
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import make_url

TERMINATED_WAIT_S = 2.0  # how long down() waits for the server to end the relayed backends


class SqliteWriteLock:
    """Another process's write lock on the SQLite file `path`, taken by `down()` and given back by `up()`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._holder: sqlite3.Connection | None = None

    def down(self) -> int:
        holder = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        self._holder = holder
        return 1

    def up(self) -> None:
        holder, self._holder = self._holder, None
        if holder is not None:
            holder.execute("ROLLBACK")
            holder.close()

    def close(self) -> None:
        self.up()


class TcpLink:
    """A relay from 127.0.0.1:`port` to `target` (host, port): `down()` stops listening (a new connection is
    refused, as by a stopped server) and cuts every relayed connection; `up()` listens again on the same port.
    Redis taken away from a server under test (issue 27) is this relay in front of it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.port = 0
        self.up()

    def up(self) -> None:
        """Listen (again, on the same port) and relay every connection to the server."""
        listener = _listener(self.port)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="tcp-link-accept", daemon=True).start()

    def down(self) -> int:
        """Stop listening and cut every relayed connection; returns how many were cut."""
        pairs = self._stop()
        for client, upstream in pairs:
            _close(client)
            _close(upstream)
        return len(pairs)

    def close(self) -> None:
        self.down()

    def _stop(self) -> list[tuple[socket.socket, socket.socket]]:
        """Stop listening; the relayed pairs, now the caller's to end."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            listener.close()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        return pairs

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # down(): the listener was shut
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:  # went down meanwhile
                    _close(client)
                    _close(upstream)
                    continue
                self._pairs.append((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), name="tcp-link-pump", daemon=True).start()


class PostgresLink(TcpLink):
    """A relay from 127.0.0.1:`port` to the PostgreSQL server of `url`; `url_through()` is `url` by way of it."""

    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        self.admin = url.replace("postgresql+psycopg://", "postgresql://", 1)
        super().__init__((parsed.host or "127.0.0.1", parsed.port or 5432))

    def url_through(self, url: str) -> str:
        """`url` with its host and port replaced by the relay's."""
        return make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    def down(self) -> int:
        """Stop listening and have the server end every relayed connection; returns how many it ended."""
        pairs = self._stop()
        ports = [upstream.getsockname()[1] for _, upstream in pairs if upstream.fileno() != -1]
        ended = 0
        if ports:
            import psycopg

            with psycopg.connect(self.admin, autocommit=True) as admin:
                ended = sum(
                    1
                    for (done,) in admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE client_port = ANY(%s) AND client_addr IN ('127.0.0.1', '::1')",
                        (ports,),
                    ).fetchall()
                    if done
                )
        # the server's FATAL reaches the client through the relay, then the connection ends; a pair the server
        # did not end (it was still being set up) is cut here
        deadline = time.monotonic() + TERMINATED_WAIT_S
        while time.monotonic() < deadline and any(upstream.fileno() != -1 for _, upstream in pairs):
            time.sleep(0.01)
        for client, upstream in pairs:
            _close(client)
            _close(upstream)
        return ended


def _listener(port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:`port`, or on a free port below the ephemeral range when `port` is 0: while
    the relay is down its port is free, and an ephemeral one could meanwhile be taken by any outgoing connection."""
    low = _ephemeral_low()
    candidates = [port] * 50 if port else [random.randrange(max(1024, low - 12000), low) for _ in range(50)]
    for candidate in candidates:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", candidate))
        except OSError:
            listener.close()
            time.sleep(0.1 if port else 0)
            continue
        listener.listen(64)
        return listener
    raise OSError(f"no port to listen on (tried {sorted(set(candidates))[:5]} …)")


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as ranges:
            return int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


@contextmanager
def postgres_link(url: str) -> Iterator[PostgresLink]:
    """A `PostgresLink` to `url`'s server, shut when the block ends."""
    link = PostgresLink(url)
    try:
        yield link
    finally:
        link.close()


@contextmanager
def tcp_link(host: str, port: int) -> Iterator[TcpLink]:
    """A `TcpLink` to `host`:`port`, shut when the block ends."""
    link = TcpLink((host, port))
    try:
        yield link
    finally:
        link.close()
