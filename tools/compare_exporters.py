"""Regenerate the README's exporter comparison: torch.onnx's two exporters and rnnx on every model.

Run from the repository root:

    .venv/bin/python tools/compare_exporters.py

It rewrites the table between the exporter-table markers in README.md and prints it (and
every failure in full). The models are tests/exporters/corpus.py's FAMILIES and the older
CASES of tests/exporters/models.py. Each is exported from its example at batch 3 by
- torch.onnx's dynamo exporter, ``Dim.AUTO`` on every dimension of every input, opset 18;
- torch.onnx's TorchScript exporter, opset 17, with the ``dynamic_axes`` written by hand
  below, as a careful user would (batch and length axes of every input and output);
- ``rnnx.export(model, example, path)``, no axes given (again from a batch-1 example);
then run in ONNX Runtime at test_corpus.py's three new shapes and compared with torch eager
(atol = rtol = 1e-4). Every cell is measured; only the hand-written axes are typed.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_map_only  # noqa: E402

import rnnx  # noqa: E402
from rnnx.errors import RNNXError  # noqa: E402
from tests.exporters.corpus import FAMILIES, Family  # noqa: E402
from tests.exporters.models import CASES  # noqa: E402
from tests.exporters.test_corpus import new_shapes, steps0  # noqa: E402

BEGIN, END = "<!-- exporter-table:begin -->", "<!-- exporter-table:end -->"
TOL_TEXT = "1e-4"
TOL = float(TOL_TEXT)
RECURRENT_OPS = ("LSTM", "GRU", "RNN", "Scan", "Loop")
B, T = "batch", "steps"  # the older cases' inputs are generated from these two labels

# Hand-written TorchScript dynamic_axes: ({input: axes}, {output: axes}), in positional order.
AXES: dict[str, tuple[dict, dict]] = {
    "crnn": ({"image": {0: B, 3: "width"}}, {"log_probs": {0: "frames", 1: B}}),
    "deepspeech": ({"spect": {0: B, 3: "frames"}}, {"probs": {0: B, 1: "out_frames"}}),
    "vad": ({"x": {0: B, 1: "frames"}, "h0": {1: B}, "c0": {1: B}}, {"prob": {0: B, 1: "frames"}, "hn": {1: B}, "cn": {1: B}}),
    "seq2seq": ({"src": {0: B, 1: "src_len"}, "tgt": {0: B, 1: "tgt_len"}}, {"log_probs": {0: B, 1: "tgt_len"}}),
    "tacotron_decoder": ({"memory": {0: B, 1: "max_time"}}, {"mel": {0: B}}),
    "lm_tied": ({"tokens": {0: "bptt", 1: B}, "h0": {1: B}, "c0": {1: B}}, {"log_probs": {0: "bptt_x_batch"}, "hn": {1: B}, "cn": {1: B}}),
    "tagger": ({"sentence": {0: B, 1: "words"}}, {"tag_scores": {0: B, 1: "words"}}),
    "utterance_classifier": ({"feats": {0: B, 1: "frames"}}, {"logits": {0: B}, "embedding": {0: B}}),
    "packed_speech_gru": ({"feats": {0: B, 1: "frames"}, "lengths": {0: B}}, {"logits": {0: B, 1: "frames"}}),
    "elmo_bilm": ({"tokens": {0: B, 1: "tokens"}}, {"mixed": {0: B, 1: "tokens"}}),
    "deepar": ({"target": {0: B, 1: "steps"}, "covariates": {0: B, 1: "steps"}}, {"mu": {0: B, 1: "steps"}, "sigma": {0: B, 1: "steps"}}),
    "session_rec": ({"item_seq": {0: B, 1: "items"}}, {"scores": {0: B}}),
    "demucs_blstm": ({"x": {0: B, 2: "time"}}, {"y": {0: B, 2: "time"}}),
    "lstm_ctc": ({"feats": {0: B, 1: "frames"}}, {"log_probs": {0: "frames", 1: B}}),
    "attention_pool": ({"x": {0: B, 1: "frames"}}, {"logits": {0: B}, "alpha": {0: B, 1: "frames"}}),
    "lstm-2layer-bidir-states": ({"x": {0: T, 1: B}, "h0": {1: B}, "c0": {1: B}}, {"y": {0: T, 1: B}, "hn": {1: B}, "cn": {1: B}}),
    "lstm-projection": ({"x": {0: T, 1: B}, "h0": {1: B}, "c0": {1: B}}, {"y": {0: T, 1: B}, "hn": {1: B}, "cn": {1: B}}),
    "gru-batch-first": ({"x": {0: B, 1: T}}, {"y": {0: B, 1: T}, "hn": {1: B}}),
    "rnn-relu": ({"x": {0: T, 1: B}}, {"y": {0: T, 1: B}, "hn": {1: B}}),
    "packed-sequence": ({"x": {0: B, 1: T}, "lengths": {0: B}}, {"y": {0: B, 1: T}, "hn": {1: B}}),
    "lstmcell-stepped": ({"x": {0: T, 1: B}}, {"y": {0: T, 1: B}}),
}


def _case_family(case) -> Family:
    """An older Case as a Family: inputs like its example's, resized along the hand-written axes."""
    axes = list(AXES[case.name][0].values())

    def example(batch: int, steps: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        out = []
        for ref, ax in zip(case.example(), axes):
            shape = [{B: batch, T: steps}.get(ax.get(d), n) for d, n in enumerate(ref.shape)]
            if ref.dtype.is_floating_point:
                out.append(torch.randn(shape, generator=g))
            else:  # sequence lengths, longest first and filling the sequence
                lengths = torch.sort(torch.randint(1, steps + 1, shape, generator=g), descending=True).values
                out.append(torch.cat([torch.tensor([steps]), lengths[1:]]))
        return tuple(out)

    return Family(case.name, case.make, example, case.native, 1)


@contextlib.contextmanager
def _quiet():
    """Silence torch.onnx: Python warnings, loggers, and what C++ writes to fds 1 and 2."""
    loggers = [logging.getLogger(n) for n in ("torch", "torch.onnx", "torch.export", "onnxscript", "torch._dynamo")]
    levels = [lg.level for lg in loggers]
    sys.stdout.flush(), sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as null, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lg in loggers:
            lg.setLevel(logging.CRITICAL)
        os.dup2(null.fileno(), 1), os.dup2(null.fileno(), 2)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            for fd, copy in enumerate(saved, start=1):
                os.dup2(copy, fd)
                os.close(copy)
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


def _first_line(exc: BaseException) -> str:
    """The first informative line: rnnx's own message, torch.onnx's innermost cause, ONNX Runtime's gist."""
    while exc.__cause__ is not None and not isinstance(exc, RNNXError):
        exc = exc.__cause__
    text = str(exc).strip()
    node = re.search(r"running (\w+) node", text)
    if "[ONNXRuntimeError]" in text and node:  # the failing op and the status message's last sentence
        return f"{node.group(1)} fails: {text.rstrip('. ').rsplit('. ', 1)[-1]}"
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("Failed to", "Traceback", "-", "#", "(Refer")):
            return line.split(" : ", 2)[-1] if line.startswith("[ONNXRuntimeError]") else line
    return type(exc).__name__


