"""Whole-model verify: an ONNX file against the torch code it came from, end to end and layer by layer.

The models are the export corpus's (written as published projects write them) and a model
exported by torch.onnx's own TorchScript exporter with hand-written axes. Each is verified
as exported, then with a layout bug planted in one recurrent layer's stored weights (two
gate blocks of W swapped); the layer-by-layer report must name that layer and no other.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402
from rnnx.errors import RNNXError  # noqa: E402
from rnnx.verify.models import is_model_code, verify_model  # noqa: E402
from tests.helpers import MadeOnFirstUse  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
# (family, which recurrent node gets the planted bug); RNN nodes have one gate, so there
# the planted bug swaps the first two rows' halves of W instead.
FAMILIES = [("crnn", 1), ("seq2seq", 2), ("tagger", 0), ("deepspeech", 1), ("lm_tied", 1)]


def _model_file(tmp: Path, family: str) -> Path:
    path = tmp / f"{family}_model.py"
    path.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "import torch\n"
        "from tests.exporters.corpus import FAMILIES\n"
        f"_family = {{f.name: f for f in FAMILIES}}[{family!r}]\n"
        "torch.manual_seed(0)\n"
        "model = _family.make().eval()\n"
        "example_inputs = _family.example(2, 12, 0)\n"
    )
    return path


def _export(tmp: Path, code: Path) -> Path:
    from rnnx.exporters.loading import load_model

    model, example = load_model(f"{code}:model")
    out = tmp / (code.stem + ".onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rnnx.export(model, example, out, check=False)
    return out


def plant(src: Path, dst: Path, which: int) -> str:
    """Swap two gate blocks of one recurrent node's W (for an RNN node: two halves of its rows)."""
    model = onnx.load(str(src))
    nodes = [n for n in model.graph.node if n.op_type in GATES]
    node = nodes[which]
    inits = {i.name: i for i in model.graph.initializer}
    W = numpy_helper.to_array(inits[node.input[1]]).copy()
    H = W.shape[1] // GATES[node.op_type]
    if node.op_type == "RNN":
        W = W[:, ::-1, :].copy()
    else:
        W[:, :H], W[:, H:2 * H] = W[:, H:2 * H].copy(), W[:, :H].copy()
    inits[node.input[1]].CopyFrom(numpy_helper.from_array(W, node.input[1]))
    onnx.save(model, str(dst))
    return node.name


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    tmp = tmp_path_factory.mktemp("whole")

    def make(family: str) -> tuple[Path, Path]:
        code = _model_file(tmp, family)
        return code, _export(tmp, code)

    # Each family is exported when a test first asks for it (~3 s each).
    return MadeOnFirstUse({family: (lambda family=family: make(family)) for family, _ in FAMILIES})


@pytest.mark.parametrize("family,which", FAMILIES, ids=[f for f, _ in FAMILIES])
def test_exported_model_passes_and_a_planted_layer_is_named(exported: dict[str, tuple[Path, Path]], family: str, which: int, tmp_path: Path) -> None:
    code, model = exported[family]
    report = verify_model(model, f"{code}:model")
    assert report.passed, str(report)
    assert {c.sizes.get("batch") for c in report.ran if "batch" in c.sizes} >= {1}  # batch 1 is always a case
    assert report.layers and all(la.status == "ok" for la in report.layers), str(report)
    assert all(la.truth.startswith("torch module") for la in report.layers)  # weights from the torch code, not the file
    assert max(r.stats.max_abs for r in report.rows) < 1e-4

    bad = tmp_path / "planted.onnx"
    planted = plant(model, bad, which)
    report = verify_model(bad, f"{code}:model")
    assert not report.passed
    first = report.first_drift
    assert first is not None and first.name == planted, str(report)
    assert [la.name for la in report.layers if la.status == "drifts"] == [planted]  # later layers match on their own inputs
    assert first.per_step and max(first.per_step) > 1e-3
    assert any("stored weights differ" in d and ".W." in d for d in first.diagnosis), first.diagnosis
    assert planted in str(report)


