"""``rnnx verify FILE --against code.py:NAME`` on forwards that take more than one tensor per
graph input (issue 26): a state tuple ``forward(input, hidden)``, a None and an int flag
among the arguments, a dict of tensors, ``forward(self, *tensors)``.

``rnnx export`` records how it called the model (the ``rnnx.call`` entry,
:mod:`rnnx.exporters.record`), and verify calls the torch model the same way. Each model
below is written to a .py file as other authors write them, exported with ``rnnx.export``,
then verified by the command line (rnnx.cli.main, in-process) at batch 1 and larger, at lengths 1 and
more; the same class with other weights must fail (exit 1), a model whose forward binds the
call differently is refused in one line (exit 2), and files without the record keep the
call they had before.
"""

from __future__ import annotations

import collections
import json
import subprocess
import warnings
from pathlib import Path
from typing import Any

import onnx
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402
from rnnx.errors import RNNXError  # noqa: E402
from rnnx.exporters import call_record  # noqa: E402
from rnnx.exporters.loading import load_model  # noqa: E402
from rnnx.verify.calls import plan_call  # noqa: E402
from tests.helpers import MadeOnFirstUse, rnnx_in_process  # noqa: E402

MODELS = '''
import torch
from torch import nn


class LM(nn.Module):
    """word_language_model's RNNModel, cut down: seq-first, forward(input, hidden), hidden = (h, c)."""

    def __init__(self, ntoken=20, ninp=8, nhid=12, nlayers=2):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, input, hidden):
        output, hidden = self.rnn(self.encoder(input), hidden)
        return self.decoder(output), hidden


class RenamedLM(LM):
    def forward(self, tokens, state):
        return super().forward(tokens, state)


class Seq2Seq(nn.Module):
    """batch-first GRU encoder-decoder: forward(src, src_len=None, tgt=None)."""

    def __init__(self, vocab=20, hid=10):
        super().__init__()
        self.emb = nn.Embedding(vocab, 8)
        self.enc = nn.GRU(8, hid, batch_first=True)
        self.dec = nn.GRU(8, hid, batch_first=True)
        self.out = nn.Linear(hid, vocab)

    def forward(self, src, src_len=None, tgt=None):
        x = self.emb(src)
        if src_len is not None:
            x = nn.utils.rnn.pack_padded_sequence(x, src_len, batch_first=True, enforce_sorted=False)
        _, h = self.enc(x)
        if tgt is None:
            tgt = src
        y, _ = self.dec(self.emb(tgt), h)
        return self.out(y)


class Tagger(nn.Module):
    """batch-first bidirectional GRU, packed when lengths are given; a str mode and an int k
    whose defaults differ from what the export was called with."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(5, 7, batch_first=True, bidirectional=True)
        self.head = nn.Linear(14, 4)

    def forward(self, x, lengths=None, h0=None, mode="mean", k=1):
        if lengths is not None:
            x = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        y, h = self.rnn(x, h0)
        if lengths is not None:
            y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True)
        scores = self.head(y)
        if mode == "last":
            scores = scores * 2.0
        return scores[..., :k], h


class Batched(nn.Module):
    """seq-first LSTM fed a dict of tensors and a bool flag."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(3, 5)

    def forward(self, batch, use_state=False):
        state = (batch["state"]["h"], batch["state"]["c"]) if use_state else None
        y, (h, c) = self.rnn(batch["x"], state)
        return {"y": y, "h": h}


class Varargs(nn.Module):
    """forward(self, *tensors): two batch-first recurrences, one per tensor."""

    def __init__(self):
        super().__init__()
        self.a = nn.LSTM(4, 6, batch_first=True)
        self.b = nn.GRU(3, 6, batch_first=True)

    def forward(self, *tensors):
        ya, _ = self.a(tensors[0])
        yb, _ = self.b(tensors[1])
        return ya + yb


class Unary(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 12, 2)

    def forward(self, x):
        return self.rnn(x)[0]


def _seeded(cls, seed):
    torch.manual_seed(seed)
    return cls()


def lm(): return _seeded(LM, 0)
def lm_other(): return _seeded(LM, 1)
def renamed_lm(): return _seeded(RenamedLM, 0)
def unary(): return _seeded(Unary, 0)
def s2s(): return _seeded(Seq2Seq, 0)
def s2s_other(): return _seeded(Seq2Seq, 1)
def tagger(): return _seeded(Tagger, 0)
def tagger_other(): return _seeded(Tagger, 1)
def batched(): return _seeded(Batched, 0)
def batched_other(): return _seeded(Batched, 1)
def varargs(): return _seeded(Varargs, 0)
def varargs_other(): return _seeded(Varargs, 1)
'''

