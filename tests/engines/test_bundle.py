"""``rnnx bundle``: folders that build and check a TensorRT engine with NVIDIA's tools alone.

TensorRT cannot be installed where these tests run, so trtexec is played by a STAND-IN
(``tests/stand_ins/trtexec``): it takes trtexec's flags as the bundle writes them, refuses any
the cited table does not show the target version accepting, and runs the "engine" (a copy of
model.onnx) in ONNX Runtime, writing trtexec's --exportOutput text. Nothing here builds or runs
a TensorRT engine. Polygraphy is the real one, run with ONNX Runtime (``--onnxrt``) in place of
``--trt``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402
from rnnx.engines import trtexec, trtexec_flags  # noqa: E402
from tests.helpers import model_file, rnnx_in_process  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = ROOT / "tests" / "stand_ins" / "trtexec"

MODELS = '''
import torch
import torch.nn.functional as F
from torch import nn


class ConvTagger(nn.Module):
    """A Conv front end over 20 features and a bidirectional 2-layer LSTM tagger: (B, T, 20) -> (B, T, 6)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(20, 16, 3, padding=1)
        self.rnn = nn.LSTM(16, 12, num_layers=2, batch_first=True, bidirectional=True)
        self.out = nn.Linear(24, 6)

    def forward(self, x):
        y = torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)
        return self.out(self.rnn(y)[0]).log_softmax(-1)


class Streamer(nn.Module):
    """A delta feature, a causal strided Conv1d, a GRU: exported streaming."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(16, 12, 3, stride=2)
        self.rnn = nn.GRU(12, 10, batch_first=True)
        self.out = nn.Linear(10, 4)

    def forward(self, x):
        y = torch.cat([x, x - F.pad(x, (0, 0, 1, 0))[:, :-1]], -1).transpose(1, 2)
        return self.out(self.rnn(torch.relu(self.conv(F.pad(y, (2, 0)))).transpose(1, 2))[0])


class Projected(nn.Module):
    """An LSTM with projections: rnnx writes it as Scans (a lowered file)."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, proj_size=6, batch_first=True)

    def forward(self, x):
        return self.rnn(x)[0]
