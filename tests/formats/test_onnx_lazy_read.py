"""Lazy reading of ONNX files (load_model(lazy=True), rnnx.formats.onnx_lazy): a skeleton whose
large tensors stay in their files, read back as read-only views of one memory map per file.
Each file here was written by its real producer (tf2onnx fixtures, onnxruntime's quantizer,
torch.onnx.export, onnx.save with external data, rnnx itself); lazy and eager reads must give
bit-identical arrays and the same conversions, a lazy read must hold about one copy of the
weights, and damage must be refused in one line."""

from __future__ import annotations

import json
import mmap
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import rnnx
from rnnx import RNNXError
from rnnx.formats import onnx_lazy
from rnnx.formats.onnx_lazy import stored_tensors as _tensors
from rnnx.formats.onnx_read import choose_group, load_model, recurrent_groups, to_array
from rnnx.formats.protobuf_wire import len_header
from rnnx.layouts.onnx import from_native
from rnnx.pipelines.convert import convert
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted((ROOT / "tests" / "fixtures").rglob("*.onnx"))


@pytest.fixture
def cut_everything(monkeypatch):
    """Every raw_data kept in the file, however small: the fixtures' tensors are all under 64 KiB."""
    monkeypatch.setattr(onnx_lazy, "THRESHOLD", 1)


def _root(array: np.ndarray) -> object:
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array.obj if isinstance(array, memoryview) else array


def _eager_weights(path: Path, name: str) -> RNNWeights:
    return from_native(choose_group(recurrent_groups(load_model(path)), name, str(path)).layer_dicts(), None)


def _same(a: RNNWeights, b: RNNWeights) -> None:
    assert str(a.spec) == str(b.spec) and set(a.tensors) == set(b.tensors)
    for k in a.tensors:
        x, y = np.asarray(a.tensors[k]), np.asarray(b.tensors[k])
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), k


def _check_file(path: Path, convert_to: Path | None = None, expect_lazy: bool = True) -> int:
    """Lazy and eager loads of ``path`` agree tensor by tensor and group by group; how many
    tensors the lazy load kept in files."""
    eager, lazy = load_model(path), load_model(path, lazy=True)
    pairs = list(zip(_tensors(eager.graph), _tensors(lazy.graph), strict=True))
    kept = 0
    for e, z in pairs:
        x, y = to_array(e), to_array(z)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), z.name
        if onnx_lazy.is_lazy(z):
            kept += 1
            assert not y.flags.writeable and isinstance(_root(y), mmap.mmap)
    assert not expect_lazy or kept
    roots = {id(_root(to_array(z))) for _, z in pairs if onnx_lazy.is_lazy(z) and z.external_data[0].value == str(path.resolve())}
    assert len(roots) <= 1  # one memory map per file, not one per tensor
    names = [g.name for g in recurrent_groups(eager)]
    assert names == [g.name for g in recurrent_groups(lazy)] == rnnx.groups(path)
    for name in names:
        try:
            want = _eager_weights(path, name)
        except RNNXError as exc:
            with pytest.raises(RNNXError, match="^" + re.escape(str(exc)) + "$"):
                rnnx.load(path, select=name)
            continue
        _same(want, rnnx.load(path, select=name))  # the format's read path, lazy
        if convert_to is not None:
            convert_to.parent.mkdir(exist_ok=True)
            out = convert_to.with_name(f"{convert_to.stem}_{len(list(convert_to.parent.iterdir()))}.safetensors")
            result = convert(path, out, select=name, check=False)
            assert result.written
            _same(want, rnnx.load(out))
    return kept


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_fixtures_read_the_same_lazily(path, cut_everything):
    _check_file(path)


