"""``Extractor`` on Cohere's chat API (v2) with structured JSON output, used when
``MEMLEDGER_EXTRACTOR=cohere``.

Each turn is sent with a JSON Schema (``response_format``) asking for facts and preferences as
triples with a confidence, the entities named and the relations between them; a run of turns is
sent as a transcript for a summary. Temperature 0 and a fixed seed, so an answer asked for again
is as close to the first as the model allows (and once recorded, it is never asked for again).

Failures: the SDK retries 429s and 5xx responses with backoff (``max_retries``); what is still
failing after that, a timeout or a broken connection is a transient ``ExtractionFailed``; an
answer that is not the JSON asked for, or another refusal (a bad key, a bad request), is not.
"""

import json
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

import cohere
import httpx
from cohere.core.api_error import ApiError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memledger_enricher.extractor import (
    Entity,
    ExtractionFailed,
    Extractor,
    Fact,
    Findings,
    Relation,
    Summary,
    Turn,
)

T = TypeVar("T", bound=BaseModel)
PROMPT_VERSION = "cohere-json/v1"
MAX_TRANSCRIPT_CHARS = 60_000
"""The most of a session sent for its summary (its latest turns)."""
_SEED = 7

EXTRACT_PROMPT = """\
You read one turn of a conversation and list what it states about the people in it, as JSON.
- facts: each a triple (subject, predicate, object) with kind "preference" for likes, dislikes
  and wishes, "fact" for anything else; "statement" says it in one plain sentence naming the
  subject; "confidence" from 0 to 1. The speaker is the subject of what they say about
  themselves ("I", "my"): use the speaker's name.
- entities: the people, organizations, places and things named (name and type).
- relations: between those entities (source and target are entity names).
List only what the turn states; empty lists if it states nothing."""

SUMMARY_PROMPT = """\
Summarise this conversation in at most five sentences, naming who said or did what, keeping
names, dates, places and decisions. Answer as JSON: {"summary": "..."}."""

_TEXT = {"type": "string", "minLength": 1}
_UNIT = {"type": "number", "minimum": 0, "maximum": 1}
EXTRACT_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["facts", "entities", "relations"],
    "properties": {
        "facts": {"type": "array", "items": {
            "type": "object",
            "required": ["kind", "subject", "predicate", "object", "statement", "confidence"],
            "properties": {"kind": {"type": "string", "enum": ["fact", "preference"]},
                           "subject": _TEXT, "predicate": _TEXT, "object": _TEXT,
                           "statement": _TEXT, "confidence": _UNIT}}},
        "entities": {"type": "array", "items": {
            "type": "object", "required": ["name", "type"],
            "properties": {"name": _TEXT, "type": _TEXT}}},
        "relations": {"type": "array", "items": {
            "type": "object", "required": ["source", "relation", "target", "confidence"],
            "properties": {"source": _TEXT, "relation": _TEXT, "target": _TEXT,
                           "confidence": _UNIT}}}}}
SUMMARY_SCHEMA: dict[str, Any] = {"type": "object", "required": ["summary"],
                                  "properties": {"summary": _TEXT}}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


Short = Field(min_length=1, max_length=512)


class _Fact(_Strict):
    kind: Literal["fact", "preference"]
    subject: str = Short
    predicate: str = Short
    object: str = Short
    statement: str = Field(min_length=1, max_length=4_096)
    confidence: float = Field(ge=0, le=1)


class _Entity(_Strict):
    name: str = Short
    type: str = Short


class _Relation(_Strict):
    source: str = Short
    relation: str = Short
    target: str = Short
    confidence: float = Field(ge=0, le=1)


class _Findings(_Strict):
    facts: list[_Fact] = Field(max_length=64)
    entities: list[_Entity] = Field(max_length=128)
    relations: list[_Relation] = Field(max_length=128)


class _Summary(_Strict):
    summary: str = Field(min_length=1, max_length=8_192)


class CohereExtractor(Extractor):
    prompt_version = PROMPT_VERSION

    def __init__(self, api_key: str, *, model: str = "command-a-03-2025",
                 base_url: str | None = None, timeout_seconds: float = 30.0,
                 max_retries: int = 2) -> None:
        self.extractor_id = f"cohere/{model}"
        self._model = model
        self._timeout = timeout_seconds
        self._client = cohere.ClientV2(api_key=api_key, base_url=base_url,
                                       max_retries=max_retries, timeout=timeout_seconds,
                                       log_warning_experimental_features=False)

    def extract(self, turn: Turn) -> Findings:
        said = json.dumps({"speaker": turn.speaker, "role": turn.role, "text": turn.text})
        found = self._ask(EXTRACT_PROMPT, said, EXTRACT_SCHEMA, _Findings)
        return Findings(
            tuple(Fact(f.kind, f.subject, f.predicate, f.object, f.statement, f.confidence)
                  for f in found.facts),
            tuple(Entity(e.name, e.type) for e in found.entities),
            tuple(Relation(r.source, r.relation, r.target, r.confidence)
                  for r in found.relations))

    def summarise(self, turns: Sequence[Turn]) -> Summary | None:
        lines: list[tuple[Turn, str]] = []
        size = 0
        for turn in reversed(turns):  # the latest turns, if not all of them fit
            line = f"{turn.speaker}: {turn.text}"
            size += len(line) + 1
            if size > MAX_TRANSCRIPT_CHARS and lines:
                break
            lines.append((turn, line))
        lines.reverse()
        found = self._ask(SUMMARY_PROMPT, "\n".join(line for _, line in lines), SUMMARY_SCHEMA,
                          _Summary)
        return Summary(found.summary, tuple(dict.fromkeys(t.message_id for t, _ in lines)))

    def _ask(self, prompt: str, text: str, schema: dict[str, Any], model: type[T]) -> T:
        answer = self._call(prompt, text, schema)
        try:
            return model.model_validate_json(answer)
        except ValidationError as error:
            raise ExtractionFailed(f"Cohere's answer is not the JSON asked for: "
                                   f"{_first_error(error)}", transient=False) from None

    def _call(self, prompt: str, text: str, schema: dict[str, Any]) -> str:
        try:
            response = self._client.chat(
                model=self._model, temperature=0, seed=_SEED,
                messages=[cohere.SystemChatMessageV2(content=prompt),
                          cohere.UserChatMessageV2(content=text)],
                response_format=cohere.JsonObjectResponseFormatV2(json_schema=schema))
        except ApiError as error:
            status = error.status_code
            raise ExtractionFailed(
                f"Cohere answered {status}: {str(error.body)[:300]}",
                transient=status is None or status in (408, 409, 429) or status >= 500,
            ) from None
        except httpx.TimeoutException:
            raise ExtractionFailed(f"Cohere did not answer within {self._timeout:g} s",
                                   transient=True) from None
        except httpx.TransportError as error:
            raise ExtractionFailed(f"Cohere could not be reached: {error!r}",
                                   transient=True) from None
        return _text_of(response)


def _text_of(response: Any) -> str:
    contents = getattr(getattr(response, "message", None), "content", None) or []
    texts = [c.text for c in contents if getattr(c, "type", None) == "text"]
    if not texts:
        raise ExtractionFailed("Cohere's answer holds no text", transient=False)
    return "".join(texts)


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(answer)"
    return f"{where}: {first['msg']}"
