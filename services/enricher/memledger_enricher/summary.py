"""Extractive summaries: a run of turns summed up by its most central sentences. Pure and
deterministic (no model), so the same turns always give the same summary.

Centrality is TF-IDF's: each sentence becomes a vector of its words' TF-IDF weights over the
run's sentences (the index's tokens: lowercased, stopwords out, plurals singular); a sentence's
centrality is its summed cosine similarity to every other sentence, so the sentences that share
the most with the rest of the conversation are the ones kept (LexRank's degree centrality).
They come out in the order said, each after its speaker.
"""

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memledger_enricher.extractor import Summary, Turn
from memledger_platform.vectorindex.sparse import tokens

MAX_SENTENCES = 5
"""The most sentences a summary keeps."""
SENTENCES_PER_KEPT = 6
"""One sentence kept per this many in the run (at least one, at most ``MAX_SENTENCES``)."""
MAX_CONSIDERED = 2_000
"""The most recent sentences considered (the similarity matrix grows with their square)."""
MIN_WORDS = 3
"""A sentence with fewer content words ("Thanks!", "Sure, sounds good.") is never kept."""
MAX_SENTENCE_CHARS = 600

_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|$)")


@dataclass(frozen=True)
class Sentence:
    turn: Turn
    text: str
    words: tuple[str, ...]


def sentences(turns: Sequence[Turn]) -> list[Sentence]:
    """The sentences of ``turns`` worth keeping, in the order said."""
    found = []
    for turn in turns:
        for match in _SENTENCE.finditer(turn.text):
            text = " ".join(match.group(0).split())[:MAX_SENTENCE_CHARS]
            words = tuple(tokens(text))
            if len(words) >= MIN_WORDS:
                found.append(Sentence(turn, text, words))
    return found[-MAX_CONSIDERED:]


def central(found: Sequence[Sentence], keep: int) -> list[int]:
    """The indices of the ``keep`` most central sentences, in the order said (ties: the
    earlier one)."""
    if len(found) <= keep:
        return list(range(len(found)))
    matrix = _tfidf(found)
    similarity = matrix @ matrix.T
    centrality = similarity.sum(axis=1) - np.diag(similarity)
    # A stable sort on the negated score keeps the earlier of two equal sentences first.
    order = np.argsort(-np.round(centrality, 9), kind="stable")
    return sorted(int(i) for i in order[:keep])


def _tfidf(found: Sequence[Sentence]) -> "np.ndarray[tuple[int, int], np.dtype[np.float64]]":
    vocabulary = {w: i for i, w in enumerate(sorted({w for s in found for w in s.words}))}
    frequency = Counter(w for s in found for w in set(s.words))
    n = len(found)
    idf = {w: math.log((1 + n) / (1 + frequency[w])) + 1.0 for w in vocabulary}
    matrix = np.zeros((n, len(vocabulary)), dtype=np.float64)
    for row, sentence in enumerate(found):
        for word, count in Counter(sentence.words).items():
            matrix[row, vocabulary[word]] = count * idf[word]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def extractive(turns: Sequence[Turn], max_sentences: int = MAX_SENTENCES) -> Summary | None:
    """The summary of ``turns``: their most central sentences, each after its speaker;
    ``None`` if no sentence is worth keeping."""
    found = sentences(turns)
    if not found:
        return None
    keep = min(max_sentences, max(1, len(found) // SENTENCES_PER_KEPT))
    chosen = [found[i] for i in central(found, keep)]
    text = " ".join(f"{s.turn.speaker}: {s.text}" for s in chosen)
    sources = tuple(dict.fromkeys(s.turn.message_id for s in chosen))
    return Summary(text, sources)