def test_fixtures_are_there():
    assert len(FIXTURES) >= 10 and any("q_" in p.name for p in FIXTURES)


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("cell", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("batch", [1, 3])
def test_torch_exports_read_the_same_lazily(cell, batch, tmp_path, cut_everything):
    torch.manual_seed(len(cell) * 10 + batch)
    module = getattr(torch.nn, cell)(5, 7, num_layers=2, bidirectional=True).eval()
    x = torch.zeros(4, batch, 5)
    path = tmp_path / f"{cell}.onnx"
    torch.onnx.export(module, (x,), str(path), input_names=["X"], opset_version=17, dynamo=False)
    _check_file(path, tmp_path / "out" / "w")


def test_large_inline_tensors_are_cut_at_the_default_threshold(tmp_path):
    torch.manual_seed(3)
    module = torch.nn.LSTM(64, 96, num_layers=2, bidirectional=True).eval()  # R: 2 x 384 x 96 floats, 295 KB
    path = tmp_path / "lstm.onnx"
    torch.onnx.export(module, (torch.zeros(3, 2, 64),), str(path), opset_version=17, dynamo=False)
    kept = _check_file(path, tmp_path / "out" / "w")
    assert kept >= 4
    lazy = load_model(path, lazy=True)
    assert len(lazy.SerializeToString()) < path.stat().st_size // 20


@pytest.mark.parametrize("one_file", [True, False])
def test_external_data_files_read_the_same_lazily(one_file, tmp_path):
    weights = RNNWeights.random(RNNSpec.parse("gru,input=6,hidden=5,layers=2,bidirectional"), seed=4)
    inline = tmp_path / "inline.onnx"
    rnnx.save(weights, inline)
    model = onnx.load(str(inline))
    folder = tmp_path / "ext"
    folder.mkdir()
    path = folder / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=one_file, location="m.data", size_threshold=0)
    assert len(list(folder.iterdir())) > (1 if one_file else 2)
    kept = _check_file(path, tmp_path / "out" / "w")
    assert kept >= 4
    _same(weights, rnnx.load(path))


@pytest.mark.parametrize("spec", ["lstm,input=8,hidden=16,layers=2,bidirectional,proj=4", "rnn_relu,input=3,hidden=4,reverse",
                                  "gru,input=5,hidden=6,layers=2,reset_before"])
def test_rnnx_written_files_read_the_same_lazily(spec, tmp_path, cut_everything):
    weights = RNNWeights.random(RNNSpec.parse(spec), seed=11)
    path = tmp_path / "w.onnx"
    rnnx.save(weights, path)
    _check_file(path, tmp_path / "out" / "w")


