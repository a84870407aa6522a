"""Every runner is a :class:`rnnx.engines.runner.Runner` and answers the same seeded feeds
with the float64 reference's outputs, within float32's tolerance (:data:`rnnx.tolerance.BY_DTYPE`).

The runners that need a GPU (cuDNN) or TensorRT are collected here too and skip at run time,
with the reason, where they cannot run; on a machine with both, this one file checks them all.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rnnx import RNNSpec, RNNWeights, parity
from rnnx.check import stack
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.engines.reference import ReferenceRunner
from rnnx.engines.runner import Runner
from rnnx.formats.onnx_build import build_stack_model
from rnnx.tolerance import BY_DTYPE

SPECS = (
    "lstm,input=3,hidden=4,layers=2,bidirectional",
    "lstm,input=5,hidden=6",
    "gru,input=3,hidden=5,layers=2,bidirectional",
    "rnn_tanh,input=2,hidden=3,layers=2",
    "rnn_relu,input=4,hidden=3,bidirectional",
)
SHAPES = ((1, 1, False), (1, 3, False), (7, 1, False), (7, 3, False), (7, 3, True))  # (length, batch, ragged)
STATES = ("none", "all", "h0 only")
NO_TENSORRT = "TensorRT's libraries cannot be installed on these machines"


def _need_cuda() -> None:
    torch = pytest.importorskip("torch", reason="the cuDNN runner allocates GPU memory through PyTorch, which is not installed")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU with cuDNN; none is visible to torch")


def _ort(weights: RNNWeights, tmp: Path) -> Runner:
    return OnnxRuntimeRunner(build_stack_model(weights, sequence_lens=True))


def _torch(weights: RNNWeights, tmp: Path) -> Runner:
    pytest.importorskip("torch", reason="PyTorch is not installed")
    from rnnx.engines.torch import TorchRunner

    return TorchRunner(weights)


def _reference(weights: RNNWeights, tmp: Path) -> Runner:
    return ReferenceRunner(weights)


def _cudnn(weights: RNNWeights, tmp: Path) -> Runner:
    _need_cuda()
    from rnnx.engines.cudnn import CudnnRunner

    return CudnnRunner(weights)


def _tensorrt(weights: RNNWeights, tmp: Path) -> Runner:
    if importlib.util.find_spec("tensorrt") is None:
        pytest.skip(NO_TENSORRT)
    _need_cuda()
    from rnnx.engines.tensorrt import BuildOptions, TensorRTRunner, build_from_weights

    engine = tmp / "stack.engine"
    build_from_weights(weights, engine, BuildOptions())
    return TensorRTRunner(engine)


RUNNERS: dict[str, Callable[[RNNWeights, Path], Runner]] = {
    "ort": _ort, "torch": _torch, "reference": _reference, "cudnn": _cudnn, "tensorrt": _tensorrt,
}
_built: dict[tuple[str, str], Runner] = {}


def _runner(name: str, weights: RNNWeights, tmp_path_factory: pytest.TempPathFactory) -> Runner:
    """One runner per (backend, spec) for the whole module: building an engine or a session once."""
    key = (name, str(weights.spec))
    if key not in _built:
        _built[key] = RUNNERS[name](weights, tmp_path_factory.mktemp(name))
    return _built[key]


def feeds(weights: RNNWeights, seq_len: int, batch: int, ragged: bool, states: str, seed: int) -> dict[str, np.ndarray]:
    """The seeded float32 feed every runner gets: X, the states asked for, seq_lens when ragged."""
    full = parity.random_inputs(weights, seq_len, batch, seed=seed, ragged=ragged)
    keep = {"none": ("X", "seq_lens"), "all": ("X", "h0", "c0", "seq_lens"), "h0 only": ("X", "h0", "seq_lens")}[states]
    return {k: v for k, v in full.items() if k in keep}


def conformance(runner: Runner, reference_weights: RNNWeights, feed: dict[str, np.ndarray], label: str) -> stack.StackReport:
    """The runner's outputs on ``feed`` against the float64 reference of ``reference_weights``."""
    got = runner(dict(feed))
    want = parity.reference_outputs(reference_weights, feed)
    assert set(runner.output_names) == set(want), f"{label}: outputs {runner.output_names}, expected {sorted(want)}"
    T, B = feed["X"].shape[:2]
    return stack.StackReport(stack.compare(label, got, want, T, B, "float32"))


