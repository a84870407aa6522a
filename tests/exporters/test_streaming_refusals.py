"""Every streaming refusal is a contract: the reason docs/streaming.md quotes, on a model written
to trigger it, and the operation, its module and the user's line of code it names.

Each model's source is written to a file and exported from there. Where the refusal is about an
operation, the line the message must name is marked ``# <-`` in the source; the test checks the
message names that file and line, then inserts blank lines before it (and, for some, moves the
operation to another line) and checks the named line moves with it, so a message that named a
fixed or a wrong line would fail. Refusals about the model as a whole, or an argument of
``rnnx.export`` (a ScriptModule, no recurrence, ``dynamic_shapes``), have no line to name.

The table in docs/streaming.md quotes one fragment of each reason; every quoted fragment must
be raised by a case here, and every case's fragment quoted there.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

import rnnx  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs" / "streaming.md"
HEADER = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
MARK = "# <-"


@dataclass(frozen=True)
class Case:
    name: str
    source: str  # defines Net and EXAMPLE; the lines the message names end with MARK
    says: tuple[str, ...]  # fragments of the reason the message must hold
    doc: str  # the fragment docs/streaming.md quotes (also in the message)
    moved: str | None = None  # the same model with the operation on another line
    options: dict[str, Any] = field(default_factory=dict)
    make: str = "Net()"  # the model exported, made in the source's namespace
    starts: str = "streaming: expected"  # how the message starts
    slow: bool = False  # refused only once the file is traced (seconds): behind --slow


def net(init: str, forward: str, example: str = "torch.randn(2, 12, 6)", extra: str = "", params: str = "x") -> str:
    """A model's source: ``init`` and ``forward`` as their bodies (indented here)."""
    body = "\n".join("        " + line if line else "" for line in init.strip("\n").splitlines())
    fwd = "\n".join("        " + line if line else "" for line in forward.strip("\n").splitlines())
    return (f"{HEADER}{extra}class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n{body}\n\n"
            f"    def forward(self, {params}):\n{fwd}\n\n\nEXAMPLE = ({example},)\n")


GRU = "self.rnn = nn.GRU(6, 6, batch_first=True)"
ON_T = "x.transpose(1, 2)"  # (batch, features, frames) for a conv or a pool

