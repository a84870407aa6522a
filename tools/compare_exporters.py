"""Regenerate docs/export.md's exporter comparison: torch.onnx's two exporters and rnnx on every model.

Run from the repository root:

    .venv/bin/python tools/compare_exporters.py

It rewrites the table between the exporter-table markers in docs/export.md and prints it (and
every failure in full). The models are tests/exporters/corpus.py's FAMILIES and the older
CASES of tests/exporters/models.py. Each is exported from its example at batch 3 by
- torch.onnx's dynamo exporter, ``Dim.AUTO`` on every dimension of every input, opset 18;
- torch.onnx's TorchScript exporter, opset 17, with the ``dynamic_axes`` written by hand
  below, as a careful user would (batch and length axes of every input and output);
- ``rnnx.export(model, example, path)``, no axes given (again from a batch-1 example);
then run in ONNX Runtime at test_corpus.py's three new shapes and compared with torch eager
(atol = rtol = 1e-4). Every cell is measured; only the hand-written axes are typed.

    .venv/bin/python tools/compare_exporters.py --third-party

does the same for the models of other authors' packages in tests/exporters/test_third_party.py
(CASES and RECORDED), at that test's three check shapes, and writes the table to
tools/third_party/EXPORTERS.md instead of docs/export.md. It measures the cases whose package this
environment imports and keeps the other rows as they were, so run it once in the test
environment and once in tools/third_party's (see its README) to fill every row; each row
says which torch measured it. A model an exporter cannot export keeps its row, with the reason.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.metadata
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

# The same for tests/exporters/test_third_party.py's models, named as the packages name them
# (flattened: a dict or a dataclass input gives one entry per tensor, in order).
THIRD_PARTY_AXES: dict[str, tuple[dict, dict]] = {
    "stanza-langid-bilstm": ({"chars": {0: B, 1: "chars"}}, {"logits": {0: B}}),
    "deepecho-par-gru": ({"x": {0: "steps", 1: B}, "context": {0: B}}, {"y": {0: "steps", 1: B}}),
    "legere-crnn-bigru": ({"image": {0: B, 3: "width"}}, {"logits": {0: B, 1: "frames"}}),
    "demucs-v3-blstm": ({"mix": {0: B, 2: "samples"}}, {"sources": {0: B, 3: "samples"}}),
    "darts-rnnmodel-lstm": ({"past_target": {0: B, 1: "steps"}, "historic_future_covariates": {0: B, 1: "steps"},
                             "future_covariates": {0: B}}, {"prediction": {0: B}, "h": {1: B}, "c": {1: B}}),
    "neuralforecast-lstm": ({"insample_y": {0: B, 1: "steps"}, "hist_exog": {0: B, 1: "steps"}}, {"forecast": {0: B}}),
    "opennmt-nmt-lstm-attention": ({"src": {0: B, 1: "src_len"}, "tgt": {0: B, 1: "tgt_len"}, "src_len": {0: B}},
                                   {"dec_out": {0: B, 1: "dec_len"}, "attn": {0: B, 1: "dec_len", 2: "src_len"}}),
    "sb3-recurrent-ppo-lstm": ({"obs": {0: "steps"}, "pi_h": {1: B}, "pi_c": {1: B}, "vf_h": {1: B}, "vf_c": {1: B},
                                "episode_starts": {0: "steps"}},
                               {"actions": {0: "steps"}, "values": {0: "steps"}, "log_prob": {0: "steps"},
                                "pi_h_out": {1: B}, "pi_c_out": {1: B}, "vf_h_out": {1: B}, "vf_c_out": {1: B}}),
    "tacotron-cbhg-bigru-lstmcell": ({"text": {0: B, 1: "symbols"}, "mels": {0: B, 2: "frames"}},
                                     {"mels_out": {0: B, 2: "frames"}, "alignments": {0: B, 1: "symbols", 2: "steps"}}),
    "piano-transcription-acoustic-crnn-bigru": ({"logmel": {0: B, 2: "frames"}}, {"keys": {0: B, 1: "frames"}}),
    "neuralhydrology-cudalstm": ({"prcp": {0: B, 1: "steps"}, "tmax": {0: B, 1: "steps"}, "srad": {0: B, 1: "steps"},
                                  "x_s": {0: B}},
                                 {"lstm_output": {0: B, 1: "steps"}, "h_n": {0: B}, "c_n": {0: B}, "y_hat": {0: B, 1: "steps"}}),
    "tape-protein-lstm": ({"input_ids": {0: B, 1: "residues"}, "input_mask": {0: B, 1: "residues"}},
                          {"sequence_output": {0: B, 1: "residues"}, "pooled_output": {0: B}}),
    "pyhealth-rnnlayer-bigru": ({"x": {0: B, 1: "visits"}, "mask": {0: B, 1: "visits"}},
                                {"outputs": {0: B, 1: "visits"}, "last_outputs": {0: B}}),
    "pykt-dkt-lstm": ({"q": {0: B, 1: "steps"}, "r": {0: B, 1: "steps"}}, {"y": {0: B, 1: "steps"}}),
    "torch-ecg-crnn-bilstm": ({"ecg": {0: B, 2: "samples"}}, {"logits": {0: B}}),
    "easyocr-vgg-bilstm": ({"image": {0: B, 3: "width"}, "text": {0: B}}, {"preds": {0: B, 1: "frames"}}),
    "speechbrain-crdnn-lstm": ({"feats": {0: B, 1: "frames"}}, {"encoded": {0: B, 1: "frames"}}),
    "pyannote-pyannet-bilstm": ({"waveforms": {0: B, 2: "samples"}}, {"scores": {0: B, 1: "frames"}}),
    "openunmix-bilstm": ({"spec": {0: B, 3: "frames"}}, {"estimate": {0: B, 3: "frames"}}),
    "asteroid-dprnn-tasnet": ({"wav": {0: B, 1: "samples"}}, {"est_sources": {0: B, 2: "samples"}}),
    "flair-sequence-tagger-bilstm-crf": ({"sentence_tensor": {0: B, 1: "words"}, "lengths": {0: B}},
                                         {"features": {0: B, 1: "words"}, "lengths_out": {0: B}, "transitions": {}}),
    "pytorch-forecasting-rnn-lstm": ({"encoder_cat": {0: B, 1: "steps"}, "encoder_cont": {0: B, 1: "steps"},
                                      "decoder_cat": {0: B}, "decoder_cont": {0: B}, "encoder_lengths": {0: B},
                                      "decoder_lengths": {0: B}, "target_scale": {0: B}}, {"prediction": {0: B}}),
}
THIRD_PARTY_TABLE = ROOT / "tools" / "third_party" / "EXPORTERS.md"


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
    if args and isinstance(args[-1], dict):  # torch.onnx would read a last dict as keyword inputs; its docs say add {}
        args = (*args, {})
    torch.onnx.export(model, args, str(path), dynamo=True, dynamic_shapes=auto, opset_version=18)


def export_torchscript(model, args, path: Path, name: str) -> None:
    inputs, outputs = AXES[name] if name in AXES else THIRD_PARTY_AXES[name]
    if args and isinstance(args[-1], dict):  # torch.onnx would read a last dict as keyword inputs; its docs say add {}
        args = (*args, {})
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
    doc = ROOT / "docs" / "export.md"
    text = doc.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        doc.write_text(f"{head}{BEGIN}\n{table}\n{END}{rest.split(END, 1)[1]}")
    print(table)


def _check_third_party(case, make_inputs, model, path: Path) -> tuple[int, str]:
    """How many of test_third_party.py's three check shapes run and match torch, and the first failure."""
    from tests.exporters import test_third_party as tp

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001  a file ONNX Runtime refuses to load
        return 0, "ONNX Runtime cannot load it: " + re.sub(r"Load model from \S+ failed:", "Load model failed: ", _first_line(exc))
    passed, first = 0, ""
    for (b, seq), args in zip(tp.CHECK_SHAPES, tp.check_inputs(make_inputs)):
        try:
            tp.compare(session, [x.numpy() for x in tp.flat_tensors(args)], tp.torch_outputs(model, args), f"B={b},T={seq}")
            passed += 1
        except Exception as exc:  # noqa: BLE001  the table records whatever ONNX Runtime or the comparison says
            first = first or (str(exc) if isinstance(exc, AssertionError) else f"B={b},T={seq}: {_first_line(exc)}")
    return passed, first


