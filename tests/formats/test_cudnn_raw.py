"""Headerless cuDNN blobs (``.bin``): the raw dump of cuDNN's weight space that C++ code
``fread``s, read and written at a stated dtype.

The dumps here are made as a C++ user makes them: PyTorch's own tensors, in the order torch
hands them to cuDNN (``_flat_weights_names``, every matrix before every bias; pinned against
cuDNN itself on a GPU by tests/gpu), written with numpy's ``tofile``. What rnnx makes of them
is then run by torch and ONNX Runtime against the torch module's own outputs. bfloat16's
rounding is held to torch's, which owns it here.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError
from rnnx.cli import main
from rnnx.formats import cudnn_raw
from rnnx.weights import tensor_name
from tests.formats.test_cudnn import TORCH_MODULES, _torch_flat_blob

torch = pytest.importorskip("torch")

README = Path(__file__).parents[2] / "docs" / "cli.md"  # where the raw-blob commands are documented
SHAPES = ((1, 1), (9, 1), (5, 3), (13, 6))  # (seq_len, batch): batch 1 and a single step included


def _module(text: str) -> object:
    """The torch module for ``text``, its weights drawn from a seed of the spec's text."""
    torch.manual_seed(zlib.crc32(text.encode()))
    module = TORCH_MODULES[text](torch.nn).eval()
    for p in module.parameters():
        torch.nn.init.uniform_(p, -0.6, 0.6)
    return module


def _dump(module: object, path: Path, dtype: str = "<f4") -> Path:
    """As a C++ program's author dumps cuDNN's weight space: the flat buffer, raw, little-endian."""
    _torch_flat_blob(module).astype(dtype).tofile(path)
    return path


