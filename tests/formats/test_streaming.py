"""Large models are streamed: read through memory maps, written part by part, and what is
written is what the owning framework reads and runs.

Each writer is checked against the real reader (the safetensors library, torch, onnx and
ONNX Runtime) and each run against the float64 reference, at several shapes, batch 1
included. The memory tests convert in a child process and read its own peak RSS.
"""

from __future__ import annotations

import filecmp
import hashlib
import json
import mmap
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights
from rnnx.check import stack
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.fileio import read_safetensors, write_safetensors
from rnnx.formats import onnx_build
from rnnx.formats.onnx_build import build_stack_model, plan_stack_model, save_planned
from rnnx.formats.onnx_lazy import stored_tensors
from rnnx.formats.onnx_stream import ALIGN
from rnnx.layouts import cudnn as cudnn_layout, onnx as onnx_layout, torch as torch_layout
from rnnx.pipelines.convert import convert
from rnnx.tensor_pieces import Pieces

SHAPES = ((1, 1), (7, 3), (16, 5))
SPECS = [
    "lstm,input=5,hidden=7,layers=2,bidirectional,peepholes",
    "lstm,input=16,hidden=16,proj=8,layers=2,bidirectional",
    "gru,input=4,hidden=6,layers=2",
    "gru,input=4,hidden=6,reset_before,bidirectional",
    "rnn_relu,input=3,hidden=5,layers=3,no_bias",
]
REPO = Path(__file__).resolve().parents[2]


def _seed(spec: str) -> int:
    return int(hashlib.sha256(spec.encode()).hexdigest()[:8], 16)


# --- Pieces -------------------------------------------------------------------------------

def test_pieces_stream_the_same_bytes_as_the_stacked_layout() -> None:
    """ONNX's stacked W/R/B/P, torch's parameters and cuDNN's blob, each as pieces, hold the
    bytes of the arrays the layouts assemble (the layouts' gate orders are pinned by the
    owning frameworks in their own tests; here the streamed form must not differ)."""
    for spec in SPECS:
        w = RNNWeights.random(RNNSpec.parse(spec), seed=_seed(spec))
        for layer in range(w.spec.num_layers):
            stacked = onnx_layout.layer_arrays(w, layer)
            for key, pieces in onnx_layout.layer_pieces(w, layer).items():
                assert pieces.shape == stacked[key].shape and np.array_equal(pieces.array(), stacked[key]), (spec, layer, key)
        if not RNNSpec.parse(spec).peepholes and RNNSpec.parse(spec).reset_after:
            assert np.array_equal(cudnn_layout.blob_pieces(w).array(), cudnn_layout.to_native(w))
            for key, pieces in torch_layout.native_pieces(w).items():
                assert np.array_equal(pieces.array(), torch_layout.to_native(w)[key]), (spec, key)


def test_joined_is_a_view_only_when_the_parts_lie_back_to_back(tmp_path: Path) -> None:
    """A torch parameter read from a cuDNN blob or a torch file is a view of the mapped file
    (no copy); read from ONNX's gate order it is not, and is assembled instead."""
    w = RNNWeights.random(RNNSpec.parse("lstm,input=5,hidden=7,layers=2,bidirectional"), seed=3)
    rnnx.save(w, tmp_path / "blob.safetensors", format="cudnn")
    from_blob = rnnx.load(tmp_path / "blob.safetensors", format="cudnn")
    for key, pieces in torch_layout.native_pieces(from_blob).items():
        view = pieces.joined()
        assert view is not None and np.array_equal(view, torch_layout.to_native(w)[key]), key
        assert isinstance(_root(view), mmap.mmap), type(_root(view))  # the file's map itself, not a copy
    onnx_pieces = onnx_layout.layer_pieces(from_blob, 0)
    assert onnx_pieces["W"].joined() is None  # i,o,f,c from a blob in i,f,g,o: not back to back
    separate = RNNWeights(w.spec, {k: v.copy() for k, v in w.tensors.items()})  # each gate its own allocation
    assert all(p.joined() is None for p in torch_layout.native_pieces(separate).values())


