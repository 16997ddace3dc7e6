"""A deterministic BM25-style text encoder: documents (by the projector) and queries (by the
query service) become ``SparseVector`` term weights, the same in every process and engine.

The IDF half of BM25 is left to the index (``VectorIndex.search_sparse``), which knows the
corpus; a document carries only its saturated, length-normalised term frequencies, and a query
only which terms it asks for.
"""

import functools
import hashlib
import re
import threading
from collections import Counter, defaultdict

import Stemmer

from memledger_platform.vectorindex.port import SparseVector

ENCODING = "snowball-en"
"""How documents and queries become terms (these stopwords, English Snowball stems, these term
indices). A vector index holds the terms of one encoding: it is part of the index's name
(``factory.index_slug``), so another encoding starts a new index, filled from the log."""

STOPWORDS = frozenset({
    "a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any",
    "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both",
    "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few",
    "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers",
    "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its",
    "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off",
    "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same",
    "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them",
    "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too",
    "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while",
    "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves"
})
"""The usual English function words: frequent everywhere, so they rank nothing."""

_POSSESSIVE = re.compile(r"['\u2019]s\b")


def tokens(text: str) -> list[str]:
    """Lowercase word tokens of ``text`` (unicode letters and digits), without stopwords and
    one-character tokens, stemmed (see ``stem``). Order and repeats are kept."""
    return [s for s in _stemmer().stemWords(plain_words(text)) if len(s) > 1]


def plain_words(text: str) -> list[str]:
    """The lowercase words of ``text`` as written, without stopwords and one-character words
    (what a label shows a person; ``tokens`` stems them). Order and repeats are kept."""
    found = re.findall(r"\w+", _POSSESSIVE.sub("", text.lower()))
    return [w for w in found if w not in STOPWORDS and len(w) > 1]


_STEMMERS = threading.local()


def stem(word: str) -> str:
    """The English Snowball (Porter 2) stem of a lowercase word, so that the forms of a word
    meet: "painted", "painting" and "paints" are "paint"; "queries" and "query" are "queri".
    (The possessive "'s" goes before tokenising, since ``\\w+`` splits on the apostrophe.)
    One stemmer per thread: a PyStemmer stemmer is not safe to share between threads."""
    return str(_stemmer().stemWord(word))


def _stemmer() -> Stemmer.Stemmer:
    stemmer: Stemmer.Stemmer | None = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = Stemmer.Stemmer("english")
    return stemmer


# A document's terms are mostly words seen before: their indices are remembered rather than
# hashed again (a bounded cache, safe to share between threads).
@functools.lru_cache(maxsize=65_536)
def term_index(token: str) -> int:
    """The sparse dimension of ``token``: the first 4 bytes of its BLAKE2b digest, big-endian,
    masked to 31 bits (stable across processes, unlike ``hash``)."""
    digest = hashlib.blake2b(token.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFF_FFFF


def encode_document(text: str, *, k1: float = 1.2, b: float = 0.75,
                    avg_len: float = 24.0) -> SparseVector:
    """BM25's term-frequency part per term: ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len /
    avg_len))``, ``len`` counting the document's tokens. Terms whose indices collide add up."""
    found = tokens(text)
    norm = k1 * (1 - b + b * len(found) / avg_len)
    weights: defaultdict[int, float] = defaultdict(float)
    for term, tf in Counter(found).items():
        weights[term_index(term)] += tf * (k1 + 1) / (tf + norm)
    return _sparse(weights)


def encode_query(text: str) -> SparseVector:
    """Weight 1.0 per distinct term (repeating a word in a query does not weigh it more)."""
    return _sparse(dict.fromkeys((term_index(t) for t in tokens(text)), 1.0))


def _sparse(weights: dict[int, float]) -> SparseVector:
    indices = tuple(sorted(weights))
    return SparseVector(indices, tuple(map(weights.__getitem__, indices)))
