"""Diagnoses that do not mislead (issue 27).

Mistakes are planted in the ONNX initializers of files written by ``rnnx export`` (a torch
model, verified against its code) and ``rnnx convert`` (a torch state_dict, verified against
it), and the diagnosis must:

- name the real cause on its first line, with the torch module's own layer number (a file's
  stack is split into one node per layer, each of which restarts at layer 0);
- never offer a mistake that changes nothing: an LSTM's input and recurrent biases are summed,
  so swapping them is not a mistake, and a file with only that is not reported at all (nor a
  GRU's swapped z and r biases);
- state a hypothesis as the cause only when it explains the whole error, and label one that
  explains part of it with its share.

The no-op rule is derived by computing: each mistake rnnx does not offer is checked here to
leave the reference's outputs unchanged on the same inputs, for LSTM, GRU and RNN, batch 1 included.
"""

from __future__ import annotations

import io
import json
import re
import warnings
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import rnnx
from rnnx import RNNSpec, RNNWeights
from rnnx.cli.main import main
from rnnx.parity import random_inputs, reference_outputs
from rnnx.tolerance import Tolerance
from rnnx.verify.diagnose import explain, hypotheses, one_layer

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

from rnnx.verify.models import verify_model  # noqa: E402

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
TOL = Tolerance(1e-4, 1e-3)

MODELS = """
import torch
torch.manual_seed(0)


class Tagger(torch.nn.Module):
    def __init__(self, cell, bidirectional):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(6, 8, num_layers=2, batch_first=True, bidirectional=bidirectional)

    def forward(self, x):
        out, _ = self.rnn(x)
        return out


bilstm = Tagger("LSTM", True).eval()
gru = Tagger("GRU", False).eval()
"""


# --- planting mistakes in a file's initializers (ONNX gate order: LSTM i,o,f,c; GRU z,r,h) ---


def plant(src: Path, dst: Path, which: int, edit, attributes: dict | None = None) -> str:
    """Apply ``edit(W, R, B, H) -> (W, R, B)`` to the ``which``-th recurrent node's initializers."""
    model = onnx.load(str(src))
    node = [n for n in model.graph.node if n.op_type in GATES][which]
    inits = {i.name: i for i in model.graph.initializer}
    arrays = [numpy_helper.to_array(inits[node.input[k]]).copy() for k in (1, 2, 3)]
    for k, array in zip((1, 2, 3), edit(*arrays, arrays[1].shape[-1])):
        inits[node.input[k]].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(array, np.float32), node.input[k]))
    for key, value in (attributes or {}).items():
        node.attribute.append(helper.make_attribute(key, value))
    onnx.save(model, str(dst))
    return node.name


def _swap(a: np.ndarray, i: int, j: int, H: int) -> np.ndarray:
    a = a.copy()
    a[:, i * H:(i + 1) * H], a[:, j * H:(j + 1) * H] = a[:, j * H:(j + 1) * H].copy(), a[:, i * H:(i + 1) * H].copy()
    return a


def gate_scaled(gate: int, by: float):
    """Every row of one gate of W (forward direction) scaled."""
    def edit(W, R, B, H):
        W = W.copy()
        W[0, gate * H:(gate + 1) * H] *= by
        return W, R, B
    return edit


def gates_swapped(i: int, j: int, gates: int):
    """Two gates exchanged in W, R and both halves of B: a gate-order mistake."""
    def edit(W, R, B, H):
        half = gates * H
        return _swap(W, i, j, H), _swap(R, i, j, H), np.concatenate([_swap(B[:, :half], i, j, H), _swap(B[:, half:], i, j, H)], axis=1)
    return edit


def biases_swapped(gates: int, which: tuple[int, ...] | None = None):
    """Wb and Rb exchanged (for the gates ``which``; all by default)."""
    def edit(W, R, B, H):
        B = B.copy()
        for g in which if which is not None else range(gates):
            wb, rb = slice(g * H, (g + 1) * H), slice((gates + g) * H, (gates + g + 1) * H)
            B[:, wb], B[:, rb] = B[:, rb].copy(), B[:, wb].copy()
        return W, R, B
    return edit


