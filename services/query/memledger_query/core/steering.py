"""Steering rules and steering-rule candidates in a context bundle's preferences section.

The rule for a candidate: a correction (kind "correction") of the space, true at the bundle's
basis, whose ratings (``feedback.recorded`` with signal "rating", recorded at or before the
basis' position) average at most 2 of 5. Being corrected and rated low again suggests the
agent keeps making that mistake: the correction is offered as a rule to follow, right after
the standing steering rules, flagged ``steering_rule_candidate`` (lowest mean rating first, at
most 20), for the agent to heed and for an operator to promote to a steering rule.
"""

from collections.abc import Sequence
from typing import Any

from psycopg import Connection

from memledger_query.core.context import Entry
from memledger_query.core.signal_views import steering_candidates
from memledger_schemas.api.reads import Basis, Item

FLAG = "steering_rule_candidate"


def candidates(conn: Connection[Any], s: str, tenant: str, space: str, at: Basis
               ) -> list[Entry]:
    """The steering-rule candidates of ``space`` at ``at``, as bundle entries."""
    return [Entry(f"- [steering_rule candidate] {item.content} (rated {mean:.1f}/5 by {n})",
                  item.item_id, item.confidence, FLAG)
            for item, mean, n in steering_candidates(conn, s, tenant, space, at)]


def rules_then_candidates(rules: Sequence[Item], found: Sequence[Entry]) -> list[Entry]:
    """Steering rules, then the candidates, then preference items (each most confident
    first)."""
    ordered = sorted(rules, key=lambda i: (i.kind != "steering_rule", -i.confidence))
    entries = [Entry(f"- [{i.kind}] {i.content}", i.item_id, i.confidence) for i in ordered]
    standing = sum(i.kind == "steering_rule" for i in ordered)
    return [*entries[:standing], *found, *entries[standing:]]
