"""The turns before a message in its session, whose words count among the message's keywords.

An answer often makes sense only after the turn that asked for it ("What did you research?"
/ "Adoption agencies."): a message's keyword vector is encoded from the ``TURNS`` turns before
it in its session (those of its own data subject) and the message itself, each as a reader
sees it (``message_text``). Only keywords: embedding the turns too did worse on the retrieval
benchmark (docs/search.md).

Deterministic whatever the fold's history: the turns before a message appended at position P
are the session's last ``TURNS`` messages appended before P, from the turns this fold has seen
and, for a session it has not seen enough of (after a restart, or once its cache let it go),
from the index (``Sessions``). Never across data subjects, so erasing a subject leaves no word
of theirs in another subject's points.
"""

from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

from memledger_platform.vectorindex.port import IndexedPoint, message_text

TURNS = 2

Sessions = Callable[[str, str, int], list[IndexedPoint]]
"""The message points of (tenant, session) appended before a position, oldest first."""


class Turn(NamedTuple):
    position: int
    subject_id: str | None
    text: str


class Context:
    """The last turns of each session the fold has seen (at most ``cache`` sessions)."""

    def __init__(self, sessions: Sessions | None, *, cache: int = 20_000) -> None:
        self._sessions = sessions
        self._cache = cache
        self._turns: OrderedDict[tuple[str, str], list[Turn]] = OrderedDict()

    def before(self, tenant: str, session: str, position: int, subject_id: str | None
               ) -> list[str]:
        """The texts of the turns before ``position`` that count for a message of
        ``subject_id`` (oldest first)."""
        turns = [t for t in self._turns.get((tenant, session), []) if t.position < position]
        if len(turns) < TURNS and self._sessions is not None:
            turns = _merged(turns, [_turn(p) for p in self._sessions(tenant, session, position)])
        return [t.text for t in turns[-TURNS:] if t.subject_id == subject_id]

    def said(self, tenant: str, session: str, turn: Turn) -> None:
        """``turn`` was folded: it may count for the messages after it."""
        key = (tenant, session)
        self._turns[key] = _merged(self._turns.get(key, []), [turn])[-TURNS:]
        self._turns.move_to_end(key)
        while len(self._turns) > self._cache:
            self._turns.popitem(last=False)

    def forget_subject(self, tenant: str, subject_id: str) -> None:
        for key, turns in list(self._turns.items()):
            if key[0] == tenant:
                self._turns[key] = [t for t in turns if t.subject_id != subject_id]

    def forget(self) -> None:
        self._turns.clear()


def _turn(point: IndexedPoint) -> Turn:
    p = point.payload
    return Turn(int(p["sys_from"]), p.get("subject_id"),
                message_text(p.get("participant"), str(p["content"])))


def _merged(*groups: list[Turn]) -> list[Turn]:
    """Turns by position, each once."""
    return sorted({t.position: t for group in groups for t in group}.values())