def r_transposed(W, R, B, H):
    """Each gate's block of R transposed (a kernel read without its transpose)."""
    R = R.copy()
    for d in range(R.shape[0]):
        for g in range(R.shape[1] // H):
            R[d, g * H:(g + 1) * H] = R[d, g * H:(g + 1) * H].T.copy()
    return W, R, B


def directions_swapped(W, R, B, H):
    return W[::-1], R[::-1], B[::-1]


# --- the files ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Path]]:
    """Each model exported by rnnx.export: (its --against, its file)."""
    from rnnx.exporters.loading import load_model

    tmp = tmp_path_factory.mktemp("diagnoses")
    code = tmp / "models.py"
    code.write_text(MODELS)
    out = {}
    for name in ("bilstm", "gru"):
        model, _ = load_model(f"{code}:{name}")
        path = tmp / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rnnx.export(model, (torch.randn(1, 5, 6),), path, check=False)
        out[name] = (f"{code}:{name}", path)
    return out


def _drifting(exported, tmp_path: Path, family: str, which: int, edit, attributes: dict | None = None):
    against, model = exported[family]
    bad = tmp_path / "planted.onnx"
    node = plant(model, bad, which, edit, attributes)
    report = verify_model(bad, against, seq_lens=[7, 13], batches=[1, 4])
    return report, node


# (family, planted node = torch layer, mistake, what the first line must say)
CAUSES = [
    pytest.param("bilstm", 0, gate_scaled(0, 1.01), "cause: stored weights differ from the torch module's: l0.forward.W.i (every row scaled by 1.01)",
                 id="lstm-W.i-x1.01-layer0"),
    pytest.param("bilstm", 1, gate_scaled(0, 1.01), "cause: stored weights differ from the torch module's: l1.forward.W.i (every row scaled by 1.01)",
                 id="lstm-W.i-x1.01-layer1"),
    pytest.param("gru", 1, gate_scaled(0, 1.01), "cause: stored weights differ from the torch module's: l1.forward.W.z (every row scaled by 1.01)",
                 id="gru-W.z-x1.01-layer1"),
    pytest.param("bilstm", 1, gates_swapped(0, 2, 4), "cause: gates read in order f,i,g,o instead of i,f,g,o in layer 1", id="lstm-gates-i-f-layer1"),
    pytest.param("bilstm", 0, r_transposed, "cause: recurrent matrices R transposed (each gate's) in layer 0", id="lstm-R-transposed-layer0"),
    pytest.param("bilstm", 1, directions_swapped, "cause: forward and reverse directions swapped in layer 1", id="lstm-directions-layer1"),
    pytest.param("gru", 1, biases_swapped(3), "cause: input and recurrent biases swapped in layer 1", id="gru-biases-layer1"),
    # W's gates i and f swapped, R and B left: no layout mistake rnnx tries; the stored tensors name it
    # (each direction's swap weighed alone, the larger share first)
    pytest.param("bilstm", 0, lambda W, R, B, H: (_swap(W, 0, 2, H), R, B),
                 "cause: stored weights differ from the torch module's: l0.", id="lstm-W-only-gates-layer0"),
]
SAID_TOO = {"lstm-W-only-gates-layer0": [f"l0.{d}.W.{a} (holds the torch module's l0.{d}.W.{b})" for d in ("forward", "reverse") for a, b in ("if", "fi")]}


@pytest.mark.parametrize(("family", "which", "edit", "first_line"), CAUSES)
def test_the_first_line_names_the_cause_with_the_modules_layer(exported, tmp_path: Path, request: pytest.FixtureRequest, family: str, which: int,
                                                               edit, first_line: str) -> None:
    report, node = _drifting(exported, tmp_path, family, which, edit)
    first = report.first_drift
    assert not report.passed and first is not None and first.name == node, str(report)
    assert first.diagnosis[0].startswith(first_line), first.diagnosis
    assert all(said in first.diagnosis[0] for said in SAID_TOO.get(request.node.callspec.id, [])), first.diagnosis
    assert f"layer {which}" in first.truth
    # the other layer's numbers never appear, and no hypothesis that changes nothing is offered
    other = 1 - which
    assert not any(f"l{other}." in line or f"layer {other}" in line for line in first.diagnosis), first.diagnosis
    assert not any(line.startswith("partial") for line in first.diagnosis), first.diagnosis
    assert not any(name in line for name in first.not_offered for line in first.diagnosis)
    if family == "bilstm":
        assert not any("biases swapped" in line for line in first.diagnosis), first.diagnosis
        assert f"input and recurrent biases swapped in layer {which}" in first.not_offered
    assert first_line in str(report)


@pytest.mark.parametrize(("family", "edit"), [("bilstm", biases_swapped(4)), ("gru", biases_swapped(3, which=(0, 1)))],
                         ids=["lstm-Wb-Rb", "gru-z-r-biases"])
def test_a_swap_that_changes_nothing_is_not_a_mistake(exported, tmp_path: Path, family: str, edit) -> None:
    against, model = exported[family]
    for which in (0, 1):
        bad = tmp_path / f"noop{which}.onnx"
        plant(model, bad, which, edit)
        stored = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(bad)).graph.initializer}
        clean = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(model)).graph.initializer}
        assert any(not np.array_equal(stored[k], clean[k]) for k in clean)  # the file did change
        report = verify_model(bad, against, seq_lens=[7, 13], batches=[1, 4])
        assert report.passed and report.first_drift is None, str(report)
        assert not any(la.diagnosis for la in report.layers)


