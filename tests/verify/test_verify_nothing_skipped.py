"""verify --against does not PASS on cases that vary no length.

Two ways a check could pass without checking: the torch model raises at every case that varies a
length the file declares dynamic (the cases are skipped, the one length left passes), and a model
that ties two inputs' lengths that the file labels apart (verify held one at the example's size
while it moved the other, so torch raised). The first is bad input (exit 2, naming the sizes and
the flags); the second is checked with the labels moved together.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

from rnnx.errors import RNNXError  # noqa: E402
from rnnx.exporters.torch_export import export  # noqa: E402
from rnnx.verify.models import verify_model  # noqa: E402
from tests.helpers import model_file  # noqa: E402

# A GRU policy stepped in Python: the loop's count is the resets' length, and each step reads the
# frames at t, so the two lengths are one; nothing in the model or the file names them as one.
RESETS = '''
import torch
from torch import nn


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 10)
        self.cell = nn.GRUCell(10, 10)
        self.head = nn.Linear(10, 2)

    def forward(self, frames, resets):
        z = torch.tanh(self.inp(frames))
        h = z.new_zeros(z.shape[0], 10)
        out = []
        for t in range(resets.shape[1]):
            h = h * (1.0 - resets[:, t, None])
            h = self.cell(z[:, t], h)
            out.append(h)
        return self.head(torch.stack(out, 1))


torch.manual_seed(4)
model = Policy().eval()
example_inputs = (torch.randn(1, 8, 4), torch.tensor([[1.0, 0, 0, 0, 1, 0, 0, 0]]))
'''

# The same LSTM twice: the file takes any length; the model code adds a learned offset table of 8
# rows (zeros), so it raises at every length past 8 and verify's longer lengths cannot run.
TAGGER = '''
import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self, table=0):
        super().__init__()
        self.rnn = nn.LSTM(3, 7, batch_first=True)
        self.out = nn.Linear(7, 2)
        self.offset = nn.Parameter(torch.zeros(1, table, 3)) if table else None

    def forward(self, x):
        if self.offset is not None:
            x = x + self.offset[:, :x.shape[1]]
        return self.out(self.rnn(x)[0])


torch.manual_seed(2)
model = Tagger().eval()
torch.manual_seed(2)
short = Tagger(table=8).eval()
example_inputs = (torch.randn(2, 8, 3),)
'''


def test_lengths_the_model_ties_are_varied_together(tmp_path: Path) -> None:
    space = model_file(tmp_path / "policy.py", RESETS)
    out = tmp_path / "policy.onnx"
    written = export(space["model"], space["example_inputs"], out)
    assert written.passed, written.check.audit_failure if written.check else written
    report = verify_model(out, f"{tmp_path / 'policy.py'}:model")
    ran = [c for c in report.cases if not c.skipped]
    assert report.passed, str(report)
    # some case that ran moved the loop's length off the example's, and every row of it was compared
    lengths = {c.sizes[k] for c in ran for k, role in report.roles.items() if role == "length" and k in c.sizes}
    assert len(lengths) > 1 and 8 in lengths, str(report)
    assert {r.case for r in report.rows} == {c.name for c in ran}
    assert not report.not_varied and "not varied" not in str(report).splitlines()[-1]
    # the rows' distances are real: the torch float64 truth against ONNX Runtime at the moved lengths
    assert all(r.stats.max_abs < 1e-5 for r in report.rows if r.against == "torch float64")


def test_every_case_that_varies_a_length_skipped_is_not_a_pass(tmp_path: Path) -> None:
    space = model_file(tmp_path / "tagger.py", TAGGER)
    out = tmp_path / "tagger.onnx"
    torch.onnx.export(space["model"], space["example_inputs"], str(out), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}, dynamo=False)
    # the premise: the file itself runs at the length the model code refuses, and is right there
    import onnxruntime as ort

    x = np.random.default_rng(7).standard_normal((1, 19, 3)).astype(np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with torch.no_grad():
        want = space["model"].double()(torch.from_numpy(x).double()).numpy()
    space["model"].float()
    assert np.abs(got - want).max() < 1e-5
    with pytest.raises(RNNXError) as raised:
        verify_model(out, f"{tmp_path / 'tagger.py'}:short")
    message = str(raised.value)
    assert "\n" not in message and "seq at " in message and "skipped" in message, message
    assert "--seq-lens" in message and "--static" in message, message
    # the user's way out: lengths the model takes are checked, and pass
    report = verify_model(out, f"{tmp_path / 'tagger.py'}:short", seq_lens=[3, 8])
    assert report.passed and {c.sizes["seq"] for c in report.ran} == {3, 8}, str(report)
