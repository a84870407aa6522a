"""fuse's and lower's check runs at shapes the input model itself takes (issue 27).

The files are made by their real producers: torch.onnx's dynamo exporter and rnnx.export.
- A voice-activity model with a reflect-padded STFT (``torch.stft(center=True,
  pad_mode="reflect")``) refuses 3 or 16 samples ("Pad reflect: pre-pad (32) exceeds maximum
  allowed"): the check used to feed every dynamic dimension 3, so ``rnnx fuse`` exited 2.
- An LSTMCell stepped 12 times in Python, exported by dynamo: without dynamic shapes the
  file is static; with torch's ``Dim.AUTO`` its time axis is dynamic but the graph reads
  positions 0..11 (``Gather`` for ``x[t]``, ``SequenceAt`` for ``x.unbind(0)``), so it only
  means what it traced at 12 ("Gather ... idx=11 must be within the inclusive range [-3,2]").
- A ``(batch, 80, seq)`` input, whose lower table read ``T 3 B 80``.

Each written file is then held against the original in ONNX Runtime by the test itself, at
shapes the original takes (batch 1 included). A fused file whose length the original only
takes from 33 samples up is removed once checked: ``rnnx verify`` (which the conftest runs
on every file rnnx writes) still sizes a foreign file's lengths at 16 without trying others.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from rnnx.cli import main
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from tests.helpers import MadeOnFirstUse, rnnx_in_process

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")  # torch.onnx's dynamo exporter
from torch import nn  # noqa: E402
from torch.export import Dim  # noqa: E402

N_FFT, HOP, HIDDEN = 64, 16, 16


def _stft_magnitude(x: Any) -> Any:
    spec = torch.stft(x, n_fft=N_FFT, hop_length=HOP, center=True, pad_mode="reflect", window=torch.hann_window(N_FFT), return_complex=False)
    return spec.pow(2).sum(-1).clamp_min(1e-8).sqrt()  # (batch, bins, frames)


class VAD(nn.Module):
    """Reflect-padded STFT magnitude, an LSTM over the frames, Linear + sigmoid per frame."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(N_FFT // 2 + 1, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, 1)

    def forward(self, x: Any) -> Any:
        out, _ = self.rnn(_stft_magnitude(x).transpose(1, 2))
        return torch.sigmoid(self.head(out)).squeeze(-1)


class StreamingVAD(nn.Module):
    """One chunk of audio and the LSTM state in; the speech probability and the next state out
    (as Silero's VAD is called): the cell's one step is what ``rnnx fuse`` makes native."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(N_FFT // 2 + 1, HIDDEN)
        self.head = nn.Linear(HIDDEN, 1)

    def forward(self, x: Any, h: Any, c: Any) -> Any:
        h, c = self.cell(_stft_magnitude(x).mean(-1), (h, c))
        return torch.sigmoid(self.head(h)), h, c


class Mel(nn.Module):
    """A (batch, 80, seq) log-mel input, as speech front ends give it."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(80, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, 4)

    def forward(self, feats: Any) -> Any:
        out, _ = self.rnn(feats.transpose(1, 2))
        return self.head(out)


