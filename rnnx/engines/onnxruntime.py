"""ONNX Runtime runner: named numpy inputs in, named numpy outputs out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rnnx.errors import RNNXError


class OnnxRuntimeRunner:
    """Runs an ONNX model (path or ModelProto) in ONNX Runtime, on the CPU unless told otherwise."""

    def __init__(self, model: str | Path | Any, providers: list[str] | None = None, threads: int = 0) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 4  # fatal only: its errors reach the user as one-line exceptions instead
        if threads:
            options.intra_op_num_threads = threads
        source = str(model) if isinstance(model, (str, Path)) else model.SerializeToString()
        self.providers = providers or ["CPUExecutionProvider"]
        try:
            self.session = ort.InferenceSession(source, options, providers=self.providers)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph classes
            raise RNNXError(f"ONNX Runtime refused the model: {str(exc).splitlines()[0][:300]}") from None
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    precision = "as the model's tensors"

    @property
    def device(self) -> str:
        return "cuda" if "CUDAExecutionProvider" in self.session.get_providers() else "cpu"

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed = {k: v for k, v in inputs.items() if k in self.input_names}
        missing = [n for n in self.input_names if n not in feed]
        if missing:
            raise RNNXError(f"ONNX model: expected inputs {self.input_names}, missing {missing}")
        try:
            outputs = self.session.run(self.output_names, feed)
        except Exception as exc:  # onnxruntime's InvalidArgument / Fail: shapes or types the model does not take
            raise RNNXError(f"ONNX Runtime could not run the model: {' '.join(str(exc).split())[:300]}") from None
        return dict(zip(self.output_names, outputs))
