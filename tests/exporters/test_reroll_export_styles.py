"""``rnnx export`` of Python loops that read more than x, or that loop over segments, from a
batch-1 example: the file has one ONNX Loop and a dynamic length, and ONNX Runtime matches torch
at lengths never traced. Where a loop cannot be one Loop (its steps differ, or it branches on
an input's values in Python), the refusal names the loop's line, its module and why, and the
flags it suggests lead out, not in a circle."""

from __future__ import annotations

import contextlib
import io
import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

MODELS = textwrap.dedent('''
    import torch
    from torch import nn


    class Policy(nn.Module):
        """A recurrent policy: its state zeroed where an episode starts."""

        def __init__(self):
            super().__init__()
            self.cell, self.pi = nn.LSTMCell(4, 6), nn.Linear(6, 2)

        def forward(self, obs, episode_starts):
            h = obs.new_zeros(obs.size(0), 6)
            c = h
            outs = []
            for t in range(obs.size(1)):
                keep = 1.0 - episode_starts[:, t, None]
                h, c = self.cell(obs[:, t], (h * keep, c * keep))
                outs.append(self.pi(h))
            return torch.stack(outs, 1)


    class BranchingPolicy(Policy):
        """The same reset written as a Python branch on the flag's value."""

        def forward(self, obs, episode_starts):
            h = obs.new_zeros(obs.size(0), 6)
            c = h
            outs = []
            for t in range(obs.size(1)):
                if episode_starts[0, t] > 0:
                    h, c = torch.zeros_like(h), torch.zeros_like(c)
                h, c = self.cell(obs[:, t], (h, c))
                outs.append(self.pi(h))
            return torch.stack(outs, 1)


    class Codec(nn.Module):
        """encode(): segments of 4 frames, each through a convolution and an LSTM, joined."""

        def __init__(self):
            super().__init__()
            self.conv, self.lstm = nn.Conv1d(3, 6, 3, padding=1), nn.LSTM(6, 5, batch_first=True)

        def forward(self, x):
            parts = []
            for i in range(0, x.size(1), 4):
                y = torch.relu(self.conv(x[:, i:i + 4].transpose(1, 2))).transpose(1, 2)
                parts.append(self.lstm(y)[0])
            return torch.cat(parts, 1)


    class Alternating(nn.Module):
        """Odd steps tanh, even steps relu: not one step repeated."""

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4 + 6, 6)

        def forward(self, x):
            h, outs = x.new_zeros(x.size(0), 6), []
            for t in range(x.size(1)):
                z = self.lin(torch.cat([x[:, t], h], 1))
                h = torch.tanh(z) if t % 2 else torch.relu(z)
                outs.append(h)
            return torch.stack(outs, 1)


    def starts(batch, length):
        s = torch.zeros(batch, length)
        s[:, 0] = 1.0
        s[:, length // 2] = 1.0  # an episode starting in the middle
        return s


    def policy():
        torch.manual_seed(0)
        return Policy().eval(), (torch.randn(1, 8, 4), starts(1, 8))


    def branching_policy():
        torch.manual_seed(0)
        return BranchingPolicy().eval(), (torch.randn(1, 8, 4), starts(1, 8))


    def codec():
        torch.manual_seed(0)
        return Codec().eval(), (torch.randn(1, 10, 3),)


    def alternating():
        torch.manual_seed(0)
        return Alternating().eval(), (torch.randn(1, 8, 4),)
''')


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reroll_styles") / "loops.py"
    path.write_text(MODELS)
    return path


def _line_of(models: Path, code: str) -> int:
    return next(k for k, line in enumerate(models.read_text().splitlines(), 1) if line.strip() == code)


def _export(models: Path, factory: str, out: Path, *flags: str) -> tuple[int, str]:
    from rnnx.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["export", f"{models}:{factory}", "-o", str(out), *flags])
    return code, err.getvalue().strip()


def _namespace(models: Path) -> dict:
    ns: dict = {}
    exec(compile(models.read_text(), str(models), "exec"), ns)  # noqa: S102  the test's own model file
    return ns


def _matches_torch(path: Path, model: object, feeds: list[tuple[torch.Tensor, ...]]) -> None:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for args in feeds:
        with torch.no_grad():
            want = model(*args)
        got = session.run(None, dict(zip(names, (a.numpy() for a in args))))[0]
        assert got.shape == tuple(want.shape), (got.shape, tuple(want.shape))
        assert np.abs(got - want.numpy()).max() < 1e-5, float(np.abs(got - want.numpy()).max())