class Unbound(nn.Module):
    """An LSTMCell stepped over ``x.unbind(0)`` in Python: 12 steps in the example."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(5, 7)

    def forward(self, x: Any) -> Any:
        h = x.new_zeros(x.shape[1], 7)
        c = x.new_zeros(x.shape[1], 7)
        ys = []
        for xt in x.unbind(0):
            h, c = self.cell(xt, (h, c))
            ys.append(h)
        return torch.stack(ys)


class Indexed(Unbound):
    """The same loop over ``x[t]`` for t in range(12): dynamo writes a Gather per step."""

    def forward(self, x: Any) -> Any:
        h = x.new_zeros(x.shape[1], 7)
        c = x.new_zeros(x.shape[1], 7)
        ys = []
        for t in range(12):
            h, c = self.cell(x[t], (h, c))
            ys.append(h)
        return torch.stack(ys)


def _dynamo(model: Any, args: tuple[Any, ...], path: Path, names: list[str], dynamic: Any = None) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), args, str(path), dynamo=True, input_names=names, dynamic_shapes=dynamic)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import rnnx

    folder = tmp_path_factory.mktemp("producers")
    # The modules and examples are drawn here, in one order, whichever files are made.
    torch.manual_seed(27)
    batch = Dim("batch")
    vad, streaming, mel = VAD().eval(), StreamingVAD().eval(), Mel().eval()
    state = (torch.zeros(2, HIDDEN), torch.zeros(2, HIDDEN))
    vad_x, svad_x = torch.randn(2, 1600), torch.randn(2, 512)
    stepped_static, static_x = Unbound(), torch.randn(12, 3, 5)
    stepped_auto, auto_x = Unbound(), torch.randn(12, 3, 5)
    indexed_auto, indexed_x = Indexed(), torch.randn(12, 3, 5)
    vad_rnnx_x, svad_rnnx_x, mel_x = torch.randn(2, 1600), torch.randn(2, 512), torch.randn(2, 80, 50)

    def by_rnnx(name: str, model: Any, args: tuple[Any, ...]) -> Path:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rnnx.export(model, args, folder / f"{name}.onnx")
        return folder / f"{name}.onnx"

    # Each file is made when a test first asks for it (the dynamo export of VAD takes ~20 s).
    return MadeOnFirstUse({
        "vad_dynamo": lambda: _dynamo(vad, (vad_x,), folder / "vad_dynamo.onnx", ["x"], ({0: batch, 1: Dim("samples")},)),
        "svad_dynamo": lambda: _dynamo(streaming, (svad_x, *state), folder / "svad_dynamo.onnx", ["x", "h", "c"],
                                       ({0: batch, 1: Dim("samples")}, {0: batch}, {0: batch})),
        "stepped_static": lambda: _dynamo(stepped_static, (static_x,), folder / "stepped_static.onnx", ["x"]),
        "stepped_auto": lambda: _dynamo(stepped_auto, (auto_x,), folder / "stepped_auto.onnx", ["x"], ({0: Dim.AUTO, 1: Dim.AUTO},)),
        "indexed_auto": lambda: _dynamo(indexed_auto, (indexed_x,), folder / "indexed_auto.onnx", ["x"], ({0: Dim.AUTO, 1: Dim.AUTO},)),
        "vad_rnnx": lambda: by_rnnx("vad_rnnx", vad, (vad_rnnx_x,)),
        "svad_rnnx": lambda: by_rnnx("svad_rnnx", streaming, (svad_rnnx_x, *state)),
        "mel_rnnx": lambda: by_rnnx("mel_rnnx", mel, (mel_x,)),
    })


def rnnx_cli(*args: Any) -> subprocess.CompletedProcess[str]:
    # in-process (rnnx.cli.main): the check's shapes are tested, not the process; fuse's and
    # lower's subprocess runs are in tests/graphs/test_fuse.py and test_lower.py, and below
    return rnnx_in_process(*args)


def rnnx_process(*args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rnnx.cli", *map(str, args)], capture_output=True, text=True, timeout=600)


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _dims(path: Path) -> dict[str, list[Any]]:
    proto = onnx.load(str(path), load_external_data=False)
    return {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in proto.graph.input}


def _same_outputs(original: Path, written: Path, shapes: list[dict[str, tuple[int, ...]]]) -> None:
    """The written file gives the original's outputs at each of ``shapes`` (all of which the original takes)."""
    before, after = OnnxRuntimeRunner(original), OnnxRuntimeRunner(written)
    rng = np.random.default_rng(0)
    for shape in shapes:
        feed = {name: rng.standard_normal(s).astype(np.float32) for name, s in shape.items()}
        want, got = before(feed), after(feed)
        assert set(want) == set(got)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], atol=1e-5, rtol=1e-4, err_msg=f"{name} at {shape}")


def _cases(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["check"]["cases"]}


def _streaming_shapes(*pairs: tuple[int, int]) -> list[dict[str, tuple[int, ...]]]:
    return [{"x": (b, n), "h": (b, HIDDEN), "c": (b, HIDDEN)} for b, n in pairs]


# --- the voice-activity models ---------------------------------------------------------------


