"""``memledger bench retrieval``: does search find what a conversation said, better than what
a user could build in an afternoon? And what does the valid-time filter add?

LoCoMo (``locomo``, the development split): each conversation is loaded into a private server
through the public API (``conversations``), then every question of categories 1-4 is asked
with ``POST /v1/search`` and scored on the turns that answer it (``recall``): overall and per
category, at turn level (``turn_recall_all_at_5``, ``turn_recall_all_at_10``,
``turn_recall_any_at_10``, ``turn_mrr``, ``turn_ndcg_at_10``) and at session level
(``session_recall_all_at_5``, sessions ranked by their best turn), with the latency of the
searches (``search_p50_ms``, ``search_p99_ms``, one at a time). Beside it, in the same run: the
same metrics of baselines computed in this process over the same turns (``baselines``:
``baseline_bm25_*``, ``baseline_dense_*`` and ``baseline_rrf_*``), and memledger's own search
with one signal alone (``dense_only_*``, ``keyword_only_*``), which its fusion must beat.

With ``--forming`` (``formed``), every session is then ended and the questions asked again,
once of the messages alone and once of messages and the memories the enricher formed from
them (``forming_*``), each hit credited with the turns it brings back (``credit``).

SituatedQA (``situated``): accuracy of the answer that held at a date, with and without the
valid-time filter (``situatedqa_*``). It is loaded after LoCoMo's questions are asked, so its
statements do not change their keyword statistics.

The data is read from where it lies (``--data``, ``--situatedqa``, or their environment
variables, else ``../shared/data/`` beside the repository), never copied.
"""

import argparse
import os
from typing import Any

import aiohttp

from memledger_cli.bench import baselines, conversations, formed, locomo, recall, situated
from memledger_cli.bench import situatedqa as sqa
from memledger_cli.bench.common import Scenario, Steps, measured, percentile, private_server
from memledger_cli.bench.settle import settled

PARTS = {"dense_only": {"dense": 1, "keyword": 0}, "keyword_only": {"dense": 0, "keyword": 1}}
"""memledger's search with one signal alone, beside the fused default (same server, same
run): fusion must beat its best part."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=None,
                        help=f"directory of {locomo.FILE} (default: ${locomo.ENV}, else "
                        "../shared/data/locomo-dev beside the repository)")
    parser.add_argument("--conversations", type=_count, default=None,
                        help="only the first N conversations (default: all)")
    parser.add_argument("--sessions", type=_count, default=None,
                        help="only the first N sessions of each conversation (default: all)")
    parser.add_argument("--limit", type=_count, default=None,
                        help="at most N questions per conversation (default: all)")
    parser.add_argument("--store", choices=("auto", "messages", "memories"), default="auto",
                        help="turns as messages, or as memories (auto: messages if the "
                        "server searches them)")
    parser.add_argument("--forming", action="store_true",
                        help="then end every session and ask again, of the messages alone "
                        "and of messages and the memories formed from them (forming_*)")
    parser.add_argument("--situatedqa", default=None,
                        help=f"directory of {sqa.FILE} (default: ${sqa.ENV}, else "
                        "../shared/data/situatedqa beside the repository)")
    parser.add_argument("--situatedqa-limit", type=int, default=None,
                        help="only the first N SituatedQA questions (0: skip that part; "
                        "default: all)")
    parser.add_argument("--situatedqa-distractors", type=int, default=situated.DISTRACTORS,
                        help="unrelated statements stored beside the answers")
    parser.add_argument("--clients", type=_count, default=4,
                        help="concurrent searches of the SituatedQA part")


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    talks = locomo.conversations(locomo.data_dir(args.data), count=args.conversations,
                                 sessions=args.sessions, limit=args.limit)
    sqa_dir = sqa.data_dir(args.situatedqa) if args.situatedqa_limit != 0 else None
    with Steps(total=6 if args.forming else 5) as steps, \
            private_server({"MEMLEDGER_EMBEDDER": "local"}) as server:
        async with aiohttp.ClientSession(server.url) as http:
            store = await conversations.store_of(http, args.store)
            if args.forming and store != "messages":
                raise SystemExit("bench retrieval: --forming needs the turns as messages "
                                 "(--store messages), which are what memories form from")
            steps.step(f"loading {sum(len(t.turns) for t in talks)} turns as {store}")
            loaded = await conversations.load_all(http, server.nats_url, talks, store)
            await settled(http)
            steps.step(f"asking {sum(len(t.questions) for t in talks)} questions")
            asked = await conversations.ask_all(http, loaded)
            parts = {name: await conversations.ask_all(http, loaded, {"weights": weights})
                     for name, weights in PARTS.items()}
            forming: dict[str, Any] = {}
            if args.forming:
                steps.step("ending sessions, forming memories, asking again")
                forming = await formed.measure(http, loaded)
            steps.step("SituatedQA")
            timeline = {} if sqa_dir is None else await situated.measure(
                http, server.nats_url, sqa_dir, args.situatedqa_limit, args.clients,
                args.situatedqa_distractors)
    steps.step("baselines")
    return {"scenario": "retrieval", "dataset": f"LoCoMo dev ({locomo.FILE})", "store": store,
            "conversations": len(talks), "sessions": sum(len(t.sessions) for t in talks),
            "turns": sum(len(t.turns) for t in talks), "questions": len(asked),
            "k": conversations.K, "model": "local (all-MiniLM-L6-v2)",
            **_scored(talks, asked), **_parts(talks, parts), **_latency(asked),
            **_anchored(talks, asked), **forming,
            **timeline,
            "cpus": os.cpu_count()}


def _scored(talks: list[locomo.Conversation], asked: list[conversations.Asked]
            ) -> dict[str, float]:
    """memledger's metrics, then each baseline's (``baseline_<name>_…``)."""
    out = recall.summary(_scores(talks, [a.ranking for a in asked]))
    for name, ranked in _baselines(talks).items():
        out.update(recall.summary(_scores(talks, ranked), prefix=f"baseline_{name}_"))
    return out


def _parts(talks: list[locomo.Conversation], parts: dict[str, list[conversations.Asked]]
           ) -> dict[str, float]:
    """memledger's overall metrics with one signal alone (``<part>_…``)."""
    out: dict[str, float] = {}
    for name, asked in parts.items():
        found = recall.summary(_scores(talks, [a.ranking for a in asked]), prefix=f"{name}_")
        out.update({k: v for k, v in found.items()
                    if k.removeprefix(f"{name}_").startswith(("turn_", "session_"))})
    return out