# A model file that names its example inputs (verify's call for files without the record).
WITH_EXAMPLE = '''
import torch
from models import lm as model

example_inputs = (torch.randint(0, 20, (7, 3)), (torch.zeros(2, 3, 12), torch.zeros(2, 3, 12)))
'''


def _examples() -> dict[str, tuple[Any, ...]]:
    g = torch.Generator().manual_seed(0)
    return {
        "lm": (torch.randint(0, 20, (7, 3), generator=g), (torch.zeros(2, 3, 12), torch.zeros(2, 3, 12))),
        "s2s": (torch.randint(0, 20, (3, 7), generator=g), None, torch.randint(0, 20, (3, 5), generator=g)),
        "tagger": (torch.randn(3, 6, 5, generator=g), torch.tensor([6, 4, 2]), None, "last", 3),
        "batched": ({"x": torch.randn(6, 3, 3, generator=g), "state": {"h": torch.zeros(1, 3, 5), "c": torch.zeros(1, 3, 5)}}, True),
        "varargs": (torch.randn(3, 7, 4, generator=g), torch.randn(3, 7, 3, generator=g)),
    }


# What each file's record must say: (the parameters, the recorded call as text).
RECORDED = {
    "lm": (["input", "hidden"], "input, (hidden_0, hidden_1)"),
    "s2s": (["src", "src_len", "tgt"], "src, None, tgt"),
    "tagger": (["x", "lengths", "h0", "mode", "k"], "x, lengths, None, 'last', 3"),
    "batched": (["batch", "use_state"], "{'x': batch_x, 'state': {'h': batch_state_h, 'c': batch_state_c}}, True"),
    "varargs": (["tensors_0", "tensors_1"], "tensors_0, tensors_1"),
}


