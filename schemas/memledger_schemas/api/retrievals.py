"""What the retrieval audit answers with: a recorded retrieval, and its replay."""

from datetime import datetime
from typing import Any

from memledger_schemas.api.reads import Basis, Frozen


class Shown(Frozen):
    """One entry a retrieval showed, in order: an item (a message, for a context bundle's
    session turns), its score if it had one, and the search layer or bundle section."""

    ref: str
    score: float | None
    section: str


class RetrievalRecord(Frozen):
    """A recorded retrieval (``retrieval.performed``): what a search or context call showed,
    at which basis, under which ranking policy, and the request that replays it."""

    retrieval_id: str
    position: int
    """Where the record itself is in the log."""
    recorded_at: datetime
    actor: str | None
    operation: str
    query: str | None
    subject: str | None
    spaces: list[str]
    """The spaces the call could read; empty: every space of the tenant."""
    parameters: dict[str, Any]
    basis: Basis
    results: list[Shown]
    policy_version: str


class Difference(Frozen):
    rank: int
    """0-based place in the list."""
    recorded: Shown | None
    replayed: Shown | None


class ReplayAnswer(Frozen):
    """The recorded request run again at its recorded basis, beside what was recorded."""

    retrieval_id: str
    basis: Basis
    same: bool
    """The same entries, in the same order, with the same scores."""
    same_items: bool
    """The same entries in the same order (scores may differ: see docs/search.md)."""
    policy_version: str
    """The ranking policy recorded; ``current_policy_version`` ranked the replay."""
    current_policy_version: str
    recorded: list[Shown]
    replayed: list[Shown]
    differences: list[Difference]
