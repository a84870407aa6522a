"""``rnnx verify FILE --against code.py:NAME --chunks 1,7``: a streaming file run chunk by chunk in
ONNX Runtime, each chunk's state outputs fed to the next chunk's state inputs, against the torch
model on the whole sequence (rnnx.verify.chunked).

A file rnnx exported with streaming=True passes (its states paired by its rnnx.streaming
record); a hand-made one (torch.onnx.export of forward(x, h0, c0) -> (y, hn, cn)) passes when
paired with --state h0=hn --state c0=cn and is refused in one line without it; a hand-made one
whose wrapper forgets the new state (returns h0, c0 as hn, cn) fails. Bad input is refused in
one line, exit 2, nothing written.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
nn = torch.nn

import rnnx  # noqa: E402
from rnnx.cli.main import main  # noqa: E402
from rnnx.errors import RNNXError  # noqa: E402

CODE = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 8, num_layers=2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y)


torch.manual_seed(0)
model = Net().eval()
example_inputs = (torch.randn(2, 11, 5),)
'''


class HandMade(nn.Module):
    """What a user writes to stream by hand: the states in and out of forward."""

    def __init__(self, net: Any, forget: bool = False) -> None:
        super().__init__()
        self.lstm, self.head, self.forget = net.lstm, net.head, forget

    def forward(self, x: Any, h0: Any, c0: Any) -> tuple[Any, Any, Any]:
        y, (hn, cn) = self.lstm(x, (h0, c0))
        if self.forget:  # the planted mistake: the input state returned as the new one
            return self.head(y), h0 * 1.0, c0 * 1.0
        return self.head(y), hn, cn


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("chunks")
    code = folder / "net.py"
    code.write_text(CODE)
    spec = importlib.util.spec_from_file_location("rnnx_test_chunks_net", code)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    net = module.model
    x = module.example_inputs[0]
    found = {"code": code, "streaming": folder / "streaming.onnx"}
    rnnx.export(net, (x,), found["streaming"], streaming=True)
    h = torch.zeros(2, 2, 8)
    axes = {"x": {0: "batch", 1: "seq"}, "h0": {1: "batch"}, "c0": {1: "batch"}, "y": {0: "batch", 1: "seq"}, "hn": {1: "batch"}, "cn": {1: "batch"}}
    for name, forget in (("hand", False), ("forgets", True)):
        path = folder / f"{name}.onnx"
        with warnings.catch_warnings():  # the legacy exporter's deprecation and tracer warnings
            warnings.simplefilter("ignore")
            torch.onnx.export(HandMade(net, forget).eval(), (x, h, h.clone()), str(path), input_names=["x", "h0", "c0"], output_names=["y", "hn", "cn"],
                              dynamic_axes=axes, dynamo=False, opset_version=17)
        found[name] = path
    return found


def cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    try:
        code = main(["verify", *map(str, args)])
    except SystemExit as stop:  # argparse's usage errors
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys: pytest.CaptureFixture[str], folder: Path, *args: object) -> str:
    """The command exits 2 with one line and writes nothing; the line."""
    before = sorted(p.name for p in folder.iterdir())
    code, out, err = cli(capsys, *args)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert sorted(p.name for p in folder.iterdir()) == before
    return lines[0]


def test_exported_streaming_file_passes_in_chunks(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, files["streaming"], "--against", f"{files['code']}:model", "--chunks", "1,7")
    assert code == 0, (out, err)
    assert "the file's rnnx.streaming record" in out and "lstm.h_in -> lstm.h_out" in out
    assert "per chunk size: 1: PASS, 7: PASS" in out and out.strip().endswith("PASS")
    code, out, err = cli(capsys, files["streaming"], "--against", f"{files['code']}:model", "--chunks", "1,7", "--json")
    assert code == 0, err
    report = json.loads(out)  # one JSON object
    assert report["passed"] is True and report["chunks"] == [1, 7]
    assert {(r["chunk"], r["batch"]) for r in report["rows"]} == {(1, 1), (1, 3), (7, 1), (7, 3)}
    assert all(r["stats"]["floor"] is not None and r["stats"]["ratio"] < 16 for r in report["rows"])  # the calibrated rule held


def test_hand_made_file_passes_with_its_states_paired(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, files["hand"], "--against", f"{files['code']}:model", "--chunks", "1,7", "--state", "h0=hn", "--state", "c0=cn")
    assert code == 0, (out, err)
    assert "states (--state): h0 -> hn, c0 -> cn" in out and "time axis seq" in out
    assert out.strip().endswith("PASS")


def test_hand_made_file_without_pairing_is_refused(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, files["hand"].parent, files["hand"], "--against", f"{files['code']}:model", "--chunks", "1,7")
    assert "--state IN=OUT" in line and "found none" in line


def test_a_stream_that_forgets_its_state_fails(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, files["forgets"], "--against", f"{files['code']}:model", "--chunks", "1,7", "--state", "h0=hn", "--state", "c0=cn")
    assert code == 1, (out, err)
    assert "per chunk size: 1: FAIL, 7: FAIL" in out and out.strip().endswith("FAIL")
    assert "chunked verification failed: output y in chunks of 1" in err


@pytest.mark.parametrize("args, said", [
    (["--chunks", "0"], "chunk of 0 frames"),
    (["--chunks", "1,0,7"], "chunk of 0 frames"),
    (["--chunks", "1", "--state", "h=hn", "--state", "c0=cn"], "expected a graph input named 'h'"),
    (["--chunks", "1", "--state", "h0=h_new", "--state", "c0=cn"], "expected a graph output named 'h_new'"),
    (["--chunks", "1", "--state", "h0"], "expected IN=OUT"),
])
def test_bad_input_is_refused_in_one_line(files: dict[str, Path], capsys: pytest.CaptureFixture[str], args: list[str], said: str) -> None:
    line = refused(capsys, files["hand"].parent, files["hand"], "--against", f"{files['code']}:model", *args)
    assert said in line


def test_streaming_session_refuses_a_state_of_the_wrong_shape_or_dtype(files: dict[str, Path]) -> None:
    session = rnnx.StreamingSession(files["streaming"])
    chunk = np.zeros((2, 4, 5), np.float32)
    before = session.process(chunk)["output"]
    # a float64 state is cast to the file's float32 (as a chunk is); a complex one cannot be
    for bad, said in ((np.zeros((2, 2, 7), np.float32), "shape [2, 2, 7]"), (np.zeros((2, 2, 8), np.complex64), "found complex64"),
                      (np.zeros((2, 3, 8), np.float32), "expected float32 of shape [2, 2, 8]")):
        with pytest.raises(RNNXError) as caught:
            session.process(chunk, **{"lstm.h_in": bad})
        assert "\n" not in str(caught.value) and said in str(caught.value) and "lstm.h_in" in str(caught.value)
    # refused before running: the stream goes on as if nothing was given
    again = session.process(chunk)["output"]
    assert again.shape == before.shape
    given = session.process(chunk, **{"lstm.h_in": np.zeros((2, 2, 8), np.float32), "lstm.c_in": np.zeros((2, 2, 8), np.float32)})["output"]
    np.testing.assert_allclose(given, before, atol=1e-6)  # a stream restarted from zeros by name


def test_chunked_report_in_library(files: dict[str, Path]) -> None:
    from rnnx.verify.chunked import verify_chunked

    report = verify_chunked(files["hand"], f"{files['code']}:model", [3], states=[("h0", "hn"), ("c0", "cn")], batches=[2])
    assert report.passed and {r.batch for r in report.rows} == {2} and report.time == "seq"