def _inputs(spec: RNNSpec, seq_len: int, batch: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = spec.num_layers * spec.num_directions
    inputs = {"X": rng.standard_normal((seq_len, batch, spec.input_size)).astype(np.float32),
              "h0": (rng.standard_normal((n, batch, spec.output_size)) * 0.5).astype(np.float32)}
    if spec.cell == "lstm":
        inputs["c0"] = (rng.standard_normal((n, batch, spec.hidden_size)) * 0.5).astype(np.float32)
    return inputs


def _torch_outputs(module: object, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    h0 = torch.from_numpy(inputs["h0"])
    state = (h0, torch.from_numpy(inputs["c0"])) if "c0" in inputs else h0
    with torch.no_grad():
        y, h = module(torch.from_numpy(inputs["X"]), state)  # type: ignore[operator]
    return [y.numpy(), *(t.numpy() for t in (h if isinstance(h, tuple) else (h,)))]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("text", list(TORCH_MODULES))
def test_a_torch_dump_converted_by_the_cli_runs_as_torch_runs_it(text: str, tmp_path: Path) -> None:
    """A raw float32 dump of torch's cuDNN buffer, converted by ``rnnx convert`` to a torch
    checkpoint and to ONNX: a fresh torch module loaded from the one and ONNX Runtime on the
    other give the original module's outputs at every shape, batch 1 included."""
    import onnxruntime as ort

    spec = RNNSpec.parse(text)
    module = _module(text)
    blob = _dump(module, tmp_path / "weights.bin")
    before = _digest(blob)
    for out in ("y.pt", "y.onnx"):
        assert main(["convert", str(blob), "--from", "cudnn", "--spec", text, "--dtype", "float32", "-o", str(tmp_path / out)]) == 0
    assert _digest(blob) == before
    fresh = TORCH_MODULES[text](torch.nn).eval()
    fresh.load_state_dict(torch.load(tmp_path / "y.pt", weights_only=True))
    session = ort.InferenceSession(str(tmp_path / "y.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for k, (seq_len, batch) in enumerate(SHAPES):
        inputs = _inputs(spec, seq_len, batch, seed=zlib.crc32(f"{text}/{k}".encode()))
        want = _torch_outputs(module, inputs)
        for got, w in zip(_torch_outputs(fresh, inputs), want):
            np.testing.assert_array_equal(got, w)  # the same weights in the same kernels
        ran = session.run(None, {n: inputs[n] for n in names})
        for got, w in zip(ran, want):
            if got.ndim == 4:  # ONNX's Y is (seq, directions, batch, hidden); torch's (seq, batch, directions * hidden)
                got = got.transpose(0, 2, 1, 3).reshape(w.shape)
            np.testing.assert_allclose(got, w, atol=3e-5, rtol=0)


def test_a_swapped_dump_is_caught(tmp_path: Path) -> None:
    """The test above can fail: a dump with two gates' rows exchanged (f and g, what a wrong
    linLayerID order does) converts without complaint but does not compute what torch does."""
    text = "gru,input=3,hidden=4,layers=3"
    module = _module(text)
    blob = _torch_flat_blob(module)
    spec = RNNSpec.parse(text)
    H = spec.hidden_size
    blob[: 2 * H * 3] = np.concatenate([blob[H * 3: 2 * H * 3], blob[: H * 3]])  # layer 0's W_r and W_z exchanged
    blob.astype("<f4").tofile(tmp_path / "w.bin")
    assert main(["convert", str(tmp_path / "w.bin"), "--spec", text, "-o", str(tmp_path / "y.pt")]) == 0
    fresh = TORCH_MODULES[text](torch.nn).eval()
    fresh.load_state_dict(torch.load(tmp_path / "y.pt", weights_only=True))
    inputs = _inputs(spec, 6, 2, seed=5)
    assert np.abs(_torch_outputs(fresh, inputs)[0] - _torch_outputs(module, inputs)[0]).max() > 1e-2


@pytest.mark.parametrize("text", list(TORCH_MODULES))
def test_writing_a_bin_from_a_torch_checkpoint_gives_torchs_buffer_byte_for_byte(text: str, tmp_path: Path) -> None:
    module = _module(text)
    torch.save(module.state_dict(), tmp_path / "ck.pt")
    want = _torch_flat_blob(module).astype("<f4").tobytes()
    assert main(["convert", str(tmp_path / "ck.pt"), "--spec", text, "-o", str(tmp_path / "w.bin")]) == 0
    assert (tmp_path / "w.bin").read_bytes() == want
    # the format named, and the dtype stated, give the same bytes
    assert main(["convert", str(tmp_path / "ck.pt"), "--spec", text, "--to", "cudnn", "--dtype", "float32", "-o", str(tmp_path / "v.bin")]) == 0
    assert (tmp_path / "v.bin").read_bytes() == want


def _torch_halves(values: np.ndarray, dtype: str) -> bytes:
    """The bytes of ``values`` rounded by torch to ``dtype`` (its 16 bits, little-endian)."""
    rounded = torch.from_numpy(np.ascontiguousarray(values, np.float32)).to(getattr(torch, dtype)).view(torch.int16)
    return rounded.numpy().astype("<i2").tobytes()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_blobs_hold_torchs_rounding_and_read_back_within_it(dtype: str, tmp_path: Path) -> None:
    spec = RNNSpec.parse("lstm,input=5,hidden=7,layers=2,bidirectional,proj=3")
    weights = RNNWeights.random(spec, seed=zlib.crc32(dtype.encode()), scale=3.0)
    rnnx.save(weights, tmp_path / "w.bin", dtype=dtype)
    blob = rnnx.to_format(weights, "cudnn")
    assert (tmp_path / "w.bin").read_bytes() == _torch_halves(blob, dtype)
    back = rnnx.load(tmp_path / "w.bin", spec=spec, dtype=dtype)
    rounding = cudnn_raw.ROUNDING[dtype]
    got = rnnx.to_format(back, "cudnn").astype(np.float64)
    assert np.all(np.abs(got - blob) <= rounding.rtol * np.abs(blob) + rounding.atol)
    assert np.abs(got - blob).max() > 0  # it did round
    want = torch.from_numpy(blob).to(getattr(torch, dtype)).to(torch.float32).numpy()
    np.testing.assert_array_equal(got, want)
    # and the file's read-back, written again, is the same file
    rnnx.save(back, tmp_path / "again.bin", dtype=dtype)
    assert (tmp_path / "again.bin").read_bytes() == (tmp_path / "w.bin").read_bytes()


def test_bfloat16_ties_and_carries_round_as_torch_rounds() -> None:
    """Exact ties (lower 16 bits 0x8000) after an even and an odd upper half, a carry into the
    exponent, subnormals, signed zeros and the largest values that stay finite."""
    upper = np.array([0x3F80, 0x3F81, 0x3FFF, 0x7F7E, 0x0001, 0x8000, 0xBF80, 0xC0FF], np.uint32)
    lower = np.array([0x8000, 0x7FFF, 0x8001, 0x0000, 0xFFFF], np.uint32)
    bits = (upper[:, None] << 16 | lower[None, :]).ravel()
    values = bits.view(np.float32)
    rng = np.random.default_rng(zlib.crc32(b"bf16"))
    values = np.concatenate([values, rng.standard_normal(4096).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 4096)]).astype(np.float32)
    assert cudnn_raw.narrow(values, "bfloat16").tobytes() == _torch_halves(values, "bfloat16")


def test_the_cli_round_trips_a_bfloat16_dump_within_bfloat16s_tolerance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A torch checkpoint written as a bfloat16 blob and read back into torch: the module computes
    what torch computes with its own bfloat16-rounded weights, and stays within bfloat16's
    tolerance of the float32 original. The check says it only read the file back."""
    text = "lstm,input=5,hidden=7,layers=2,bidirectional,proj=3"
    module = _module(text)
    torch.save(module.state_dict(), tmp_path / "ck.pt")
    assert main(["convert", str(tmp_path / "ck.pt"), "-o", str(tmp_path / "w.bin"), "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "read back only" in out and "cuDNN did not run" in out and "ok" not in out.split()
    assert main(["convert", str(tmp_path / "w.bin"), "--spec", text, "--dtype", "bfloat16", "-o", str(tmp_path / "y.pt")]) == 0
    fresh = TORCH_MODULES[text](torch.nn).eval()
    fresh.load_state_dict(torch.load(tmp_path / "y.pt", weights_only=True))
    rounded = TORCH_MODULES[text](torch.nn).eval()
    rounded.load_state_dict({k: v.to(torch.bfloat16).to(torch.float32) for k, v in module.state_dict().items()})
    spec = RNNSpec.parse(text)
    for k, (seq_len, batch) in enumerate(SHAPES):
        inputs = _inputs(spec, seq_len, batch, seed=k)
        for got, want, exact in zip(_torch_outputs(fresh, inputs), _torch_outputs(module, inputs), _torch_outputs(rounded, inputs)):
            np.testing.assert_array_equal(got, exact)
            np.testing.assert_allclose(got, want, atol=5e-2, rtol=5e-2)


def test_weights_beyond_float16s_range_are_refused(tmp_path: Path) -> None:
    spec = RNNSpec.parse("gru,input=2,hidden=3")
    weights = RNNWeights.random(spec, seed=1)
    weights["l0.forward.R.z"][1, 2] = 7e4
    with pytest.raises(RNNXError, match=r"l0.forward.R.z holds 70000, beyond float16's largest value 65504"):
        rnnx.save(weights, tmp_path / "w.bin", dtype="float16")
    assert not (tmp_path / "w.bin").exists()
    rnnx.save(weights, tmp_path / "w.bin", dtype="bfloat16")  # within bfloat16's range


WRONG = {
    "one byte short": (lambda raw: raw[:-1], "float32", r"expected 4608 bytes \(1152 float32 values\) for spec S at dtype float32, found 4607 bytes"),
    "one value extra": (lambda raw: raw + raw[:4], "float32", r"expected 4608 bytes .* found 4612 bytes"),
    "float32 stated as float16": (lambda raw: raw, "float16",
                                  r"expected 2304 bytes \(1152 float16 values\) for spec S at dtype float16, found 4608 bytes; "
                                  r"that is its size as float32 values; pass --dtype float32"),
    "header-like bytes": (lambda raw: (2**62).to_bytes(8, "little") + raw[8:], "bfloat16", r"expected 2304 bytes .* found 4608 bytes"),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_a_blob_of_the_wrong_size_is_refused_in_one_line_before_it_is_read(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "lstm,input=8,hidden=8,bidirectional"
    cut, dtype, says = WRONG[case]
    blob = tmp_path / "weights.bin"
    blob.write_bytes(cut(rnnx.to_format(RNNWeights.random(RNNSpec.parse(text), seed=2), "cudnn").astype("<f4").tobytes()))
    before = _digest(blob)
    assert main(["convert", str(blob), "--from", "cudnn", "--spec", text, "--dtype", dtype, "-o", str(tmp_path / "y.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "header" not in err, err
    assert re.search(says.replace("spec S", f"spec {text}"), err), err
    assert _digest(blob) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.bin"]


def test_refusals_say_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "rnn_tanh,input=2,hidden=3,bidirectional,no_bias"
    module = _module(text)
    _dump(module, tmp_path / "w.bin")
    torch.save(module.state_dict(), tmp_path / "model.bin")  # a PyTorch checkpoint, named as many are
    rnnx.save(rnnx.load(tmp_path / "w.bin", spec=text), tmp_path / "w.safetensors")
    cases = {
        ("convert", "w.bin", "-o", "y.pt"): "a headerless .bin blob does not say what it holds; pass --spec SPEC",
        ("convert", "model.bin", "--spec", text, "-o", "y.pt"): "the file is a zip archive, as a PyTorch checkpoint is: pass --from torch",
        ("convert", "w.safetensors", "-o", "y.pt", "--dtype", "float16"): "neither w.safetensors (rnnx) nor y.pt (torch) is one; drop --dtype",
        ("convert", "w.bin", "--spec", text, "-o", "y.bin", "--dtype", "fp16,fp32"): "a raw blob has one element type",
        ("convert", "w.bin", "--spec", text.replace(",no_bias", ""), "-o", "y.pt"): f"that is the size for spec {text}",
    }
    for argv, says in cases.items():
        assert main([a if not a.endswith((".bin", ".pt", ".safetensors")) else str(tmp_path / a) for a in argv]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin", "w.bin", "w.safetensors"]
    assert main(["convert", str(tmp_path / "model.bin"), "--from", "torch", "--spec", text, "-o", str(tmp_path / "y.bin")]) == 0
    assert (tmp_path / "y.bin").read_bytes() == (tmp_path / "w.bin").read_bytes()


def test_the_readme_commands_work_as_written(tmp_path: Path) -> None:
    """The docs' own raw-blob commands (docs/cli.md), run as a user runs them: reading a dump of torch's
    buffer, and writing one from a torch checkpoint, byte for byte what torch would hand cuDNN."""
    lines = [line.split("#")[0].strip() for line in README.read_text().splitlines()
             if line.startswith("rnnx convert ") and ".bin" in line.split("#")[0]]
    assert len(lines) >= 2, "docs/cli.md shows no rnnx convert command for .bin files"
    stored = {"float32": "<f4", "float16": "<f2", "float64": "<f8"}
    for line in lines:
        argv = shlex.split(line)
        source, output = Path(argv[2]), Path(argv[argv.index("-o") + 1])
        spec = RNNSpec.parse(argv[argv.index("--spec") + 1]) if "--spec" in argv else RNNSpec.parse("lstm,input=8,hidden=16,layers=2")
        dtype = argv[argv.index("--dtype") + 1] if "--dtype" in argv else "float32"
        assert spec.cell == "lstm" and not spec.proj_size
        torch.manual_seed(zlib.crc32(line.encode()))
        module = torch.nn.LSTM(spec.input_size, spec.hidden_size, spec.num_layers, bidirectional=spec.num_directions == 2)
        flat = _torch_flat_blob(module)
        if source.suffix == ".bin":
            flat.astype(stored[dtype]).tofile(tmp_path / source)
        else:
            torch.save(module.state_dict(), tmp_path / source)
        result = subprocess.run([sys.executable, "-m", "rnnx.cli", *argv[1:]], capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert result.returncode == 0, (line, result.stderr)
        if output.suffix == ".bin":
            want = _torch_halves(flat, dtype) if dtype in ("bfloat16", "float16") else flat.astype(stored[dtype]).tobytes()
            assert (tmp_path / output).read_bytes() == want, line
        else:
            np.testing.assert_array_equal(rnnx.to_format(rnnx.load(tmp_path / output), "cudnn"), flat.astype(stored[dtype]))
        for path in (source, output):
            (tmp_path / path).unlink()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_layout_counts_bytes_at_the_blobs_dtype(dtype: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``rnnx layout --dtype`` gives the byte offsets a C++ reader of that .bin needs: the last
    tensor ends where the file rnnx writes at that dtype ends, and each offset finds its tensor."""
    import json

    text = "lstm,input=5,hidden=7,layers=2,bidirectional,proj=3"
    weights = RNNWeights.random(RNNSpec.parse(text), seed=4)
    rnnx.save(weights, tmp_path / "w.bin", dtype=dtype)
    assert main(["layout", "--spec", text, "--dtype", dtype, "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    size = (tmp_path / "w.bin").stat().st_size
    last = table["entries"][-1]
    assert table["elements"] * table["itemsize"] == size == last["byte_offset"] + int(np.prod(last["shape"])) * table["itemsize"]
    raw = (tmp_path / "w.bin").read_bytes()
    back = rnnx.load(tmp_path / "w.bin", spec=text, dtype=dtype)
    for row in table["entries"]:
        n = int(np.prod(row["shape"])) * table["itemsize"]
        chunk = cudnn_raw.widen(np.frombuffer(raw[row["byte_offset"]: row["byte_offset"] + n], cudnn_raw.STORED[dtype]), dtype)
        np.testing.assert_array_equal(chunk, back[tensor_name(row["layer"], row["direction"], row["kind"], row["gate"])].reshape(-1))