FOREIGN = """
import torch
from torch import nn
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 8)
        self.rnn = nn.LSTM(8, 12, num_layers=2, bidirectional=True)
        self.head = nn.Linear(24, 5)

    def forward(self, tokens):
        y, _ = self.rnn(self.emb(tokens))
        return self.head(y)


model = Net().eval()
"""


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A file from torch.onnx's TorchScript exporter with the axes written by hand, as users do."""
    tmp = tmp_path_factory.mktemp("foreign")
    code = tmp / "net.py"
    code.write_text(FOREIGN)
    from rnnx.exporters.loading import load_model

    model, _ = load_model(f"{code}:model")
    out = tmp / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randint(0, 30, (7, 2)),), str(out), dynamo=False, input_names=["tokens"], output_names=["logits"],
                          dynamic_axes={"tokens": {0: "seq", 1: "batch"}, "logits": {0: "seq", 1: "batch"}})
    return code, out


def test_file_from_another_exporter_is_matched_by_spec(foreign: tuple[Path, Path], tmp_path: Path) -> None:
    code, model = foreign
    report = verify_model(model, f"{code}:model", seq_lens=[1, 9], batches=[1, 3])
    assert report.passed, str(report)
    assert [c.sizes for c in report.ran] == [{"seq": 1, "batch": 1}, {"seq": 1, "batch": 3}, {"seq": 9, "batch": 1}, {"seq": 9, "batch": 3}]
    assert [la.truth for la in report.layers] == ["torch module 'rnn' layer 0 (matched by spec)", "torch module 'rnn' layer 1 (matched by spec)"]
    planted = plant(model, tmp_path / "bad.onnx", 1)
    bad = verify_model(tmp_path / "bad.onnx", f"{code}:model")
    assert not bad.passed and bad.first_drift is not None and bad.first_drift.name == planted


def test_torchscript_file_as_the_source(foreign: tuple[Path, Path], tmp_path: Path) -> None:
    code, model = foreign
    from rnnx.exporters.loading import load_model

    net, _ = load_model(f"{code}:model")
    scripted = tmp_path / "net.pt"
    torch.jit.script(net).save(str(scripted))
    assert is_model_code(scripted) and not is_model_code(code)
    report = verify_model(model, str(scripted), seq_lens=[5], batches=[1, 2])
    assert report.passed, str(report)
    assert all(la.status == "ok" for la in report.layers)


def test_projected_lstm_is_checked_through_its_lowered_layers(tmp_path: Path) -> None:
    code = tmp_path / "proj.py"
    code.write_text("import torch\nfrom torch import nn\ntorch.manual_seed(1)\n"
                    "model = nn.LSTM(6, 10, num_layers=2, proj_size=4, batch_first=True).eval()\n"
                    "example_inputs = (torch.randn(2, 7, 6),)\n")
    model = _export(tmp_path, code)
    report = verify_model(model, f"{code}:model", seq_lens=[1, 6], batches=[1, 2])
    assert report.passed, str(report)
    assert [(la.form, la.status) for la in report.layers] == [("lowered", "ok"), ("lowered", "ok")]
    assert report.layers[1].truth == "torch module '' layer 1"


