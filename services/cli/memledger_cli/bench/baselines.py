"""What a user could build in an afternoon, beside memledger in the same run: rankings of the
same turns computed in this process, never through the server.

- ``bm25``: BM25 from ``bm25s`` (its default parameters, English stopwords and the Snowball
  stemmer, as its documentation shows);
- ``dense``: cosine over the embeddings of the same model the server runs;
- ``rrf``: the two fused by reciprocal rank.

A document is a turn as a reader sees it, ``"<speaker>: <text>"``: who said it is part of it.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import bm25s
import numpy as np
import numpy.typing as npt
import Stemmer

from memledger_cli.bench.recall import rrf
from memledger_platform.embedding.embedder import Embedder

DEPTH = 100
"""How far down each baseline ranks (enough for every metric reported)."""


@dataclass(frozen=True)
class Corpus:
    ids: list[str]
    documents: list[str]


class Bm25:
    """BM25 over a corpus (``bm25s``)."""

    def __init__(self, corpus: Corpus) -> None:
        self._ids = corpus.ids
        self._stemmer = Stemmer.Stemmer("english")
        self._index = bm25s.BM25()
        self._index.index(self._tokens(corpus.documents), show_progress=False)

    def _tokens(self, texts: list[str]) -> "bm25s.tokenization.Tokenized":
        return bm25s.tokenize(texts, stopwords="en", stemmer=self._stemmer,
                              show_progress=False)

    def rank(self, query: str, depth: int = DEPTH) -> list[str]:
        """The ids of the documents sharing a term with ``query``, best first."""
        terms = bm25s.tokenize([query], stopwords="en", stemmer=self._stemmer,
                               return_ids=False, show_progress=False)[0]
        if not terms:
            return []
        scores = self._index.get_scores(terms)
        best = np.argsort(-scores, kind="stable")[:depth]
        return [self._ids[i] for i in best if scores[i] > 0]


class Dense:
    """Cosine over ``embedder``'s vectors of a corpus."""

    def __init__(self, corpus: Corpus, embedder: Embedder) -> None:
        self._ids = corpus.ids
        self._embedder = embedder
        self._matrix: npt.NDArray[np.float32] = np.asarray(
            embedder.embed_documents(corpus.documents), dtype=np.float32)

    def rank(self, query: str, depth: int = DEPTH) -> list[str]:
        vector = np.asarray(self._embedder.embed_query(query), dtype=np.float32)
        best = np.argsort(-(self._matrix @ vector), kind="stable")[:depth]
        return [self._ids[i] for i in best]


def rankings(corpus: Corpus, questions: Sequence[str], embedder: Embedder
             ) -> dict[str, list[list[str]]]:
    """Each baseline's ranking of the corpus for each question, in question order."""
    keyword, dense = Bm25(corpus), Dense(corpus, embedder)
    found: dict[str, list[list[str]]] = {"bm25": [], "dense": [], "rrf": []}
    for question in questions:
        by_words, by_meaning = keyword.rank(question), dense.rank(question)
        found["bm25"].append(by_words)
        found["dense"].append(by_meaning)
        found["rrf"].append(rrf([by_words, by_meaning])[:DEPTH])
    return found
