"""LoCoMo (the development split) as conversations to load and questions to ask: pure parsing
for ``bench retrieval``.

The file is a list of conversations, each with two speakers, sessions ``session_<n>`` (lists
of turns ``{speaker, dia_id, text, [blip_caption]}``) dated by ``session_<n>_date_time``
("1:56 pm on 8 May, 2023") and questions ``qa`` (``question``, ``evidence`` as dia ids,
``category``). Categories 1-4 are asked (1 multi-hop, 2 temporal, 3 open-domain, 4
single-hop); category 5 (adversarial, unanswerable) has no evidence to find. A turn that
shares an image says so in its text, as ``[shares image: <caption>]``.

The data is read from where it lies (``--data``, ``$MEMLEDGER_BENCH_LOCOMO`` or
``../shared/data/locomo-dev`` beside the repository), never copied.
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from memledger_cli.bench.datasets import located

FILE = "locomo-dev.json"
ENV = "MEMLEDGER_BENCH_LOCOMO"
CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop"}
_SESSION = re.compile(r"session_(\d+)")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    """What was said, with a shared image's caption appended."""
    session: int


@dataclass(frozen=True)
class Session:
    number: int
    said_at: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    question: str
    evidence: tuple[str, ...]
    """The dia ids of the turns that answer it (those the conversation has)."""
    category: int


@dataclass(frozen=True)
class Conversation:
    name: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]

    @property
    def asked_at(self) -> datetime:
        """When its questions are asked: the day after its last session."""
        return max(s.said_at for s in self.sessions).replace(hour=0, minute=0) + _DAY


_DAY = datetime(1970, 1, 2, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)


def data_dir(option: str | None) -> Path:
    """The data directory: the option, else ``$MEMLEDGER_BENCH_LOCOMO``, else
    ``../shared/data/locomo-dev`` beside the repository."""
    return located(option, ENV, "locomo-dev", FILE, "--data")


def parse_said_at(text: str) -> datetime:
    """A session's date, "1:56 pm on 8 May, 2023", as a UTC instant."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def turn_text(raw: dict[str, Any]) -> str:
    caption = raw.get("blip_caption")
    text = str(raw.get("text", "")).strip()
    return f"{text} [shares image: {caption}]" if caption else text


def conversation_of(raw: dict[str, Any], *, sessions: int | None = None,
                    limit: int | None = None) -> Conversation:
    """One conversation: its first ``sessions`` sessions, and at most ``limit`` of its questions
    of categories 1-4 whose evidence lies in those sessions (evidence naming no turn of the
    conversation, an error in the data, is left out)."""
    talk = raw["conversation"]
    numbers = sorted(int(m.group(1)) for key in talk
                     if (m := _SESSION.fullmatch(key)) is not None)[:sessions]
    parsed = tuple(Session(n, parse_said_at(talk[f"session_{n}_date_time"]),
                           tuple(Turn(str(t["dia_id"]), str(t["speaker"]), turn_text(t), n)
                                 for t in talk[f"session_{n}"]))
                   for n in numbers)
    known = {t.dia_id for s in parsed for t in s.turns}
    asked = []
    for qa in raw["qa"]:
        evidence = tuple(e for e in _dia_ids(qa.get("evidence", [])) if e in known)
        if qa.get("category") in CATEGORIES and evidence:
            asked.append(Question(str(qa["question"]), evidence, int(qa["category"])))
    return Conversation(str(raw.get("sample_id", "")), parsed, tuple(asked[:limit]))


def _dia_ids(evidence: list[str]) -> list[str]:
    # A few entries hold several ids ("D8:6; D9:17"): split them.
    return [part.strip() for e in evidence for part in re.split(r"[;,]", str(e)) if part.strip()]


def conversations(path: Path, *, count: int | None = None, sessions: int | None = None,
                  limit: int | None = None) -> list[Conversation]:
    """The first ``count`` conversations of the file (see ``conversation_of``)."""
    raw = orjson.loads((path / FILE).read_bytes())
    return [conversation_of(c, sessions=sessions, limit=limit) for c in raw[:count]]
