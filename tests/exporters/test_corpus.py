"""rnnx.export on a corpus of recurrent models written as open-source projects write them.

For each family and example batch: export with no dynamic axes given, count the native
recurrence nodes, then run ONNX Runtime at three shapes unlike the example's and compare
with the module, output by output.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import rnnx  # noqa: E402
from tests.exporters.corpus import FAMILIES, Family  # noqa: E402

# The example's length (image width for crnn, frames for deepspeech, source length for
# seq2seq, memory length for the Tacotron decoder); 12 when not listed.
STEPS0 = {"crnn": 64, "deepspeech": 24}
EXAMPLE_BATCHES = (1, 3)


def steps0(family: Family) -> int:
    return STEPS0.get(family.name, 12)


def new_shapes(family: Family) -> list[tuple[int, int]]:
    """(batch, steps) pairs unlike the example's: longer at batch 1, bigger in both, shorter at batch 2."""
    s = steps0(family)
    return [(1, s + s // 2), (5, 2 * s), (2, s // 2)]


def _flat_numpy(args) -> list[np.ndarray]:
    from torch.utils._pytree import tree_flatten

    flat, _ = tree_flatten(args)
    return [x.detach().numpy() for x in flat if isinstance(x, torch.Tensor)]


def _torch_outputs(model, args) -> list[np.ndarray]:
    from torch.utils._pytree import tree_flatten

    with torch.no_grad():
        out = model(*args)
    flat, _ = tree_flatten(out)
    return [x.numpy() for x in flat if isinstance(x, torch.Tensor)]


# Families tests/verify/test_whole_model.py also exports, from a batch-2 example, and checks in
# ONNX Runtime against the module at varied shapes (batch 1 included): here their batch-3
# example runs with --slow, their batch-1 example by default.
ALSO_FROM_BATCH_2 = {"crnn", "seq2seq", "tagger", "deepspeech", "lm_tied"}


def _cases() -> list:
    return [pytest.param(family, batch, id=f"{family.name}-{batch}",
                         marks=pytest.mark.slow if batch != 1 and family.name in ALSO_FROM_BATCH_2 else ())
            for family in FAMILIES for batch in EXAMPLE_BATCHES]


@pytest.mark.parametrize(("family", "batch"), _cases())
def test_corpus_exports_native_and_dynamic(family: Family, batch: int, tmp_path) -> None:
    torch.manual_seed(0)
    model = family.make().eval()
    path = tmp_path / "m.onnx"
    report = rnnx.export(model, family.example(batch, steps0(family), seed=1), path)
    assert report.passed, str(report)

    proto = onnx.load(str(path))
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    assert ops[family.native] >= family.min_native, f"{family.native} x{ops[family.native]}, want >= {family.min_native}: {dict(ops)}"

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for seed, (b, steps) in enumerate(new_shapes(family), start=2):
        args = family.example(b, steps, seed=seed)
        feeds = _flat_numpy(args)
        assert len(names) == len(feeds), f"the ONNX model takes {names}, the example flattens to {len(feeds)} tensors"
        got = session.run(None, dict(zip(names, feeds)))
        want = _torch_outputs(model, args)
        assert len(got) == len(want), f"batch {b}, steps {steps}: ONNX gives {len(got)} outputs, torch {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape, f"batch {b}, steps {steps}, output {i}: shape {g.shape}, torch {w.shape}"
            err = float(np.max(np.abs(g - w))) if w.size else 0.0
            assert np.allclose(g, w, atol=1e-4, rtol=1e-4), f"batch {b}, steps {steps}, output {i}: max abs err {err:.3g}"
