"""The cheap paths of verify's ONNX Runtime child (rnnx.engines.isolated): what it imports, the
session options it gets, and the frames it reads straight into their arrays. No timings: each
test checks the mechanism that keeps a path cheap, and fails if it is undone."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from rnnx.engines import isolated

ROOT = Path(__file__).resolve().parents[2]


def test_the_child_imports_neither_rnnxs_onnx_runtime_module_nor_the_graph_inspector() -> None:
    """Each session starts a process that imports rnnx.engines.isolated; what that import pulls in is paid every time."""
    code = ("import sys; from rnnx.engines.isolated import serve; "
            "print(' '.join(m for m in ('rnnx.engines.onnxruntime', 'rnnx.graphs.inspect', 'onnx', 'torch') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split() == []


def test_the_child_session_reads_external_data_from_the_folder_and_does_not_spin(tmp_path: Path) -> None:
    from rnnx.engines.ort_options import EXTERNAL_DATA_FOLDER, session_options

    assert isolated._session_config(tmp_path) == {EXTERNAL_DATA_FOLDER: str(tmp_path)}
    assert EXTERNAL_DATA_FOLDER not in isolated._session_config(None)
    options = session_options(extended_only=True, config=isolated._session_config(tmp_path))  # as the child builds them
    assert options.get_session_config_entry(EXTERNAL_DATA_FOLDER) == str(tmp_path)
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def _roundtrip(arrays: list[np.ndarray]) -> tuple[dict, list[np.ndarray]]:
    """Frames written by one thread and read by this one through a real pipe (larger than its buffer)."""
    read_fd, write_fd = os.pipe()

    def send() -> None:
        with os.fdopen(write_fd, "wb") as writer:  # closed however it ends: the reader then sees the end, never hangs
            isolated._send(writer, {"tag": 1}, arrays)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        with os.fdopen(read_fd, "rb") as reader:
            return isolated._recv(reader, deadline=None)
    finally:
        sender.join()


def test_frames_come_back_as_the_arrays_sent() -> None:
    rng = np.random.default_rng(0)
    sent = [rng.standard_normal((17, 8, 2048)).astype(np.float32),  # 1.1 MB: many reads
            np.array(3.5, np.float64), np.zeros((0, 4), np.float16),  # an empty output (batch 0) must not break the frame
            np.arange(5, dtype=np.int32)[::2],
            np.array([True, False]), rng.standard_normal((3, 2)).astype(">f8")]
    header, got = _roundtrip(sent)
    assert header == {"tag": 1}
    for want, array in zip(sent, got, strict=True):
        assert array.dtype == want.dtype and array.shape == want.shape and array.flags.writeable
        np.testing.assert_array_equal(array, want)


@pytest.mark.parametrize("shape", [[-1], [2.0], [1 << 62, 1 << 62]])
def test_a_frame_with_a_shape_no_array_has_is_a_broken_pipe_not_a_crash(shape: list) -> None:
    import json

    read_fd, write_fd = os.pipe()
    header = json.dumps({"arrays": [["<f4", shape]]}).encode()
    os.write(write_fd, isolated._LENGTH.pack(len(header)) + header)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reader, pytest.raises(EOFError):
        isolated._recv(reader, deadline=None)
