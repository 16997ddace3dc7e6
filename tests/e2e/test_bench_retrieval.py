"""``memledger bench retrieval --json`` end to end, on a conversation and SituatedQA questions
small enough for CI (written here in the datasets' formats): it loads them through the public
API of a private server, asks every question, and reports metrics that can fail."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TOPICS = [
    ("Ann", "I adopted a kitten named Miso last weekend."),
    ("Bo", "Congratulations! I spent Saturday repairing my bicycle chain."),
    ("Ann", "My sister is moving to Lisbon for a new job."),
    ("Bo", "I have started learning to play the cello."),
    ("Ann", "The garden tomatoes finally turned red."),
    ("Bo", "Our team lost the volleyball final by two points."),
    ("Ann", "I baked sourdough bread with rye flour."),
    ("Bo", "My landlord raised the rent again."),
    # A phrasing the rules extractor reads as a fact about its speaker (``--forming``).
    ("Ann", "I always play tennis on Thursday evening."),
    ("Bo", "I joined a chess club downtown."),
    ("Ann", "The museum had a new exhibit on glass art."),
    ("Bo", "I booked a train trip to the mountains."),
    ("Ann", "Work has been quiet this month."),
    ("Bo", "I repainted the kitchen a pale green."),
]


def locomo(directory: Path) -> Path:
    turns = [{"speaker": s, "dia_id": f"D{1 + n // 7}:{1 + n % 7}", "text": t}
             for n, (s, t) in enumerate(TOPICS)]
    conversation = {
        "speaker_a": "Ann", "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": turns[:7],
        "session_2_date_time": "10:00 am on 9 June, 2023", "session_2": turns[7:]}
    questions = [
        {"question": "What kind of pet did Ann adopt?", "evidence": ["D1:1"], "category": 4},
        {"question": "Which instrument is Bo learning?", "evidence": ["D1:4"], "category": 4},
        {"question": "When does Ann play tennis?", "evidence": ["D2:2"], "category": 2},
        # Nothing in the conversation says so: the evidence cannot come first.
        {"question": "What colour was the ferry they took?", "evidence": ["D1:5", "D2:6"],
         "category": 1},
        {"question": "Is this unanswerable?", "evidence": [], "category": 5}]
    directory.mkdir()
    (directory / "locomo-dev.json").write_text(json.dumps(
        [{"sample_id": "conv-t", "conversation": conversation, "qa": questions}]))
    return directory


def situatedqa(directory: Path) -> Path:
    rows = [
        {"id": 1, "question": "who coached the city rowing team", "date": "2015",
         "edited_question": "who coached the city rowing team as of 2015", "answer": ["Ines"],
         "date_type": "start"},
        {"id": 1, "question": "who coached the city rowing team", "date": "2019",
         "edited_question": "who coached the city rowing team as of 2019", "answer": ["Tomas"],
         "date_type": "start"},
        {"id": 2, "question": "what is the tallest tower in the harbour", "date": "2018",
         "edited_question": "what is the tallest tower in the harbour as of 2018",
         "answer": ["Beacon Tower"], "date_type": "sampled_year"}]
    directory.mkdir()
    (directory / "qa_data_temp.dev.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return directory


def bench(*args: str) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, "-m", "memledger_cli", "bench", "retrieval", "--json", *args],
        capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    found: dict[str, Any] = json.loads(run.stdout)
    return found


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of every part: the questions are asked before the sessions end and memories
    form (``--forming``), so forming leaves the turn figures as a run without it has them."""
    root = tmp_path_factory.mktemp("bench")
    return bench("--data", str(locomo(root / "locomo")), "--forming",
                 "--situatedqa", str(situatedqa(root / "sqa")),
                 "--situatedqa-distractors", "50", "--clients", "2")


def test_every_question_of_categories_one_to_four_is_asked_of_the_loaded_turns(
        result: dict[str, Any]) -> None:
    assert result["questions"] == 4
    assert (result["conversations"], result["sessions"], result["turns"]) == (1, 2, 14)
    assert result["store"] in ("messages", "memories")


def test_the_metrics_are_shares_and_the_unanswerable_evidence_makes_them_fail(
        result: dict[str, Any]) -> None:
    metrics = {k: v for k, v in result.items() if k.startswith(("turn_", "session_",
                                                                "baseline_"))}
    assert metrics
    assert all(0.0 <= v <= 1.0 for v in metrics.values())
    assert result["turn_recall_any_at_10"] > 0
    assert result["turn_recall_all_at_5"] <= 0.75, "the ferry question's turns say nothing of it"
    assert result["single_hop_turn_mrr"] == 1.0, "a question in the turn's own words"


def test_the_baselines_and_latency_come_from_the_same_run(result: dict[str, Any]) -> None:
    for name in ("bm25", "dense", "rrf"):
        assert f"baseline_{name}_turn_recall_all_at_10" in result
        assert f"baseline_{name}_session_recall_all_at_5" in result
    for part in ("dense_only", "keyword_only"):
        assert 0.0 <= result[f"{part}_turn_recall_all_at_10"] <= 1.0
    assert 0 < result["search_p50_ms"] <= result["search_p99_ms"]


def test_situatedqa_is_asked_with_and_without_the_valid_time_filter(
        result: dict[str, Any]) -> None:
    assert result["situatedqa_questions"] == 2
    assert result["situatedqa_rows"] == 3
    assert result["situatedqa_as_of_accuracy"] == 1.0
    assert 0.0 <= result["situatedqa_as_of_accuracy_without_filter"] <= 1.0
    assert result["situatedqa_rows_changed"] == 1


def test_with_forming_what_was_formed_is_searched_beside_the_messages_and_scored_alike(
        result: dict[str, Any]) -> None:
    assert (result["forming_summaries"], result["forming_facts"]) == (2, 1)  # one a session
    for name in ("messages_only", "mixed", "derived_half", "sources_in_place"):
        for metric in ("turn_recall_all_at_10", "turn_mrr", "session_recall_all_at_5"):
            assert 0.0 <= result[f"forming_{name}_{metric}"] <= 1.0
    assert result["forming_mixed_turn_recall_all_at_5"] <= 0.75, "the ferry question"
    assert result["forming_mixed_temporal_turn_recall_all_at_10"] == 1.0, "the tennis turn"
    assert 0.0 < result["forming_top10_derived_share"] <= 1.0