def _scores(talks: list[locomo.Conversation], rankings: list[list[str]]
            ) -> list[recall.Scored]:
    questions = [(t, q) for t in talks for q in t.questions]
    return [recall.score(ranking, q.evidence, {x.dia_id: str(x.session) for x in t.turns},
                         locomo.CATEGORIES[q.category])
            for (t, q), ranking in zip(questions, rankings, strict=True)]


def _baselines(talks: list[locomo.Conversation]) -> dict[str, list[list[str]]]:
    """Each baseline's rankings, question by question in the order they were asked (each
    conversation its own corpus)."""
    from memledger_platform.embedding.embedder import LocalMiniLmEmbedder

    embedder = LocalMiniLmEmbedder()
    found: dict[str, list[list[str]]] = {}
    for talk in talks:
        corpus = baselines.Corpus([t.dia_id for t in talk.turns],
                                  [conversations.document(t) for t in talk.turns])
        ranked = baselines.rankings(corpus, [q.question for q in talk.questions], embedder)
        for name, lists in ranked.items():
            found.setdefault(name, []).extend(lists)
    return found


def _anchored(talks: list[locomo.Conversation], asked: list[conversations.Asked]
              ) -> dict[str, int]:
    """How many questions an event-relative expression ("after the accident") lifted hits
    for, through its anchor event: overall (``anchored_questions``) and per category."""
    categories = [locomo.CATEGORIES[q.category] for t in talks for q in t.questions]
    out = {"anchored_questions": sum(a.anchored for a in asked)}
    for category in sorted(set(categories)):
        out[f"{category}_anchored_questions"] = sum(
            a.anchored for a, c in zip(asked, categories, strict=True) if c == category)
    return out


def _latency(asked: list[conversations.Asked]) -> dict[str, float]:
    ms = [a.ms for a in asked]
    return {"search_p50_ms": round(percentile(ms, 50), 2),
            "search_p99_ms": round(percentile(ms, 99), 2)}


SCENARIO = Scenario("retrieval", "recall of conversation turns on LoCoMo against BM25, dense "
                    "and fused baselines; SituatedQA as-of accuracy with and without the "
                    "valid-time filter", add_arguments, measured(_measure))
