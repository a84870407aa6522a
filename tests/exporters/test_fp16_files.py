"""float16 ONNX files: --precision fp16 on export and convert, their inputs and outputs float16
or float32 (--keep-io-types), checked against the float64 reference at float16's rounding floor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import rnnx
from rnnx import RNNSpec, RNNWeights
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.errors import RNNXError
from rnnx.pipelines.convert import convert

torch = pytest.importorskip("torch")


class Tagger(torch.nn.Module):
    """A Conv1d front end, a batch-first bidirectional LSTM, a Linear and a log-softmax."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)
        self.rnn = torch.nn.LSTM(8, 16, batch_first=True, num_layers=2, bidirectional=True)
        self.fc = torch.nn.Linear(32, 5)

    def forward(self, feats):  # (batch, 4, time)
        y, _ = self.rnn(self.conv(feats).transpose(1, 2))
        return torch.log_softmax(self.fc(y), -1)


def _io(path: Path) -> tuple[list[tuple[str, int]], list[tuple[str, int]], set[int]]:
    graph = onnx.load(str(path)).graph
    return ([(i.name, i.type.tensor_type.elem_type) for i in graph.input], [(o.name, o.type.tensor_type.elem_type) for o in graph.output],
            {t.data_type for t in graph.initializer if t.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16)})


@pytest.mark.parametrize("keep", [False, True], ids=["float16 io", "float32 io"])
def test_export_fp16_writes_a_float16_file_checked_against_float64(keep: bool, tmp_path: Path) -> None:
    model = Tagger().eval()
    path = tmp_path / "tagger16.onnx"
    report = rnnx.export(model, (torch.randn(2, 4, 20),), path, precision="fp16", keep_io_types=keep)
    edge = TensorProto.FLOAT if keep else TensorProto.FLOAT16
    inputs, outputs, weights = _io(path)
    assert report.passed and inputs == [("feats", edge)] and outputs[0][1] == edge
    assert weights == {TensorProto.FLOAT16}  # every weight rounded to float16 once
    rows = [o for c in report.check.cases for o in c.rows]
    assert rows and all(o.floor is not None and o.ratio <= 16 for o in rows)
    # what the file computes, against the float32 model in float64: float16's error, not float32's
    runner = OnnxRuntimeRunner(path)
    x = torch.randn(3, 4, 17)
    with torch.no_grad():
        want = model.double()(x.double()).numpy()
    got = next(iter(runner({"feats": x.numpy() if keep else x.half().numpy()}).values())).astype(np.float64)
    error = np.abs(got - want).max()
    assert 1e-5 < error < 5e-2, error


def test_export_keep_io_types_needs_fp16_and_precision_is_checked(tmp_path: Path) -> None:
    with pytest.raises(RNNXError, match="keep_io_types: a float32 file"):
        rnnx.export(Tagger(), (torch.randn(1, 4, 5),), tmp_path / "x.onnx", keep_io_types=True)
    with pytest.raises(RNNXError, match="precision: expected fp32 or fp16, found 'int8'"):
        rnnx.export(Tagger(), (torch.randn(1, 4, 5),), tmp_path / "x.onnx", precision="int8")


@pytest.mark.parametrize("spec", ["lstm,input=5,hidden=8,layers=2,bidirectional", "gru,input=5,hidden=8", "lstm,input=5,hidden=8,proj=4"])
@pytest.mark.parametrize("keep", [False, True], ids=["float16 io", "float32 io"])
def test_convert_fp16(spec: str, keep: bool, tmp_path: Path) -> None:
    weights = RNNWeights.random(RNNSpec.parse(spec), seed=2)
    source = tmp_path / "w.safetensors"
    rnnx.save(weights, source)
    out = tmp_path / "w16.onnx"
    result = convert(source, out, precision="fp16", keep_io_types=keep)
    assert result.written and result.report and result.precision == "fp16"
    rows = [r for r in result.report.rows if r.backend == "ort"]
    assert rows and all(r.floor is not None and r.dtype == "float16" for r in rows)
    inputs, outputs, stored = _io(out)
    edge = TensorProto.FLOAT if keep else TensorProto.FLOAT16
    assert {t for _, t in inputs} == {edge} and {t for _, t in outputs} == {edge} and TensorProto.FLOAT not in stored
    assert result.to_json()["precision"] == "fp16" and result.to_json()["keep_io_types"] is keep


