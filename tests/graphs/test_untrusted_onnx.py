"""ONNX files are untrusted: external data outside the model's folder or past a file's end is refused."""

from __future__ import annotations

import onnx
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError
from rnnx.formats.onnx_build import build_stack_model


def _external(tmp_path, location: str, **fields: str):
    weights = RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"))
    model = build_stack_model(weights)
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    onnx.save(model, str(folder / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    model = onnx.load(str(folder / "m.onnx"), load_external_data=False)
    for init in model.graph.initializer:
        for entry in init.external_data:
            if entry.key == "location":
                entry.value = location
            elif entry.key in fields:
                entry.value = fields[entry.key]
    onnx.save(model, str(folder / "m.onnx"))
    return folder / "m.onnx", weights


def test_external_data_inside_the_folder_loads(tmp_path) -> None:
    path, weights = _external(tmp_path, "m.data")
    assert rnnx.load(path).equal(weights)


@pytest.mark.parametrize(("location", "fragment"), [("../secret.bin", "outside the model's folder"), ("/etc/passwd", "not a relative file name"),
                                                   ("nothing.bin", "does not exist")])
def test_external_data_elsewhere_is_refused(tmp_path, location: str, fragment: str) -> None:
    (tmp_path / "secret.bin").write_bytes(b"\0" * 4096)
    path, _ = _external(tmp_path, location)
    with pytest.raises(RNNXError, match=fragment):
        rnnx.load(path)


def test_external_data_past_the_end_is_refused(tmp_path) -> None:
    path, _ = _external(tmp_path, "m.data", length="99999999")
    with pytest.raises(RNNXError, match="claims bytes"):
        rnnx.load(path)