@pytest.mark.parametrize("backend", list(RUNNERS))
@pytest.mark.parametrize("text", SPECS)
def test_every_runner_matches_the_reference(backend: str, text: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    weights = RNNWeights.random(RNNSpec.parse(text), seed=7)
    runner = _runner(backend, weights, tmp_path_factory)
    assert isinstance(runner, Runner), f"{type(runner).__name__} lacks part of the Runner protocol"
    assert runner.device in ("cpu", "cuda") and runner.precision and "X" in runner.input_names
    for k, (T, B, ragged) in enumerate(SHAPES):
        if ragged and "seq_lens" not in runner.input_names:
            continue  # an engine built without per-sequence lengths runs whole sequences only
        for states in STATES:
            feed = feeds(weights, T, B, ragged, states, seed=100 + k)
            report = conformance(runner, weights, feed, f"{backend} T={T} B={B} states={states}{' ragged' if ragged else ''}")
            assert report, report.failure()
            assert {r.atol for r in report.rows} == {BY_DTYPE["float32"].atol}


def test_no_states_means_zero_states() -> None:
    """The default is zeros, not whatever a runner happens to do: feeding zeros gives the same outputs."""
    pytest.importorskip("torch")
    from rnnx.engines.torch import TorchRunner

    weights = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4,layers=2,bidirectional"), seed=2)
    x_only = feeds(weights, 5, 2, False, "none", seed=3)
    zeros = {**x_only, "h0": np.zeros((4, 2, 4), np.float32), "c0": np.zeros((4, 2, 4), np.float32)}
    for runner in (OnnxRuntimeRunner(build_stack_model(weights)), TorchRunner(weights), ReferenceRunner(weights)):
        a, b = runner(x_only), runner(zeros)
        for name in runner.output_names:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"{type(runner).__name__} {name}")


@pytest.mark.parametrize("text", ["lstm,input=3,hidden=4,layers=2,bidirectional", "gru,input=3,hidden=5"])
def test_a_runner_with_the_wrong_gate_order_fails_conformance(text: str) -> None:
    """The test can fail: ONNX Runtime fed weights with the spec's last two gates swapped (LSTM g
    and o, GRU r and n), the mildest layout mistake, is held against the reference of the true weights."""
    weights = RNNWeights.random(RNNSpec.parse(text), seed=7)
    gates = weights.spec.gates
    swap = {gates[-1]: gates[-2], gates[-2]: gates[-1]}

    def swapped_name(name: str) -> str:
        parts = name.split(".")
        if len(parts) == 4 and parts[2] != "P":
            parts[3] = swap.get(parts[3], parts[3])
        return ".".join(parts)

    planted = RNNWeights(weights.spec, {name: weights[swapped_name(name)] for name in weights})
    good, bad = OnnxRuntimeRunner(build_stack_model(weights)), OnnxRuntimeRunner(build_stack_model(planted))
    for states in STATES:
        feed = feeds(weights, 7, 3, False, states, seed=11)
        assert conformance(good, weights, feed, "ort")
        report = conformance(bad, weights, feed, "ort with two gates swapped")
        assert not report, f"a swap of gates {gates[-2]} and {gates[-1]} passed conformance:\n{report}"
        assert not next(r for r in report.rows if r.output == "Y").passed, report


def test_the_protocol_is_checked_at_run_time() -> None:
    class NoNames:
        device, precision = "cpu", "fp32"

        def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return feeds

    assert not isinstance(NoNames(), Runner)
    assert isinstance(ReferenceRunner(RNNWeights.random(RNNSpec.parse("gru,input=2,hidden=3"))), Runner)