def _short(text: str, n: int = 60) -> str:
    text = " ".join(text.split()).replace("|", "/").replace("`", "'")
    return text if len(text) <= n else text[: n - 1] + "…"


def export_dynamo(model, args, path: Path, name: str) -> None:
    auto = tree_map_only(torch.Tensor, lambda t: {d: torch.export.Dim.AUTO for d in range(t.dim())}, args)
    torch.onnx.export(model, args, str(path), dynamo=True, dynamic_shapes=auto, opset_version=18)


def export_torchscript(model, args, path: Path, name: str) -> None:
    inputs, outputs = AXES[name]
    torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17, input_names=list(inputs),
                      output_names=list(outputs), dynamic_axes={**inputs, **outputs})


def export_rnnx(model, args, path: Path, name: str) -> None:
    report = rnnx.export(model, args, path)
    if not report.passed:
        raise RuntimeError(report.check.failure())


EXPORTERS = [  # (column, name in the summary, exporter, example batch)
    ("torch.onnx dynamo, `Dim.AUTO`", "torch.onnx dynamo", export_dynamo, 3),
    ("torch.onnx TorchScript, hand-written axes", "TorchScript", export_torchscript, 3),
    ("rnnx, no axes", "rnnx", export_rnnx, 3),
    ("rnnx, batch-1 example", "rnnx from a batch-1 example", export_rnnx, 1),
]


