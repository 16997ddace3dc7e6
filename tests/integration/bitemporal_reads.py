"""Reading the query API back and comparing every answer with the point-wise model
(``bitemporal_oracle``): the attributes and status of an item as of (valid_at, position), the
rectangle it comes from, history versions tiling valid time, and the change feeds."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import httpx
import orjson

from memledger_platform.auth import TENANT_HEADER
from memledger_schemas.api.reads import Change, History, ItemAnswer, ItemList, Rectangle
from tests.integration.bitemporal_oracle import ATTRIBUTES, Oracle, Recorded, constant_over


@dataclass(frozen=True)
class ReadBack:
    """The query API as one tenant, in one space: every answer checked against ``oracle``."""

    http: httpx.AsyncClient
    tenant: str
    space: str
    oracle: Oracle

    async def get(self, path: str, **params: Any) -> httpx.Response:
        query = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in params.items()
                 if v is not None}
        return await self.http.get(path, params=query, headers={TENANT_HEADER: self.tenant})

    async def item(self, item: UUID, valid_at: datetime, position: int) -> str:
        """Read ``item``; return its status (``absent`` for a 404)."""
        response = await self.get(f"/v1/spaces/{self.space}/items/{item}", valid_at=valid_at,
                                  as_of_position=position)
        present = self.oracle.attrs_at(str(item), valid_at, position) is not None
        assert response.status_code == (200 if present else 404), response.text
        if not present:
            return "absent"
        answer = ItemAnswer.model_validate_json(response.content)
        assert (answer.basis.position, answer.basis.valid_at) == (position, valid_at)
        check_item(self.oracle, orjson.loads(answer.item.model_dump_json()), valid_at,
                   position)
        return answer.item.status

    async def listing(self, valid_at: datetime | None, position: int | None, *,
                      recorded_at: datetime | None = None, include_archived: bool = False
                      ) -> int:
        """A listing (at the latest position if neither ``position`` nor ``recorded_at``);
        return the position it was read at."""
        response = await self.get(f"/v1/spaces/{self.space}/items", valid_at=valid_at,
                                  as_of_position=position, recorded_at=recorded_at,
                                  include_archived=str(include_archived).lower())
        assert response.status_code == 200, response.text
        answer = ItemList.model_validate_json(response.content)
        at, valid = answer.basis.position, answer.basis.valid_at
        expected = self.oracle.listed(valid, at, include_archived)
        assert [i.item_id for i in answer.items] == sorted(expected)
        for found in answer.items:
            check_item(self.oracle, orjson.loads(found.model_dump_json()), valid, at)
        return at

    async def history(self, item: UUID, position: int) -> None:
        """History as of ``position``: the item's changes up to it, and the versions known
        then, which at every position up to it tile valid time exactly as the model says."""
        response = await self.get(f"/v1/spaces/{self.space}/items/{item}/history",
                                  as_of_position=position)
        if str(item) not in self.oracle.status:
            assert response.status_code == 404, response.text
            return
        assert response.status_code == 200, response.text
        history = History.model_validate_json(response.content)
        assert history.basis.position == position
        check_changes(history.changes, self.oracle.of(str(item), position))
        for q in {position, *(e.position for e in self.oracle.of(str(item), position))}:
            check_tiling(self.oracle, str(item), history.versions, q)

    async def feed(self, path: str, limit: int, since: datetime | None) -> None:
        """The whole change feed, page by page from its cursors, then an empty page."""
        found: list[Change] = []
        cursor = None
        while True:
            response = await self.get(path, after=cursor, limit=limit, since=since)
            assert response.status_code == 200, response.text
            page = response.json()
            found += [Change.model_validate(change) for change in page["changes"]]
            cursor = page["next_cursor"]
            if not page["changes"]:
                break
            assert len(page["changes"]) <= limit
        check_changes(found, self.oracle.changes(since=since))


def check_item(oracle: Oracle, answer: dict[str, Any], valid_at: datetime, position: int
               ) -> None:
    """An item as read at (``valid_at``, ``position``): the model's attributes and status,
    on a rectangle over which the model's answer is the same, known since a position from
    which the model's answer at ``valid_at`` has not changed."""
    item = answer["item_id"]
    expected = oracle.attrs_at(item, valid_at, position)
    assert expected is not None, f"{item} shown at {valid_at} as of {position}"
    assert answer["status"] == oracle.status_at(item, position)
    assert {k: answer[k] for k in ATTRIBUTES} == expected
    start = datetime.fromisoformat(answer["valid_from"])
    end = answer["valid_to"] and datetime.fromisoformat(answer["valid_to"])
    assert start <= valid_at
    assert end is None or valid_at < end
    for t in constant_over(oracle, start, end):
        assert oracle.attrs_at(item, t, position) == expected, f"not constant at {t}"
    since = answer["known_since_position"]
    positions = [e.position for e in oracle.of(item, position)]
    assert since in positions
    for p in (p for p in positions if p >= since):
        assert oracle.attrs_at(item, valid_at, p) == expected, f"changed at {p}"


def check_changes(found: list[Change], expected: list[Recorded]) -> None:
    assert [(f.position, f.recorded_at, f.event_type, f.subject, f.reason, f.valid_from,
             f.valid_to) for f in found] == [
        (e.position, e.recorded_at, e.planned.event_type, e.planned.subject,
         e.planned.reason, e.planned.valid_from, e.planned.valid_to) for e in expected]


def check_tiling(oracle: Oracle, item: str, versions: list[Rectangle], position: int) -> None:
    """The versions known at ``position`` hold the model's answer at every instant the model
    tells apart, and none holds where the item was not true."""
    known = [v for v in versions
             if v.sys_from <= position and (v.sys_to is None or position < v.sys_to)]
    for t in oracle.probes():
        holding = [v for v in known if v.valid_from <= t and (
            v.valid_to is None or t < v.valid_to)]
        expected = oracle.attrs_at(item, t, position)
        assert len(holding) == (expected is not None), (t, position, holding, expected)
        if expected is not None:
            assert {k: holding[0].attrs.get(k) for k in ATTRIBUTES} == expected, (t, position)