def _export(code: Path, name: str, out: Path, **kwargs: Any) -> Path:
    model, _ = load_model(f"{code}:{name}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = rnnx.export(model.eval(), _examples()[name], out, **kwargs)
    assert report.passed and report.written, report
    return out


def _varargs_shapes() -> Any:
    from torch.export import Dim

    return (({0: Dim.AUTO, 1: Dim.AUTO}, {0: Dim.AUTO, 1: Dim.AUTO}),)  # torch.export binds *tensors as one parameter


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    tmp = tmp_path_factory.mktemp("forwards")
    code = tmp / "models.py"
    code.write_text(MODELS)
    # Each model is exported when a test first asks for it.
    return code, MadeOnFirstUse({name: (lambda name=name: _export(code, name, tmp / f"{name}.onnx")) for name in RECORDED})


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    # in-process: what is checked is the call verify makes, not the process (the verify verb's
    # subprocess tests are in tests/verify/test_verify.py); 13 new processes cost ~35 s of CPU
    return rnnx_in_process("verify", *args)


def _record(path: Path) -> call_record.CallRecord:
    found, why = call_record.read_call(onnx.load(str(path), load_external_data=False))
    assert found is not None, why
    return found


@pytest.mark.parametrize("name", ["lm", "s2s", "tagger", "batched", "varargs"])
def test_verify_calls_the_model_as_it_was_exported(files: tuple[Path, dict[str, Path]], name: str, tmp_path: Path) -> None:
    code, out = files
    found = _record(out[name])
    assert (found.parameters, call_record.describe_call(found)) == RECORDED[name]

    ok = cli(out[name], "--against", f"{code}:{name}", "--batch", "1,3", "--seq-lens", "1,6,13", "--json", "--report", tmp_path / "r.json")
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr
    data = json.loads(ok.stdout)
    assert data["passed"] and "the file's call record" in data["called"], data["called"]
    ran = [c for c in data["cases"] if not c["skipped"] and not c["error"]]
    assert len(ran) == len(data["cases"]) == 6, data["cases"]  # every length at every batch: the torch model took them all
    assert {c["sizes"].get("batch") for c in ran} == {1, 3}
    assert max(r["max_abs"] for r in data["rows"]) < 1e-4

    # The same class with other weights: the outputs and the layers differ, exit 1.
    bad = cli(out[name], "--against", f"{code}:{name}_other", "--batch", "1,3", "--seq-lens", "1,6")
    assert bad.returncode == 1, bad.stdout[-3000:] + bad.stderr
    assert "FAIL" in bad.stdout and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_a_forward_that_binds_the_call_differently_is_refused_in_one_line(files: tuple[Path, dict[str, Path]]) -> None:
    code, out = files
    renamed = cli(out["lm"], "--against", f"{code}:renamed_lm", "--batch", "1", "--seq-lens", "3")
    assert renamed.returncode == 2, renamed.stdout + renamed.stderr
    line = renamed.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert "argument 1 binds to 'tokens', in the file to 'input'" in line and "argument 2 binds to 'state', in the file to 'hidden'" in line

    unary = cli(out["lm"], "--against", f"{code}:unary", "--batch", "1", "--seq-lens", "3")
    assert unary.returncode == 2, unary.stdout + unary.stderr
    line = unary.stderr.strip()
    assert len(line.splitlines()) == 1 and "forward(input, (hidden_0, hidden_1))" in line and "does not take" in line, line


def test_files_without_the_record_keep_the_call_they_had(files: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    """An older file (or one from another producer): flat, one tensor per graph input, or
    through the model's own example_inputs; the record only adds."""
    code, out = files
    proto = onnx.load(str(out["lm"]))
    kept = [p for p in proto.metadata_props if p.key != call_record.CALL_KEY]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    older = tmp_path / "older.onnx"
    onnx.save(proto, str(older))
    assert call_record.read_call(proto) == (None, "")

    flat = cli(older, "--against", f"{code}:lm", "--batch", "1", "--seq-lens", "3")
    assert flat.returncode == 2 and "takes 3 positional arguments but 4 were given" in flat.stderr, flat.stderr  # today's flat call

    example = code.with_name("lm_example.py")
    example.write_text(WITH_EXAMPLE)
    through = cli(older, "--against", f"{example}:model", "--batch", "1,3", "--seq-lens", "1,6", "--json")
    assert through.returncode == 0, through.stdout[-3000:] + through.stderr
    assert json.loads(through.stdout)["called"] == "the model's example_inputs"


def test_varargs_exported_with_torch_exports_own_dynamic_shapes(files: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    """The same record when the axes come in torch.export's format (``*tensors`` bound as one parameter)."""
    code, _ = files
    out = _export(code, "varargs", tmp_path / "varargs.onnx", dynamic_shapes=_varargs_shapes())
    found = _record(out)
    assert (found.parameters, call_record.describe_call(found)) == RECORDED["varargs"]
    ok = cli(out, "--against", f"{code}:varargs", "--batch", "1,3", "--seq-lens", "1,6")
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr


# --- the record itself ---------------------------------------------------------------------

State = collections.namedtuple("State", ["h", "c"])


class Widget:
    pass


def _proto_with(text: str) -> Any:
    proto = onnx.ModelProto()
    record_prop = proto.metadata_props.add()
    record_prop.key, record_prop.value = call_record.CALL_KEY, text
    return proto


def test_the_record_round_trips_every_kind_of_leaf_and_container() -> None:
    x, h, c, m = torch.zeros(2), torch.ones(1), torch.full((1,), 2.0), torch.full((3,), 3.0)
    widget = Widget()
    args = (x, State(h, c), [None, True, 7, 0.5, "mode"], collections.OrderedDict([("mask", m), (3, -1)]), widget, float("nan"))
    entry = call_record.call_record(args, ["x", "h", "c", "m"], ["x", "state", "flags", "extra", "widget", "scale"])
    assert entry is not None
    found, why = call_record.read_call(_proto_with(json.dumps(entry)))
    assert found is not None and why == "" and found.tensors() == ["x", "h", "c", "m"]
    by_name = {"x": x, "h": h, "c": c, "m": m}
    asked: list[tuple[Any, str]] = []
    built = call_record.build_call(found, by_name.__getitem__, lambda path, kind: asked.append((path, kind)) or kind)
    assert built[0] is x and built[1].h is h and built[1].c is c and type(built[1]).__name__ == "State" and built[1]._fields == ("h", "c")
    assert built[2] == [None, True, 7, 0.5, "mode"] and isinstance(built[2], list)
    assert list(built[3].items()) == [("mask", m), (3, -1)]
    assert asked == [((4,), "Widget"), ((5,), "float")] and built[4:] == ("Widget", "float")
    assert call_record.describe_call(found) == "x, State(h=h, c=c), [None, True, 7, 0.5, 'mode'], {'mask': m, 3: -1}, <Widget>, <float>"


def test_a_tensor_that_became_no_graph_input_is_unrecorded() -> None:
    node = {"tuple": [{"tensor": "a"}, {"dict": [["k", {"tensor": "gone"}]]}]}
    assert call_record.only_graph_inputs(node, {"a"}) == {"tuple": [{"tensor": "a"}, {"dict": [["k", {"unrecorded": "Tensor"}]]}]}


def test_a_structure_rnnx_cannot_write_down_gets_no_record() -> None:
    from torch.utils._pytree import register_pytree_node

    class Box:
        def __init__(self, t: Any) -> None:
            self.t = t

    register_pytree_node(Box, lambda b: ([b.t], None), lambda values, _: Box(values[0]))
    assert call_record.call_record((Box(torch.zeros(1)),), ["box_0"], ["box"]) is None


@pytest.mark.parametrize("text,why", [
    ("{", "not valid JSON"),
    ('{"version": 2, "parameters": null, "args": []}', "version 2"),
    ('{"version": 1, "parameters": ["a", "b"], "args": [{"tensor": "x"}]}', "no valid args/parameters"),
    ('{"version": 1, "parameters": null, "args": [{"tensor": 3}]}', "names no graph input"),
    ('{"version": 1, "parameters": null, "args": [{"tuple": [{"what": 1}]}]}', "unknown node 'what'"),
    ('{"version": 1, "parameters": null, "args": [{"value": [1, 2]}]}', "value [1, 2]"),
    ('{"version": 1, "parameters": null, "args": [{"namedtuple": "class", "fields": []}]}', "needs an identifier"),
    ('{"version": 1, "parameters": null, "args": [{"namedtuple": "P", "fields": [["a", {"value": 1}], ["a", {"value": 2}]]}]}', "not distinct"),
    ('{"version": 1, "parameters": null, "args": [' + '{"tuple": [' * 100 + '{"value": 1}' + ']}' * 100 + ']}', "nested deeper"),
])
def test_a_damaged_record_reads_as_absent(text: str, why: str) -> None:
    found, said = call_record.read_call(_proto_with(text))
    assert found is None and why in said, said


def test_an_unrecorded_leaf_comes_from_the_example_or_is_refused_by_name() -> None:
    entry = {"version": 1, "parameters": None, "args": [{"tensor": "x"}, {"tuple": [{"value": 1}, {"unrecorded": "Widget"}]}]}
    proto = _proto_with(json.dumps(entry))
    module = torch.nn.Identity()
    widget = Widget()
    call = plan_call(proto, module, (torch.zeros(4), (1, widget)), ["x"], "m.py:net")
    args = call.args({"x": torch.ones(2).numpy()}, None)
    assert args[1][1] is widget and torch.equal(args[0], torch.ones(2)) and list(call.example_arrays) == ["x"]
    with pytest.raises(RNNXError, match=r"argument 2\[1\] of the call the file records is a Widget.*define example_inputs in m.py"):
        plan_call(proto, module, None, ["x"], "m.py:net")
    other = plan_call(proto, module, None, ["x", "y"], "m.py:net")  # a record naming other inputs is not this file's
    assert other.source == "one tensor per graph input" and "not this file's" in other.notes[0]
