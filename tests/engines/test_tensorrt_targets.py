"""Each TensorRT release's verdict on a whole file whose recurrence is an ONNX Loop (a Python loop
re-rolled by rnnx export), as ``rnnx inspect`` says it: the Loop itself and every node of its
body are judged by the parser table read from onnx-tensorrt's source."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

import rnnx  # noqa: E402
from rnnx.engines.tensorrt_targets import has_control_flow, target_verdicts  # noqa: E402


class MovingAverage(torch.nn.Module):
    """A running mean over frames in a Python loop, then a head: re-rolled into a Loop of Mul/Add."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        avg = torch.zeros_like(x[:, 0])
        out = []
        for t in range(x.shape[1]):
            avg = 0.9 * avg + 0.1 * x[:, t]
            out.append(avg)
        return self.head(torch.stack(out, 1))


class NormedCell(torch.nn.Module):
    """A layer-normalised cell stepped in Python: its body holds LayerNormalization."""

    def __init__(self) -> None:
        super().__init__()
        self.x, self.h, self.ln = torch.nn.Linear(6, 8), torch.nn.Linear(8, 8, bias=False), torch.nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[0], 8)
        out = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.ln(self.x(x[:, t]) + self.h(h)))
            out.append(h)
        return torch.stack(out, 1)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("loops")
    torch.manual_seed(0)
    out = {}
    for model in (MovingAverage(), NormedCell()):
        path = folder / f"{type(model).__name__}.onnx"
        report = rnnx.export(model.eval(), (torch.randn(1, 7, 6),), path)
        assert report.written
        out[type(model).__name__] = path
    return out


def verdicts(model: object) -> dict[str, tuple[str, str | None]]:
    return {t.version: (t.verdict, None if t.decided_by is None else t.decided_by.op_type) for t in target_verdicts(model)}


def test_a_loop_of_accepted_ops_is_accepted_where_the_table_was_read(files: dict[str, Path]) -> None:
    model = onnx.load(str(files["MovingAverage"]))
    assert has_control_flow(model) and any(n.op_type == "Loop" for n in model.graph.node)
    found = verdicts(model)
    assert all(found[v] == ("accepted", None) for v in ("8.2", "8.5", "8.6", "10.1", "10.15")), found
    assert found["11.x"][0] == "unknown"  # no source read for 11: never a guess


def test_a_body_op_an_older_parser_has_no_importer_for_refuses_the_file_there(files: dict[str, Path]) -> None:
    found = verdicts(onnx.load(str(files["NormedCell"])))
    assert found["8.2"] == found["8.5"] == ("refused", "LayerNormalization"), found
    assert found["8.6"][0] != "refused" and found["10.15"][0] != "refused", found


def test_the_loop_itself_is_judged_a_loop_without_its_trip_count_is_refused_by_10_15(files: dict[str, Path]) -> None:
    model = onnx.load(str(files["MovingAverage"]))
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    assert len(loop.output) > len(loop.input) - 2, "the re-rolled Loop stacks its steps as scan outputs"
    loop.input[0] = ""  # no trip count: a while-loop on its condition, with scan outputs
    found = verdicts(model)
    assert found["10.15"] == ("refused", "Loop"), found
    assert found["8.6"] == ("builds but computes differently", "Loop"), found


def test_inspect_says_each_releases_verdict_in_text_and_json(files: dict[str, Path]) -> None:
    cli = [sys.executable, "-m", "rnnx", "inspect", str(files["NormedCell"])]
    text = subprocess.run(cli, capture_output=True, text=True, timeout=120, check=True).stdout
    assert "TensorRT 8.2: refused, at LayerNormalization" in text and "reroll0.body" in text
    data = json.loads(subprocess.run(cli + ["--json"], capture_output=True, text=True, timeout=120, check=True).stdout)
    assert [t["version"] for t in data["tensorrt_targets"]] == ["8.2", "8.5", "8.6", "10.1", "10.15", "11.x"]
    assert data["tensorrt_targets"][0]["decided_by"]["op_type"] == "LayerNormalization"