def test_fuse_checks_a_reflect_padded_stft_where_the_model_runs(files: dict[str, Path], tmp_path: Path) -> None:
    src, out = files["svad_dynamo"], tmp_path / "fused.onnx"
    assert _dims(src)["x"] == ["batch", "samples"]
    report = _json(rnnx_cli("fuse", src, "-o", out, "--json"))
    check = report["check"]
    assert len(report["cells"]) == 1 and check["passed"]
    assert check["dims"] == {"x": ["batch", "samples"], "h": ["batch", HIDDEN], "c": ["batch", HIDDEN]}
    assert check["roles"] == {"batch": "batch", "samples": "length"}
    # 16 samples (and fewer) is a shape the model itself refuses: tried, said, and not held against the rewrite
    assert check["refused"] and all("samples=16" in r or "samples=32" in r for r in check["refused"])
    assert any("Pad reflect" in n for n in check["notes"])
    ran = [c for c in check["cases"] if not c["skipped"]]
    assert len(ran) >= 3 and all(c["passed"] for c in ran)
    assert {c["sizes"]["batch"] for c in ran} >= {1} and len({c["sizes"]["samples"] for c in ran}) >= 2
    for c in ran:  # every shape is labelled by the graph's own names
        b, n = c["sizes"]["batch"], c["sizes"]["samples"]
        assert c["shapes"] == {"x": [b, n], "h": [b, HIDDEN], "c": [b, HIDDEN]} and n > N_FFT // 2
        assert c["where"] == f"x[batch={b}, samples={n}], h[batch={b}, {HIDDEN}], c[batch={b}, {HIDDEN}]"
    assert {r["case"] for r in check["rows"]} == {c["name"] for c in ran} and not any("seq_len" in r for r in check["rows"])
    _same_outputs(src, out, _streaming_shapes((1, 64), (3, 400), (2, 1000)))
    out.unlink()  # rnnx verify still sizes this file's samples at 16 (see the module docstring)


