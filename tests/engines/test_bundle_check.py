"""The device check of an ``rnnx bundle`` folder cannot pass without checking.

Each attack below once passed (exit 0) or ended in a traceback: golden files emptied, cut or
grown; trtexec's exported JSON holding one value per output; an interrupted copy; a missing
golden file; ``cases: []``; a rule edited to a string; ``--carry`` led out of the folder by a
``../`` path; an engine whose outputs are all zeros (a printed 0 was read as accurate to ±0.5);
a bundle with every case left out; two tensor names that mapped to one file; and an honest fp32
engine failing because build.sh left TF32 on.

trtexec is played by the STAND-IN ``tests/stand_ins/trtexec`` (TensorRT cannot be installed
here). Where precision matters it computes as the build asked: TF32 unless ``--noTF32`` (the
inputs of matrix products and convolutions, and a recurrent node's X, W and R, rounded to a
10-bit mantissa), float16 tensors with ``--fp16``. Inside a recurrent node ONNX Runtime keeps
the state in float32, so its error there understates an engine's; it builds no engine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import rnnx  # noqa: E402
from rnnx.engines.onnx_reference import ReferenceRun, round_to_tf32  # noqa: E402
from rnnx.pipelines.bundle_files import file_stems  # noqa: E402
from tests.engines.test_bundle import STAND_IN, _bundle, _device  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VERSION = "8.6"


class Tagger(torch.nn.Module):
    """A GRU tagger whose outputs are all well within 0.5 of zero (a printed zero once held them)."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.GRU(6, 10, batch_first=True)
        self.out = torch.nn.Linear(10, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.05 * torch.tanh(self.out(self.rnn(x)[0]))


class Stream(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.LSTM(5, 7, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An fp32 bundle and a streaming one, built and checked once by the stand-in (out/ filled)."""
    root = tmp_path_factory.mktemp("check")
    torch.manual_seed(0)
    assert rnnx.export(Tagger().eval(), (torch.randn(1, 7, 6),), root / "tagger.onnx").passed
    assert rnnx.export(Stream().eval(), (torch.randn(1, 6, 5),), root / "stream.onnx", streaming=True).passed
    folders = {}
    for name in ("tagger", "stream"):
        folder = root / f"{name}-bundle"
        done = _bundle(root / f"{name}.onnx", folder, "--tensorrt", VERSION)
        assert done.returncode == 0, done.stderr
        assert _device(folder, "build.sh", VERSION).returncode == 0
        ran = _device(folder, "check.sh", VERSION)
        assert ran.returncode == 0 and ran.stdout.strip().endswith("PASS"), ran.stdout + ran.stderr
        folders[name] = folder
    folders["onnx"] = root / "tagger.onnx"
    return folders


def _copy(folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(folder, target)
    return target


def _check(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "check.py", *argv], cwd=folder, capture_output=True, text=True, timeout=300)


def _rehash(folder: Path) -> None:
    """BUNDLE.json's sizes and hashes made to match the files again: a deliberate edit, which only
    cases.json's own validation can catch."""
    bundle = json.loads((folder / "BUNDLE.json").read_text())
    for relative in bundle["files"]:
        data = (folder / relative).read_bytes()
        bundle["files"][relative] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / "BUNDLE.json").write_text(json.dumps(bundle))


def _goldens(folder: Path) -> list[Path]:
    return sorted(folder.glob("golden/*/*/*.f64"))


def _refused(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout[-800:], done.stderr[-800:])
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_the_untouched_folder_passes(checked, tmp_path: Path) -> None:
    done = _check(_copy(checked["tagger"], tmp_path))
    assert done.returncode == 0 and done.stdout.strip().endswith("PASS"), done.stdout + done.stderr


@pytest.mark.parametrize("damage", ["emptied", "cut to 8 bytes", "cut to half", "bytes appended"])
def test_a_damaged_golden_file_is_refused(checked, tmp_path: Path, damage: str) -> None:
    folder = _copy(checked["tagger"], tmp_path)
    targets = _goldens(folder) if damage == "emptied" else [p for p in _goldens(folder) if p.parts[-3] == "max"]
    assert targets
    for path in targets:
        data = path.read_bytes()
        path.write_bytes({"emptied": b"", "cut to 8 bytes": data[:8], "cut to half": data[:len(data) // 2],
                          "bytes appended": data + os.urandom(24)}[damage])
    _refused(_check(folder), targets[0].relative_to(folder).as_posix(), "bytes")
    _rehash(folder)  # and where BUNDLE.json was rewritten to match, the file's size against its shape still refuses it
    _refused(_check(folder), "bytes for its shape")


def test_an_interrupted_copy_and_a_missing_golden_file_are_refused(checked, tmp_path: Path) -> None:
    folder = _copy(checked["tagger"], tmp_path)
    model = folder / "model.onnx"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 3])
    _refused(_check(folder), "model.onnx", "copy it again")
    folder = _copy(checked["tagger"], tmp_path / "again")
    _goldens(folder)[0].unlink()
    _refused(_check(folder), "expected the file BUNDLE.json lists")
    (folder / "BUNDLE.json").unlink()
    _refused(_check(folder), "BUNDLE.json")


def test_trtexecs_export_with_too_few_values_is_refused(checked, tmp_path: Path) -> None:
    folder = _copy(checked["tagger"], tmp_path)
    for export in folder.glob("out/*/*.json"):  # one value per output, as a cut or hand-made file would hold
        text = export.read_text()
        head, _, rest = text.partition('"values" : [ ')
        export.write_text(head + '"values" : [ ' + rest.split(",")[0].split(" ]")[0] + " ]\n  }\n]\n")
    _refused(_check(folder), "expected", "values for its dimensions")


@pytest.mark.parametrize("edit,words", [
    (lambda m: m.update(cases=[]), ("cases", "at least one case")),
    (lambda m: m["rule"].update(multiple="16"), ("rule.multiple",)),
    (lambda m: m["rule"].update(multiple=1e9 * float("inf")), ("rule.multiple",)),
    (lambda m: m["cases"][0]["chunks"][0].update(outputs={}), ("at least one output",)),
    (lambda m: next(iter(m["cases"][0]["chunks"][0]["outputs"].values())).update(floor=-1.0), ("floor",)),
    (lambda m: next(iter(m["cases"][0]["chunks"][0]["outputs"].values())).update(golden="golden/../../../etc/passwd"), ("inside",)),
    (lambda m: m.update(printed_digits=True), ("printed_digits",)),
])
def test_cases_json_holds_only_what_rnnx_writes(checked, tmp_path: Path, edit, words) -> None:
    folder = _copy(checked["tagger"], tmp_path)
    manifest = json.loads((folder / "cases.json").read_text())
    edit(manifest)
    (folder / "cases.json").write_text(json.dumps(manifest))
    _refused(_check(folder), "cases.json")  # its hash first
    _rehash(folder)
    _refused(_check(folder), *words)


def test_carry_cannot_write_outside_the_folder(checked, tmp_path: Path) -> None:
    folder = _copy(checked["stream"], tmp_path)
    manifest = json.loads((folder / "cases.json").read_text())
    case = next(c for c in manifest["cases"] if c["carry"])
    state = next(iter(case["carry"]))
    case["chunks"][1]["inputs"][state]["file"] = "out/../../escaped.bin"
    (folder / "cases.json").write_text(json.dumps(manifest))
    _refused(_check(folder, "--carry", case["name"], "1"), "inside the bundle folder")
    assert not (tmp_path / "escaped.bin").exists() and not (folder.parent / "escaped.bin").exists()


def test_an_engine_that_outputs_zeros_fails(checked, tmp_path: Path) -> None:
    folder = _copy(checked["tagger"], tmp_path)
    golden = np.concatenate([np.fromfile(p, "<f8") for p in _goldens(folder)])
    assert 0 < np.abs(golden).max() < 0.5  # the model this attack needs: every value within 0.5 of zero
    done = _device(folder, "check.sh", VERSION, STAND_IN_ZEROS="1")
    assert done.returncode == 1 and done.stdout.strip().endswith("FAIL"), done.stdout[-2000:]


def test_a_printed_value_may_miss_by_half_its_sixth_digit_and_a_printed_zero_by_nothing() -> None:
    sys.path.insert(0, str(ROOT / "rnnx" / "pipelines"))
    try:
        import bundle_check
    finally:
        sys.path.pop(0)
    for text, quantum in (("0", 0.0), ("-0", 0.0), ("0.5", 5e-7), ("3", 5e-6), ("123457", 0.5), ("-1.25", 5e-6),
                          ("1e-07", 5e-13), ("0.000123457", 5e-10), ("1.5e+10", 5e4), ("0.123456789", 5e-10)):
        assert bundle_check._quantum(text, 6) == pytest.approx(quantum, rel=1e-9), text


def test_a_bundle_with_no_case_to_check_is_refused_where_it_is_written(tmp_path: Path) -> None:
    """A file whose fixed sequence dimension is 10^8: every case is too large, so none would be checked."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in (("W", (1, 16, 3)), ("R", (1, 16, 4)))]
    graph = helper.make_graph([helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=4)], "huge",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10 ** 8, 1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [10 ** 8, 1, 1, 4])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "huge.onnx")
    done = _bundle(tmp_path / "huge.onnx", tmp_path / "b", "--tensorrt", VERSION)
    assert done.returncode == 2 and "expected at least one case to check" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "b").exists()


NAMES = ["a.b", "a_b", "A_B", "x y", "frames:0", "in/put", "größe", "x-1"]  # dots, case, spaces, colons, slashes, letters beyond ASCII


def _many_names(path: Path, inputs: list[str], outputs: list[str]) -> None:
    """An LSTM over the sum of inputs with awkward names, its Y and Y_h as outputs with awkward names."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array((0.4 * rng.standard_normal(s)).astype(np.float32), n) for n, s in (("W", (1, 16, 3)), ("R", (1, 16, 4)))]
    nodes, total = [], inputs[0]
    for k, name in enumerate(inputs[1:]):
        nodes.append(helper.make_node("Add", [total, name], [f"sum{k}"]))
        total = f"sum{k}"
    nodes.append(helper.make_node("LSTM", [total, "W", "R"], ["y", "h"], hidden_size=4))
    nodes += [helper.make_node("Identity", ["y" if k % 2 == 0 else "h"], [name]) for k, name in enumerate(outputs)]
    graph = helper.make_graph(nodes, "names", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [5, 2, 3]) for n in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_names_that_would_share_a_file_get_their_own_and_a_correct_engine_passes(tmp_path: Path) -> None:
    stems = file_stems(NAMES)
    assert len({s.lower() for s in stems.values()}) == len(NAMES) and stems["x-1"] == "x-1"
    _many_names(tmp_path / "names.onnx", NAMES, ["y.1", "y_1", "Y_1", "out put"])
    folder = tmp_path / "b"
    done = _bundle(tmp_path / "names.onnx", folder, "--tensorrt", VERSION)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _device(folder, "build.sh", VERSION).returncode == 0
    ran = _device(folder, "check.sh", VERSION)
    assert ran.returncode == 0 and ran.stdout.strip().endswith("PASS"), ran.stdout[-3000:] + ran.stderr[-2000:]
    assert len(list(folder.glob("golden/*/0/*.f64"))) == 4 and len(list(folder.glob("cases/*/0/*.bin"))) == len(NAMES)


@pytest.mark.parametrize("kind,name", [("input", "a,b"), ("input", "it's"), ("output", 'y"1'), ("output", "y\\1"), ("output", "y\n1")])
def test_a_name_trtexec_cannot_carry_is_refused_by_name(tmp_path: Path, kind: str, name: str) -> None:
    _many_names(tmp_path / "bad.onnx", [name] if kind == "input" else ["x"], [name] if kind == "output" else ["y"])
    done = _bundle(tmp_path / "bad.onnx", tmp_path / "b", "--tensorrt", VERSION)
    assert done.returncode == 2 and f"{kind} {name!r}" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "b").exists()