CASES = [
    # --- refused before the model is traced: the recurrences themselves ---------------------------
    Case("bidirectional", net("self.rnn = nn.GRU(6, 6, batch_first=True, bidirectional=True)", f"return self.rnn(x)[0]  {MARK}"),
         ("found a bidirectional nn.GRU at rnn", "make it unidirectional"), "its output at frame t needs the frames after t"),
    Case("subclass", net("self.rnn = MyGRU(6, 6, batch_first=True)", f"return self.rnn(x)[0]  {MARK}",
                         extra="class MyGRU(nn.GRU):\n    def forward(self, x, hx=None):\n        return super().forward(x, hx)\n\n\n"),
         ("a MyGRU (an nn.GRU subclass) with a forward of its own at rnn",), "rnnx cannot tell which of its arguments are the states"),
    Case("called_twice", net(GRU, f"y = self.rnn(x)[0]  {MARK}\nreturn self.rnn(y)[0]  {MARK}"),
         ("a module called 2 times in one forward at rnn", "call it once per forward"), "streaming carries one state per module"),
    Case("packed", net(GRU, "lengths = torch.full((x.shape[0],), x.shape[1])\npacked = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)\n"
                           f"out, _ = self.rnn(packed)  {MARK}\nreturn nn.utils.rnn.pad_packed_sequence(out, batch_first=True)[0]"),
         ("a PackedSequence input at rnn", "feed it padded chunks"), "per-sequence lengths end the sequences at different frames"),
    Case("states_given", net(GRU, f"return self.rnn(x, h)[0]  {MARK}", "torch.randn(2, 12, 6), torch.zeros(1, 2, 6)", params="x, h"),
         ("initial states taken from the inputs at rnn", "--state IN=OUT"), "the model already streams"),
    Case("seq2seq", net("self.encoder = nn.GRU(6, 6, batch_first=True)\nself.decoder = nn.GRU(6, 6, batch_first=True)",
                        f"_, h = self.encoder(x)\nreturn self.decoder(x, h)[0]  {MARK}"),
         ("found decoder (GRU) starting from a state computed from encoder's final state", "stream encoder alone"),
         "reads the whole input's summary before its first frame"),
    # --- found by the causality probe: a module or an operation that reads later frames -------------
    Case("mean_removed", net(GRU, f"centred = x - x.mean(1, keepdim=True)  {MARK}\nreturn self.rnn(centred)[0]"),
         ("found rnn's input changing at frame t with frames after t, made by the model's forward before calling rnn: Tensor.mean",),
         "reduces the time axis to a summary of the whole sequence",
         moved=net(GRU, f"y = x * 2.0\n\nmean = y.mean(1, keepdim=True) / 2.0  {MARK}\ncentred = x - mean\nreturn self.rnn(centred)[0]")),
    Case("module_mean", net(f"self.norm = Centring()\n{GRU}", "return self.rnn(self.norm(x))[0]",
                            extra=f"class Centring(nn.Module):\n    def forward(self, x):\n        return x - x.mean(1, keepdim=True)  {MARK}\n\n\n"),
         ("found norm (Centring) whose output at frame t changes with frames after t: Tensor.mean in norm's forward",),
         "reduces the time axis to a summary of the whole sequence"),
    Case("centred_conv", net(f"self.conv = nn.Conv1d(6, 6, 3, padding=1)\n{GRU}", f"y = self.conv({ON_T})  {MARK}\nreturn self.rnn(y.transpose(1, 2))[0]"),
         ("found conv (Conv1d) whose output at frame t changes with frames after t",), "its window reaches past frame t"),
    Case("attention", net(f"{GRU}\nself.attn = nn.MultiheadAttention(6, 2, batch_first=True)", f"y = self.rnn(x)[0]\nreturn self.attn(y, y, y)[0]  {MARK}"),
         ("found attn (MultiheadAttention) whose output at frame t changes with frames after t",), "attention over the whole sequence"),
    Case("instance_norm", net(f"self.norm = nn.InstanceNorm1d(6)\n{GRU}", f"y = self.norm({ON_T})  {MARK}\nreturn self.rnn(y.transpose(1, 2))[0]"),
         ("found norm (InstanceNorm1d) whose output at frame t changes with frames after t",), "a normalization over time"),
    Case("state_from_mean", net(GRU, f"h0 = torch.tanh(x.mean(1)).unsqueeze(0)  {MARK}\nreturn self.rnn(x, h0)[0]"),
         ("found rnn (GRU) whose output at frame t changes with frames after t", "Tensor.mean in the model's forward"),
         "it starts from a state that reads the whole sequence"),
    Case("centred_pool", net(f"self.pool = nn.AvgPool1d(3, 1, padding=1)\n{GRU}", f"y = self.pool({ON_T})  {MARK}\nreturn self.rnn(y.transpose(1, 2))[0]"),
         ("found pool (AvgPool1d) whose output at frame t changes with frames after t", "its window reaches past frame t"),
         "pad it on the left only, F.pad(x, (kernel - 1, 0))"),
    Case("centred_functional_pool", net(GRU, f"y = F.avg_pool1d({ON_T}, 3, 1, padding=1)  {MARK}\nreturn self.rnn(y.transpose(1, 2))[0]"),
         ("made by the model's forward before calling rnn: F.avg_pool1d in the model's forward", "its window reaches past frame t"),
         "made by the model's forward before calling",
         moved=net(GRU, f"t = {ON_T}\n\n\ny = F.avg_pool1d(t, 3, 1, padding=1)  {MARK}\nreturn self.rnn(y.transpose(1, 2))[0]")),
    Case("reduced", net(f"{GRU}\nself.pool = nn.AdaptiveAvgPool1d(1)", f"y = self.rnn(x)[0]\nreturn self.pool(y.transpose(1, 2))  {MARK}"),
         ("found pool (AdaptiveAvgPool1d) reducing it",), "an output over the whole sequence, which no chunk has"),
    Case("transposed", net(f"{GRU}\nself.up = nn.ConvTranspose1d(6, 6, 2, stride=2)", f"y = self.rnn(x)[0]\nreturn self.up(y.transpose(1, 2))  {MARK}"),
         ("found up (a ConvTranspose1d along time",), "its frames overlap into the next chunk"),
    Case("cumprod", net(GRU, f"y = torch.cumprod(torch.sigmoid(x), 1)  {MARK}\nreturn self.rnn(y)[0]"),
         ("found cumprod along time in the model's forward",), "expected running operations rnnx carries across chunks"),
    # --- found planning the caches and the windows ---------------------------------------------------
    Case("conv_twice", net(f"self.conv = nn.Conv1d(6, 6, 1)\n{GRU}", f"y = self.conv({ON_T})  {MARK}\ny = self.conv(y)  {MARK}\n"
                                                                        "return self.rnn(y.transpose(1, 2))[0]"),
         ("found conv called 2 times",), "streaming keeps one cache per module"),
    Case("padding_mode", net(f"self.conv = nn.Conv1d(6, 6, 3, padding=2, padding_mode='replicate')\n{GRU}",
                             f"y = self.conv({ON_T})[..., :-2]  {MARK}\nreturn self.rnn(y.transpose(1, 2))[0]"),
         ("expected conv to pad with zeros, found padding_mode='replicate'",), "which reads frames the chunk does not have at its edges"),
    Case("pad_mode", net(f"self.conv = nn.Conv1d(6, 6, 3)\n{GRU}",
                         f"padded = F.pad({ON_T}, (2, 0), mode='replicate')  {MARK}\nreturn self.rnn(self.conv(padded).transpose(1, 2))[0]"),
         ("expected the F.pad before conv to pad with zeros, found mode='replicate'",), "which a stream cannot carry from the chunk before"),
    Case("pool_pad_value", net(GRU, f"padded = F.pad({ON_T}, (2, 0), value=float('-inf'))  {MARK}\n"
                                    "return self.rnn(F.max_pool1d(padded, 3, 1).transpose(1, 2))[0]"),
         ("expected the F.pad before F.max_pool1d to pad with zeros, found mode='constant', value=-inf",),
         "which a stream cannot carry from the chunk before"),
    Case("unpadded_overlap", net(f"self.conv = nn.Conv1d(6, 6, 3)\n{GRU}", f"y = self.conv({ON_T})  {MARK}\nreturn self.rnn(y.transpose(1, 2))[0]"),
         ("expected conv's windows of 3 frames, 1 apart, to be padded on the left or not to overlap, found neither",),
         "a stream's first chunk would give fewer frames than the same frames later"),
    Case("pool_overlap", net(f"self.pool = nn.MaxPool1d(4, stride=2)\n{GRU}", f"y = self.pool({ON_T})  {MARK}\nreturn self.rnn(y.transpose(1, 2))[0]"),
         ("expected pool's windows of 4 frames, 2 apart, to be padded on the left or not to overlap, found neither",),
         "a stream's first chunk would give fewer frames than the same frames later"),
    Case("underpadded", net(f"self.conv = nn.Conv1d(6, 6, 4, stride=2)\n{GRU}",
                            f"y = self.conv(F.pad({ON_T}, (1, 0)))  {MARK}\nreturn self.rnn(y.transpose(1, 2))[0]"),
         ("expected conv's windows of 4 frames, 2 apart, to be padded on the left by at least the 2 frames each shares with the next, found 1",),
         "a stream's first chunk would give fewer frames than the same frames later"),
    Case("overpadded", net(f"self.conv = nn.Conv1d(6, 6, 2)\n{GRU}", f"y = self.conv(F.pad({ON_T}, (2, 0)))  {MARK}\nreturn self.rnn(y.transpose(1, 2))[0]"),
         ("expected conv's left padding along time to reach back no further than its window of 2 frames, found 2 frames",),
         "its first window reads only padding"),
    Case("pool_own_padding", net(f"self.pool = nn.MaxPool1d(2, stride=1, padding=1)\n{GRU}",
                                 f"y = self.pool({ON_T})[..., :-1]  {MARK}\nreturn self.rnn(y.transpose(1, 2))[0]"),
         ("expected pool to take the frames before the sequence from an F.pad, found its own padding=1 along time",),
         "which every chunk would put before its first frame again"),
    # --- the model as a whole, or export's arguments: no line to name ---------------------------------
    Case("no_time_axis", net(GRU, "return self.rnn(x[:, :4])[0]"),
         ("expected an input axis whose length sets the recurrences' sequence length",),
         "no input axis the model runs with doubled lengthens every recurrence's sequence"),
    Case("no_recurrence", net("self.lin = nn.Linear(6, 6)", "return self.lin(x)"),
         ("expected at least one nn.LSTM, nn.GRU or nn.RNN",), "has no state to carry"),
    Case("raises", net(GRU, f"if x.shape[-1] != 7:\n    raise ValueError('expected 7 features')  {MARK}\nreturn self.rnn(x)[0]"),
         ("found it raised ValueError: expected 7 features",), "expected the model to run on the example"),
    Case("dynamic_shapes", net(GRU, "return self.rnn(x)[0]"), ("found dynamic_shapes (by forward's parameters",),
         "which the streaming model extends with states", options={"dynamic_shapes": ({1: torch.export.Dim("t")},)}),
    Case("script_module", net(GRU, "return self.rnn(x)[0]"), ("expected a torch.nn.Module (rnnx wraps its Python forward), found a",),
         "export the Python model", make="torch.jit.script(Net())"),
    Case("bare_recurrence", net(GRU, "return self.rnn(x)[0]"), ("found a bare GRU",), "it already streams when exported with its states",
         make="nn.GRU(6, 6, batch_first=True)"),
    Case("input_names", net(GRU, "return self.rnn(x)[0]"), ("found ['a', 'b']",), "rnnx names the states",
         options={"input_names": ["a", "b"]}, starts="input names: expected at most 1"),
    Case("output_names", net(GRU, "return self.rnn(x)[0]"), ("(the model's output tensors; rnnx names the states rnn.h_out), found ['a', 'b']",),
         "rnnx names the states", options={"output_names": ["a", "b"]}, starts="output names: expected 1"),
    Case("skipped", net(GRU, "if torch.compiler.is_exporting() or torch.jit.is_tracing():\n    return x\nreturn self.rnn(x)[0]"),
         ("expected rnn to be called, as on the example, found it skipped",), "streaming needs the same recurrences on every call",
         starts="no translation route could export the model", slow=True),
    Case("static_time", net(GRU, "return self.rnn(x)[0]"), ("found none (the time axis is static)",),
         "expected one dynamic time axis in the inputs to cut into chunks", options={"static": {"x": [1]}}, slow=True),
    Case("two_time_axes", net(GRU, "return self.rnn(torch.cat([x, y], 1))[0]", "torch.randn(2, 12, 6), torch.randn(2, 5, 6)", params="x, y"),
         ("found 2 independent ones (x_seq, y_seq)",), "expected one dynamic time axis in the inputs to cut into chunks", slow=True),
]
BY_NAME = {case.name: case for case in CASES}
_modules = itertools.count()