'''


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bundled")
    ns = model_file(folder / "models.py", MODELS)
    torch.manual_seed(0)
    files = {"tagger": folder / "tagger.onnx", "stream": folder / "stream.onnx", "lowered": folder / "lowered.onnx"}
    assert rnnx.export(ns["ConvTagger"]().eval(), (torch.randn(1, 12, 20),), files["tagger"]).passed
    assert rnnx.export(ns["Streamer"]().eval(), (torch.randn(1, 20, 8),), files["stream"], streaming=True).passed
    assert rnnx.export(ns["Projected"]().eval(), (torch.randn(1, 9, 8),), files["lowered"]).passed
    return files


def _bundle(source: Path, folder: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rnnx", "bundle", str(source), "-o", str(folder), *flags, "--json"],
                          capture_output=True, text=True, timeout=600)


def _bundle_here(source: Path, folder: Path, *flags: str) -> subprocess.CompletedProcess:
    """``_bundle`` in this process (rnnx.cli.main), for refusals and replacements: what is
    written is tested, not the process."""
    return rnnx_in_process("bundle", source, "-o", folder, *flags, "--json")


def _device(folder: Path, script: str, flags_version: str, **env: str) -> subprocess.CompletedProcess:
    """Run build.sh or check.sh as on the device, with the stand-in as trtexec."""
    environment = {**os.environ, "TRTEXEC": str(STAND_IN), "STAND_IN_TRTEXEC": flags_version, "STAND_IN_RNNX": str(ROOT),
                   "PYTHON": sys.executable, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **env}
    return subprocess.run(["bash", script], cwd=folder, capture_output=True, text=True, timeout=600, env=environment)


def _lines_flags(folder: Path) -> list[str]:
    """Every trtexec flag that build.sh and check.sh pass."""
    flags = []
    for script in ("build.sh", "check.sh"):
        for line in (folder / script).read_text().splitlines():
            if line.startswith('"$TRTEXEC"') or line.startswith("run "):
                flags += [a.split("=", 1)[0] for a in shlex.split(line) if a.startswith("--")]
    return flags


CORPUS = [  # (file, flags, the trtexec table version the target reads as)
    ("tagger", ("--jetpack", "4.6.1"), "8.2"),
    ("tagger", ("--jetpack", "5.1.2", "--precision", "fp16"), "8.5"),
    ("stream", ("--jetpack", "6.1"), "10.3"),
    ("lowered", ("--tensorrt", "10.15"), "10.3"),  # between the tables' 10.3 and 10.16 columns: both must accept each flag
]


@pytest.mark.parametrize("name,flags,version", CORPUS, ids=[f"{c[0]}-{'-'.join(c[1])}" for c in CORPUS])
def test_a_bundle_builds_and_checks_with_the_stand_in_and_every_flag_is_the_targets(exported, tmp_path: Path, name, flags, version) -> None:
    folder = tmp_path / "bundle"
    done = _bundle(exported[name], folder, *flags)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["passed"] and report["target"]["trtexec_flags"] == version
    umask = os.umask(0)
    os.umask(umask)
    assert folder.stat().st_mode & 0o777 == 0o777 & ~umask  # as a folder the user makes, not mkdtemp's 0700
    above = report["target"]["trtexec_flags_above"]
    for flag in _lines_flags(folder):
        assert trtexec.accepts(version, flag), f"{flag} is not accepted by trtexec {version} by the table"
        assert above is None or trtexec.accepts(above, flag), f"{flag} is not accepted by trtexec {above} by the table"
    bundle = json.loads((folder / "BUNDLE.json").read_text())
    assert bundle["opset"] == (13 if version in ("8.0", "8.2") else 17)
    assert "--fp16" in bundle["commands"]["trtexec build"] if "fp16" in flags else "--fp16" not in bundle["commands"]["trtexec build"]
    built = _device(folder, "build.sh", version)
    assert built.returncode == 0 and (folder / "model.engine").exists(), built.stdout + built.stderr
    checked = _device(folder, "check.sh", version)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    assert checked.stdout.strip().endswith("PASS") and " ok" in checked.stdout


def test_check_sh_fails_on_perturbed_outputs_and_on_a_gate_swap_planted_in_one_layer(exported, tmp_path: Path) -> None:
    folder = tmp_path / "bundle"
    assert _bundle(exported["tagger"], folder, "--tensorrt", "8.6").returncode == 0
    assert _device(folder, "build.sh", "8.6").returncode == 0
    perturbed = _device(folder, "check.sh", "8.6", STAND_IN_PERTURB="1e-3")
    assert perturbed.returncode == 1 and perturbed.stdout.strip().endswith("FAIL"), perturbed.stdout[-2000:]
    # the engine from a file whose second LSTM layer has its forget and cell gates swapped (ONNX's i,o,f,c)
    model = onnx.load(folder / "model.onnx")
    lstm = [n for n in model.graph.node if n.op_type == "LSTM"][1]
    weights = {t.name: t for t in model.graph.initializer}
    w = onnx.numpy_helper.to_array(weights[lstm.input[1]]).copy()
    h = w.shape[1] // 4
    w[0, 2 * h:3 * h], w[0, 3 * h:] = w[0, 3 * h:].copy(), w[0, 2 * h:3 * h].copy()
    weights[lstm.input[1]].CopyFrom(onnx.numpy_helper.from_array(w, lstm.input[1]))
    onnx.save(model, folder / "model.engine")
    swapped = _device(folder, "check.sh", "8.6")
    assert swapped.returncode == 1 and "FAIL" in swapped.stdout, swapped.stdout[-2000:]
    assert "likely cause: frame 0 is already off" in swapped.stdout


def test_polygraphy_with_onnx_runtime_passes_the_bundles_own_check(exported, tmp_path: Path) -> None:
    """The README's Polygraphy command, with --onnxrt for --trt (and its TensorRT profile flags left out)."""
    pytest.importorskip("polygraphy")
    folder = tmp_path / "bundle"
    assert _bundle(exported["stream"], folder, "--jetpack", "6.2").returncode == 0
    command = json.loads((folder / "BUNDLE.json").read_text())["commands"]["polygraphy"]
    assert command[:3] == ["polygraphy", "run", "model.onnx"] and "--trt" in command
    argv, skipping = [], False
    for arg in command[3:]:
        if arg.startswith("--trt-"):
            skipping = True
            continue
        if skipping and not arg.startswith("--"):
            continue
        skipping = False
        argv.append("--onnxrt" if arg == "--trt" else arg)
    polygraphy = Path(sys.executable).with_name("polygraphy")
    done = subprocess.run([str(polygraphy), "run", "model.onnx", *argv], cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "PASSED" in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]
    # and it fails when the file computes something else
    model = onnx.load(folder / "model.onnx")
    out = next(t for t in model.graph.initializer if t.name.startswith("out.") and "bias" in t.name)
    out.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(out) + 1e-2, out.name))
    onnx.save(model, folder / "planted.onnx")
    done = subprocess.run([str(polygraphy), "run", "planted.onnx", *argv], cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr


def test_check_py_needs_only_python_3_6_and_the_standard_library() -> None:
    source = (ROOT / "rnnx" / "pipelines" / "bundle_check.py").read_text()
    tree = ast.parse(source, feature_version=(3, 6))  # no syntax newer than 3.6 (walrus, positional-only, match)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) and "__future__" not in imported, imported
    # the 3.7+ names it must not use
    assert not re.search(r"\bdataclass|\bbreakpoint\(|asyncio\.run|from __future__ import annotations", source)


def test_the_trtexec_table_cites_a_source_line_for_every_cell() -> None:
    versions = set(trtexec_flags.SOURCES)
    for source in trtexec_flags.SOURCES.values():
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]) and source["file"] == "samples/common/sampleOptions.cpp"
    for flag, row in trtexec_flags.FLAGS.items():
        assert set(row["versions"]) == versions, flag
        cited = {c["version"] for c in row["cite"]}
        for version, state in row["versions"].items():
            assert state in trtexec_flags.STATES, (flag, version, state)
            if state in trtexec.ACCEPTED:
                assert version in cited, f"{flag} is {state} in {version} without a citation"
        for cite in row["cite"]:
            if row["versions"][cite["version"]] in trtexec.ACCEPTED:
                assert cite["file"].startswith("samples/") and cite["function"] and cite["line"].strip(), (flag, cite)


def test_bundle_refusals_are_one_line_and_write_nothing(exported, tmp_path: Path) -> None:
    for flags, expected in ((("--tensorrt", "11.0"), "rnnx has read"), (("--jetpack", "3.3"), "expected one of"),
                            (("--tensorrt", "7.x"), "expected a TensorRT version like"),
                            (("--precision", "int8"), "invalid choice: 'int8' (choose from 'fp32', 'tf32', 'fp16')"),
                            (("--jetpack", "4.6"), "--jetpack: JetPack 4.6 ships TensorRT 8.0.1, which rnnx cannot target")):
        done = _bundle_here(exported["tagger"], tmp_path / "b", *flags)
        assert done.returncode == 2 and expected in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert not (tmp_path / "b").exists()
    (tmp_path / "there").mkdir()
    done = _bundle_here(exported["tagger"], tmp_path / "there")
    assert done.returncode == 2 and "expected a new folder or one rnnx bundle wrote" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["there"]  # no staging folder left behind
    # a folder an earlier bundle wrote is replaced whole, as a CI job that reruns expects
    assert _bundle_here(exported["tagger"], tmp_path / "b1", "--tensorrt", "8.6").returncode == 0
    (tmp_path / "b1" / "model.engine").write_bytes(b"an engine of the earlier bundle")
    again = _bundle_here(exported["tagger"], tmp_path / "b1", "--tensorrt", "10.15")
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "b1" / "BUNDLE.json").read_text())["target"]["tensorrt"] == "10.15"
    assert not (tmp_path / "b1" / "model.engine").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b1", "there"]


def test_the_golden_outputs_are_torchs_own_in_float64(exported, tmp_path: Path) -> None:
    """The reference (ONNX's evaluator on the file in float64) against the framework that owns the
    model: torch's float64 copy of the tagger, on the bundle's own input files."""
    folder = tmp_path / "bundle"
    assert _bundle(exported["tagger"], folder, "--tensorrt", "8.6").returncode == 0
    ns = model_file(tmp_path / "models.py", MODELS)
    torch.manual_seed(0)
    model = ns["ConvTagger"]().eval().double()  # the weights exported: the same seed, the same first model
    manifest = json.loads((folder / "cases.json").read_text())
    assert {c["name"] for c in manifest["cases"]} == {"example", "min", "max"}
    for case in manifest["cases"]:
        chunk = case["chunks"][0]
        x = np.fromfile(folder / chunk["inputs"]["x"]["file"], dtype="<f4").reshape(chunk["inputs"]["x"]["shape"])
        golden = np.fromfile(folder / chunk["outputs"]["output"]["golden"], dtype="<f8").reshape(chunk["outputs"]["output"]["shape"])
        with torch.no_grad():
            want = model(torch.from_numpy(x.astype(np.float64))).numpy()
        assert np.abs(golden - want).max() < 1e-10, case["name"]
        assert chunk["outputs"]["output"]["floor"] >= 2.0 ** -23  # measured in float32, never below its epsilon