# --- precision on the device ----------------------------------------------------------------------


def test_tf32_rounding_keeps_ten_mantissa_bits_to_nearest() -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(10000) * 10.0 ** rng.integers(-20, 20, 10000)).astype(np.float32)
    r = round_to_tf32(x)
    assert not (r.view(np.uint32) & np.uint32(0x1FFF)).any()  # the 13 low bits a float32 keeps beyond TF32's 10
    assert np.all(np.abs(r.astype(np.float64) - x) <= np.abs(x.astype(np.float64)) * 2.0 ** -11)
    step = np.abs(x.astype(np.float64)) * 2.0 ** -10  # no other TF32 value lies nearer: the neighbours are a step away
    assert np.all(np.abs(r - x) <= step / 2 * (1 + 1e-6))
    assert round_to_tf32(np.float32([1 + 2 ** -11]))[0] == 1.0 and round_to_tf32(np.float32([1 + 3 * 2 ** -11]))[0] == 1 + 2 ** -9


def test_the_stand_ins_tf32_is_the_same_rounding_in_onnx_runtime() -> None:
    """The stand-in rounds in the graph (Veltkamp's split, float32 nodes); rnnx's floor in numpy's bits: two ways, one answer."""
    import importlib.machinery
    import importlib.util

    from onnx import TensorProto, helper

    loader = importlib.machinery.SourceFileLoader("stand_in_trtexec", str(STAND_IN))
    stand_in = importlib.util.module_from_spec(importlib.util.spec_from_loader("stand_in_trtexec", loader))
    loader.exec_module(stand_in)
    nodes: list = []
    out = stand_in._round_tf32("x", nodes, helper)
    graph = helper.make_graph(nodes + [helper.make_node("Identity", [out], ["y"])], "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    x = (np.random.default_rng(3).standard_normal(5000) * 100).astype(np.float32)
    assert np.array_equal(session.run(None, {"x": x})[0], round_to_tf32(x))


def test_the_tf32_floor_is_the_file_computing_in_tf32(checked) -> None:
    """The honest TF32 run lands about 2^-11 of the outputs' scale from the float64 reference (far
    above float32's floor, below float16's), and its recurrences round their state at every step."""
    model = onnx.load(checked["onnx"])
    x = np.random.default_rng(4).standard_normal((2, 9, 6)).astype(np.float32)
    want = ReferenceRun(model, "float64")({"x": x})["output"]
    errors = {d: float(np.abs(ReferenceRun(model, d)({"x": x})["output"].astype(np.float64) - want).max()) for d in ("float32", "tf32", "float16")}
    scale = float(np.abs(want).max())
    assert errors["float32"] * 20 < errors["tf32"] < errors["float16"] and 2 ** -16 * scale < errors["tf32"] < 2 ** -8 * scale, errors


def _precision_case(checked, tmp_path: Path, precision: str) -> Path:
    folder = tmp_path / precision
    done = _bundle(checked["onnx"], folder, "--tensorrt", VERSION, "--precision", precision)
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


def test_an_fp32_bundle_builds_without_tf32_and_fails_where_the_engine_computes_in_tf32(checked, tmp_path: Path) -> None:
    folder = _precision_case(checked, tmp_path, "fp32")
    bundle = json.loads((folder / "BUNDLE.json").read_text())
    assert "--noTF32" in bundle["commands"]["trtexec build"] and bundle["tf32"] is False
    assert "--noTF32" in (folder / "build.sh").read_text() and "TF32 off" in (folder / "README.txt").read_text()
    assert bundle["trtexec_flags"]["--noTF32"][0]["line"] == 'getAndDelNegOption(arguments, "--noTF32", tf32);'
    # the engine an fp32 bundle's build.sh makes passes its check (the existing tests build and check it); a build.sh that
    # forgets the flag makes an engine in TF32, which the stand-in computes as TensorRT may, and the check fails it
    script = folder / "build.sh"
    script.write_text(script.read_text().replace(" --noTF32", ""))
    _rehash(folder)
    assert _device(folder, "build.sh", VERSION).returncode == 0
    done = _device(folder, "check.sh", VERSION)
    assert done.returncode == 1 and done.stdout.strip().endswith("FAIL"), done.stdout[-2000:]
    assert "likely cause: the error is small and everywhere" in done.stdout and "--noTF32" in done.stdout, done.stdout[-2000:]
    assert "input weights" not in done.stdout
    # and one built with --fp16
    script.write_text(script.read_text().replace("--saveEngine=model.engine", "--saveEngine=model.engine --fp16"))
    _rehash(folder)
    assert _device(folder, "build.sh", VERSION).returncode == 0
    assert _device(folder, "check.sh", VERSION).returncode == 1


def test_a_small_uniform_error_is_named_a_precision_cause_not_a_layer(checked, tmp_path: Path) -> None:
    folder = _copy(checked["tagger"], tmp_path)
    done = _device(folder, "check.sh", VERSION, STAND_IN_PERTURB="1e-4")
    assert done.returncode == 1 and "the error is small and everywhere" in done.stdout and "input weights" not in done.stdout, done.stdout[-2000:]


@pytest.mark.parametrize("precision", ["tf32", "fp16"])
def test_a_tf32_or_fp16_bundle_holds_an_engine_computing_so_to_that_precisions_floor(checked, tmp_path: Path, precision: str) -> None:
    folder = _precision_case(checked, tmp_path, precision)
    bundle = json.loads((folder / "BUNDLE.json").read_text())
    argv = bundle["commands"]["trtexec build"]
    assert "--noTF32" not in argv and bundle["tf32"] is True and ("--fp16" in argv) == (precision == "fp16")
    assert ("--tf32" in bundle["commands"]["polygraphy"]) == (precision == "tf32")
    built = _device(folder, "build.sh", VERSION)
    assert built.returncode == 0 and f"stand-in precision: {precision}" in (folder / "build.log").read_text()
    done = _device(folder, "check.sh", VERSION)
    assert done.returncode == 0 and done.stdout.strip().endswith("PASS"), done.stdout[-2000:] + done.stderr[-1000:]
    floors = [o["floor"] for c in json.loads((folder / "cases.json").read_text())["cases"] for ch in c["chunks"] for o in ch["outputs"].values()]
    assert min(floors) > 2 ** -23 * 16  # measured at that precision, far above float32's


# --- a second campaign: what a hostile tester found after the first ----------------------------------


def test_an_fp16_bundle_of_small_outputs_holds_them_to_their_own_scale(checked, tmp_path: Path) -> None:
    """The floor was never below fp16's epsilon at 1 (16 x that is 0.016): an engine of zeros, or one off by
    0.01, passed an output of 0.05. Each output's floor is now at its own scale."""
    folder = _precision_case(checked, tmp_path, "fp16")
    assert _device(folder, "build.sh", VERSION).returncode == 0
    assert _device(folder, "check.sh", VERSION).returncode == 0
    for env in ({"STAND_IN_ZEROS": "1"}, {"STAND_IN_PERTURB": "0.003"}):
        done = _device(folder, "check.sh", VERSION, **env)
        assert done.returncode == 1 and done.stdout.strip().endswith("FAIL"), (env, done.stdout[-1500:])
    assert "did not compute it" in _device(folder, "check.sh", VERSION, STAND_IN_ZEROS="1").stdout


def test_carry_does_not_write_through_a_planted_link(checked, tmp_path: Path) -> None:
    folder = _copy(checked["stream"], tmp_path)
    manifest = json.loads((folder / "cases.json").read_text())
    case = next(c for c in manifest["cases"] if c["carry"])
    target = folder / case["chunks"][1]["inputs"][next(iter(case["carry"]))]["file"]
    target.parent.mkdir(parents=True, exist_ok=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    Path(str(target) + ".tmp").symlink_to(victim)
    done = _check(folder, "--carry", case["name"], "1")
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "precious" and not target.is_symlink() and target.stat().st_size > 0


def test_a_stale_export_or_engine_does_not_pass(checked, tmp_path: Path) -> None:
    folder = _copy(checked["tagger"], tmp_path)
    (folder / "model.engine").touch()  # an engine built after the exports in out/ were written
    os.utime(folder / "model.engine", (time_now := __import__("time").time(), time_now + 10))
    _refused(_check(folder), "written before it was built")
    failing = tmp_path / "fail-trtexec"
    failing.write_text("#!/bin/sh\necho '[I] TensorRT version: 8.6.1'\nexit 1\n")
    failing.chmod(0o755)
    built = _device(folder, "build.sh", VERSION, TRTEXEC=str(failing))
    assert built.returncode == 1 and not (folder / "model.engine").exists()  # no earlier engine left for check.sh
    assert _device(folder, "check.sh", VERSION).returncode == 2


def test_names_beyond_ascii_print_under_an_ascii_terminal_and_nan_in_a_name_is_a_name(tmp_path: Path) -> None:
    _many_names(tmp_path / "n.onnx", ["größe"], ["y nan ]", "h inf ]"])
    folder = tmp_path / "b"
    assert _bundle(tmp_path / "n.onnx", folder, "--tensorrt", VERSION).returncode == 0
    assert _device(folder, "build.sh", VERSION).returncode == 0
    done = _device(folder, "check.sh", VERSION, PYTHONIOENCODING="ascii", LANG="C", LC_ALL="C")
    assert done.returncode == 0 and done.stdout.strip().endswith("PASS"), done.stdout[-1500:] + done.stderr[-800:]
    piped = subprocess.run(f"{sys.executable} check.py | head -n 1", shell=True, cwd=folder, capture_output=True, text=True, timeout=120)
    assert "internal error" not in piped.stderr and "Traceback" not in piped.stderr, piped.stderr


def test_a_failing_later_chunk_is_not_blamed_on_the_carry_when_the_first_chunk_is_one_frame(checked, tmp_path: Path) -> None:
    """A one-frame first chunk from zero states never uses the recurrent weights, so its holding says nothing of them."""
    folder = _copy(checked["stream"], tmp_path)
    engine = onnx.load(folder / "model.engine")
    lstm = next(n for n in engine.graph.node if n.op_type == "LSTM")
    weights = {t.name: t for t in engine.graph.initializer}
    r = onnx.numpy_helper.to_array(weights[lstm.input[2]]).copy()
    h = r.shape[1] // 4
    r[0, 2 * h:3 * h], r[0, 3 * h:] = r[0, 3 * h:].copy(), r[0, 2 * h:3 * h].copy()  # f and c swapped in R only
    weights[lstm.input[2]].CopyFrom(onnx.numpy_helper.from_array(r, lstm.input[2]))
    onnx.save(engine, folder / "model.engine")
    done = _device(folder, "check.sh", VERSION)
    assert done.returncode == 1, done.stdout[-1500:]
    assert "states carried between chunks" not in done.stdout, done.stdout[-2500:]


def test_check_sh_needs_a_python_3_and_says_so(checked, tmp_path: Path) -> None:
    folder = _copy(checked["tagger"], tmp_path)
    done = _device(folder, "check.sh", VERSION, PYTHON=str(tmp_path / "no-python"))
    assert done.returncode == 2 and "expected Python 3.6 or later" in done.stderr, done.stderr