def _export(tmp_path: Path, source: str, case: Case, stem: str = "net") -> tuple[str, Path]:
    """Write ``source`` to a file, import it and export its model with streaming: the one-line
    message it is refused with, and the file."""
    path = tmp_path / f"{stem}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"refused_{next(_modules)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    with pytest.raises(rnnx.RNNXError) as refused:
        rnnx.export(eval(case.make, vars(module)).eval(), module.EXAMPLE, tmp_path / f"{stem}.onnx", streaming=True, **case.options)
    assert not (tmp_path / f"{stem}.onnx").exists()
    message = str(refused.value)
    assert "\n" not in message and message.startswith(case.starts), message
    return message, path


def _marked(source: str) -> list[int]:
    return [n for n, line in enumerate(source.splitlines(), 1) if line.rstrip().endswith(MARK)]


def _with_blank_lines(source: str, before: int, count: int) -> str:
    lines = source.splitlines()
    return "\n".join(lines[:before - 1] + [""] * count + lines[before - 1:]) + "\n"


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c.slow else c for c in CASES], ids=lambda c: c.name)
def test_each_refusal_says_why_and_names_the_line(tmp_path: Path, case: Case) -> None:
    message, path = _export(tmp_path, case.source, case)
    for fragment in (*case.says, case.doc):
        assert fragment in message, f"{fragment!r} not in {message!r}"
    lines = _marked(case.source)
    if not lines:  # about the model as a whole: no operation, no line
        assert f"{path.name}:" not in message, message
        return
    for n in lines:
        assert re.search(rf"\b{re.escape(path.name)}:{n} \(", message), f"{path.name}:{n} not named in {message!r}"
    # the named line moves with the operation: three blank lines before it
    moved_message, _ = _export(tmp_path, _with_blank_lines(case.source, lines[0], 3), case, "moved")
    assert f"moved.py:{lines[0] + 3} (" in moved_message and f"moved.py:{lines[0]} (" not in moved_message, moved_message
    if case.moved is not None:  # the operation written on another line
        elsewhere = _marked(case.moved)
        assert elsewhere and elsewhere[0] != lines[0]
        other, _ = _export(tmp_path, case.moved, case, "elsewhere")
        assert f"elsewhere.py:{elsewhere[0]} (" in other and case.doc in other, other


def test_the_docs_quote_every_refusal_and_only_those() -> None:
    """docs/streaming.md's table of refusals quotes, in backquotes, one fragment of each
    reason: each must be a case's here (raised by the test above), and each case's must be there."""
    text = DOCS.read_text()
    start = text.index("<!-- refusals -->")
    table = text[start:text.index("<!-- /refusals -->", start)]
    quoted = {q for row in table.splitlines() if row.startswith("|") for q in re.findall(r"`([^`]+)`", row.split("|")[2])}
    wanted = {case.doc for case in CASES}
    assert quoted - wanted == set(), f"quoted in the docs but raised by no case: {sorted(quoted - wanted)}"
    assert wanted - quoted == set(), f"raised but not in the docs: {sorted(wanted - quoted)}"
