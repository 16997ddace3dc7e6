"""SituatedQA (temporal) as answer timelines: pure parsing for ``bench retrieval``.

Each row asks a question as of a date and gives the gold answers then. A question's rows,
sorted by date, make its timeline: an answer holds from the earliest date it is given until
the date a different answer is first given (the last answer holds on, open-ended). An answer
that comes back after another makes a segment of its own. Answers are compared normalised
(Unicode NFKC, case-folded, whitespace collapsed); a row continues the current segment when
it shares any gold answer with it.
"""

import re
import unicodedata
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from memledger_cli.bench.datasets import located

FILE = "qa_data_temp.dev.jsonl"
ENV = "MEMLEDGER_BENCH_SITUATEDQA"


@dataclass(frozen=True)
class Row:
    question_id: str
    question: str
    at: datetime
    answers: frozenset[str]
    """Normalised gold answers as of ``at``."""
    start: bool
    """The row gives the date an answer started (``date_type == "start"``)."""
    shown: str
    """The first gold answer as written (spacing normalised)."""
    asked: str = ""
    """The question as the data rephrases it for its date ("... as of 2019"), if it does."""


@dataclass
class Segment:
    valid_from: datetime
    shown: str
    """The answer as first written (what the memory says)."""
    answers: set[str] = field(default_factory=set)
    valid_to: datetime | None = None


def data_dir(option: str | None) -> Path:
    """The data directory: the option, else ``$MEMLEDGER_BENCH_SITUATEDQA``, else
    ``../shared/data/situatedqa`` beside the repository."""
    return located(option, ENV, "situatedqa", FILE, "--situatedqa")


def normalise(answer: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", answer)).strip().casefold()


def parse_date(text: str) -> datetime | None:
    """A year ("2019", as 1 January) or a full date ("December 13, 1999"), UTC; else None."""
    for pattern in ("%Y", "%B %d, %Y", "%b %d, %Y", "%Y-%m-%d"):
        try:
            return datetime.strptime(text.strip(), pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def row_of(raw: dict[str, Any]) -> Row | None:
    at = parse_date(str(raw["date"]))
    answers = frozenset(normalise(a) for a in raw["answer"] if a.strip())
    if at is None or not answers:
        return None
    shown = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", raw["answer"][0])).strip()
    return Row(str(raw["id"]), raw["question"], at, answers, raw.get("date_type") == "start",
               shown, str(raw.get("edited_question") or ""))


def questions(path: Path, limit: int | None = None) -> dict[str, list[Row]]:
    """Rows by question id, in file order of first appearance (the first ``limit``)."""
    grouped: defaultdict[str, list[Row]] = defaultdict(list)
    for line in (path / FILE).read_bytes().splitlines():
        row = row_of(orjson.loads(line)) if line.strip() else None
        if row is not None and (row.question_id in grouped or limit is None
                                or len(grouped) < limit):
            grouped[row.question_id].append(row)
    return dict(grouped)


def timeline(rows: list[Row]) -> list[Segment]:
    """The question's answer segments, oldest first (see the module docstring). Two different
    answers given for the same instant: the one of a "start" row wins."""
    segments: list[Segment] = []
    for row in sorted(rows, key=lambda r: (r.at, not r.start)):
        current = segments[-1] if segments else None
        if current is not None and current.answers & row.answers:
            current.answers |= row.answers
        elif current is None or current.valid_from < row.at:
            if current is not None:
                current.valid_to = row.at
            segments.append(Segment(row.at, row.shown, set(row.answers)))
    return segments


_ASKING = re.compile(
    r"^(?:who|whom|whose|what|which|when|where|why|how(?: many| much| long| old| often)?)"
    r"(?:\s+(?:is|are|was|were|did|does|do|has|have|had|will|would|can))?\s+", re.IGNORECASE)


def statement(question: str, answer: str) -> str:
    """A question's answer as a statement: the question without its asking words, then the
    answer ("who won the world cup" -> "won the world cup: France")."""
    topic = _ASKING.sub("", question.strip().rstrip("?")).strip() or question.strip()
    return f"{topic}: {answer}"


def latest(rows: list[Row]) -> Row:
    """The row of the latest date (a "start" row first among equals)."""
    return max(rows, key=lambda r: (r.at, r.start))
