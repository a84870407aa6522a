"""ONNX Runtime runner: named numpy inputs in, named numpy outputs out.

On a stack rnnx wrote (its ``rnnx.spec`` entry in ``metadata_props``), initial states that
are not fed start at zeros and lengths not fed are full, as in every other runner
(:mod:`rnnx.engines.runner`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rnnx.engines.ort_options import EXTERNAL_DATA_FOLDER, FLOAT16_NOTE, session_options
from rnnx.engines.rules import BackendRules, Rule
from rnnx.engines.runner import with_zero_states
from rnnx.errors import CAUSE_CHARS, RNNXError, one_line
from rnnx.graphs.precision import computes_in_float16
from rnnx.spec import RNNSpec

#: What ONNX Runtime's CPU kernels for LSTM/GRU/RNN refuse (tests/graphs/test_inspect.py pins it by running them).
KERNEL_RULES = BackendRules(
    "onnxruntime",
    "predicted from ONNX Runtime's kernel rules, pinned by a test that runs them; not run on this file",
    (Rule(lambda n: n.layout != 0, lambda n: "layout=1 (batch-major) is not supported; re-export with layout 0"),),
)


_SNIFF_BYTES = 256 << 20  # a larger file is not read twice to learn its dtype


def _sniffed_float16(model: str | Path | Any) -> bool:
    """:func:`~rnnx.graphs.precision.computes_in_float16` of a proto, or of a file read without its external data (if small)."""
    import onnx

    if isinstance(model, (str, Path)):
        try:
            if Path(model).stat().st_size > _SNIFF_BYTES:
                return False
            model = onnx.load(str(model), load_external_data=False)
        except Exception:  # noqa: BLE001  an unreadable file: the session's own error says why, below
            return False
    return computes_in_float16(model)


def cpu_session(model: str | Path | Any, options: Any = None) -> Any:
    """A bare ONNX Runtime session on the CPU, for a caller that runs chosen outputs itself (the
    streaming record's partial runs); ``options``: its SessionOptions (default
    :func:`session_options`'s). Raises ONNX Runtime's own error where it cannot build one."""
    import onnxruntime as ort

    source = str(model) if isinstance(model, (str, Path)) else model.SerializeToString()
    return ort.InferenceSession(source, options if options is not None else session_options(), providers=["CPUExecutionProvider"])


class OnnxRuntimeRunner:
    """Runs an ONNX model (path or ModelProto) in ONNX Runtime, on the CPU unless told otherwise."""

    def __init__(self, model: str | Path | Any, providers: list[str] | None = None, threads: int = 0, data_folder: str | Path | None = None) -> None:
        """``data_folder``: where a ModelProto's external data lies (its file's folder), for a
        model given as a proto whose large tensors stay in their files."""
        import onnxruntime as ort

        half = _sniffed_float16(model)
        options = session_options(threads, extended_only=half, config={EXTERNAL_DATA_FOLDER: str(data_folder)} if data_folder is not None else None)
        source = str(model) if isinstance(model, (str, Path)) else model.SerializeToString()
        self.providers = providers or ["CPUExecutionProvider"]
        self.notes: list[str] = [FLOAT16_NOTE] if half else []
        try:
            self.session = ort.InferenceSession(source, options, providers=self.providers)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph classes
            raise RNNXError(f"ONNX Runtime refused the model: {one_line(str(exc).strip().splitlines()[0] if str(exc).strip() else exc, CAUSE_CHARS)}") from None
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.spec, self.batch_first = _stack_record(self.session.get_modelmeta().custom_metadata_map)

    precision = "as the model's tensors"

    @property
    def device(self) -> str:
        return "cuda" if "CUDAExecutionProvider" in self.session.get_providers() else "cpu"

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.spec is not None and "X" in inputs:
            inputs = with_zero_states(self.spec, inputs, self.batch_first)
            if "seq_lens" in self.input_names and "seq_lens" not in inputs:
                # Lengths not fed: every sequence runs its full length, as ONNX does without sequence_lens.
                T, B = inputs["X"].shape[:2][::-1] if self.batch_first else inputs["X"].shape[:2]
                inputs = {**inputs, "seq_lens": np.full(B, T, np.int32)}
        feed = {k: v for k, v in inputs.items() if k in self.input_names}
        missing = [n for n in self.input_names if n not in feed]
        if missing:
            raise RNNXError(f"ONNX model: expected inputs {self.input_names}, missing {missing}")
        try:
            outputs = self.session.run(self.output_names, feed)
        except Exception as exc:  # onnxruntime's InvalidArgument / Fail: shapes or types the model does not take
            raise RNNXError(f"ONNX Runtime could not run the model: {one_line(exc, CAUSE_CHARS)}") from None
        return dict(zip(self.output_names, outputs))


def _stack_record(metadata: dict[str, str]) -> tuple[RNNSpec | None, bool]:
    """The spec and batch-major flag of a stack rnnx wrote; (None, False) for any other model."""
    text = metadata.get("rnnx.spec")
    if text is None:
        return None, False
    try:
        spec = RNNSpec.parse(text)
    except RNNXError:
        return None, False  # a foreign or damaged entry: drive the model by its inputs alone
    return spec, metadata.get("rnnx.batch_first") == "1"