def test_convert_fp16_of_a_gate_swapped_file_fails(tmp_path: Path) -> None:
    """float16's floor still leaves a layout mistake outside: the check is not blind at fp16."""
    from unittest import mock

    from rnnx.weights import tensor_name

    weights = RNNWeights.random(RNNSpec.parse("lstm,input=5,hidden=8"), seed=2)
    source = tmp_path / "w.safetensors"
    rnnx.save(weights, source)
    from rnnx.layouts.onnx import layer_pieces as original

    def swapped(w: RNNWeights, k: int):
        f, o = tensor_name(0, "forward", "W", "f"), tensor_name(0, "forward", "W", "o")
        return original(RNNWeights(w.spec, {**w.tensors, f: w.tensors[o], o: w.tensors[f]}), k)
    from rnnx.formats import onnx_build

    with mock.patch.object(onnx_build, "layer_pieces", swapped):  # what the stack writer calls
        result = convert(source, tmp_path / "bad16.onnx", precision="fp16")
    assert not result.written and not result.report and not (tmp_path / "bad16.onnx").exists()


def test_precision_applies_to_onnx_only(tmp_path: Path) -> None:
    weights = RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=0)
    source = tmp_path / "w.safetensors"
    rnnx.save(weights, source)
    with pytest.raises(RNNXError, match="apply to to_format=onnx only"):
        convert(source, tmp_path / "w.pt", precision="fp16")


TAGGER_CODE = '''
import torch


class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)
        self.rnn = torch.nn.LSTM(8, 16, batch_first=True, num_layers=2, bidirectional=True)
        self.fc = torch.nn.Linear(32, 5)

    def forward(self, feats):
        y, _ = self.rnn(self.conv(feats).transpose(1, 2))
        return torch.log_softmax(self.fc(y), -1)
'''


@pytest.mark.parametrize("keep", [False, True], ids=["float16 io", "float32 io"])
def test_verify_an_fp16_file_against_its_model_code(keep: bool, tmp_path: Path) -> None:
    """rnnx verify FILE --against code.py:NAME on an fp16 file: held at float16's floor (the model in
    float16 against its float64 copy), each layer too; and a gate swap in it still fails."""
    import io
    from contextlib import redirect_stdout

    from onnx import numpy_helper

    from rnnx.cli.main import main

    code = tmp_path / "tagger.py"
    code.write_text(TAGGER_CODE)
    path = tmp_path / "t16.onnx"
    args = ["export", f"{code}:Tagger", "-o", str(path), "--precision", "fp16", "--input", "feats:2x4x20"] + (["--keep-io-types"] if keep else [])
    with redirect_stdout(io.StringIO()):
        assert main(args) == 0
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["verify", str(path), "--against", f"{code}:Tagger", "--dtype", "fp16"]) == 0, out.getvalue()
    assert "computes in float16" in out.getvalue()
    proto = onnx.load(str(path))  # f and o of layer 0's forward W swapped (ONNX order i, o, f, c)
    lstm = next(n for n in proto.graph.node if n.op_type == "LSTM")
    init = next(i for i in proto.graph.initializer if i.name == lstm.input[1])
    w = numpy_helper.to_array(init).copy()
    H = w.shape[1] // 4
    w[0, H:2 * H], w[0, 2 * H:3 * H] = w[0, 2 * H:3 * H].copy(), w[0, H:2 * H].copy()
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    bad = tmp_path / "bad16.onnx"
    onnx.save(proto, str(bad))
    with redirect_stdout(io.StringIO()):
        assert main(["verify", str(bad), "--against", f"{code}:Tagger"]) == 1


@pytest.mark.parametrize("keep", [False, True], ids=["float16 io", "float32 io"])
def test_lower_holds_an_fp16_file_to_the_floor_of_the_precision_it_computes_in(keep: bool, tmp_path: Path) -> None:
    # a file that computes in float16 and takes float32 (--keep-io-types) was held to float32's
    # floor, which the float16 arithmetic of any rewrite exceeds; a wrong rewrite still fails
    from rnnx.pipelines.lower import lower_file

    path = tmp_path / "t16.onnx"
    assert rnnx.export(Tagger(), (torch.randn(2, 4, 20),), path, precision="fp16", keep_io_types=keep).passed
    result = lower_file(path, tmp_path / "low.onnx")
    assert result.check is not None and bool(result.check), str(result.check)
    floors = [r.floor for c in result.check.cases for r in c.rows if r.floor is not None]
    assert floors and min(floors) > 1e-4  # float16's, not float32's (~1e-7)