def test_a_skeleton_saved_by_mistake_is_refused(tmp_path, cut_everything):
    path = tmp_path / "w.onnx"
    rnnx.save(RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4"), seed=2), path)
    skeleton = load_model(path, lazy=True)
    saved = tmp_path / "copy" / "w.onnx"
    saved.parent.mkdir()
    onnx.save(skeleton, str(saved))
    with pytest.raises(RNNXError, match="not a relative file name"):
        load_model(saved)
    with pytest.raises(RNNXError, match="not a relative file name"):
        load_model(saved, lazy=True)
    with pytest.raises(Exception):  # noqa: B017  onnx's own error types for a path outside the folder vary by version
        onnx.load(str(saved))


def test_a_changed_file_is_refused_not_misread(tmp_path, cut_everything):
    path = tmp_path / "w.onnx"
    rnnx.save(RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4"), seed=2), path)
    skeleton = load_model(path, lazy=True)
    onnx_lazy._recent.clear()
    rnnx.save(RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4"), seed=3), tmp_path / "other.onnx")
    (tmp_path / "other.onnx").replace(path)
    tensor = next(t for t in _tensors(skeleton.graph) if onnx_lazy.is_lazy(t))
    with pytest.raises(RNNXError, match="has changed since the model was read"):
        to_array(tensor)


# --- memory ---------------------------------------------------------------------------------

# The peak is VmHWM, this process's own high-water mark: getrusage's ru_maxrss would carry over
# the test process's from before the exec (Linux keeps the larger across execve).
_CHILD = """
import json, sys
import numpy as np
from rnnx.formats.onnx_read import load_model, recurrent_groups
def hwm():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
base = hwm()
total = 0.0
for g in recurrent_groups(load_model(sys.argv[1], lazy=sys.argv[2] == "lazy")):
    for d in g.layer_dicts():
        total += sum(float(v.sum(dtype=np.float64)) for v in d.values() if isinstance(v, np.ndarray))
peak = hwm()
print(json.dumps({"base": base * 1024, "peak": peak * 1024, "total": total}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_a_lazy_read_holds_one_copy_of_the_weights(tmp_path):
    path = tmp_path / "big.onnx"
    rnnx.save(RNNWeights.random(RNNSpec.parse("lstm,input=1024,hidden=1024,layers=2,bidirectional"), seed=1), path)
    try:
        _measure(path)
    finally:  # rnnx verify of this file (the suite's hook on every file rnnx writes) takes 20 s; smaller ones run it above
        path.unlink()


def _measure(path: Path) -> None:
    size = path.stat().st_size
    assert 150e6 < size < 300e6
    runs = {}
    for mode in ("lazy", "eager"):
        done = subprocess.run([sys.executable, "-c", _CHILD, str(path), mode], capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[mode] = json.loads(done.stdout)
    grown = {m: (r["peak"] - r["base"]) / size for m, r in runs.items()}
    print(f"file {size / 1e6:.0f} MB; peak RSS over imports: lazy {grown['lazy']:.2f}x, eager {grown['eager']:.2f}x; "
          f"peak RSS: lazy {runs['lazy']['peak'] / size:.2f}x, eager {runs['eager']['peak'] / size:.2f}x")
    assert runs["lazy"]["total"] == runs["eager"]["total"]  # every byte touched, the same
    assert grown["lazy"] < 1.3
    assert runs["lazy"]["peak"] < 1.3 * size + runs["lazy"]["base"]
    assert grown["eager"] > grown["lazy"] + 1.0  # the check can fail: eager holds more copies


# --- hostile files --------------------------------------------------------------------------------


def _small_model_bytes(payload: int = 20000) -> tuple[bytes, bytes, bytes]:
    """(the model's bytes without its graph, the graph's bytes, the raw payload) of a model with one
    float initializer of ``payload`` floats feeding an Identity."""
    values = np.arange(payload, dtype=np.float32)
    init = numpy_helper.from_array(values, "W")
    graph = helper.make_graph([helper.make_node("Identity", ["W"], ["Y"])], "g", [], [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [payload])], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    graph_bytes = graph.SerializeToString()
    model.ClearField("graph")
    return model.SerializeToString(), graph_bytes, values.tobytes()


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "hostile.onnx"
    path.write_bytes(data)
    return path


def _refused(path: Path, match: str) -> str:
    tracemalloc.start()
    try:
        with pytest.raises(RNNXError, match=match) as info:
            model = load_model(path, lazy=True)
            for t in _tensors(model.graph):
                to_array(t)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "\n" not in str(info.value) and peak < 4 << 20, peak
    return str(info.value)


def test_the_hostile_model_is_sound_before_it_is_damaged(tmp_path):
    head, graph, payload = _small_model_bytes()
    path = _write(tmp_path, head + len_header(7, len(graph)) + graph)
    model = load_model(path, lazy=True)
    (w,) = [t for t in _tensors(model.graph) if onnx_lazy.is_lazy(t)]
    assert to_array(w).tobytes() == payload


def test_a_raw_data_running_past_the_end_of_the_file_is_refused(tmp_path):
    head, graph, payload = _small_model_bytes()
    _refused(_write(tmp_path, head + len_header(7, len(graph)) + graph[:-100]), "runs past the end")
    at = graph.index(payload)  # the raw_data's length claims the file's end and more, the enclosing lengths agree
    bad = graph[:at - 3] + len_header(9, 1 << 40)[1:] + graph[at:]
    _refused(_write(tmp_path, head + len_header(7, len(bad)) + bad), "runs past the end|cannot parse")


def test_a_varint_over_ten_bytes_is_refused(tmp_path):
    head, _, _ = _small_model_bytes()
    _refused(_write(tmp_path, head + b"\x3a" + b"\xff" * 11 + b"\x01"), "over 10 bytes")


@pytest.mark.parametrize("lie", [+1000, -7, 1 << 50])
def test_an_enclosing_length_that_lies_is_refused(lie, tmp_path):
    head, graph, _ = _small_model_bytes()
    _refused(_write(tmp_path, head + len_header(7, len(graph) + lie) + graph), "runs past the end|cannot parse|damaged")


def test_an_external_offset_past_the_data_file_is_refused(tmp_path):
    head, graph, _ = _small_model_bytes()
    model = onnx.load_model_from_string(head + len_header(7, len(graph)) + graph)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="m.data", size_threshold=0)
    model = onnx.load(str(path), load_external_data=False)
    for e in model.graph.initializer[0].external_data:
        if e.key == "offset":
            e.value = str(10 ** 9)
    onnx.save(model, str(path))
    _refused(path, "claims bytes")


def test_a_tensor_whose_bytes_do_not_fit_its_dims_is_refused(tmp_path):
    head, graph, _ = _small_model_bytes()
    model = onnx.load_model_from_string(head + len_header(7, len(graph)) + graph)
    model.graph.initializer[0].dims[0] += 1
    inline = _write(tmp_path, model.SerializeToString())
    assert "do not fit its shape" in _refused(inline, "do not fit its shape")
    folder = tmp_path / "ext"
    folder.mkdir()
    onnx.save(model, str(folder / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0)
    _refused(folder / "m.onnx", "do not fit its shape")
