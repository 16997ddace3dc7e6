"""The MCP tools that write memory items (remember, revise, retract, promote, forget,
feedback, prune) and recall's retrieval id, through the SDK's in-process client over the fake
HTTP API (``mcp_fake``): what each sends, what it answers, and how it refuses."""

import json

import pytest

from tests.unit.mcp_fake import FakeMemledger, call, connected, refused

ALICE = {"subject": "alice", "predicate": "works_at", "object": "acme"}
SESSION = "0190a000-0000-7000-8000-0000000005e5"


@pytest.fixture
def fake() -> FakeMemledger:
    return FakeMemledger()


async def test_remember_sends_the_triple_the_valid_time_and_the_session_with_the_agent(
        fake: FakeMemledger) -> None:
    async with connected(fake, agent="helper") as session:
        await call(session, "remember", content="Alice works at Acme", triple=ALICE,
                   valid_from="2020-01-01T00:00:00Z", valid_to="2022-01-01T00:00:00+01:00",
                   session_id=SESSION, importance=0.9)
    body = fake.body("/v1/spaces/agent/memories")
    assert body["triple"] == ALICE
    assert (body["valid_from"], body["valid_to"]) == ("2020-01-01T00:00:00Z",
                                                      "2021-12-31T23:00:00Z")
    assert (body["session_id"], body["agent_id"], body["importance"]) == (
        SESSION, "helper", 0.9)


