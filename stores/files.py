"""Files a user names (imports, exports): read bounded from a regular file, written new and atomic.

- `read_file` reads a regular file and at most its limit: a device (`/dev/zero`), a directory, a FIFO or a
  socket is refused before a byte is read, and a file that grows past the limit while it is read is refused too
  (the limit + 1st byte tells).
- `write_file` writes a new regular file in one step: a temporary file in the same folder, flushed to the disk
  (fsync), then `os.replace`, so a reader sees the old file or the whole new one, never half of it. An existing
  regular file is replaced only with `overwrite`; a device (`/dev/full`), a directory, a FIFO, a socket or a
  symbolic link is never replaced (a symlink is written through only with `follow_symlinks`).
- `parse_json` / `read_json` turn text into JSON values within `MAX_JSON_DEPTH` levels and with no NUL
  character (PostgreSQL's text cannot hold one; SQLite would store it and the two would differ) nor lone
  surrogate (`"\\ud800"`: not text; no database can store it) in any string.

Every refusal is one `InvalidInput` line naming the path (or the argument) and why.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.validation import bad_character

MAX_JSON_DEPTH = 64  # our formats need 5 levels, SillyTavern files and character cards fewer than 10
READ_CHUNK = 1 << 20


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _kind(mode: int) -> str:
    """What a non-regular file is, in the words of `ls -l`'s users."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def read_file(path: str | os.PathLike[str], limit: int, *, what: str = "file") -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them; `InvalidInput` naming the path for a
    missing or unreadable file, a non-regular file or one over the limit (`what` names the limit)."""
    name = os.fspath(path)
    try:
        # stat first: opening a device or a FIFO can itself have effects (a FIFO's writer is woken up)
        before = os.stat(name)
        if not stat.S_ISREG(before.st_mode):
            raise InvalidInput(f"cannot read {name}: it is {_kind(before.st_mode)}, not a regular file")
        # O_NONBLOCK: should the path have become a FIFO since the stat, the open does not wait for a writer
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InvalidInput(f"cannot read {name}: {_reason(exc)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(f"cannot read {name}: it is {_kind(info.st_mode)}, not a regular file")
        if info.st_size > limit:
            raise InvalidInput(f"{name} is {info.st_size} bytes, over the {what} limit of {limit}")
        chunks: list[bytes] = []
        total = 0
        while total <= limit:  # one byte past the limit says the file grew too big while being read
            chunk = os.read(fd, min(READ_CHUNK, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise InvalidInput(f"{name} is over the {what} limit of {limit} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise InvalidInput(f"cannot read {name}: {_reason(exc)}") from None
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask without changing it (os.umask would, for a moment, for every thread)."""
    try:
        for row in Path("/proc/self/status").read_text().splitlines():
            if row.startswith("Umask:"):
                return int(row.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o077  # unknown: private, as tempfile's files are


def write_file(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    overwrite: bool = False,
    follow_symlinks: bool = False,
    mode: int | None = None,
) -> Path:
    """Write `data` as the regular file `path` in one step (see the module doc) and return the path written.

    `InvalidInput` naming the path when it is a device, a directory, a FIFO, a socket, a symlink (unless
    `follow_symlinks`: then its target, which must be a regular file or missing), an existing file without
    `overwrite`, or when the folder cannot be written. A replaced file keeps its permissions; a new one gets
    the umask's, as `open` would give it; `mode` sets them instead (0o600: a file only its user may read)."""
    name = os.fspath(path)
    target = Path(name)
    try:
        info: os.stat_result | None = os.lstat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise InvalidInput(f"cannot write {name}: {_reason(exc)}") from None
    if info is not None and stat.S_ISLNK(info.st_mode):
        if not follow_symlinks:
            raise InvalidInput(f"cannot write {name}: it is a symbolic link; name its target instead")
        target = Path(os.path.realpath(target))
        try:
            info = os.lstat(target)
        except FileNotFoundError:
            info = None
        except OSError as exc:
            raise InvalidInput(f"cannot write {name}: {_reason(exc)}") from None
    if info is not None:
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(f"cannot write {name}: it is {_kind(info.st_mode)}, not a regular file")
        if not overwrite:
            raise InvalidInput(f"cannot write {name}: it exists (not replaced without overwrite)")
    if mode is None:
        mode = stat.S_IMODE(info.st_mode) if info is not None else 0o666 & ~_umask()
    folder = target.parent
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise InvalidInput(f"cannot write {name}: {_reason(exc)}") from None
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)  # the data is on the disk before the name points at it
        finally:
            os.close(fd)
        os.replace(temporary, target)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise InvalidInput(f"cannot write {name}: {_reason(exc)}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _sync_folder(folder)
    return target


def _sync_folder(folder: Path) -> None:
    """fsync the folder so the rename itself survives a power cut (best effort: not every system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def parse_json(text: str, source: str) -> Any:
    """The JSON value of `text`; `InvalidInput` naming `source` for malformed JSON, nesting deeper than
    `MAX_JSON_DEPTH`, or a NUL character or a lone surrogate in any string (a key or a value)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{source} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise InvalidInput(f"{source} is nested deeper than {MAX_JSON_DEPTH} levels") from None
    check_json_tree(value, source)
    return value


def check_json_tree(value: Any, source: str) -> None:
    """Refuse nesting deeper than `MAX_JSON_DEPTH`, NUL characters and lone surrogates in a parsed JSON value,
    naming where. Iterative, so a deep value cannot exhaust the stack here."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            bad = bad_character(item)
            if bad:
                raise InvalidInput(f"{source}: the text at {where or 'the top level'} contains {bad}")
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_JSON_DEPTH:
            raise InvalidInput(f"{source} is nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, dict):
            for key, child in item.items():
                bad = bad_character(key)
                if bad:
                    raise InvalidInput(f"{source}: a key at {where or 'the top level'} contains {bad}")
                stack.append((child, f"{where}.{key}" if where else key, depth + 1))
        else:
            stack.extend((child, f"{where}[{index}]", depth + 1) for index, child in enumerate(item))


def read_json(path: str | os.PathLike[str], limit: int, *, what: str = "file") -> Any:
    """The JSON in the regular file `path` (UTF-8, a BOM allowed), read by `read_file` and `parse_json`."""
    raw = read_file(path, limit, what=what)
    name = os.fspath(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput(f"{name} is not UTF-8 text") from None
    return parse_json(text, name)
