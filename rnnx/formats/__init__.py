"""Weight formats, one module each, registered by name around :class:`rnnx.RNNWeights`.

A new layout is one new module that calls :func:`register`; framework imports stay inside
its functions so that importing rnnx never imports torch, keras or jax.
"""

from rnnx.formats.registry import Format, detect, get, names, register

# Built-in formats register themselves on import.
from rnnx.formats import canonical, cudnn, flax, jax, keras, keras_legacy_h5, onnx, torch  # noqa: E402,F401  isort: skip

__all__ = ["Format", "detect", "get", "names", "register"]
