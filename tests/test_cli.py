"""The rnnx command as users and pipelines call it: real files, and a real subprocess wherever the test is about the process
(exit codes of a whole run, tracebacks, signals, concurrent runs); elsewhere rnnx.cli.main in-process (`inproc`)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights
from rnnx.layouts import cudnn
from tests.helpers import rnnx_in_process

EXAMPLE = Path(__file__).parents[1] / "examples" / "encoder.safetensors"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rnnx.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)


def inproc(capsys: pytest.CaptureFixture[str], *args: object) -> subprocess.CompletedProcess[str]:
    """``python -m rnnx ARGS`` in this process (:func:`tests.helpers.rnnx_in_process`), for a test
    about what a verb does, not about the process: no 2-3 s of importing torch again."""
    return rnnx_in_process(*args)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_help_lists_the_verbs() -> None:
    result = run("--help")
    assert result.returncode == 0
    for verb in ("convert", "layout", "formats"):
        assert verb in result.stdout
    assert run("convert", "--help").returncode == 0


def test_convert_example_to_onnx_checks_it(tmp_path: Path) -> None:
    before = digest(EXAMPLE)
    out = tmp_path / "enc.onnx"
    result = run("convert", EXAMPLE, "-o", out, "--json", "--seq-lens-input")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["spec"] == "lstm,input=24,hidden=32,layers=2,bidirectional"
    assert report["check"]["passed"] and {r["backend"] for r in report["check"]["rows"]} == {"ort"}
    assert {(r["seq_len"], r["batch"]) for r in report["check"]["rows"]} == {(1, 1), (5, 3), (11, 7)}  # batch 1 included
    assert digest(EXAMPLE) == before  # the input is never touched
    assert rnnx.load(out).equal(rnnx.load(EXAMPLE))


def test_convert_to_cudnn_then_layout(tmp_path: Path) -> None:
    out = tmp_path / "blob.safetensors"
    assert run("convert", EXAMPLE, "-o", out, "--to", "cudnn").returncode == 0
    result = run("layout", out, "--json")
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    spec = RNNSpec.parse(table["spec"])
    assert table["elements"] == cudnn.blob_size(spec)
    assert [r["offset"] for r in table["entries"]] == [e.offset for e in cudnn.offset_table(spec)]
    text = run("layout", "--spec", "lstm,input=8,hidden=16,layers=2,bidirectional,proj=4")
    assert text.returncode == 0 and "3840 elements" in text.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("convert", "missing.pt", "-o", "x.onnx"), "expected an existing file"),
        (("layout", "--spec", "lstm,input=3"), "missing hidden=N"),
        (("layout",), "exactly one of --spec SPEC or FILE"),
        (("layout", "--spec", "lstm,input=3,hidden=4,peepholes"), "cuDNN LSTMs have no peepholes"),
        (("convert", "EXAMPLE", "-o", "x.dat"), "no format reads or writes .dat"),  # .bin is a raw cuDNN blob
        (("convert", "EXAMPLE", "-o", "x.safetensors", "--to", "cudnn", "--spec", "gru,input=24,hidden=32"), "expected 3\\*32 rows"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, args: tuple[str, ...], fragment: str) -> None:
    args = tuple(str(EXAMPLE) if a == "EXAMPLE" else a for a in args)
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert __import__("re").search(fragment, lines[0]), lines[0]
    assert not [p for p in tmp_path.iterdir()], "no output, not even a partial one, is left behind"


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = run("--debug", "convert", "missing.pt", "-o", "x.onnx", cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_several_groups_ask_for_select(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.ModuleDict({"a": torch.nn.GRU(3, 4), "b": torch.nn.LSTM(3, 4)})
    path = tmp_path / "two.pt"
    torch.save(model.state_dict(), path)
    result = inproc(capsys, "convert", path, "-o", tmp_path / "x.onnx")
    assert result.returncode == 2 and "2 recurrent groups ('a', 'b'); pass --select GROUP" in result.stderr
    assert inproc(capsys, "convert", path, "-o", tmp_path / "x.onnx", "--select", "b").returncode == 0


def test_parity_failure_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A check that fails exits 1: float32's rounding fails a tolerance of zero."""
    zero = ("--atol", "0", "--rtol", "0")
    out = tmp_path / "enc.onnx"
    result = run("convert", EXAMPLE, "-o", out, *zero)
    assert result.returncode == 1, result.stderr
    assert "parity check failed: ort" in result.stderr and f"nothing was written to {out}" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a file that failed its check stays unwritten, with no temporary left"
    earlier = tmp_path / "enc.pt"
    earlier.write_bytes(b"previous")  # and an earlier output under that name stays as it was
    again = inproc(capsys, "convert", EXAMPLE, "-o", earlier, *zero)
    assert again.returncode == 1 and earlier.read_bytes() == b"previous" and len(list(tmp_path.iterdir())) == 1, again.stderr


