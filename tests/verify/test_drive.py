"""verify drives the files rnnx itself writes, in every layout, from their record or their wiring.

Each file is written by the command's code (``rnnx convert`` with every combination of its
layout flags, ``rnnx export`` of PyTorch modules written as users write them) and checked by
``rnnx verify`` (both through rnnx.cli.main, in-process): it must pass on the file as written and fail, naming the mistake,
on the same file with a planted gate-order bug.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights
from rnnx.formats.onnx_build import build_stack_model
from tests.helpers import rnnx_in_process
from tests.verify.test_verify import _forum_packed

FLAGS = list(itertools.product([False, True], repeat=3))  # batch_first, seq_lens, no_states


def _rnnx(*args: object) -> subprocess.CompletedProcess[str]:
    # in-process (rnnx.cli.main): what is tested is what convert writes and verify drives, not
    # the process; tests/test_cli.py and tests/verify/test_verify.py run these verbs as subprocesses
    return rnnx_in_process(*args)


# Each flag is on in one default case and off in another; the other combinations run with --slow.
_DEFAULT_FLAGS = {(False, False, False), (True, True, True), (True, False, False), (False, True, True)}
CASES = [pytest.param("lstm,input=3,hidden=4,layers=2,bidirectional", *flags,
                      marks=() if flags in _DEFAULT_FLAGS else pytest.mark.slow) for flags in FLAGS] + [
    # A GRU (no c0) in the default layout; the flags, driven as for the LSTM, on too with --slow.
    ("gru,input=2,hidden=5", False, False, False), pytest.param("gru,input=2,hidden=5", True, True, True, marks=pytest.mark.slow)]


@pytest.mark.parametrize(("text", "batch_first", "seq_lens", "no_states"), CASES)
def test_every_convert_layout_is_driven_and_a_planted_bug_fails(tmp_path: Path, text: str, batch_first: bool, seq_lens: bool, no_states: bool) -> None:
    weights = RNNWeights.random(RNNSpec.parse(text), seed=7, scale=0.9)
    rnnx.save(weights, tmp_path / "w.safetensors")
    flags = [f for f, on in (("--batch-first", batch_first), ("--seq-lens", seq_lens), ("--no-states", no_states)) if on]
    assert _rnnx("convert", tmp_path / "w.safetensors", "-o", tmp_path / "m.onnx", *flags).returncode == 0
    good = _rnnx("verify", tmp_path / "m.onnx", "--against", tmp_path / "w.safetensors", "--json", "--batch", "1,3")
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr
    report = json.loads(good.stdout)
    assert report["passed"] and report["driven"]["batch_first"] == batch_first
    roles = set(report["driven"]["inputs"].values())
    assert ("seq_lens" in roles) == seq_lens and ("h0" in roles) != no_states
    ort_rows = [r for r in report["rows"] if r["backend"] == "ort"]
    assert {r["batch"] for r in ort_rows} == {1, 3} and all(r["passed"] for r in ort_rows)

    bad = build_stack_model(_forum_packed(weights), batch_first=batch_first, sequence_lens=seq_lens, initial_states=not no_states)
    onnx.save(bad, str(tmp_path / "bad.onnx"))
    planted = _rnnx("verify", tmp_path / "bad.onnx", "--against", tmp_path / "w.safetensors", "--batch", "1,3")
    if weights.spec.cell == "lstm":  # the forum mistake swaps LSTM gates g and o; a GRU has neither
        assert planted.returncode == 1, planted.stdout[-2000:] + planted.stderr
        assert "diagnosis for ort" in planted.stdout


def test_exported_modules_are_driven_from_their_record(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    (tmp_path / "models.py").write_text(
        "import torch\n"
        "torch.manual_seed(3)\n"
        "class Tagger(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.rnn = torch.nn.LSTM(6, 8, num_layers=2, batch_first=True, bidirectional=True)\n"
        "    def forward(self, tokens):\n"
        "        out, _ = self.rnn(tokens)\n"
        "        return out\n"
        "class Stateful(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.gru = torch.nn.GRU(4, 5)\n"
        "    def forward(self, x, h):\n"
        "        return self.gru(x, h)\n"
        "tagger, stateful = Tagger(), Stateful()\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import models  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    cases = [("tagger", models.tagger.rnn, ["--input", "tokens:2x7x6"]), ("stateful", models.stateful.gru, ["--input", "x:5x2x4", "--input", "h:1x2x5"])]
    for name, module, inputs in cases:
        torch.save(module.state_dict(), tmp_path / f"{name}.pt")
        exported = _rnnx("export", f"{tmp_path / 'models.py'}:{name}", "-o", tmp_path / f"{name}.onnx", *inputs)
        assert exported.returncode == 0, exported.stderr
        out = _rnnx("verify", tmp_path / f"{name}.onnx", "--against", tmp_path / f"{name}.pt", "--json")
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr
        report = json.loads(out.stdout)
        assert report["passed"] and report["driven"]["source"] == "rnnx export's record"
        assert any(r["backend"] == "ort" and r["batch"] == 1 for r in report["rows"])


def test_an_input_no_rule_reaches_is_named_with_the_flag_that_maps_it(tmp_path: Path) -> None:
    weights = RNNWeights.random(RNNSpec.parse("gru,input=2,hidden=3"), seed=1)
    rnnx.save(weights, tmp_path / "w.safetensors")
    model = build_stack_model(weights)
    model.graph.input.append(onnx.helper.make_tensor_value_info("temperature", onnx.TensorProto.FLOAT, [1]))
    onnx.save(model, str(tmp_path / "m.onnx"))
    out = _rnnx("verify", tmp_path / "m.onnx", "--against", tmp_path / "w.safetensors")
    assert out.returncode == 2 and "--input-map temperature=ROLE" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_the_input_map_names_what_the_wiring_cannot_show(tmp_path: Path) -> None:
    """A batch-major file whose transposes were folded away: the wiring cannot see the layout;
    --batch-first says it, and without it the check fails rather than passing by accident."""
    weights = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4"), seed=2, scale=0.9)
    rnnx.save(weights, tmp_path / "w.safetensors")
    model = build_stack_model(weights, batch_first=False)
    onnx.save(model, str(tmp_path / "m.onnx"))
    plain = _rnnx("verify", tmp_path / "m.onnx", "--against", tmp_path / "w.safetensors", "--input-map", "X=X", "--input-map", "Y=Y")
    assert plain.returncode == 0, plain.stderr
    wrong = _rnnx("verify", tmp_path / "m.onnx", "--against", tmp_path / "w.safetensors", "--batch-first", "--batch", "2", "--seq-lens", "5")
    assert wrong.returncode in (1, 2), wrong.stdout[-1000:]
