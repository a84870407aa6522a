"""verify --against on models whose inputs must change together (issue 46).

A graph model takes node features and an ``edge_index`` of node ids: verify used to draw the ids
from the example's range at fewer nodes, every case made the torch model raise, and verify
exited 2 on a correct file. A model that views its sequence as a fixed number of regions takes
only lengths divisible by it. Now verify asks the torch model which axis the ids index and draws
them below that axis' size at every case, rounds a length the model refuses to a multiple the
lengths it ran at share, and runs the example's shapes (saying so) where nothing else is known.

The models are written here as such projects write them, exported by rnnx, and checked by the
real torch model against ONNX Runtime at seeded inputs: batch 1 and lengths never traced.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402
from rnnx.check import Case  # noqa: E402
from rnnx.cli.main import main  # noqa: E402
from rnnx.shapes.file_dims import InputSpec  # noqa: E402
from rnnx.verify.feeds import make_feed  # noqa: E402
from rnnx.verify.models import verify_model  # noqa: E402
from tests.helpers import model_file  # noqa: E402

# A GRU over each node's time series (the nodes are its batch), then one round of message passing:
# each edge carries a message from its source node, summed at its destination with index_add_.
GRAPH = '''
import torch
from torch import nn


class NodeGRU(nn.Module):
    def __init__(self, feats=4, hidden=8, classes=3, one_based=False):
        super().__init__()
        self.one_based = one_based
        self.gru = nn.GRU(feats, hidden, batch_first=True)
        self.message = nn.Linear(hidden, hidden)
        self.out = nn.Linear(2 * hidden, classes)

    def forward(self, x, edge_index):
        _, h = self.gru(x)                      # x: (nodes, steps, feats)
        h = h[0]
        if self.one_based:                      # ids numbered from 1, as some datasets store them
            edge_index = edge_index - 1
        src, dst = edge_index[0], edge_index[1]
        sent = self.message(h)[src]
        received = torch.zeros_like(h).index_add_(0, dst, sent)
        return self.out(torch.cat([h, received], -1))


torch.manual_seed(0)
model = NodeGRU().eval()
_edges = torch.randint(0, 12, (2, 20))
_edges[:, 0] = torch.tensor([11, 3])           # the example's ids reach the last node
example_inputs = (torch.randn(12, 6, 4), _edges)


def one_based():
    torch.manual_seed(0)
    return NodeGRU(one_based=True).eval(), (example_inputs[0], _edges + 1)
'''

# A sequence viewed as a fixed number of regions, each read by one LSTM: lengths divisible by 4 only.
REGIONS = '''
import torch
from torch import nn


class Regions(nn.Module):
    REGIONS = 4

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 7, batch_first=True)
        self.out = nn.Linear(7, 2)

    def forward(self, x):
        b, t, f = x.shape
        parts = x.view(b, self.REGIONS, t // self.REGIONS, f).reshape(b * self.REGIONS, t // self.REGIONS, f)
        _, (h, _) = self.lstm(parts)
        return self.out(h[0].view(b, self.REGIONS, -1)).mean(1)


torch.manual_seed(1)
model = Regions().eval()
example_inputs = (torch.randn(2, 12, 5),)
'''


def _export(folder: Path, source: str, name: str = "model") -> tuple[Path, Path]:
    """``source`` written as ``folder/code.py`` and its ``name`` (a module, or a factory returning one
    and its example) exported to ``folder/NAME.onnx``."""
    code = folder / "code.py"
    ns = model_file(code, source)
    model, example = (ns[name], ns["example_inputs"]) if isinstance(ns[name], torch.nn.Module) else ns[name]()
    out = folder / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rnnx.export(model, example, out, check=False)
    return code, out


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _export(tmp_path_factory.mktemp("graph"), GRAPH)


def _cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, dict]:
    code = main(["verify", "--json", *map(str, args)])
    out, _ = capsys.readouterr()
    return code, json.loads(out)


def test_graph_model_runs_at_fewer_nodes(graph: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """The export is right: verify passes, at batch 1 (one node) and 8 (fewer than the example's 12), at
    lengths the trace never saw, with the edge ids drawn below the node count of each case."""
    code, out = graph
    exit_code, report = _cli(capsys, out, "--against", f"{code}:model")
    assert exit_code == 0, report
    assert report["passed"] is True
    assert not [c for c in report["cases"] if c["skipped"] or c["error"]], report["cases"]
    ran = {(c["shapes"]["x"][0], c["shapes"]["x"][1]) for c in report["cases"]}
    assert {1, 8} <= {n for n, _ in ran} and any(t != 6 for _, t in ran), ran
    assert any("edge_index holds ids of x dim 0" in n for n in report["notes"]), report["notes"]
    assert not any(c["at_example"] for c in report["cases"])


def test_graph_model_with_messages_reversed_fails(graph: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file whose index ops are wired the wrong way round (messages gathered at the destination
    and summed at the source) fails with exit 1 at the cases the ids now reach."""
    code, out = graph
    proto = onnx.load(str(out))
    gather = next(n for n in proto.graph.node if n.op_type == "GatherND")
    scatter = next(n for n in proto.graph.node if n.op_type == "ScatterND")
    gather.input[1], scatter.input[1] = scatter.input[1], gather.input[1]
    wrong = tmp_path / "reversed.onnx"
    onnx.save(proto, str(wrong))
    exit_code, report = _cli(capsys, wrong, "--against", f"{code}:model", "--seq-lens", "9", "--batch", "1,5")
    assert exit_code == 1, report
    failed = {r["case"] for r in report["rows"] if r["against"] == "torch float64" and not r["passed"]}
    assert failed == {"seq=9, batch=5"}, report["rows"]  # one node has no edge to reverse: batch 1 holds


def test_regions_model_checked_at_lengths_it_takes(tmp_path: Path) -> None:
    """verify's second length (2 x 12 + 3 = 27) is not a multiple of 4: the model refuses it, and
    verify checks the nearest length above it that keeps the divisibility the lengths it ran at share."""
    code, out = _export(tmp_path, REGIONS)
    report = verify_model(out, f"{code}:model")
    assert report.passed, str(report)
    lengths = {c.shapes["x"][1] for c in report.ran}
    assert 12 in lengths and len(lengths) == 2 and all(t % 4 == 0 for t in lengths), lengths
    assert {c.shapes["x"][0] for c in report.ran} == {1, 8}
    skipped = [c for c in report.cases if c.skipped]
    assert skipped and all("instead" in c.skipped for c in skipped), [c.skipped for c in skipped]


def test_example_shapes_where_nothing_is_known(graph: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ids numbered from 1 index no input axis verify can confirm (the largest id is the node count):
    with the batches given, the model raises at every case verify chose, so verify checks the
    example's shapes, says so in the text and the JSON, and still catches a wrong file there."""
    code, out = _export(tmp_path, GRAPH, "one_based")
    exit_code, report = _cli(capsys, out, "--against", f"{code}:one_based", "--batch", "1,8")
    assert exit_code == 0, report
    ran = [c for c in report["cases"] if not c["skipped"]]
    assert [c["at_example"] for c in ran] == [True] and ran[0]["shapes"]["x"] == [12, 6, 4], report["cases"]
    assert any("checked at the example's shapes" in n for n in report["notes"]), report["notes"]
    assert main(["verify", str(out), "--against", f"{code}:one_based", "--batch", "1,8"]) == 0
    assert "checked at the example's shapes (x 12x6x4, edge_index 2x20) only" in capsys.readouterr().out

    proto = onnx.load(str(out))
    weight = next(i for i in proto.graph.initializer if i.name == "message.weight")
    values = onnx.numpy_helper.to_array(weight).copy()
    values[0] *= 1.01  # one row of the message layer off by 1%
    weight.CopyFrom(onnx.numpy_helper.from_array(values, weight.name))
    wrong = tmp_path / "perturbed.onnx"
    onnx.save(proto, str(wrong))
    exit_code, report = _cli(capsys, wrong, "--against", f"{code}:one_based", "--batch", "1,8")
    assert exit_code == 1 and not report["passed"], report


@pytest.mark.parametrize("nodes", [1, 3, 40])
def test_ids_drawn_below_the_axis_at_each_size(nodes: int) -> None:
    """The feed keeps the relation at every size: ids below the node count, reaching its last node."""
    specs = [InputSpec("x", np.dtype(np.float32), ["batch", "seq", 4]),
             InputSpec("edge_index", np.dtype(np.int64), [2, "edges"], values={"min": 0, "max": 11, "padding": None})]
    case = Case("c", {"batch": nodes, "seq": 5, "edges": 200}, {"x": [nodes, 5, 4], "edge_index": [2, 200]})
    ids = make_feed(specs, case, {}, seed=nodes, ids={"edge_index": ("x", 0)})["edge_index"]
    assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() == nodes - 1
    unbound = make_feed(specs, case, {}, seed=nodes)["edge_index"]
    assert unbound.max() == 11  # without the relation, the example's range