def test_a_policy_reset_by_episode_starts_exports_one_loop_of_any_length(models: Path, tmp_path: Path) -> None:
    out = tmp_path / "policy.onnx"
    code, err = _export(models, "policy", out)
    assert code == 0, err
    proto = onnx.load(str(out))
    assert [n.op_type for n in proto.graph.node].count("Loop") == 1
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in proto.graph.input}
    assert dims["obs"][:2] == dims["episode_starts"] == ["batch", "seq"], dims
    ns = _namespace(models)
    model, _ = ns["policy"]()
    g = torch.Generator().manual_seed(7)
    feeds = [(torch.randn(b, n, 4, generator=g), ns["starts"](b, n)) for b, n in ((1, 1), (1, 7), (3, 13), (3, 5))]
    feeds.append((torch.randn(2, 11, 4, generator=g), (torch.rand(2, 11, generator=g) < 0.3).float()))  # starts the trace never saw
    _matches_torch(out, model, feeds)


def test_a_loop_whose_steps_differ_is_refused_naming_its_line_module_and_operation(models: Path, tmp_path: Path) -> None:
    code, err = _export(models, "alternating", tmp_path / "a.onnx")
    assert code == 1 and "\n" not in err, err  # the audit's finding: the file would not match the model at other lengths
    line = _line_of(models, "for t in range(x.size(1)):")
    assert f"the loop at loops.py:{line} (for t in range(x.size(1)):) in the model's forward (Alternating)" in err, err
    assert "step 2 differs from step 1: it computes Relu" in err and "where step 1 computes Tanh" in err, err
    assert "--static x:1" in err and "--dynamic" not in err.split("could not make it dynamic", 1)[1], err
    assert not (tmp_path / "a.onnx").exists()


@pytest.mark.slow
def test_the_flags_a_loop_refusal_suggests_lead_out_not_in_a_circle(models: Path, tmp_path: Path) -> None:
    code, err = _export(models, "alternating", tmp_path / "d.onnx", "--dynamic", "x:1=frames")
    assert code == 2 and "the loop at loops.py:" in err and "computes Relu" in err, err
    assert "give --static to accept the fixed size" in err, err
    code, err = _export(models, "alternating", tmp_path / "s.onnx", "--static", "x:1")
    assert code == 0, err  # the flag both refusals suggest gives a file, fixed at the example's length
    assert onnx.load(str(tmp_path / "s.onnx")).graph.input[0].type.tensor_type.shape.dim[1].dim_value == 8


def test_a_python_branch_on_episode_starts_is_refused_naming_its_line(models: Path, tmp_path: Path) -> None:
    code, err = _export(models, "branching_policy", tmp_path / "b.onnx")
    assert code == 1 and "\n" not in err, err
    line = _line_of(models, "if episode_starts[0, t] > 0:")
    assert re.search(rf"a Python branch on its values in the model's forward \(BranchingPolicy\) at loops\.py:{line} "
                     r"\(if episode_starts\[0, t\] > 0:\)", err), err
    assert "torch.where" in err


@pytest.mark.slow
def test_a_codec_looping_over_segments_exports_one_loop_right_at_lengths_not_multiples_of_the_segment(models: Path, tmp_path: Path) -> None:
    out = tmp_path / "codec.onnx"
    code, err = _export(models, "codec", out, "--json")
    assert code == 0, err
    proto = onnx.load(str(out))
    assert [n.op_type for n in proto.graph.node].count("Loop") == 1
    assert proto.graph.input[0].type.tensor_type.shape.dim[1].dim_param == "seq"
    model, _ = _namespace(models)["codec"]()
    g = torch.Generator().manual_seed(3)
    _matches_torch(out, model, [(torch.randn(b, n, 3, generator=g),) for b, n in ((1, 1), (1, 5), (3, 13), (2, 16), (1, 23))])


def test_the_export_report_says_a_loop_over_segments_was_re_rolled(models: Path, tmp_path: Path) -> None:
    from rnnx.cli.main import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        assert main(["export", f"{models}:codec", "-o", str(tmp_path / "c.onnx"), "--json", "--no-check"]) == 0
    notes = json.loads(buf.getvalue())["notes"]
    assert any("(3 segments of 4 steps), re-rolled into one ONNX Loop" in n and "its length dynamic" in n for n in notes), notes
