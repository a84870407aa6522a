"""``rnnx verify model.onnx --against weights.pt``: a whole model's file (its inputs are not a
recurrent stack's) checked against a weights file. Each recurrent layer of the file is matched
to the layer of the weights file's group with its spec, and held, on the inputs it received
in the whole model's run, to the float64 reference with those weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

import rnnx  # noqa: E402
from rnnx.cli.main import main  # noqa: E402


class Speech(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 6, 3, padding=1)
        self.rnn = torch.nn.LSTM(6, 10, num_layers=2, batch_first=True, bidirectional=True)
        self.out = torch.nn.Linear(20, 5)

    def forward(self, x: Any) -> Any:
        return self.out(self.rnn(torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2))[0])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("whole")
    torch.manual_seed(0)
    model = Speech().eval()
    rnnx.export(model, (torch.randn(2, 12, 8),), folder / "speech.onnx")
    torch.save(model.state_dict(), folder / "speech.pt")
    state = model.state_dict()
    state["rnn.weight_hh_l1_reverse"][3] *= 1.01  # one row of layer 1's reverse R, 1% off
    torch.save(state, folder / "one_row_off.pt")
    torch.save(torch.nn.GRU(4, 3).state_dict(), folder / "other.pt")
    return {"folder": folder, "onnx": folder / "speech.onnx", "right": folder / "speech.pt", "wrong": folder / "one_row_off.pt", "other": folder / "other.pt"}


def _verify(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = main(["verify", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("select", [[], ["--select", "rnn"]], ids=["every-group", "select"])
def test_the_weights_the_file_was_made_from_pass(files: dict[str, Path], capsys: pytest.CaptureFixture[str], select: list[str]) -> None:
    code, out, err = _verify(capsys, files["onnx"], "--against", files["right"], *select)
    assert code == 0, err
    assert "speech.pt group 'rnn' layer 0" in out and "speech.pt group 'rnn' layer 1" in out and out.rstrip().endswith("PASS")


def test_one_row_off_fails_naming_the_layer_and_the_row(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _verify(capsys, files["onnx"], "--against", files["wrong"], "--json")
    assert code == 1
    import json

    report = json.loads(out)
    verdicts = {la["truth"]: la["status"] for la in report["layers"]}
    assert verdicts == {"one_row_off.pt group 'rnn' layer 0": "ok", "one_row_off.pt group 'rnn' layer 1": "drifts"}
    drifting = next(la for la in report["layers"] if la["status"] == "drifts")
    assert "l1.reverse.R.i (row 3 scaled by" in drifting["diagnosis"][0]


def test_weights_of_another_model_are_refused_in_one_line(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _verify(capsys, files["onnx"], "--against", files["other"])
    assert code == 2 and err.count("\n") == 1
    assert "expected a group whose layers have the specs of this file's recurrent layers" in err and "gru,input=4,hidden=3" in err


def test_html_report_of_a_whole_model_plots_each_layer(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    page = files["folder"] / "layers.html"
    code, out, err = _verify(capsys, files["onnx"], "--against", files["wrong"], "--html", page)
    assert code == 1 and page.is_file()
    text = page.read_text()
    assert "rnnx verify: FAIL" in text and text.count("data:image/png;base64,") == 1 and "Error along the sequence, per layer" in text
    assert "node_lstm_1__2" in text  # the drifting layer, in the report's text above the plot
