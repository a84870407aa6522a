"""The --json contract: every verb prints exactly one JSON object on stdout, on success and on
failure. A success is valid against rnnx/cli/schema/<verb>.json (with a top-level "verb" and
"passed": true, false where a check failed and the verb exits 1, null where it checks nothing);
a failure against rnnx/cli/schema/error.json.

The runs are made once, in dependency order, by one module-scoped fixture: in-process (as
``rnnx.cli.main.main``) except the plain export, which runs as ``python -m rnnx.cli`` so that
anything torch's exporter writes to the process's own stdout would show.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import rnnx
import rnnx.cli
from rnnx.cli.main import main
from tests.helpers import model_file

torch = pytest.importorskip("torch")

SCHEMAS = Path(rnnx.cli.__file__).parent / "schema"  # what the package ships
VERBS = ("convert", "export", "inspect", "fuse", "lower", "build", "bundle", "verify", "layout", "formats", "doctor")

MODEL = '''
import torch
from torch import nn


class Net(nn.Module):
    """A whole model: a projection before the LSTM, so its sequence is computed."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(3, 5)
        self.rnn = nn.LSTM(5, 4, batch_first=True)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        y, _ = self.rnn(torch.tanh(self.inp(x)))
        return self.out(y)


torch.manual_seed(0)
model = Net().eval()
example_inputs = (torch.randn(2, 5, 3),)
'''


class _SteppedCell(torch.nn.Module):
    """An LSTMCell stepped in Python: an unrolled graph that rnnx fuse makes one LSTM node."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = torch.nn.LSTMCell(3, 4)

    def forward(self, x: Any) -> Any:
        h = torch.zeros(x.shape[1], 4)
        c = torch.zeros(x.shape[1], 4)
        ys = []
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], (h, c))
            ys.append(h)
        return torch.stack(ys)


def schema(verb: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{verb}.json").read_text())


def _in_process(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse's usage errors
            code = int(stop.code or 0)
    return code, out.getvalue(), err.getvalue()


def _subprocess(argv: list[str]) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "rnnx.cli", *argv], capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def _one_object(stdout: str) -> dict[str, Any]:
    found = json.loads(stdout)  # exactly one value: json.loads refuses anything after it
    assert isinstance(found, dict), f"expected one JSON object, found {type(found).__name__}"
    return found


# name -> (verb, argv, exit status); {d} is the folder of inputs. Run in this order: later ones read earlier outputs.
SUCCESS: dict[str, tuple[str, list[str], int]] = {
    "convert": ("convert", ["convert", "{d}/w.safetensors", "-o", "{d}/w.onnx"], 0),
    "convert --no-check": ("convert", ["convert", "{d}/w.safetensors", "-o", "{d}/w.pt", "--no-check"], 0),
    "convert, check failed": ("convert", ["convert", "{d}/w.safetensors", "-o", "{d}/never.onnx", "--atol", "0", "--rtol", "0"], 1),
    "export": ("export", ["export", "{d}/wm.py:model", "-o", "{d}/m.onnx"], 0),
    "export --streaming": ("export", ["export", "{d}/wm.py:model", "-o", "{d}/s.onnx", "--streaming"], 0),
    "export --no-check": ("export", ["export", "{d}/wm.py:model", "-o", "{d}/unchecked.onnx", "--no-check"], 0),
    "inspect onnx": ("inspect", ["inspect", "{d}/m.onnx"], 0),
    "inspect onnx, fusable": ("inspect", ["inspect", "{d}/cell.onnx"], 0),
    "inspect weights": ("inspect", ["inspect", "{d}/w.safetensors"], 0),
    "fuse": ("fuse", ["fuse", "{d}/cell.onnx", "-o", "{d}/fused.onnx"], 0),
    "fuse, nothing to fuse": ("fuse", ["fuse", "{d}/w.onnx", "-o", "{d}/same.onnx"], 0),
    "lower": ("lower", ["lower", "{d}/w.onnx", "-o", "{d}/lowered.onnx"], 0),
    "bundle": ("bundle", ["bundle", "{d}/m.onnx", "-o", "{d}/bundle", "--jetpack", "5.1.2"], 0),
    "bundle, streaming": ("bundle", ["bundle", "{d}/s.onnx", "-o", "{d}/s-bundle", "--tensorrt", "8.6", "--precision", "fp16"], 0),
    "verify onnx alone": ("verify", ["verify", "{d}/w.onnx"], 0),
    "verify --against weights": ("verify", ["verify", "{d}/w.onnx", "--against", "{d}/w.safetensors"], 0),
    "verify --against weights, check failed": ("verify", ["verify", "{d}/w.onnx", "--against", "{d}/w.safetensors", "--backends", "ort",
                                                          "--atol", "0", "--rtol", "0"], 1),
    "verify whole model --against weights": ("verify", ["verify", "{d}/m.onnx", "--against", "{d}/wm.pt"], 0),
    "verify --against code": ("verify", ["verify", "{d}/m.onnx", "--against", "{d}/wm.py:model"], 0),
    "verify --chunks": ("verify", ["verify", "{d}/s.onnx", "--against", "{d}/wm.py:model", "--chunks", "2,5"], 0),
    "layout spec": ("layout", ["layout", "--spec", "gru,input=2,hidden=3,bidirectional"], 0),
    "layout file": ("layout", ["layout", "{d}/w.safetensors"], 0),
    "formats": ("formats", ["formats"], 0),
    "doctor": ("doctor", ["doctor"], 0),
}

# One bad input (or usage) per verb: exit 2 and error.json's object.
FAILURE: dict[str, list[str]] = {
    "convert": ["convert", "{d}/none.pt", "-o", "{d}/out.onnx"],
    "export": ["export", "{d}/none.py:model", "-o", "{d}/out.onnx"],
    "inspect": ["inspect", "{d}/none.onnx"],
    "fuse": ["fuse", "{d}/none.onnx", "-o", "{d}/out.onnx"],
    "lower": ["lower", "{d}/none.onnx", "-o", "{d}/out.onnx"],
    "build": ["build", "{d}/none.onnx", "-o", "{d}/out.engine"],
    "bundle": ["bundle", "{d}/none.onnx", "-o", "{d}/out-bundle"],
    "verify": ["verify", "{d}/w.safetensors"],  # a weights file is not a model to check
    "layout": ["layout"],
    "formats": ["formats", "--no-such-flag"],
    "doctor": ["doctor", "--no-such-flag"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, tuple[int, str, str]]]:
    d = tmp_path_factory.mktemp("json_contract")
    rnnx.save(rnnx.RNNWeights.random(rnnx.RNNSpec.parse("lstm,input=3,hidden=4,layers=2"), seed=0), d / "w.safetensors")
    scope = model_file(d / "wm.py", MODEL)
    torch.save(scope["model"].state_dict(), d / "wm.pt")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_SteppedCell().eval(), (torch.randn(3, 2, 3),), str(d / "cell.onnx"), dynamo=False, opset_version=17)
    done = {}
    for name, (_, argv, _) in SUCCESS.items():
        argv = [a.format(d=d) for a in argv] + ["--json"]
        done[name] = _subprocess(argv) if name == "export" else _in_process(argv)
    return d, done


@pytest.mark.parametrize("name", list(SUCCESS))
def test_success_is_one_object_valid_against_its_verbs_schema(runs: tuple[Path, dict[str, tuple[int, str, str]]], name: str) -> None:
    verb, _, status = SUCCESS[name]
    code, out, err = runs[1][name]
    assert code == status, err
    found = _one_object(out)
    jsonschema.validate(found, schema(verb))
    assert found["verb"] == verb
    if status == 1:  # a failed check says so, and exits 1 with its one line on stderr
        assert found["passed"] is False and len(err.strip().splitlines()) == 1 and "failed" in err
    else:
        assert found["passed"] in (True, None)


def test_passed_is_what_each_verb_checked(runs: tuple[Path, dict[str, tuple[int, str, str]]]) -> None:
    found = {name: json.loads(out) for name, (_, out, _) in runs[1].items()}
    assert found["convert"]["passed"] is True and found["convert --no-check"]["passed"] is None
    assert found["export --no-check"]["passed"] is None and found["export"]["passed"] is True
    assert found["fuse"]["passed"] is True and found["fuse"]["check"]["passed"] is True
    assert found["fuse, nothing to fuse"]["passed"] is None and found["fuse, nothing to fuse"]["check"] is None
    assert found["lower"]["passed"] is found["lower"]["check"]["passed"] is True
    assert all(found[n]["passed"] is None for n in ("inspect onnx", "inspect weights", "layout spec", "layout file", "formats"))
    assert found["doctor"]["passed"] is found["doctor"]["cudnn_layout"]["passed"]
    assert found["verify --against code"]["self_check"] is False and found["verify --chunks"]["check"] == "chunked"
    whole = found["verify whole model --against weights"]
    assert whole["self_check"] is True and whole["against"].endswith("wm.pt") and whole["layers"][0]["status"] == "ok"
    assert found["inspect onnx, fusable"]["fusable"]["chains"] and "export" in found["inspect onnx"]
    # the keys the reports had before verb and passed were added stay as they were
    assert found["convert"]["check"]["passed"] is True and found["layout spec"]["elements"] == 126
    assert {"cudnn", "onnx", "rnnx", "torch"} <= {f["name"] for f in found["formats"]["formats"]}


@pytest.mark.parametrize("verb", list(FAILURE))
def test_bad_input_is_one_error_object(runs: tuple[Path, dict[str, tuple[int, str, str]]], verb: str) -> None:
    argv = [a.format(d=runs[0]) for a in FAILURE[verb]] + ["--json"]
    code, out, err = _in_process(argv)
    assert code == 2, err
    found = _one_object(out)
    jsonschema.validate(found, schema("error"))
    assert found["exit_code"] == 2 and found["verb"] == verb and found["error"] == err.strip().splitlines()[-1]


def test_every_verb_has_a_schema() -> None:
    from rnnx.cli.parser import build_parser

    parser = build_parser()
    verbs = next(a for a in parser._actions if a.dest == "command").choices  # noqa: SLF001  argparse keeps them here only
    assert set(verbs) == set(VERBS) == set(FAILURE)
    for verb in (*VERBS, "error"):
        found = schema(verb)
        jsonschema.Draft202012Validator.check_schema(found)
        assert found["$id"] == f"rnnx/cli/schema/{verb}.json" and found["title"] and found["description"]
        if verb != "error":
            assert {"verb", "passed"} <= set(found["required"]) and found["properties"]["verb"] == {"const": verb}


def test_build_success_with_a_stand_in_for_tensorrt(runs: tuple[Path, dict[str, tuple[int, str, str]]],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorRT cannot be installed here: its bindings and Polygraphy's loaders are replaced by
    stand-ins that build nothing, so the record rnnx writes beside the engine, and prints, is real."""
    pytest.importorskip("polygraphy", reason="Polygraphy is not installed")
    from types import SimpleNamespace

    from polygraphy.backend import trt as polygraphy_trt

    from rnnx.engines import tensorrt as trt_module

    class Loaders:
        CreateConfig, PostprocessConfig = polygraphy_trt.CreateConfig, polygraphy_trt.PostprocessConfig

        def NetworkFromOnnxPath(self, path: str) -> Any:  # noqa: N802  Polygraphy's names
            return lambda: "network"

        def EngineFromNetwork(self, network: Any, config: Any, save_timing_cache: Any = None) -> Any:  # noqa: N802
            return "engine"

        def SaveEngine(self, engine: Any, path: str) -> Any:  # noqa: N802
            return lambda: Path(path).write_bytes(b"stand-in")

    flags = SimpleNamespace(TF32=1, FP16=2, BF16=3, INT8=4, VERSION_COMPATIBLE=5, GPU_FALLBACK=6)
    fake = SimpleNamespace(__version__="10.3.0", BuilderFlag=flags, IBuilderConfig=SimpleNamespace(builder_optimization_level=None))
    monkeypatch.setattr(trt_module, "_import_trt", lambda: fake)
    monkeypatch.setattr(trt_module, "_import_polygraphy", Loaders)
    d = runs[0]
    code, out, err = _in_process(["build", str(d / "w.onnx"), "-o", str(d / "w.engine"), "--json"])
    assert code == 0, err
    found = _one_object(out)
    jsonschema.validate(found, schema("build"))
    assert found["verb"] == "build" and found["passed"] is None and found["tensorrt"] == "10.3.0"
    assert found["spec"] == "lstm,input=3,hidden=4,layers=2"
