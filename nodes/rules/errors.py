"""PersonaLab's one error family: what a user or a host app can cause, told apart from bugs.

Everything PersonaLab raises on purpose derives from `PersonaLabError`; invalid input is also a `ValueError` and
a missing thing also a `LookupError`, so callers that catch the built-in kinds keep working. The CLI and the
HTTP layer catch `PersonaLabError` only: any other exception is a bug and is reported as one.
"""

from __future__ import annotations


class PersonaLabError(Exception):
    """Base of every error PersonaLab raises on purpose."""


class InvalidInput(PersonaLabError, ValueError):
    """Input that breaks a rule (a field, a file, a setting); the message names the bad item."""


class ConfigError(InvalidInput):
    """A bad `PERSONALAB_*` setting; the message names the variable and what it allows."""


class NotFound(PersonaLabError, LookupError):
    """A thing asked for by id that does not exist."""


class InstanceNotFound(NotFound):
    """No conversation instance (seed 002 会话实例; the seed's `save` table) with that id."""


class InstanceBusy(PersonaLabError):
    """Another turn of the same instance is running: never two replies to one parent line."""


class TurnLockLost(InstanceBusy):
    """This turn's lock on its instance lapsed and another process took it over: the turn stops, nothing stored."""


class RunOvertaken(InstanceBusy):
    """A served run replayed after its server process died (issue 27) whose stored user line a later turn of the
    instance already followed: answering it now would move the instance back under the later turn; nothing is
    stored, its client gets this error (the line stays unanswered, as after any failed turn)."""


class NotAllowed(PersonaLabError, PermissionError):
    """An operation the caller may not run at all (administration, for a signed-in user): the message names it."""


class StoreUnavailable(PersonaLabError):
    """The database cannot be opened or written (a read-only file or folder, an unreachable server): not the
    input's fault, but not a bug either; the message names the database and what the system said."""


def error_class(name: object) -> type[PersonaLabError] | None:
    """The PersonaLab error class called `name` (an error that crossed a process by its class name: a served run's,
    a turn handed to the server), None for any other name."""
    kind = globals().get(str(name))
    return kind if isinstance(kind, type) and issubclass(kind, PersonaLabError) else None