def _root(a: object) -> object:
    while getattr(a, "base", None) is not None:  # as_strided's views hold their source as ``base`` too
        a = a.base  # type: ignore[attr-defined]
    return a


# --- safetensors ----------------------------------------------------------------------------

def test_streamed_safetensors_read_by_the_safetensors_library_and_torch(tmp_path: Path) -> None:
    from safetensors import safe_open
    from safetensors.numpy import load_file
    from safetensors.torch import load_file as torch_load_file

    rng = np.random.default_rng(11)
    arrays = {"a": rng.standard_normal((3, 5)).astype(np.float32), "b": rng.standard_normal(7).astype(np.float64),
              "c": rng.standard_normal((2, 2, 2)).astype(np.float16), "empty": np.zeros((0, 4), np.float32)}
    parts = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(3)]
    path = tmp_path / "x.safetensors"
    write_safetensors(path, {**arrays, "stacked": Pieces.of(parts)}, {"format": "torch", "note": "é"})
    want = {**arrays, "stacked": np.concatenate(parts)}
    for loaded in (load_file(str(path)), {k: v.numpy() for k, v in torch_load_file(str(path)).items()}, read_safetensors(path)[0]):
        assert loaded.keys() == want.keys()
        for k in want:
            assert loaded[k].dtype == want[k].dtype and np.array_equal(loaded[k], want[k]), k
    with safe_open(str(path), "np") as f:
        assert f.metadata() == {"format": "torch", "note": "é"}
    header_length = int.from_bytes(path.read_bytes()[:8], "little")
    assert (8 + header_length) % 8 == 0  # the data starts aligned, as the library writes it


def test_safetensors_are_read_through_a_memory_map_and_the_input_is_untouched(tmp_path: Path) -> None:
    w = RNNWeights.random(RNNSpec.parse("lstm,input=6,hidden=8,layers=2"), seed=5)
    src = tmp_path / "w.safetensors"
    rnnx.save(w, src, format="torch")
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    tensors, _ = read_safetensors(src)
    assert all(not t.flags.writeable and isinstance(_root(t), mmap.mmap) for t in tensors.values())
    for target in ("x.onnx", "x.pt", "blob.bin", "c.safetensors"):
        assert convert(src, tmp_path / target, to_format="cudnn" if target.startswith("c.") else None).written
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before


# --- ONNX -----------------------------------------------------------------------------------