def measure_third_party(case, exporter, batch: int, tmp: Path) -> tuple[bool, str]:
    from tests.exporters import test_third_party as tp

    model, make_inputs = tp.build(case)
    path = tmp / f"{case.name}-{exporter.__name__}-{batch}.onnx"
    try:
        with _quiet():
            exporter(model, tp.example(make_inputs, batch), path, case.name)
    except Exception as exc:  # noqa: BLE001  torch.onnx raises many types; the first line says what failed
        print(f"  {case.name}, {exporter.__name__} (batch {batch}): export fails: {_first_line(exc)}", flush=True)
        return False, f"✗ export: {_short(_first_line(exc), 90)}"
    ops = collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)
    rec = ", ".join(f"{op}×{ops[op]}" for op in RECURRENT_OPS if ops[op]) or "unrolled"
    with _quiet():
        passed, first = _check_third_party(case, make_inputs, model, path)
    if first:
        print(f"  {case.name}, {exporter.__name__} (batch {batch}): {first}", flush=True)
    mark = "✓" if passed == 3 else "✗"
    return passed == 3, f"{mark} {passed}/3 · {rec} · {sum(ops.values())} nodes" + (f"<br>{_short(first, 90)}" if first else "")


def third_party(only: set[str] | None = None) -> None:
    """Measure the third-party models this environment can build (or those named); keep the other rows."""
    import pytest

    from tests.exporters import test_third_party as tp

    cases = [*tp.CASES, *tp.RECORDED]
    header = ["model", "package", "measured with", *(col for col, _, _, _ in EXPORTERS)]
    rows: dict[str, str] = {}
    if THIRD_PARTY_TABLE.exists():
        for line in THIRD_PARTY_TABLE.read_text().splitlines():
            if line.startswith("| ") and not line.startswith("| model "):
                rows[line[2:].split(" |", 1)[0]] = line
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            if only and case.name not in only:
                continue
            try:
                tp.build(case)
            except pytest.skip.Exception:
                print(f"{case.name}: {case.package} is not installed here; row kept", flush=True)
                continue
            group = "live in the tests" if case in tp.CASES else "recorded by tools/third_party"
            cells = [case.name, f"{case.package} {importlib.metadata.version(case.package)}",
                     f"torch {torch.__version__} ({group})"]
            for _, _, exporter, batch in EXPORTERS:
                cells.append(measure_third_party(case, exporter, batch, Path(tmp))[1])
            rows[case.name] = "| " + " | ".join(cells) + " |"
            print(rows[case.name], flush=True)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [rows[c.name] for c in cases if c.name in rows]
    correct = {col: sum(r.split(" | ")[3 + i].startswith("✓ 3/3") for r in lines[2:]) for i, (col, _, _, _) in enumerate(EXPORTERS)}
    summary = "**Correct at all three check shapes:** " + ", ".join(
        f"{short} {correct[col]}/{len(lines) - 2}" for col, short, _, _ in EXPORTERS) + "."
    text = "\n".join([
        "# Exporters on recurrent models from other authors' packages",
        "",
        "Written by `tools/compare_exporters.py --third-party` (run in the test environment and in tools/third_party's).",
        f"Each model of tests/exporters/test_third_party.py is exported from its example (batch 3, or 1 in the last column), "
        f"then run in ONNX Runtime at that test's three check shapes {tp.CHECK_SHAPES} (batch, steps) and compared with "
        f"torch eager (atol = rtol = {TOL_TEXT}). torch.onnx dynamo: `Dim.AUTO` on every dimension, opset 18; "
        "TorchScript: opset 17 with hand-written `dynamic_axes` (THIRD_PARTY_AXES); rnnx: no axes. "
        "A cell gives the shapes that match, the recurrence nodes of the main graph and its node count, and the first failure.",
        "", *lines, "", summary, ""])
    THIRD_PARTY_TABLE.write_text(text)
    print(text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--third-party", action="store_true", help="the models of test_third_party.py, into tools/third_party/EXPORTERS.md")
    parser.add_argument("--only", help="with --third-party: comma-separated model names to measure (the other rows are kept)")
    options = parser.parse_args()
    if options.third_party:
        third_party(set(options.only.split(",")) if options.only else None)
    else:
        main()
