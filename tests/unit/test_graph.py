"""The graph's pure parts: the breadth-first walk over relations, and entity mentions folded
from extractions (one row per entity as written, a nameless row for an empty extraction)."""

from typing import Any

from memledger_platform.events import decode
from memledger_platform.readmodel.projection import Projection, name_key
from memledger_query.core.views import walk
from memledger_schemas.api.reads import Relation

ITEM = "0190a000-0000-7000-8000-0000000000a1"


def relation(number: int, source: str, target: str) -> Relation:
    return Relation(relation_id=f"r{number}", source_entity=source, relation_type="knows",
                    target_entity=target, confidence=1.0, status="active")


# alice - bob - carol - dave, and erin -> alice (pointing the other way)
CHAIN = [relation(1, "alice", "bob"), relation(2, "bob", "carol"),
         relation(3, "carol", "dave"), relation(4, "erin", "alice")]


asked: list[set[str]] = []
"""The sets of entities the walk asked ``touching`` about, in order."""


def touching(ids: set[str]) -> list[Relation]:
    """The fake of the relations query: those with either end in ``ids``."""
    asked.append(set(ids))
    return [r for r in CHAIN if r.source_entity in ids or r.target_entity in ids]


def test_one_step_reaches_the_entities_related_either_way() -> None:
    depths, walked = walk("alice", 1, touching)
    assert depths == {"alice": 0, "bob": 1, "erin": 1}
    assert [r.relation_id for r in walked] == ["r1", "r4"]


def test_two_steps_reach_the_neighbours_of_the_neighbours_at_depth_two() -> None:
    depths, walked = walk("alice", 2, touching)
    assert depths == {"alice": 0, "bob": 1, "erin": 1, "carol": 2}
    assert [r.relation_id for r in walked] == ["r1", "r2", "r4"]


def test_an_entity_keeps_the_depth_it_was_first_reached_at() -> None:
    triangle = [relation(1, "a", "b"), relation(2, "b", "c"), relation(3, "a", "c")]
    depths, walked = walk("a", 3, lambda ids: [
        r for r in triangle if {r.source_entity, r.target_entity} & ids])
    assert depths == {"a": 0, "b": 1, "c": 1}
    assert len(walked) == 3


def test_the_walk_asks_only_for_the_new_frontier_and_stops_when_it_is_empty() -> None:
    asked.clear()
    walk("dave", 3, touching)
    assert asked == [{"dave"}, {"carol"}, {"bob"}]
    asked.clear()
    depths, walked = walk("zed", 3, touching)
    assert (depths, walked, asked) == ({"zed": 0}, [], [{"zed"}])


# --- mentions -------------------------------------------------------------------------------

def extracted(position: int, entities: list[dict[str, str]], version: int = 1
              ) -> dict[str, Any]:
    return {"global_position": position, "recorded_at": "2025-01-10T09:00:00Z",
            "event_type": "memory.entities_extracted", "event_id": f"evt-{position}",
            "tenant_id": "acme", "space_id": "notes", "actor": "enricher",
            "payload": {"item_id": ITEM, "item_version": version, "extractor": "mentions/v1",
                        "entities": entities}}


def mentions(*documents: dict[str, Any]) -> list[tuple[Any, ...]]:
    projection = Projection()
    for document in documents:
        projection.apply(decode(document))
    return [(m["position"], m["item_version"], m["ordinal"], m["name"], m["name_key"],
             m["type"]) for m in projection.mentions]


def test_each_extracted_entity_becomes_a_mention_with_its_casefolded_key() -> None:
    found = mentions(extracted(1, [{"name": "Ada Lovelace", "type": "person"},
                                   {"name": "STRASSE", "type": "place"}]))
    assert found == [(1, 1, 0, "Ada Lovelace", "ada lovelace", "person"),
                     (1, 1, 1, "STRASSE", "strasse", "place")]


def test_an_extraction_that_found_nothing_keeps_one_nameless_row() -> None:
    found = mentions(extracted(1, [{"name": "Ada", "type": "person"}]),
                     extracted(2, [], version=2))
    assert found == [(1, 1, 0, "Ada", "ada", "person"), (2, 2, 0, None, None, None)]


def test_a_name_key_matches_across_case_and_the_german_sharp_s() -> None:
    assert name_key("Straße") == name_key("STRASSE") == "strasse"