def test_nan_weights_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = RNNWeights.random(RNNSpec.parse("gru,input=2,hidden=3"))
    weights["l0.forward.R.z"][1, 1] = np.nan
    src = tmp_path / "nan.safetensors"
    rnnx.save(weights, src)
    result = inproc(capsys, "convert", src, "-o", tmp_path / "x.onnx")
    assert result.returncode == 2 and "NaN or Inf" in result.stderr


def test_refuses_to_overwrite_its_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "w.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse("gru,input=2,hidden=3")), src)
    before = digest(src)
    result = inproc(capsys, "convert", src, "-o", src)
    assert result.returncode == 2 and "overwrite the input" in result.stderr
    assert digest(src) == before


def test_formats_json() -> None:
    result = run("formats", "--json")
    names = {r["name"] for r in json.loads(result.stdout)["formats"]}
    assert {"rnnx", "torch", "onnx", "cudnn", "jax", "keras"} <= names


MODEL_FILE = '''
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, num_layers=2, proj_size=4)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.out(y)

def build():
    return Net()

example_inputs = lambda: (torch.randn(5, 3, 8),)
'''


def test_export_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    (tmp_path / "mymodel.py").write_text(MODEL_FILE)
    ckpt = tmp_path / "ck.pt"
    result = run("export", tmp_path / "mymodel.py:build", "-o", tmp_path / "m.onnx", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["check"]["passed"] and report["op_types"]["Scan"] == 2 and len(report["lowered"]) == 2
    # With a checkpoint and explicit inputs; a wrong checkpoint is refused in one line.
    import importlib.util

    spec = importlib.util.spec_from_file_location("mymodel", tmp_path / "mymodel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.save(mod.Net().state_dict(), ckpt)
    ok = inproc(capsys, "export", f"{tmp_path / 'mymodel.py'}:Net", "--checkpoint", ckpt, "--input", "4x2x8", "-o", tmp_path / "m2.onnx")
    assert ok.returncode == 0, ok.stderr
    torch.save(torch.nn.GRU(3, 3).state_dict(), ckpt)
    bad = inproc(capsys, "export", f"{tmp_path / 'mymodel.py'}:Net", "--checkpoint", ckpt, "-o", tmp_path / "m3.onnx")
    assert bad.returncode == 2 and "does not fit the model" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m3.onnx").exists()
    missing = inproc(capsys, "export", f"{tmp_path / 'mymodel.py'}:nope", "-o", tmp_path / "m4.onnx")
    assert missing.returncode == 2 and "has no attribute 'nope'" in missing.stderr


def test_nonfinite_warn_converts_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = RNNWeights.random(RNNSpec.parse("gru,input=2,hidden=3"))
    weights["l0.forward.W.n"][0, 0] = np.inf
    src = tmp_path / "inf.safetensors"
    rnnx.save(weights, src)
    result = inproc(capsys, "convert", src, "-o", tmp_path / "x.onnx", "--nonfinite", "warn")
    assert result.returncode == 0 and "holds NaN or Inf" in result.stdout and (tmp_path / "x.onnx").exists()


def test_a_killed_conversion_leaves_no_output(tmp_path: Path) -> None:
    """SIGKILL while the output is being written: the final name never appears."""
    import signal
    import time

    src = tmp_path / "big.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse("lstm,input=1024,hidden=1024,layers=3,bidirectional")), src)
    out = tmp_path / "big.onnx"
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-m", "rnnx.cli", "convert", str(src), "-o", str(out), "--no-check"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen_part = False
        while proc.poll() is None:
            if list(tmp_path.glob(".big.onnx.*.part*")):
                seen_part = True
                time.sleep(0.05)  # let it write a little
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                break
            time.sleep(0.001)
        if seen_part:
            break
        out.unlink(missing_ok=True)
    assert seen_part, "the conversion finished before it could be killed"
    assert not out.exists()


SEQ2SEQ_FILE = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(13, 6)
        self.enc = nn.GRU(6, 8, batch_first=True)
        self.dec = nn.GRU(6, 8, batch_first=True)
        self.out = nn.Linear(8, 13)

    def forward(self, src, tgt):
        _, h = self.enc(self.emb(src))
        y, _ = self.dec(self.emb(tgt), h)
        return self.out(y)
'''


def test_export_names_inputs_axes_and_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    (tmp_path / "s2s.py").write_text(SEQ2SEQ_FILE)
    model = f"{tmp_path / 's2s.py'}:Net"
    # Named inputs may come in any order; 1:int64 is a shape (one token), not the value 1.
    result = inproc(capsys, "export", model, "--input", "tgt:1x1:int64", "--input", "src:1x9:int64", "--dynamic", "tgt:1=target_len",
                 "--static", "src:1", "--output-names", "logits", "-o", tmp_path / "m.onnx", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["axes"] == {"src": {"0": "batch"}, "tgt": {"0": "batch", "1": "target_len"}}
    assert report["check"]["passed"] and {c["name"] for c in report["check"]["cases"]} >= {"batch=1", "target_len=4"}
    import onnx

    proto = onnx.load(str(tmp_path / "m.onnx"))
    assert [i.name for i in proto.graph.input] == ["src", "tgt"] and [o.name for o in proto.graph.output] == ["logits"]
    for bad, message in ((["--input", "nope:2x3"], "expected a parameter of Net.forward"),
                         (["--input", "src:2x9:int64", "--input", "tgt:2x4:int64", "--dynamic", "tgt:x"], "expected NAME:DIM[=LABEL]"),
                         (["--input", "src:2xq"], "expected a shape like 5x3x8")):
        out = inproc(capsys, "export", model, *bad, "-o", tmp_path / "bad.onnx")
        assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "bad.onnx").exists()


def test_an_internal_error_has_its_own_exit_status(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from rnnx import cli
    from rnnx.cli import commands

    def broken(args: object) -> int:
        return {}["missing"]  # a bug, not bad input

    monkeypatch.setattr(commands, "list_formats", broken)
    assert cli.main(["formats"]) == cli.INTERNAL_ERROR == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error KeyError" in err[0] and "--debug" in err[0]
    with pytest.raises(KeyError):
        cli.main(["formats", "--debug"])


def test_no_output_overwrites_an_input_or_a_special_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every verb that writes refuses an output that is one of its inputs (by any name), another
    output, or a device/pipe; the inputs' bytes never change."""
    import os

    torch = pytest.importorskip("torch")
    weights = tmp_path / "w.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=0), weights)
    model_file = tmp_path / "m.py"
    model_file.write_text("import torch\nbuild = lambda: torch.nn.GRU(3, 4)\nexample_inputs = lambda: (torch.randn(5, 2, 3),)\n")
    ckpt = tmp_path / "ck.pt"
    torch.save(torch.nn.GRU(3, 4).state_dict(), ckpt)
    onnx_file = tmp_path / "g.onnx"
    assert inproc(capsys, "convert", weights, "-o", onnx_file).returncode == 0
    link = tmp_path / "link.safetensors"
    os.link(weights, link)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    before = {p: p.read_bytes() for p in (weights, model_file, ckpt, onnx_file)}
    cases = [
        (("verify", onnx_file, "--against", weights, "--report", onnx_file), "would overwrite the input"),
        (("verify", onnx_file, "--against", weights, "--html", weights), "would overwrite the input"),
        (("verify", onnx_file, "--against", weights, "--report", tmp_path / "r.json", "--html", tmp_path / "r.json"), "is also the --report output"),
        (("export", f"{model_file}:build", "--checkpoint", ckpt, "-o", ckpt), "would overwrite the input"),
        (("export", f"{model_file}:build", "-o", model_file), "would overwrite the input"),
        (("convert", weights, "-o", link), "would overwrite the input"),
        (("convert", weights, "-o", fifo), "not a regular file"),
    ]
    for argv, message in cases:
        out = inproc(capsys, *argv)
        assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1, (argv, out.stderr)
    assert all(p.read_bytes() == data for p, data in before.items())
    assert fifo.exists() and not fifo.is_file()


def test_a_private_output_stays_private(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import stat

    weights = tmp_path / "w.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=0), weights)
    out = tmp_path / "out.onnx"
    assert inproc(capsys, "convert", weights, "-o", out, "--no-check").returncode == 0
    os.chmod(out, 0o600)
    old = out.read_bytes()
    rnnx.save(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=1), weights)
    assert inproc(capsys, "convert", weights, "-o", out, "--no-check").returncode == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and out.read_bytes() != old


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_terminated_conversion_leaves_nothing(tmp_path: Path, signame: str) -> None:
    """SIGTERM (what timeout and CI send) and SIGHUP remove the half-written file, as Ctrl-C does."""
    import signal
    import time

    src = tmp_path / "big.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse("lstm,input=1024,hidden=1024,layers=3,bidirectional")), src)
    out = tmp_path / "big.onnx"
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-m", "rnnx.cli", "convert", str(src), "-o", str(out), "--no-check"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seen_part = False
        while proc.poll() is None:
            if list(tmp_path.glob(".big.onnx.*.part*")):
                seen_part = True
                proc.send_signal(getattr(signal, signame))
                break
            time.sleep(0.001)
        _, err = proc.communicate(timeout=60)
        if seen_part and proc.returncode == 128 + getattr(signal, signame):
            break
        out.unlink(missing_ok=True)
    assert seen_part and proc.returncode == 128 + getattr(signal, signame), err
    assert f"stopped by {signame}" in err
    assert not out.exists() and not list(tmp_path.glob(".big.onnx.*")), sorted(p.name for p in tmp_path.iterdir())


def test_an_existing_output_never_decides_the_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--help says .safetensors means rnnx's canonical form; a torch file already at -o must not change that."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    weights = tmp_path / "w.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=0), weights)
    out = tmp_path / "out.safetensors"
    save_file({k: v.contiguous() for k, v in torch.nn.GRU(3, 4).state_dict().items()}, str(out))
    result = inproc(capsys, "convert", weights, "-o", out, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["output_format"] == "rnnx"


def test_huge_check_sizes_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = tmp_path / "w.safetensors"
    rnnx.save(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=0), weights)
    for flag in ("--seq-lens", "--batch"):
        out = inproc(capsys, "verify", "--against", weights, "--backends", "reference", flag, "1000000000")
        assert out.returncode == 2 and "expected at most 100000" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_other_libraries_warnings_stay_out_of_a_refusal(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import warnings

    from rnnx import RNNXError, cli
    from rnnx.cli import commands

    def noisy(args: object) -> int:
        warnings.warn("some library's deprecation notice", DeprecationWarning, stacklevel=2)
        warnings.warn("another library's user warning", UserWarning, stacklevel=2)
        raise RNNXError("x.onnx: expected an ONNX model, found nothing")

    monkeypatch.setattr(commands, "list_formats", noisy)
    assert cli.main(["formats"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rnnx formats: x.onnx: expected an ONNX model, found nothing"]
    with pytest.warns(UserWarning), pytest.raises(RNNXError):
        cli.main(["formats", "--debug"])


@pytest.mark.parametrize(("dtype", "module", "backend"), [("float16", "LSTM", "ort"), ("float64", "LSTM", None), ("float64", "GRU", None)])
def test_half_and_double_checkpoints_convert_to_onnx_with_the_check_on(tmp_path: Path, capsys: pytest.CaptureFixture[str], dtype: str, module: str,
                                                                     backend: str | None) -> None:
    """The written file takes inputs of its weights' dtype; where ONNX Runtime has no CPU kernel
    for that dtype, the check says so and re-reads the file instead of failing."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(5)
    layer = getattr(torch.nn, module)(3, 4, num_layers=2).to(getattr(torch, dtype))
    torch.save(layer.state_dict(), tmp_path / "ck.pt")
    out = inproc(capsys, "convert", tmp_path / "ck.pt", "-o", tmp_path / "m.onnx", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["check"]["passed"] and report["written"]
    backends = {row["backend"] for row in report["check"]["rows"]}
    if backend:
        assert backends == {backend}
        import onnx

        assert onnx.load(str(tmp_path / "m.onnx")).graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    else:
        assert backends == {"onnx (reread)"} or backends == {"ort"}
        assert backends == {"ort"} or any("no float64 kernel" in n for n in report["notes"])


def test_two_writers_to_one_output_each_check_their_own_file(tmp_path: Path) -> None:
    """Each run writes and checks its own temporary file and renames it whole: the output is one
    run's file, complete, whichever renames last, and no temporary is left."""
    torch = pytest.importorskip("torch")
    for name, hidden in (("a.pt", 48), ("b.pt", 40)):
        torch.manual_seed(hidden)
        torch.save(torch.nn.LSTM(16, hidden, num_layers=2).state_dict(), tmp_path / name)
    out = tmp_path / "out.onnx"
    argv = [[sys.executable, "-m", "rnnx.cli", "convert", str(tmp_path / n), "-o", str(out), "--json"] for n in ("a.pt", "b.pt")]
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in argv]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [r[1] for r in results]
    assert all(json.loads(r[0])["check"]["passed"] for r in results)
    written = rnnx.load(out)
    assert written.spec.hidden_size in (48, 40)
    assert written.equal(rnnx.load(tmp_path / ("a.pt" if written.spec.hidden_size == 48 else "b.pt")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "b.pt", "out.onnx"]