def test_a_partial_explanation_is_labelled_and_not_stated_as_the_cause(exported, tmp_path: Path) -> None:
    """Gates i and f swapped, and the node told to clip its pre-activations at 1: the swap
    explains most of the error, but no mistake rnnx tries explains all of it."""
    report, node = _drifting(exported, tmp_path, "bilstm", 0, gates_swapped(0, 2, 4), {"clip": 1.0})
    first = report.first_drift
    assert first is not None and first.name == node, str(report)
    assert not any(line.startswith("cause:") for line in first.diagnosis), first.diagnosis
    top = re.fullmatch(r"partial: gates read in order f,i,g,o instead of i,f,g,o in layer 0 explains (\d+)% of the error, not all of it", first.diagnosis[0])
    assert top is not None and 50 <= int(top.group(1)) <= 99, first.diagnosis
    shares = [int(m.group(1)) for line in first.diagnosis if (m := re.search(r"explains (\d+)% of the error", line))]
    assert shares == sorted(shares, reverse=True)  # ranked by how much each explains
    assert first.diagnosis[-1] == "no mistake rnnx tries explains all of it"


# --- a state_dict source: the whole stack, through the CLI -------------------------------------


def _cli(*args: object) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main([str(a) for a in args])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("converted")
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(6, 8, num_layers=2, bidirectional=True)
    source = tmp / "lstm.pt"
    torch.save(lstm.state_dict(), source)
    code, _ = _cli("convert", source, "-o", tmp / "lstm.onnx")
    assert code == 0
    return source, tmp / "lstm.onnx"


@pytest.mark.parametrize(("which", "edit", "first_line"), [
    (1, gate_scaled(0, 1.01), "cause: stored weights differ from the source's: l1.forward.W.i (every row scaled by 1.01)"),
    (1, directions_swapped, "cause: forward and reverse directions swapped in layer 1 only"),
    (0, gates_swapped(0, 2, 4), "cause: gates read in order f,i,g,o instead of i,f,g,o in layer 0 only"),
], ids=["W.i-x1.01-layer1", "directions-layer1", "gates-layer0"])
def test_verify_against_a_state_dict_names_the_layer(converted, tmp_path: Path, which: int, edit, first_line: str) -> None:
    source, model = converted
    bad = tmp_path / "bad.onnx"
    plant(model, bad, which, edit)
    code, out = _cli("verify", bad, "--against", source, "--batch", "1,3", "--json")
    assert code == 1
    (diagnosis,) = json.loads(out)["diagnosis"]
    assert diagnosis["lines"][0].startswith(first_line), diagnosis["lines"]
    assert diagnosis["matches"] and diagnosis["lines"][0].startswith("cause: " + diagnosis["matches"][0])
    names = [h["name"] for h in diagnosis["hypotheses"]]
    assert not any("biases swapped" in n for n in names), names  # an LSTM's summed biases: never offered
    assert "input and recurrent biases swapped" in diagnosis["not_offered"]
    assert all(0.0 <= h["explained"] <= 1.0 for h in diagnosis["hypotheses"])
    code, text = _cli("verify", bad, "--against", source, "--batch", "1,3")
    assert code == 1 and f"diagnosis for ort: {first_line}" in text


# --- the rules, on the reference alone ------------------------------------------------------


