"""The public API, and that importing rnnx pulls in no framework."""

from __future__ import annotations

import subprocess
import sys

import rnnx


def test_public_names() -> None:
    assert sorted(rnnx.__all__) == sorted(
        ["ExportCheckFailed", "ParityError", "RNNSpec", "RNNWeights", "RNNXError", "StreamingSession", "__version__", "export", "from_format", "groups", "load", "save",
         "to_format"]
    )
    assert all(hasattr(rnnx, name) for name in rnnx.__all__)
    assert callable(rnnx.formats.register)


def test_import_is_light() -> None:
    code = "import sys, rnnx; print(','.join(m for m in ('torch', 'keras', 'jax', 'onnxruntime', 'tensorrt', 'h5py', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == ""
