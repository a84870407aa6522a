"""``rnnx export`` of models that loop over time in Python, whose steps no native node can
fuse (attention and input feeding between an LSTMCell's steps, a layer norm in a hand-written
cell): the trace's unrolled steps are re-rolled into one ONNX Loop and the length is dynamic,
where the dimension audit used to refuse the file. The self-check varies the length; verify
checks lengths never traced."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

MODELS = textwrap.dedent('''
    import torch
    from torch import nn


    class AttentionDecoder(nn.Module):
        def __init__(self, vocab=11, emb=6, hid=8):
            super().__init__()
            self.emb, self.cell = nn.Embedding(vocab, emb), nn.LSTMCell(emb + hid, hid)
            self.attn_out, self.out, self.hid = nn.Linear(2 * hid, hid), nn.Linear(hid, vocab), hid

        def forward(self, trg, enc):
            h, c, feed = (enc.new_zeros(trg.size(0), self.hid) for _ in range(3))
            outs = []
            for t in range(trg.size(1)):
                h, c = self.cell(torch.cat([self.emb(trg[:, t]), feed], 1), (h, c))
                a = torch.softmax(torch.bmm(enc, h.unsqueeze(2)).squeeze(2), 1)
                ctx = torch.bmm(a.unsqueeze(1), enc).squeeze(1)
                feed = torch.tanh(self.attn_out(torch.cat([h, ctx], 1)))
                outs.append(self.out(feed))
            return torch.stack(outs, 1)


    class LayerNormLSTM(nn.Module):
        def __init__(self, n_in=5, n_h=7):
            super().__init__()
            self.x2h, self.h2h, self.ln_c, self.n_h = nn.Linear(n_in, 4 * n_h), nn.Linear(n_h, 4 * n_h), nn.LayerNorm(n_h), n_h

        def forward(self, x):
            h = x.new_zeros(x.size(0), self.n_h)
            c = x.new_zeros(x.size(0), self.n_h)
            outs = []
            for t in range(x.size(1)):
                i, f, g, o = (self.x2h(x[:, t]) + self.h2h(h)).chunk(4, 1)
                c = self.ln_c(torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g))
                h = torch.sigmoid(o) * torch.tanh(c)
                outs.append(h)
            return torch.stack(outs, 1)


    def decoder():
        torch.manual_seed(0)
        return AttentionDecoder().eval(), (torch.randint(0, 11, (3, 8)), torch.randn(3, 5, 8))


    def layer_norm_lstm():
        torch.manual_seed(0)
        return LayerNormLSTM().eval(), (torch.randn(1, 6, 5),)
''')


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reroll") / "models.py"
    path.write_text(MODELS)
    return path


@pytest.mark.parametrize(("factory", "source"), [("decoder", "trg"), ("layer_norm_lstm", "x")])
def test_a_python_loop_is_rerolled_and_verified_at_lengths_never_traced(models: Path, tmp_path: Path, factory: str, source: str,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from rnnx.cli.main import main

    out = tmp_path / f"{factory}.onnx"
    assert main(["export", f"{models}:{factory}", "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["written"]
    assert any(f"a Python loop over {source} dim 1" in n and "re-rolled into one ONNX Loop" in n for n in report["notes"]), report["notes"]
    (dim,) = [d for d in report["check"]["dimensions"] if d["input"] == source and d["dim"] == 1]
    assert dim["verdict"] == "dynamic" and dim["role"] == "length", dim
    import onnx

    assert [n.op_type for n in onnx.load(str(out)).graph.node].count("Loop") == 1
    assert main(["verify", str(out), "--against", f"{models}:{factory}", "--seq-lens", "1,13"]) == 0
    assert "PASS" in capsys.readouterr().out