def test_rnnx_lower_output_is_checked_layer_by_layer(exported: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    from rnnx.pipelines.lower import lower_file

    code, model = exported["tagger"]
    lowered = tmp_path / "tagger.lowered.onnx"
    lower_file(model, lowered)
    report = verify_model(lowered, f"{code}:model", seq_lens=[1, 8], batches=[1, 2])
    assert report.passed, str(report)
    assert report.layers and all(la.form == "lowered" and la.status == "ok" for la in report.layers), str(report)


def test_refusals_are_one_line(foreign: tuple[Path, Path], exported: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    code, model = foreign
    other_code, _ = exported["crnn"]
    with pytest.raises(RNNXError, match="the torch model raised at every shape tried .*Input type"):
        verify_model(model, f"{other_code}:model")  # CRNN's convolutions refuse token ids
    two = tmp_path / "two.py"
    two.write_text(FOREIGN + "\n\nclass Two(Net):\n    def forward(self, tokens):\n        return super().forward(tokens), tokens\n\n\n"
                   "torch.manual_seed(0)\nmodel = Two().eval()\n")
    with pytest.raises(RNNXError, match="the ONNX file has 1 outputs .*returned 2 tensors"):
        verify_model(model, f"{two}:model")
    odd = tmp_path / "odd.onnx"
    proto = onnx.load(str(model))
    proto.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "k"
    onnx.save(proto, str(odd))
    assert verify_model(odd, f"{code}:model").roles["k"] == "batch"  # a name that says nothing: the wiring through the embedding does
    report = verify_model(odd, f"{code}:model", dims={"k": 2}, seq_lens=[3])
    assert report.passed and {c.sizes["k"] for c in report.cases} == {2}


def test_inputs_are_seeded_and_lengths_fill_the_sequence() -> None:
    from rnnx.check import Case
    from rnnx.shapes.file_dims import InputSpec
    from rnnx.verify.feeds import make_feed

    specs = [InputSpec("x", np.dtype("float32"), ["seq", "batch", 3]), InputSpec("lens", np.dtype("int64"), ["batch"], lengths_of="seq"),
             InputSpec("ids", np.dtype("int64"), ["batch"], vocabulary=7)]
    case = Case("c", {"seq": 9, "batch": 5}, {"x": [9, 5, 3], "lens": [5], "ids": [5]})
    a, b = make_feed(specs, case, {}, 3), make_feed(specs, case, {}, 3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["lens"][0] == 9 and list(a["lens"]) == sorted(a["lens"], reverse=True) and a["lens"].min() >= 1
    assert a["ids"].max() < 7 and a["ids"].min() >= 0


# --- a file on its own (no --against) ----------------------------------------------------


def test_a_file_on_its_own_runs_at_varied_shapes_and_each_layer_is_checked(tmp_path: Path) -> None:
    """A projected stack: its layers are Scans, each weight stored once, read back from the
    Scans through the lowering record and checked against the reference; a bug planted in
    one Scan's arithmetic (two gates' pre-activations swapped) is named."""
    from rnnx import RNNSpec, RNNWeights
    from rnnx.verify.models import verify_file

    weights = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=5,layers=2,proj=2"), seed=2)
    rnnx.save(weights, tmp_path / "w.safetensors")
    from rnnx.pipelines.convert import convert

    convert(tmp_path / "w.safetensors", tmp_path / "m.onnx")
    report = verify_file(tmp_path / "m.onnx", seq_lens=[1, 7], batches=[1, 2], isolated=False)
    assert report.passed, str(report)
    assert [(la.form, la.status, la.truth) for la in report.layers] == [("lowered", "ok", "its own weights"), ("lowered", "ok", "its own weights")]
    assert [c.sizes for c in report.ran] == [{"seq": 1, "batch": 1}, {"seq": 1, "batch": 2}, {"seq": 7, "batch": 1}, {"seq": 7, "batch": 2}]

    model = onnx.load(str(tmp_path / "m.onnx"))
    scan = next(n for n in model.graph.node if n.op_type == "Scan" and "l1__" in n.output[0])
    split = next(n for n in scan.attribute[0].g.node if n.op_type == "Split")
    split.output[0], split.output[1] = split.output[1], split.output[0]  # the input and forget gates swapped in the step
    onnx.save(model, str(tmp_path / "bad.onnx"))
    bad = verify_file(tmp_path / "bad.onnx", seq_lens=[4], batches=[2], isolated=False)
    assert not bad.passed and bad.first_drift is not None and bad.first_drift.name.endswith("_l1"), str(bad)
    assert [la.status for la in bad.layers] == ["ok", "drifts"]


class _GroupsOfFour(torch.nn.Module):
    """Frames in groups of 4 before the LSTM: the model takes only lengths that are multiples of 4."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(12, 6, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, f = x.shape
        return self.lstm(x.reshape(b, t // 4, 4 * f))[0]


def test_a_file_on_its_own_that_takes_only_some_lengths_is_checked_at_those(tmp_path: Path) -> None:
    """With no torch model to ask, a length the file cannot run at (99 frames, in groups of 4)
    where another length ran at the same batch is said and skipped, not a failure; a batch the
    file cannot run at stays one (tests/verify/test_verify_wild.py)."""
    from rnnx.verify.models import verify_file

    torch.manual_seed(0)
    assert rnnx.export(_GroupsOfFour().eval(), (torch.randn(1, 48, 3),), tmp_path / "g.onnx").passed
    report = verify_file(tmp_path / "g.onnx", isolated=False)
    assert report.passed, str(report)
    refused = [c for c in report.cases if c.skipped]
    assert refused and all("does not run at these lengths" in c.skipped and "--seq-lens" in c.skipped for c in refused), str(report)
    assert all(c.sizes.get("seq", 0) % 4 for c in refused) and report.ran and all(c.sizes.get("seq", 4) % 4 == 0 for c in report.ran)


def test_a_file_on_its_own_that_cannot_be_checked_is_refused(tmp_path: Path, foreign: tuple[Path, Path]) -> None:
    from onnx import TensorProto, helper

    from rnnx.verify.models import verify_file

    plain = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])]))
    onnx.save(plain, str(tmp_path / "relu.onnx"))
    with pytest.raises(RNNXError, match="nothing to check on its own"):
        verify_file(tmp_path / "relu.onnx")
    _, model = foreign
    report = verify_file(model, seq_lens=[3], batches=[1])  # a foreign file: native layers on their own weights
    assert report.passed and all(la.truth == "its own weights" for la in report.layers)


def test_cli_exit_statuses_and_json(exported: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    def cli(*args: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rnnx", "verify", *map(str, args)], capture_output=True, text=True, timeout=600)

    code, model = exported["tagger"]
    ok = cli(model, "--against", f"{code}:model", "--seq-lens", "4,9", "--batch", "1,2", "--json", "--report", tmp_path / "r.json")
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    # stdout names the verb too
    assert data["passed"] and data["first_drift"] is None and json.loads((tmp_path / "r.json").read_text()) == {k: v for k, v in data.items() if k != "verb"}
    planted = plant(model, tmp_path / "bad.onnx", 0)
    bad = cli(tmp_path / "bad.onnx", "--against", f"{code}:model", "--seq-lens", "4", "--batch", "1")
    assert bad.returncode == 1 and f"first layer out of tolerance: {planted}" in bad.stdout
    assert bad.stderr.strip() == f"rnnx verify: verification failed: layer {planted} is the first out of tolerance"
    # the process's exit statuses are held above; the rest in-process (rnnx.cli.main), 2-3 s a run less
    from tests.helpers import rnnx_in_process

    alone = rnnx_in_process("verify", tmp_path / "bad.onnx", "--seq-lens", "4", "--batch", "1")  # on its own the file is self-consistent
    assert alone.returncode == 0, alone.stdout + alone.stderr
    for args in (["--against", f"{code}:model", "--dim", "x"], ["--against", f"{code}:model", "--dtype", "fp16"], ["--checkpoint", code]):
        refused = rnnx_in_process("verify", model, *args)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, (args, refused.stderr)


def test_what_would_go_unvaried_or_unchecked_is_said(foreign: tuple[Path, Path], tmp_path: Path) -> None:
    """torch's own axis names (dynamic_axes given as a list) say nothing: the wiring through the
    embedding reads them, and the report says so; sizes given fix them; a module with no layer
    in the graph is named; a --dim for no dimension is refused."""
    code, model = foreign
    proto = onnx.load(str(model))
    for d, dim in enumerate(proto.graph.input[0].type.tensor_type.shape.dim):
        dim.dim_param = f"input_dynamic_axes_{d + 1}"
    onnx.save(proto, str(tmp_path / "auto.onnx"))
    report = verify_model(tmp_path / "auto.onnx", f"{code}:model", dims={"input_dynamic_axes_1": 6, "input_dynamic_axes_2": 2})
    assert report.passed and len(report.cases) == 1
    assert any("read by the graph's wiring" in n and "input_dynamic_axes_1 is a length" in n for n in report.notes), report.notes
    with pytest.raises(RNNXError, match="^dims: input_dynamic_axes_1=6 fixes a length that seq_lens= varies"):
        verify_model(tmp_path / "auto.onnx", f"{code}:model", seq_lens=[3], dims={"input_dynamic_axes_1": 6, "input_dynamic_axes_2": 2})
    with pytest.raises(RNNXError, match="dims: nosuch: the file has no dynamic dimension"):
        verify_model(model, f"{code}:model", dims={"nosuch": 5})
    spare = tmp_path / "spare.py"
    spare.write_text(FOREIGN + "\n\nclass Spare(Net):\n    def __init__(self):\n        super().__init__()\n        self.unused = nn.GRU(3, 3)\n\n\n"
                     "torch.manual_seed(0)\nmodel = Spare().eval()\n")
    report = verify_model(model, f"{spare}:model", seq_lens=[4], batches=[1])
    assert report.passed and any("'unused'" in n and "not layer by layer" in n for n in report.notes), report.notes