def test_fuse_text_report_names_each_dimension(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "fused.onnx"
    done = rnnx_cli("fuse", files["svad_dynamo"], "-o", out)
    assert done.returncode == 0, done.stderr
    assert "x[batch=1, samples=" in done.stdout and "h[batch=1, 16]" in done.stdout
    assert "the input model itself refuses" in done.stdout and "Pad reflect" in done.stdout
    out.unlink()


# The dynamo export of the VAD (dynamic samples through the STFT into the LSTM) costs ~20 s, so
# lowering it runs with --slow. The search past sizes the model refuses is the check's own, shared
# by fuse and lower: fuse meets it by default on svad_dynamo (the same reflect-padded STFT), and
# lower's refusal on vad_rnnx (the sizes given) runs by default too.
@pytest.mark.parametrize("producer", [pytest.param("vad_dynamo", marks=pytest.mark.slow), "vad_rnnx"])
def test_lower_checks_a_vad_at_shapes_it_takes(files: dict[str, Path], tmp_path: Path, producer: str) -> None:
    src, out = files[producer], tmp_path / "lowered.onnx"
    report = _json(rnnx_cli("lower", src, "-o", out, "--json"))
    check = report["check"]
    assert len(report["lowered"]) == 1 and check["passed"]
    cases = _cases(report)
    ran = [c for c in cases.values() if not c["skipped"]]
    assert len(ran) >= 3 and any(c["sizes"]["batch"] == 1 for c in ran)
    if producer == "vad_rnnx":  # the example rnnx export recorded comes first, exactly
        assert check["dims"] == {"x": ["batch", "seq"]} and not check["refused"]
        assert cases["the recorded example"]["shapes"] == {"x": [2, 1600]}
        assert cases["batch=1"]["shapes"] == {"x": [1, 1600]}
    else:
        assert check["dims"] == {"x": ["batch", "samples"]} and check["refused"]
        assert all(c["sizes"]["samples"] > N_FFT // 2 for c in ran)
    _same_outputs(src, out, [{"x": (1, 1600)}, {"x": (3, 800)}, {"x": (1, 100)}])
    if producer == "vad_dynamo":
        out.unlink()  # rnnx verify still sizes this file's samples at 16 (see the module docstring)


def test_lower_table_labels_batch_80_seq(files: dict[str, Path], tmp_path: Path) -> None:
    """A (batch, 80, seq) input read as T 3 B 80 before: the first axis taken for time, the second for batch."""
    src = files["mel_rnnx"]
    assert _dims(src)["feats"] == ["batch", 80, "seq"]
    report = _json(rnnx_cli("lower", src, "-o", tmp_path / "a.onnx", "--json"))
    check = report["check"]
    assert check["dims"] == {"feats": ["batch", 80, "seq"]} and check["roles"] == {"batch": "batch", "seq": "length"}
    cases = _cases(report)
    assert cases["the recorded example"]["where"] == "feats[batch=2, 80, seq=50]"
    assert cases["batch=1"]["where"] == "feats[batch=1, 80, seq=50]"
    assert any(c["where"] == "feats[batch=4, 80, seq=53]" for c in cases.values())
    text = rnnx_cli("lower", src, "-o", tmp_path / "b.onnx")
    assert text.returncode == 0, text.stderr
    assert "feats[batch=1, 80, seq=50]" in text.stdout
    header = next(line for line in text.stdout.splitlines() if "max abs" in line)
    assert header.split()[:2] == ["case", "output"] and " T " not in header and " B " not in header
    _same_outputs(src, tmp_path / "a.onnx", [{"feats": (1, 80, 7)}, {"feats": (3, 80, 20)}])


# --- an LSTMCell stepped 12 times --------------------------------------------------------------


def test_fuse_a_static_unrolled_loop(files: dict[str, Path], tmp_path: Path) -> None:
    src, out = files["stepped_static"], tmp_path / "fused.onnx"
    assert _dims(src)["x"] == [12, 3, 5]  # torch.onnx.export(dynamo=True) with no dynamic shapes
    report = _json(rnnx_cli("fuse", src, "-o", out, "--json"))
    assert report["chains"][0]["steps"] == 12 and report["check"]["passed"]
    assert [c["shapes"] for c in report["check"]["cases"]] == [{"x": [12, 3, 5]}]  # the only shape the file takes
    _same_outputs(src, out, [{"x": (12, 3, 5)}])


@pytest.mark.parametrize("producer", ["stepped_auto", "indexed_auto"])
def test_fuse_holds_a_traced_length_and_varies_the_batch(files: dict[str, Path], tmp_path: Path, producer: str) -> None:
    """Dim.AUTO leaves the time axis dynamic, but the graph reads positions 0..11: at 3 the
    Gather is out of range, above 12 the extra steps are ignored. The check holds it at 12."""
    src, out = files[producer], tmp_path / "fused.onnx"
    (time_label, batch_label, _) = _dims(src)["x"]
    assert isinstance(time_label, str) and isinstance(batch_label, str)
    original = OnnxRuntimeRunner(src)
    with pytest.raises(Exception, match="11"):  # what the old check hit at its size 3
        original({"x": np.zeros((3, 3, 5), np.float32)})
    report = _json(rnnx_cli("fuse", src, "-o", out, "--json"))
    check = report["check"]
    assert report["chains"][0]["steps"] == 12 and check["passed"]
    assert any(n.startswith(f"{time_label} is held at 12") for n in check["notes"])
    ran = [c for c in check["cases"] if not c["skipped"]]
    assert {c["sizes"][time_label] for c in ran} == {12} and {c["sizes"][batch_label] for c in ran} >= {1, 3}
    assert all(c["where"] == f"x[{time_label}=12, {batch_label}={c['sizes'][batch_label]}, 5]" for c in ran)
    _same_outputs(src, out, [{"x": (12, 1, 5)}, {"x": (12, 4, 5)}])


# --- the caller's shapes -----------------------------------------------------------------------


def test_dim_and_input_set_the_check_shapes(files: dict[str, Path], tmp_path: Path) -> None:
    fused = tmp_path / "fused.onnx"
    report = _json(rnnx_cli("fuse", files["svad_dynamo"], "-o", fused, "--json", "--dim", "samples=400"))
    ran = [c for c in report["check"]["cases"] if not c["skipped"]]
    assert {c["sizes"]["samples"] for c in ran} == {400} and {c["sizes"]["batch"] for c in ran} >= {1}
    assert not report["check"]["refused"]
    fused.unlink()  # as above: verify's own lengths
    report = _json(rnnx_cli("lower", files["vad_rnnx"], "-o", tmp_path / "a.onnx", "--json", "--input", "x:1x16000"))
    assert [(c["name"], c["shapes"]) for c in report["check"]["cases"]] == [("the sizes given", {"x": [1, 16000]})]
    report = _json(rnnx_cli("lower", files["svad_rnnx"], "-o", tmp_path / "b.onnx", "--json", "--input", "x:[3,1024]", "--dim", "batch=3"))
    assert [c["shapes"] for c in report["check"]["cases"]] == [{"x": [3, 1024], "h": [3, HIDDEN], "c": [3, HIDDEN]}]
    # the time axis of an unrolled loop may be set too: at 13 the original ignores the 13th step, the fused file does not
    done = rnnx_cli("fuse", files["indexed_auto"], "-o", tmp_path / "c.onnx", "--dim", f"{_dims(files['indexed_auto'])['x'][0]}=13")
    assert done.returncode == 1 and "differs" in done.stderr and not (tmp_path / "c.onnx").exists()


@pytest.mark.parametrize(("verb", "producer", "flags", "fragments"), [
    ("fuse", "svad_dynamo", ["--dim", "samples=20"], ["refuses every shape tried (with the sizes given)", "samples=20", "Pad reflect"]),
    ("lower", "vad_rnnx", ["--input", "x:2x24"], ["refuses every shape tried (with the sizes given)", "x[batch=2, seq=24]"]),
    ("fuse", "indexed_auto", ["--dim", "IDX=5"], ["refuses every shape tried", "=5, ", "idx=11"]),
])
def test_a_size_the_model_refuses_is_one_line_exit_2(files: dict[str, Path], tmp_path: Path, verb: str, producer: str,
                                                     flags: list[str], fragments: list[str]) -> None:
    flags = [f.replace("IDX", str(_dims(files[producer])["x"][0])) for f in flags]
    out = tmp_path / "out.onnx"
    done = rnnx_process(verb, files[producer], "-o", out, *flags)  # a process: no traceback reaches its stderr
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert all(f in lines[0] for f in fragments), lines[0]
    assert "give shapes it takes with --dim LABEL=SIZE or --input NAME:SHAPE" in lines[0]
    assert not out.exists()


@pytest.mark.parametrize(("flags", "fragment"), [
    (["--dim", "frames=9"], "--dim: frames: the file has no dynamic dimension of that name; its dynamic dimensions are batch, samples"),
    (["--input", "x:1x20x3"], "--input: x:1x20x3: x has 2 dimensions (batch, samples), found 3"),
    (["--input", "h:2x17"], "dimension 1 of h is 16 in the graph (batch, 16), found 17"),
    (["--input", "1x400"], "a SHAPE without a NAME fits a model with one input; this one takes x, h, c"),
    (["--input", "y:2x400"], "the file has no graph input of that name; its inputs are x, h, c"),
    (["--input", "x:2xq"], "expected NAME:SHAPE with positive sizes, e.g. x:1x16000"),
])
def test_bad_shape_flags_are_refused_before_any_work(files: dict[str, Path], tmp_path: Path, flags: list[str], fragment: str) -> None:
    done = rnnx_cli("fuse", files["svad_dynamo"], "-o", tmp_path / "o.onnx", *flags)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and fragment in lines[0], done.stderr


# --- the check still fails a wrong rewrite ----------------------------------------------------


def _planted(rewrite: Any) -> Any:
    """``rewrite``, then the weights of what it made scaled by 1.3: a native node's recurrence
    matrix R (fuse), or a lowered layer's hoisted input matrix (lower)."""
    from onnx import numpy_helper

    def wrong(model: Any, *args: Any) -> Any:
        result = rewrite(model, *args)
        graph = (result[0] if isinstance(result, tuple) else model).graph
        name = next(n.input[2] if n.op_type in ("LSTM", "GRU", "RNN") else n.input[1] for n in graph.node
                    if n.op_type in ("LSTM", "GRU", "RNN") or (n.op_type == "MatMul" and n.input[1].endswith("_Wt")))
        tensor = next([i] for i in graph.initializer if i.name == name) if any(i.name == name for i in graph.initializer) else \
            [a.t for n in graph.node if n.op_type == "Constant" and n.output[0] == name for a in n.attribute if a.name == "value"]
        tensor[0].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor[0]) * 1.3, tensor[0].name))
        return result

    return wrong


@pytest.mark.parametrize(("verb", "producer", "target"), [
    ("fuse", "svad_dynamo", "rnnx.pipelines.fuse.run_fuse_passes"),
    ("lower", "mel_rnnx", "rnnx.pipelines.lower.lower_recurrences"),
])
def test_a_wrong_rewrite_still_fails_the_check(files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str], verb: str, producer: str, target: str) -> None:
    import importlib

    module_name, _, attr = target.rpartition(".")
    module = importlib.import_module(module_name)
    monkeypatch.setattr(module, attr, _planted(getattr(module, attr)))
    out = tmp_path / "wrong.onnx"
    assert main([verb, str(files[producer]), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "differs from" in err and "nothing was written" in err and "batch=" in err
    assert not out.exists()
