"""The metrics of bench retrieval, the LoCoMo parsing and the baselines: pure, checked on
rankings small enough to work out by hand."""

import math
from datetime import UTC, datetime

import pytest

from memledger_cli.bench import baselines, conversations, locomo, recall
from memledger_cli.bench import situatedqa as sqa
from memledger_platform.embedding.embedder import HashingEmbedder


def test_recall_all_counts_a_question_only_when_every_evidence_turn_is_in_the_top_k() -> None:
    ranking = ["a", "b", "c", "d"]
    assert recall.recall_all(ranking, ["a", "c"], 3) == 1.0
    assert recall.recall_all(ranking, ["a", "d"], 3) == 0.0
    assert recall.recall_all(ranking, [], 3) == 0.0


def test_recall_any_counts_a_question_when_one_evidence_turn_is_in_the_top_k() -> None:
    assert recall.recall_any(["a", "b", "c"], ["c", "z"], 3) == 1.0
    assert recall.recall_any(["a", "b", "c"], ["c", "z"], 2) == 0.0


def test_mrr_is_one_over_the_rank_of_the_first_evidence_turn_and_zero_if_none() -> None:
    assert recall.mrr(["a", "b", "c"], ["c", "b"]) == 0.5
    assert recall.mrr(["a", "b"], ["z"]) == 0.0


def test_ndcg_is_one_for_evidence_on_top_and_less_when_it_is_lower() -> None:
    assert recall.ndcg(["a", "b", "c"], ["a", "b"], 10) == 1.0
    lower = recall.ndcg(["x", "a", "b"], ["a", "b"], 10)
    expected = (1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert lower == pytest.approx(expected)
    assert recall.ndcg(["x", "y"], ["a"], 10) == 0.0


def test_sessions_are_ranked_by_their_best_turn() -> None:
    session_of = {"a1": "A", "a2": "A", "b1": "B", "c1": "C"}
    assert recall.sessions_ranked(["a2", "b1", "a1", "zz", "c1"], session_of) == ["A", "B", "C"]


def test_session_recall_needs_every_evidence_session_in_the_top_five() -> None:
    session_of = {f"t{n}": f"S{n}" for n in range(8)}
    ranking = [f"t{n}" for n in range(8)]
    assert recall.score(ranking, ["t1", "t4"], session_of, "x").values[
        "session_recall_all_at_5"] == 1.0
    assert recall.score(ranking, ["t1", "t5"], session_of, "x").values[
        "session_recall_all_at_5"] == 0.0


def test_rrf_rewards_agreement_between_rankings() -> None:
    fused = recall.rrf([["a", "b", "c"], ["b", "c", "a"]], k=60)
    assert fused[0] == "b"  # 1/62 + 1/61 beats a's 1/61 + 1/63
    assert set(fused) == {"a", "b", "c"}
    assert recall.rrf([["a"], ["b"]], k=60) == ["a", "b"]  # a tie keeps the first seen first


def test_summary_gives_means_overall_and_per_category_with_a_prefix() -> None:
    scored = [recall.Scored("temporal", {"recall_all_at_10": 1.0, "session_recall_all_at_5": 1.0}),
              recall.Scored("single_hop", {"recall_all_at_10": 0.0,
                                           "session_recall_all_at_5": 1.0})]
    out = recall.summary(scored, prefix="baseline_bm25_")
    assert out["baseline_bm25_turn_recall_all_at_10"] == 0.5
    assert out["baseline_bm25_session_recall_all_at_5"] == 1.0
    assert out["baseline_bm25_temporal_turn_recall_all_at_10"] == 1.0
    assert out["baseline_bm25_single_hop_turn_recall_all_at_10"] == 0.0


RAW = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
                      {"speaker": "Bo", "dia_id": "D1:2", "text": "Look!",
                       "blip_caption": "a photo of a lake"}],
        "session_2_date_time": "10:00 am on 9 June, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "I ran a race."}]},
    "qa": [{"question": "What did Ann adopt?", "evidence": ["D1:1"], "category": 4},
           {"question": "Unanswerable?", "evidence": ["D1:1"], "category": 5},
           {"question": "What did both do?", "evidence": ["D1:1; D2:1"], "category": 1},
           {"question": "Ghost?", "evidence": ["D9:9"], "category": 2}]}


