"""Sessions of an instance (seed 002 会话实例: 可暂停/继续, 跨会话延续): the sittings a play-through is made of.

A session starts on the first turn after a pause (`PERSONALAB_SESSION_PAUSE` minutes without a turn) or when the
user starts one (`start_session`); every turn's record names its session (`turn_record.session_id`). The first turn
of a new session is told what happened in the last one (`recap_turns`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from personalab.stores.saves import get_save
from personalab.stores.tables import Line, PlaySession, utcnow
from personalab.stores.turn_tables import TurnRecord
from sqlalchemy import func
from sqlmodel import Session, col, select


def _aware(moment: datetime | None) -> datetime | None:
    """Stored timestamps come back naive on SQLite: they are UTC."""
    if moment is not None and moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment


def current_session(session: Session, save_id: int) -> PlaySession | None:
    """The instance's latest session (None before its first turn)."""
    stmt = select(PlaySession).where(col(PlaySession.save_id) == save_id)
    return session.exec(stmt.order_by(col(PlaySession.id).desc()).limit(1)).first()


def _turn_count(session: Session, session_id: int) -> int:
    stmt = select(func.count()).select_from(TurnRecord).where(col(TurnRecord.session_id) == session_id)
    return int(session.exec(stmt).one())


def _last_turn_at(session: Session, session_id: int) -> datetime | None:
    stmt = select(func.max(TurnRecord.created_at)).where(col(TurnRecord.session_id) == session_id)
    return _aware(session.exec(stmt).one())


def start_session(session: Session, save_id: int) -> PlaySession:
    """End the instance's current session (at its last turn, or now when it had none) and start a new one. A
    current session without turns is kept as the new one: starting twice does not make empty sittings."""
    get_save(session, save_id)
    current = current_session(session, save_id)
    if current is not None and current.id is not None:
        if current.ended_at is None and _turn_count(session, current.id) == 0:
            return current
        if current.ended_at is None:
            current.ended_at = _last_turn_at(session, current.id) or utcnow()
            session.add(current)
    started = PlaySession(save_id=save_id)
    session.add(started)
    session.flush()
    return started


@dataclass
class TurnSession:
    """The session a turn belongs to, whether the turn opens it, and the session before it."""

    session: PlaySession
    is_new: bool
    previous: PlaySession | None


def session_for_turn(session: Session, save_id: int, pause_minutes: float) -> TurnSession:
    """The session of a turn starting now (under the instance's turn lock): the current one, unless the last turn
    was more than `pause_minutes` ago (or there is none yet), when a new one starts. A session started by the user
    and without turns yet is new for its first turn."""
    current = current_session(session, save_id)
    if current is not None and current.id is not None and current.ended_at is None:
        last = _last_turn_at(session, current.id)
        if last is None:
            return TurnSession(current, True, _session_before(session, save_id, current.id))
        if datetime.now(UTC) - last <= timedelta(minutes=pause_minutes):
            return TurnSession(current, False, None)
    started = start_session(session, save_id)
    return TurnSession(started, True, current if current is not None and current.id != started.id else None)


def _session_before(session: Session, save_id: int, session_id: int) -> PlaySession | None:
    stmt = select(PlaySession).where(col(PlaySession.save_id) == save_id, col(PlaySession.id) < session_id)
    return session.exec(stmt.order_by(col(PlaySession.id).desc()).limit(1)).first()


def recap_turns(
    session: Session, play: PlaySession, last: int = 5, branch: Collection[int] | None = None
) -> list[dict[str, Any]]:
    """The last `last` answered turns of session `play` whose reply is on `branch` (the line ids from the root
    to the current leaf; None: every turn), oldest first: `{"turn", "user", "reply"}` with the user's line and
    the reply's text (its lines joined). What a new session's first turn is reminded of: a turn of a branch the
    user left (regenerated, rewound, edited) did not happen on this one."""
    stmt = select(TurnRecord).where(col(TurnRecord.session_id) == play.id, col(TurnRecord.status) == "ok")
    stmt = stmt.order_by(col(TurnRecord.id).desc())
    records: list[TurnRecord] = []
    for limit in (4 * last, None):  # the branch's own turns are usually the newest: one short read
        rows = list(session.exec(stmt.limit(limit) if limit else stmt).all())
        records = [row for row in rows if branch is None or row.reply_line_id in branch][:last]
        if len(records) == last or (limit and len(rows) < limit):
            break
    records.reverse()
    turns = []
    for record in records:
        if record.user_line_id is None or record.reply_line_id is None:
            continue
        user = session.get(Line, record.user_line_id)
        # a turn's reply lines are written in one transaction under the instance's lock, after its user line
        reply_stmt = select(Line.content).where(
            col(Line.save_id) == record.save_id,
            col(Line.id) > record.user_line_id,
            col(Line.id) <= record.reply_line_id,
            col(Line.attribute) == "assistant",
        )
        reply = "".join(session.exec(reply_stmt.order_by(col(Line.id))).all())
        turns.append({"turn": record.turn, "user": user.content if user else "", "reply": reply})
    return turns


def list_sessions(session: Session, save_id: int) -> list[dict[str, Any]]:
    """The instance's sessions, oldest first: id, started, ended (None for the current one), turns, last turn."""
    get_save(session, save_id)
    stmt = select(PlaySession).where(col(PlaySession.save_id) == save_id).order_by(col(PlaySession.id))
    counts = dict(
        session.exec(
            select(TurnRecord.session_id, func.count())
            .where(col(TurnRecord.save_id) == save_id)
            .group_by(col(TurnRecord.session_id))
        ).all()
    )
    return [
        {
            "id": play.id,
            "instance_id": save_id,
            "started_at": _aware(play.started_at),
            "ended_at": _aware(play.ended_at),
            "turns": counts.get(play.id, 0),
            "last_turn_at": _last_turn_at(session, play.id) if play.id is not None else None,
        }
        for play in session.exec(stmt).all()
    ]


RECAP_CHARS = 120  # per line of the recap: a reminder, not a transcript


RECAP_LINE = "第{turn}轮 用户：{user}／{name}：{reply}"


def recap_items(turns: list[dict[str, Any]], character_name: str, line: str = RECAP_LINE) -> list[str]:
    """The recap block's lines (seed 002 跨会话延续): one per turn of the last session, `第N轮 用户：…／name：…`,
    each side cut to `RECAP_CHARS` characters (marked with …)."""

    def cut(text: str) -> str:
        text = " ".join(text.split())
        return text if len(text) <= RECAP_CHARS else text[: RECAP_CHARS - 1] + "…"

    # `line`: the instance's language (issue 28, prompt_catalog.Catalog.recap_line), Chinese by default
    return [line.format(turn=t["turn"], user=cut(t["user"]), name=character_name, reply=cut(t["reply"])) for t in turns]