def _flat(tree) -> list[np.ndarray]:
    return [x.detach().numpy() for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)]


def _at_new_shapes(family: Family, model, path: Path) -> tuple[int, str]:
    """How many of the three new shapes run and match torch, and the first failure."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    passed, first = 0, ""
    for seed, (b, steps) in enumerate(new_shapes(family), start=2):
        args = family.example(b, steps, seed)
        feeds = _flat(args)
        with torch.no_grad():
            want = _flat(model(*args))
        where = f"B={b},T={steps}"
        try:
            if len(names) != len(feeds):
                raise ValueError(f"takes {len(names)} inputs, not {len(feeds)}")
            got = session.run(None, dict(zip(names, feeds)))
            if len(got) != len(want):
                raise ValueError(f"{len(got)} outputs, torch {len(want)}")
            for i, (g, w) in enumerate(zip(got, want)):
                if g.shape != w.shape:
                    raise ValueError(f"output {i} shape {list(g.shape)}, torch {list(w.shape)}")
                if not np.allclose(g, w, atol=TOL, rtol=TOL):
                    raise ValueError(f"output {i} off by {float(np.abs(g - w).max()):.1e}")
            passed += 1
        except Exception as exc:  # noqa: BLE001  the table records whatever ONNX Runtime says
            first = first or f"{where}: {_first_line(exc)}"
    return passed, first


def measure(family: Family, exporter, batch: int, tmp: Path) -> tuple[bool, str]:
    """(correct at every new shape, the cell's text)."""
    torch.manual_seed(0)
    model = family.make().eval()
    args = family.example(batch, steps0(family), 1)
    path = tmp / f"{family.name}-{exporter.__name__}-{batch}.onnx"
    try:
        with _quiet():
            exporter(model, args, path, family.name)
    except Exception as exc:  # noqa: BLE001  torch.onnx raises many types; the first line says what failed
        print(f"  {family.name}, {exporter.__name__} (batch {batch}): export fails: {_first_line(exc)}", flush=True)
        return False, f"✗ export: {_short(_first_line(exc))}"
    ops = collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)
    rec = ", ".join(f"{op}×{ops[op]}" for op in RECURRENT_OPS if ops[op]) or "unrolled"
    with _quiet():
        passed, first = _at_new_shapes(family, model, path)
    if first:
        print(f"  {family.name}, {exporter.__name__} (batch {batch}): {first}", flush=True)
    mark = "✓" if passed == 3 else "✗"
    return passed == 3, f"{mark} {passed}/3 · {rec} · {sum(ops.values())} nodes" + (f"<br>{_short(first, 80)}" if first else "")


def main() -> None:
    rows = [*FAMILIES, *(_case_family(c) for c in CASES)]
    header = ["model", *(col for col, _, _, _ in EXPORTERS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    correct = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, family in enumerate(rows):
            cells = []
            for col, _, exporter, batch in EXPORTERS:
                ok, cell = measure(family, exporter, batch, Path(tmp))
                correct[col, i < len(FAMILIES)] += ok
                cells.append(cell)
            lines.append(f"| {family.name}{'' if i < len(FAMILIES) else ' (older case)'} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    n, m = len(FAMILIES), len(rows) - len(FAMILIES)
    summary = "**Correct at all three new shapes:** " + ", ".join(
        f"{short} {correct[col, True] + correct[col, False]}/{n + m} ({correct[col, True]}/{n} corpus families)"
        for col, short, _, _ in EXPORTERS) + "."
    legend = (f"Each model is exported from its example (batch 3, or 1 in the last column), then run in ONNX Runtime at "
              f"three new (batch, steps) shapes, batch 1 included, and compared with torch eager (atol = rtol = {TOL_TEXT}). "
              "A cell gives the shapes that match, the recurrence nodes of the main graph and its node count, "
              "and the first failure.")
    table = "\n".join([f"Measured with torch {torch.__version__}, onnxruntime {ort.__version__} by `tools/compare_exporters.py`.",
                       "", legend, "", *lines, "", summary])
    readme = ROOT / "README.md"
    text = readme.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        readme.write_text(f"{head}{BEGIN}\n{table}\n{END}{rest.split(END, 1)[1]}")
    print(table)


if __name__ == "__main__":
    main()