@pytest.mark.parametrize("external", [False, True], ids=["one_file", "external_data"])
@pytest.mark.parametrize("spec", SPECS)
def test_streamed_onnx_is_the_built_model_and_runs_in_onnx_runtime(tmp_path: Path, spec: str, external: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The streamed file parses (onnx and ONNX Runtime) to the model built in memory, passes
    onnx's checker, and ONNX Runtime on it matches the float64 reference, batch 1 included.
    With external data (forced here by a zero threshold), every tensor is at a 4096-aligned
    offset of ``<name>.data``."""
    import onnx
    from onnx import numpy_helper

    monkeypatch.setattr(onnx_build, "EXTERNAL_DATA_BYTES", 0 if external else onnx_build.EXTERNAL_DATA_BYTES)
    w = RNNWeights.random(RNNSpec.parse(spec), seed=_seed(spec))
    path = tmp_path / "m.onnx"
    assert save_planned(plan_stack_model(w, sequence_lens=True), path) is external
    assert (tmp_path / "m.onnx.data").exists() is external
    onnx.checker.check_model(str(path), full_check=True)
    written, built = onnx.load(str(path)), build_stack_model(w, sequence_lens=True)
    assert [n.op_type for n in written.graph.node] == [n.op_type for n in built.graph.node]
    got = {t.name: numpy_helper.to_array(t) for t in written.graph.initializer}
    want = {t.name: numpy_helper.to_array(t) for t in built.graph.initializer}
    assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)
    if external:
        raw = onnx.load(str(path), load_external_data=False)
        stored = [t for t in stored_tensors(raw.graph) if t.data_location == onnx.TensorProto.EXTERNAL]  # Scans' Constants too
        assert stored and all(int({e.key: e.value for e in t.external_data}["offset"]) % ALIGN == 0 for t in stored)
    report = stack.check("ort", OnnxRuntimeRunner(path), w, shapes=SHAPES, ragged=True, seed=_seed(spec))
    assert report, report
    assert rnnx.load(path).equal(w) or w.spec.proj_size  # lowered projections store the summed biases


def test_a_streamed_onnx_file_is_checked_by_onnx_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker runs on the planned model (its weights in a sparse placeholder), so a
    broken graph is refused before anything is written."""
    from rnnx.formats import onnx_stream

    w = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4"), seed=1)
    plan = plan_stack_model(w)
    plan.model.graph.node[0].input[0] = "missing"
    with pytest.raises(rnnx.RNNXError, match="does not pass onnx.checker"):
        onnx_stream.check_planned(plan)


# --- the CLI on a model of some size: memory and the check's cost -------------------------

# The child's own high-water mark (VmHWM): ru_maxrss would carry the parent's (pytest's) peak
# over from the fork.
_MEASURED = """
import re, sys
from rnnx.cli import main
try:
    code = main(sys.argv[2:])
finally:
    status = open("/proc/self/status").read()
    with open(sys.argv[1], "w") as f:
        f.write(str(int(re.search(r"VmHWM:\\s+(\\d+) kB", status).group(1)) * 1024))
sys.exit(code)
"""


def run_measured(args: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, int]:
    """``rnnx ARGS`` in a child process: (its result, its peak RSS in bytes)."""
    peak = tmp_path / f"peak-{os.getpid()}-{len(list(tmp_path.iterdir()))}"
    done = subprocess.run([sys.executable, "-c", _MEASURED, str(peak), *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return done, int(peak.read_text())


def torch_checkpoint(path: Path, spec: RNNSpec, seed: int) -> None:
    """A torch-layout safetensors file of seeded uniform weights, one tensor at a time."""
    rng = np.random.default_rng(seed)
    bound = 1.0 / np.sqrt(spec.hidden_size)
    arrays = {name: rng.uniform(-bound, bound, size=shape).astype(np.float32) for name, shape in _torch_shapes(spec).items()}
    write_safetensors(path, arrays, {"format": "pt"})


def _torch_shapes(spec: RNNSpec) -> dict[str, tuple[int, ...]]:
    gates = len(spec.gates)
    shapes = {}
    for layer in range(spec.num_layers):
        for sfx in ("", "_reverse")[: spec.num_directions]:
            shapes[f"weight_ih_l{layer}{sfx}"] = (gates * spec.hidden_size, spec.layer_input_size(layer))
            shapes[f"weight_hh_l{layer}{sfx}"] = (gates * spec.hidden_size, spec.hidden_size)
            shapes[f"bias_ih_l{layer}{sfx}"] = (gates * spec.hidden_size,)
            shapes[f"bias_hh_l{layer}{sfx}"] = (gates * spec.hidden_size,)
    return shapes


def test_a_200_mb_checkpoint_converts_in_about_one_copy_of_memory(tmp_path: Path) -> None:
    """A 200 MB torch checkpoint converts to ONNX (one file) and to a cuDNN blob with peak
    memory under the start-up's plus 1.3x the file (before streaming: 8x for ONNX), and the
    JSON reports the check's cost apart from the conversion's."""
    spec = RNNSpec.parse("lstm,input=512,hidden=1024,layers=3,bidirectional")
    src = tmp_path / "ck.safetensors"
    torch_checkpoint(src, spec, seed=7)
    size = src.stat().st_size
    assert size > 150e6
    tiny = tmp_path / "tiny.safetensors"
    torch_checkpoint(tiny, RNNSpec.parse("lstm,input=4,hidden=8,layers=3,bidirectional"), seed=7)
    for target in ("out.onnx", "out.bin"):
        start, start_peak = run_measured(["convert", str(tiny), "-o", str(tmp_path / ("tiny-" + target)), "--no-check"], tmp_path)
        assert start.returncode == 0, start.stderr
        done, peak = run_measured(["convert", str(src), "-o", str(tmp_path / target), "--no-check", "--json"], tmp_path)
        assert done.returncode == 0, done.stderr
        assert peak - start_peak < 1.3 * size, f"{target}: peak {peak / 1e6:.0f} MB, start-up {start_peak / 1e6:.0f} MB, file {size / 1e6:.0f} MB"
        report = json.loads(done.stdout)
        assert report["check"] is None and set(report["seconds"]) == {"read", "write"}
    done, _ = run_measured(["convert", str(src), "-o", str(tmp_path / "checked.onnx"), "--json"], tmp_path)
    report = json.loads(done.stdout)
    assert report["check"]["passed"] and report["check"]["seconds"] == report["seconds"]["check"] > 0
    assert [list(s) for s in report["check"]["shapes"]] == [list(s) for s in sorted(stack.DEFAULT_SHAPES)]
    # The conftest runs rnnx verify on every file written (~10 s for each 200 MB file): a checked
    # file byte for byte the same as out.onnx is verified once, as out.onnx.
    if filecmp.cmp(tmp_path / "checked.onnx", tmp_path / "out.onnx", shallow=False):
        (tmp_path / "checked.onnx").unlink()


@pytest.mark.slow
def test_a_3_gb_model_converts_to_onnx_and_cudnn_under_8_gb(tmp_path: Path) -> None:
    """A 3.1 GB 4-layer bidirectional LSTM (H=3072) converts, with its check, to ONNX (as
    external data: past protobuf's 2 GiB) and to a cuDNN blob, each in under 8 GB of memory."""
    spec = RNNSpec.parse("lstm,input=1024,hidden=3072,layers=4,bidirectional")
    src = tmp_path / "big.safetensors"
    torch_checkpoint(src, spec, seed=3)
    assert src.stat().st_size > 3.0e9
    for target in ("big.onnx", "big.cudnn.safetensors"):
        done, peak = run_measured(["convert", str(src), "-o", str(tmp_path / target), "--to", target.split(".")[1], "--json"], tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        report = json.loads(done.stdout)
        assert report["check"]["passed"], report
        assert peak < 8e9, f"{target}: peak {peak / 1e9:.2f} GB"
        print(f"{target}: peak {peak / 1e9:.2f} GB for a {src.stat().st_size / 1e9:.2f} GB file; seconds {report['seconds']}")
    assert (tmp_path / "big.onnx.data").exists()


# --- an input changed while it is converted ------------------------------------------------

_CUT_SHORT = """
import os, sys
from rnnx import fileio
from rnnx.cli import main
real = fileio.stream
def cut_after_first(f, pieces, *args, **kwargs):  # another process truncates the input mid-conversion
    written = real(f, pieces, *args, **kwargs)
    os.truncate(sys.argv[1], 4096)
    return written
fileio.stream = cut_after_first
import rnnx.formats.cudnn_raw as cudnn_raw
import rnnx.formats.onnx_stream as onnx_stream
onnx_stream.stream = cudnn_raw.stream = cut_after_first
sys.exit(main(["convert", sys.argv[1], "-o", sys.argv[2], "--no-check"]))
"""


@pytest.mark.parametrize("target", ["out.onnx", "out.bin"])
def test_an_input_cut_short_during_a_conversion_is_one_line_and_leaves_nothing(tmp_path: Path, target: str) -> None:
    """The mapped source truncated after the first tensor is written: the next read of it is a
    bus error, which the CLI turns into one line, exit 2 and no partial file."""
    src = tmp_path / "w.safetensors"
    torch_checkpoint(src, RNNSpec.parse("lstm,input=256,hidden=256,layers=2,bidirectional"), seed=1)
    done = subprocess.run([sys.executable, "-c", _CUT_SHORT, str(src), str(tmp_path / target)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert done.stderr.count("\n") == 1 and "shrank while it was read" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]


def test_an_input_rewritten_during_a_conversion_is_not_renamed_into_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Overwritten in place (same size) while the output is written: what was read may be half
    old, half new, so nothing is renamed into place."""
    from rnnx.formats import cudnn_raw

    src = tmp_path / "w.safetensors"
    torch_checkpoint(src, RNNSpec.parse("gru,input=8,hidden=8,layers=2"), seed=2)
    real = cudnn_raw.write

    def rewrite_then_write(weights: RNNWeights, path: Path, dtype: str | None = None) -> None:
        with open(src, "r+b") as f:  # as `dd conv=notrunc` does
            f.seek(200)
            f.write(b"\0" * 64)
        os.utime(src, ns=(os.stat(src).st_atime_ns, os.stat(src).st_mtime_ns + 10**9))
        real(weights, path, dtype)

    monkeypatch.setattr(cudnn_raw, "write", rewrite_then_write)
    with pytest.raises(rnnx.RNNXError, match=r"w.safetensors: changed while it was being converted .* nothing was written to .*out.bin"):
        convert(src, tmp_path / "out.bin", check=False)
    assert not (tmp_path / "out.bin").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]


def test_external_data_is_named_in_the_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the threshold an ONNX output is two files; the result lists both with their sizes
    and a note says to keep them together."""
    monkeypatch.setattr(onnx_build, "EXTERNAL_DATA_BYTES", 0)
    src = tmp_path / "w.safetensors"
    torch_checkpoint(src, RNNSpec.parse("lstm,input=16,hidden=32,layers=2"), seed=4)
    result = convert(src, tmp_path / "m.onnx")
    data = tmp_path / "m.onnx.data"
    assert result.written and result.report and set(result.to_json()["files"]) == {str(tmp_path / "m.onnx"), str(data)}
    assert result.files[str(data)] == data.stat().st_size > 0
    assert any("m.onnx.data" in n and "ship both files together" in n for n in result.notes)
    plain = convert(src, tmp_path / "w.bin")
    assert plain.files == {str(tmp_path / "w.bin"): (tmp_path / "w.bin").stat().st_size}


@pytest.mark.parametrize("external", [False, True], ids=["one_file", "external_data"])
def test_verify_hands_onnx_runtime_a_small_proto_that_points_into_the_files(tmp_path: Path, external: bool,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """verify reads the model lazily and gives ONNX Runtime a protobuf whose weights point into
    the model's own file (or its external data): a small message, whatever the model's size,
    which ONNX Runtime runs, in a child process and in this one."""
    from rnnx.formats.onnx_lazy import for_runtime
    from rnnx.formats.onnx_read import load_model
    from rnnx.verify.models import verify_file

    monkeypatch.setattr(onnx_build, "EXTERNAL_DATA_BYTES", 0 if external else onnx_build.EXTERNAL_DATA_BYTES)
    w = RNNWeights.random(RNNSpec.parse("gru,input=128,hidden=256,layers=2,bidirectional"), seed=9)
    path = tmp_path / "m.onnx"
    save_planned(plan_stack_model(w), path)
    size = path.stat().st_size + sum(p.stat().st_size for p in tmp_path.glob("*.data"))
    handed = for_runtime(load_model(path, lazy=True), tmp_path)
    assert handed.ByteSize() < size / 100, (handed.ByteSize(), size)
    for isolated in (True, False):
        report = verify_file(path, isolated=isolated)
        assert report.passed and all(la.status == "ok" for la in report.layers), report