def _observed(weights: RNNWeights, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """What a float32 backend would return for ``weights``."""
    return reference_outputs(weights, inputs)["Y"].astype(np.float32)


def _inputs(weights: RNNWeights, batch: int) -> dict[str, np.ndarray]:
    return {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in random_inputs(weights, 9, batch, seed=4).items()}


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize(("text", "summed"), [("lstm,input=5,hidden=5,layers=2,bidirectional", True), ("rnn_tanh,input=4,hidden=6,layers=2", True),
                                              ("gru,input=4,hidden=6,layers=2", False)])
def test_what_is_not_offered_is_computed_to_change_nothing(text: str, summed: bool, batch: int) -> None:
    weights = RNNWeights.random(RNNSpec.parse(text), seed=2, scale=0.8)
    inputs = _inputs(weights, batch)
    broken = RNNWeights(weights.spec, {k: (np.zeros_like(v) if k.startswith("l1.") and ".bW." in k else v) for k, v in weights.tensors.items()})
    found = explain(weights, inputs, _observed(broken, inputs), atol=1e-3, tol=TOL)
    assert ("input and recurrent biases swapped" in found.not_offered) == summed
    offered = {h.name for h in found.hypotheses}
    assert not offered & set(found.not_offered)
    want = reference_outputs(weights, inputs)["Y"]
    makers = {name: make for name, _, make, _ in hypotheses(weights)}
    for name in found.not_offered:  # each one, rerun: the same outputs as the correct weights
        np.testing.assert_allclose(reference_outputs(makers[name](), inputs)["Y"], want, rtol=0, atol=1e-12)
    for h in found.hypotheses:
        assert 0.0 <= h.explained <= 1.0


@pytest.mark.parametrize("batch", [1, 3])
def test_partial_explanations_rank_below_the_cause_and_say_their_share(batch: int) -> None:
    weights = RNNWeights.random(RNNSpec.parse("lstm,input=5,hidden=5,layers=2,bidirectional"), seed=6, scale=0.9)
    inputs = _inputs(weights, batch)
    swap = {"i": "f", "f": "i"}

    def permuted(name: str) -> str:
        parts = name.split(".")
        return ".".join(parts[:3] + [swap.get(parts[3], parts[3])]) if len(parts) == 4 else name

    # one cell's gates i and f swapped: the cause, named with its layer and direction
    one_cell = RNNWeights(weights.spec, {k: weights[permuted(k)] if k.startswith("l1.reverse.") else v for k, v in weights.tensors.items()})
    found = explain(weights, inputs, _observed(one_cell, inputs), atol=1e-3, tol=TOL)
    assert found.lines()[0].startswith("cause: gates read in order f,i,g,o instead of i,f,g,o in layer 1 (reverse direction only);")
    assert found.matches == ["gates read in order f,i,g,o instead of i,f,g,o in layer 1 (reverse direction only)"]
    assert found.hypotheses[1].explained < 1 and not found.hypotheses[1].full

    # that, and layer 0's biases dropped: two mistakes, neither explains all of it
    both = RNNWeights(one_cell.spec, {k: (np.zeros_like(v) if k.startswith("l0.") and ".b" in k else v) for k, v in one_cell.tensors.items()})
    found = explain(weights, inputs, _observed(both, inputs), atol=1e-3, tol=TOL)
    assert not found.matches
    lines = found.lines()
    assert all(re.fullmatch(r"partial: .+ explains \d+% of the error, not all of it", line) for line in lines[:-1]), lines
    assert lines[-1] == "no mistake rnnx tries explains all of it"
    assert lines[0].startswith("partial: biases dropped in layer 0 only explains"), lines  # the larger of the two mistakes
    shares = [h.explained for h in found.hypotheses]
    assert shares == sorted(shares, reverse=True) and 0 < shares[0] < 1


def test_stored_tensors_are_named_with_the_modules_layer_and_summed_swaps_left_out() -> None:
    """Layer 3 of a GRU module as a one-layer stack: its stored W.n scaled and its z and r biases
    swapped (which changes nothing): the cause names l3.forward.W.n and nothing else."""
    module = RNNWeights.random(RNNSpec.parse("gru,input=4,hidden=6,layers=4"), seed=8, scale=0.9)
    truth = one_layer(module, 3)
    stored = dict(truth.tensors)
    for g in ("z", "r"):
        stored[f"l0.forward.bW.{g}"], stored[f"l0.forward.bR.{g}"] = truth[f"l0.forward.bR.{g}"], truth[f"l0.forward.bW.{g}"]
    stored["l0.forward.W.n"] = truth["l0.forward.W.n"] * np.float32(1.05)
    stored_weights = RNNWeights(truth.spec, stored)
    inputs = _inputs(truth, 1)
    found = explain(truth, inputs, _observed(stored_weights, inputs), atol=1e-3, tol=TOL, stored=stored_weights, first_layer=3,
                    source="the torch module's")
    first = found.lines()[0]
    assert first.startswith("cause: stored weights differ from the torch module's: l3.forward.W.n (every row scaled by 1.05);"), first
    assert ".bW." not in first and ".bR." not in first and "l0." not in first
    assert len(found.matches) == 1 and first.startswith(f"cause: {found.matches[0]};")
    assert "input and recurrent biases swapped in layer 3" in [h.name for h in found.hypotheses]  # a GRU's n biases are not summed