def test_a_locomo_conversation_keeps_its_sessions_dates_captions_and_askable_questions() -> None:
    talk = locomo.conversation_of(RAW)
    assert [s.said_at for s in talk.sessions] == [datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
                                                  datetime(2023, 6, 9, 10, 0, tzinfo=UTC)]
    assert talk.turns[1].text == "Look! [shares image: a photo of a lake]"
    assert [(q.question, q.evidence) for q in talk.questions] == [
        ("What did Ann adopt?", ("D1:1",)), ("What did both do?", ("D1:1", "D2:1"))]
    assert talk.asked_at == datetime(2023, 6, 10, tzinfo=UTC)


def test_a_slice_of_sessions_keeps_only_the_questions_answered_inside_it() -> None:
    talk = locomo.conversation_of(RAW, sessions=1)
    assert [q.evidence for q in talk.questions] == [("D1:1",), ("D1:1",)]
    assert len(locomo.conversation_of(RAW, limit=1).questions) == 1


def test_turns_are_loaded_as_messages_said_at_their_sessions_date_or_as_memories() -> None:
    talk = locomo.conversation_of(RAW)
    sent = conversations.commands(talk, "messages")
    assert [c["command"] for c in sent] == ["create_space", "start_session", "append_message",
                                            "append_message", "start_session",
                                            "append_message"]
    assert sent[2]["said_at"] == "2023-05-08T13:56:00+00:00"
    assert sent[2]["participant"] == "Ann"
    assert sent[2]["content"] == "I adopted a cat."
    memories = conversations.commands(talk, "memories")
    assert memories[1]["content"] == "Ann: I adopted a cat."
    assert memories[1]["valid_from"] == "2023-05-08T13:56:00+00:00"


def test_hits_are_mapped_to_turns_by_the_ids_the_writes_returned() -> None:
    talk = locomo.conversation_of(RAW)
    sent = conversations.commands(talk, "memories")
    results = [{"ids": {"space_id": "s"}}] + [{"ids": {"item_id": f"i{n}"}} for n in range(3)]
    assert conversations.turns_written(talk, sent, results) == {
        "i0": "D1:1", "i1": "D1:2", "i2": "D2:1"}


def test_the_bm25_baseline_ranks_documents_sharing_the_query_words_and_nothing_else() -> None:
    corpus = baselines.Corpus(["a", "b", "c"], ["Ann: I adopted a cat", "Bo: I ran a race",
                                                "Bo: the race was long and the cats slept"])
    bm25 = baselines.Bm25(corpus)
    assert bm25.rank("who ran the race?")[0] == "b"
    assert set(bm25.rank("cats")) == {"a", "c"}  # stemmed: cat, cats
    assert bm25.rank("zebra") == []


def test_the_baselines_rank_every_question_and_fuse_the_two() -> None:
    corpus = baselines.Corpus(["a", "b"], ["Ann adopted a cat", "Bo ran a race"])
    found = baselines.rankings(corpus, ["cat adopted", "race"], HashingEmbedder())
    assert found["bm25"] == [["a"], ["b"]]
    assert [len(r) for r in found["dense"]] == [2, 2]
    assert found["rrf"][0][0] == "a"


def test_a_situatedqa_answer_is_stored_as_a_statement_not_as_its_question() -> None:
    assert sqa.statement("who won the world cup?", "France") == "won the world cup: France"
    assert sqa.statement("when did england last reach a semi final", "2018") == (
        "england last reach a semi final: 2018")