async def test_remember_says_which_item_a_new_object_for_the_same_slot_replaced(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        acme = await call(session, "remember", content="Alice works at Acme", triple=ALICE)
        globex = await call(session, "remember", content="Alice works at Globex",
                            triple={**ALICE, "object": "globex"})
    assert acme["superseded"] is None
    assert globex["superseded"] == acme["item_id"]


async def test_remember_refuses_a_triple_without_its_object_naming_it(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        error = await refused(session, "remember", content="x",
                              triple={"subject": "alice", "predicate": "works_at"})
    assert error.startswith("Invalid arguments for remember: triple.object: required.")
    assert fake.requests == []


async def test_revise_corrects_a_period_with_its_reason(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        item = (await call(session, "remember", content="Alice works at Acme"))["item_id"]
        revised = await call(session, "revise", item_id=item, content="Alice worked at Acme",
                             valid_from="2020-01-01T00:00:00Z",
                             valid_to="2021-01-01T00:00:00Z", reason="she told us")
    assert revised == {"item_id": item, "position": 3}
    body = fake.body(f"/v1/spaces/agent/memories/{item}/revise")
    assert (body["content"], body["reason"], body["valid_to"]) == (
        "Alice worked at Acme", "she told us", "2021-01-01T00:00:00Z")


async def test_revise_without_a_change_names_what_it_needs(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        error = await refused(session, "revise", item_id=SESSION, reason="no change")
    assert error == ("Invalid arguments for revise: a revision must change at least one of "
                     "content, triple, confidence, importance, tags. Fix these arguments and "
                     "call it again.")
    assert fake.requests == []


async def test_retract_promote_and_forget_act_on_one_item_and_say_its_position(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        item = (await call(session, "remember", content="Deploys on Fridays",
                           session_id=SESSION))["item_id"]
        promoted = await call(session, "promote", item_id=item, layer="ecosystem")
        retracted = await call(session, "retract", item_id=item,
                               valid_until="2026-01-01T00:00:00Z", reason="policy changed")
        again = await refused(session, "forget", item_id=item)
    assert [promoted["position"], retracted["position"]] == [3, 4]
    assert fake.body(f"/v1/spaces/agent/memories/{item}/promote")["layer"] == "ecosystem"
    assert fake.body(f"/v1/spaces/agent/memories/{item}/retract")["valid_until"] == (
        "2026-01-01T00:00:00Z")
    assert again.startswith(f"memory item '{item}' is retracted (conflict). The item "
                            "changed meanwhile or is no longer active")


async def test_recall_is_audited_by_default_and_answers_with_its_retrieval_id(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        await call(session, "remember", content="The billing service ships on Fridays")
        audited = await call(session, "recall", query="billing", agent_id="helper",
                             recorded_at="2026-01-01T00:00:00Z")
        plain = await call(session, "recall", query="billing", audit=False)
    assert audited["retrieval_id"] is not None
    assert plain["retrieval_id"] is None
    bodies = [json.loads(r.content) for r in fake.sent("/v1/search")]
    assert [b.get("audit") for b in bodies] == [True, False]
    assert (bodies[0]["agent_id"], bodies[0]["recorded_at"]) == (
        "helper", "2026-01-01T00:00:00Z")


async def test_recall_answers_unaudited_where_memledger_cannot_record_the_retrieval(
        fake: FakeMemledger) -> None:
    fake.audit_fails = True
    async with connected(fake) as session:
        item = (await call(session, "remember", content="billing ships Fridays"))["item_id"]
        found = await call(session, "recall", query="billing")
    assert [h["item_id"] for h in found["hits"]] == [item]
    assert found["retrieval_id"] is None
    assert [json.loads(r.content)["audit"] for r in fake.sent("/v1/search")] == [True, False]


async def test_recall_tells_the_model_when_keywords_alone_ranked_it(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        await call(session, "remember", content="billing ships Fridays")
        whole = await call(session, "recall", query="billing")
        fake.embedder_down = True
        degraded = await call(session, "recall", query="billing")
    assert (whole["degraded"], degraded["degraded"]) == ([], ["embedder"])
    assert [h["content"] for h in degraded["hits"]] == ["billing ships Fridays"]


async def test_feedback_records_one_signal_per_item_in_one_batch_with_the_retrieval(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        first = (await call(session, "remember", content="billing ships Fridays"))["item_id"]
        second = (await call(session, "remember", content="billing needs review"))["item_id"]
        found = await call(session, "recall", query="billing")
        used = await call(session, "feedback", item_ids=[first, second], signal="used",
                          retrieval_id=found["retrieval_id"])
        rated = await call(session, "feedback", item_ids=[first], signal="rating", rating=5)
    commands = [c for r in fake.sent("/v1/batch") for c in json.loads(r.content)["commands"]]
    assert [(c["item_id"], c["signal"]) for c in commands] == [
        (first, "used"), (second, "used"), (first, "rating")]
    assert commands[0]["retrieval_id"] == found["retrieval_id"]
    assert used["recorded"] == 2
    assert rated["recorded"] == 1


async def test_feedback_refusals_say_which_argument_and_what_next(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        no_rating = await refused(session, "feedback", item_ids=[SESSION], signal="rating")
        bad_id = await refused(session, "feedback", item_ids=[SESSION, "x"], signal="used")
        unknown = await refused(session, "feedback", item_ids=[SESSION], signal="used")
    assert no_rating.startswith("Invalid arguments for feedback: rating (1-5) is required "
                                "with signal 'rating' and only with it.")
    assert bad_id.startswith("Invalid arguments for feedback: item_ids.1: Input should be a "
                             "valid UUID")
    assert unknown.startswith(f"memory item '{SESSION}' not found (not_found). Check the id")


async def test_prune_lists_first_and_archives_only_when_told(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        for n in range(3):
            await call(session, "remember", content=f"note {n}", kind="observation",
                       importance=0.1 * n)
        await call(session, "remember", content="a fact", kind="fact")
        dry = await call(session, "prune", kinds=["observation"], importance_below=0.15)
        archived_before = fake.sent("/v1/batch")
        done = await call(session, "prune", kinds=["observation"], importance_below=0.15,
                          dry_run=False)
        left = await call(session, "what_was_true")
    assert [m["content"] for m in dry["matched"]] == ["note 0", "note 1"]
    assert (dry["dry_run"], dry["archived"], dry["position"], dry["more"]) == (
        True, [], None, False)
    assert archived_before == []
    assert done["archived"] == [m["item_id"] for m in dry["matched"]]
    assert done["reason"] == "pruned by agent (kinds=observation; importance_below=0.15)"
    assert [i["content"] for i in left["items"]] == ["note 2", "a fact"]


async def test_prune_takes_at_most_limit_and_says_there_is_more(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        for n in range(3):
            await call(session, "remember", content=f"note {n}", kind="observation")
        first = await call(session, "prune", kinds=["observation"], limit=2, dry_run=False,
                           reason="tidying up")
        rest = await call(session, "prune", kinds=["observation"], limit=2, dry_run=False)
    assert (len(first["archived"]), first["more"]) == (2, True)
    assert first["reason"] == "pruned by agent: tidying up"
    assert (len(rest["archived"]), rest["more"]) == (1, False)


async def test_prune_without_criteria_is_refused_naming_them(fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        await call(session, "remember", content="keep me")
        error = await refused(session, "prune", dry_run=False)
    assert error.startswith("Invalid arguments for prune: name what to prune with at least "
                            "one of kinds, tags, session_id, agent_id, subject, predicate, "
                            "valid_before, importance_below, confidence_below")
    assert fake.sent("/v1/batch") == []


async def test_profile_shows_what_is_believed_about_a_subject_and_not_what_was_replaced(
        fake: FakeMemledger) -> None:
    async with connected(fake) as session:
        await call(session, "remember", content="Alice works at Acme", triple=ALICE)
        await call(session, "remember", content="Alice works at Globex",
                   triple={**ALICE, "object": "globex"})
        await call(session, "remember", content="Bob likes tea", kind="preference",
                   triple={"subject": "Bob", "predicate": "likes", "object": "tea"})
        found = await call(session, "profile", subject="alice")
    assert found["subject"] == "alice"
    assert [f["content"] for f in found["facts"]] == ["Alice works at Globex"]


async def test_themes_lists_the_spaces_themes_and_recall_can_keep_to_one(
        fake: FakeMemledger) -> None:
    theme = "0190a000-0000-7000-8000-00000000aaaa"
    async with connected(fake) as session:
        await call(session, "remember", content="tomatoes need sun")
        fake.theme_list = [{"theme_id": theme, "label": "garden · tomato", "size": 2,
                            "members": [], "threshold": 0.8, "policy_version": 1,
                            "formed_position": 3, "updated_position": 3,
                            "updated_at": "2026-01-01T00:00:00Z"}]
        listed = await call(session, "themes")
        await call(session, "recall", query="sun", theme=theme)
    assert [t["label"] for t in listed["themes"]] == ["garden · tomato"]
    assert json.loads(fake.sent("/v1/search")[-1].content)["theme"] == theme
