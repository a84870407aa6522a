"""Careless input a newcomer gives outside the flags: an environment variable, a state's
name with a typo, a thread count below zero, a keyword rnnx does not take. Each is refused
in one line (exit 2 from the command line, RNNXError in Python), never ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import rnnx  # noqa: E402
from rnnx.streaming import StreamingSession  # noqa: E402
from tests.helpers import rnnx_in_process  # noqa: E402


class _Stream(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = torch.nn.GRU(3, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gru(x)[0]


@pytest.fixture(scope="module")
def streaming_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("careless") / "s.onnx"
    torch.manual_seed(0)
    assert rnnx.export(_Stream().eval(), (torch.randn(1, 6, 3),), path, streaming=True).passed
    return path


@pytest.mark.parametrize("value", ["abc", "-3", "1000000000000", "\u0663\u0660\u0660\u0660\u0660\u0660", "2.5"])
def test_a_bad_ort_threads_variable_is_refused_in_one_line(streaming_file: Path, value: str) -> None:
    env = {**os.environ, "RNNX_ORT_THREADS": value}
    done = subprocess.run([sys.executable, "-m", "rnnx", "verify", str(streaming_file)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "RNNX_ORT_THREADS: expected a number of threads from 0 to 1024 in ASCII digits" in line
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RNNX_ORT_THREADS", value)
        with pytest.raises(rnnx.RNNXError, match="RNNX_ORT_THREADS"):
            StreamingSession(streaming_file)


def test_a_good_ort_threads_variable_is_used(streaming_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RNNX_ORT_THREADS", "1")
    session = StreamingSession(streaming_file)
    assert session.runner.session.get_session_options().intra_op_num_threads == 1


def test_a_typo_in_a_state_name_and_a_negative_thread_count_are_refused(streaming_file: Path) -> None:
    session = StreamingSession(streaming_file)
    x = torch.randn(1, 2, 3).numpy()
    with pytest.raises(rnnx.RNNXError, match=r"process: expected inputs among gru\.h_in, x, found 'gru\.h_inn'"):
        session.process(x, **{"gru.h_inn": torch.zeros(1, 1, 4).numpy()})
    assert session.states is None  # nothing ran
    with pytest.raises(rnnx.RNNXError, match="threads: expected a whole number from 0"):
        StreamingSession(streaming_file, threads=-1)


def test_the_unknown_keyword_message_lists_streaming(tmp_path: Path) -> None:
    with pytest.raises(rnnx.RNNXError) as raised:
        rnnx.export(_Stream().eval(), (torch.randn(1, 6, 3),), tmp_path / "m.onnx", streamin=True)
    assert "streaming" in str(raised.value) and "'streamin'" in str(raised.value)
    with pytest.raises(rnnx.RNNXError, match="streaming: expected True or False"):
        rnnx.export(_Stream().eval(), (torch.randn(1, 6, 3),), tmp_path / "m.onnx", streaming="yes")


def test_html_without_matplotlib_is_refused_before_any_work(streaming_file: Path, tmp_path: Path) -> None:
    # matplotlib made unimportable in the child, as on a machine without the plots extra
    code = ("import sys; sys.modules['matplotlib'] = None; from rnnx.cli import main; "
            f"sys.exit(main(['verify', {str(streaming_file)!r}, '--report', {str(tmp_path / 'r.json')!r}, '--html', {str(tmp_path / 'r.html')!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "--html: plots need matplotlib, which is not installed: pip install 'rnnx[plots]'" in done.stderr
    assert not list(tmp_path.iterdir())  # no report written: nothing ran


def test_an_example_the_model_refuses_is_named_as_the_input_not_as_a_route_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    done = cli(capsys, "export", "examples/tagger.py:model", "-o", tmp_path / "t.onnx", "--input", "2x5:float32")
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert line.startswith("rnnx export: the model raised on the example as given (tokens 2x5 float32): RuntimeError:") and "\n" not in line
    assert "no translation route" not in line and not list(tmp_path.iterdir())


def test_checkpoint_messages_say_what_the_file_is(streaming_file: Path, tmp_path: Path) -> None:
    from rnnx.exporters.loading import load_checkpoint

    model = _Stream()
    torch.save(model, tmp_path / "whole.pt")  # a whole pickled model, as torch.save(model) writes it
    with pytest.raises(rnnx.RNNXError) as raised:
        load_checkpoint(model, tmp_path / "whole.pt")
    line = str(raised.value)
    assert "it pickles Python objects, such as a whole model saved with torch.save(model)" in line and "state_dict" in line
    assert "\n" not in line and "two options" not in line
    with pytest.raises(rnnx.RNNXError, match=r"an ONNX file, not torch weights; --checkpoint takes the state_dict"):
        load_checkpoint(model, streaming_file)


def test_a_long_first_line_is_cut_at_a_word() -> None:
    from rnnx.errors import one_line

    text = "Weights only load failed because there is a high likelihood that the file holds code"
    assert one_line(text, 55) == "Weights only load failed because there is a high..."
    assert one_line("short", 60) == "short"


def cli(capsys: pytest.CaptureFixture[str], *args: object) -> subprocess.CompletedProcess[str]:
    """``python -m rnnx ARGS`` in this process (:func:`tests.helpers.rnnx_in_process`), for a test
    about what a verb does, not about the process: no 2-3 s of importing torch again."""
    return rnnx_in_process(*args)


def _tampered(source: Path, target: Path, change: str) -> Path:
    import json

    import onnx

    proto = onnx.load(str(source))
    props = {p.key: p for p in proto.metadata_props}
    record = json.loads(props["rnnx.streaming"].value)
    if change == "missing output":
        record["states"][0]["output"] = "gru.h_nowhere"
    elif change == "huge multiple":
        record["chunk_multiple"] = "@HUGE@"
    elif change == "deep":
        record["inputs"] = "@DEEP@"
    elif change in ("size 1e12", "size -1"):
        record["states"][0]["dims"][0] = 10**12 if change == "size 1e12" else -1
    elif change == "time axis 99":
        record["inputs"]["x"]["time_axis"] = 99
    elif change == "batch axis text":
        record["states"][0]["batch_axis"] = "1"
    text = json.dumps(record).replace('"@HUGE@"', "1e999").replace('"@DEEP@"', "[" * 100_000 + "]" * 100_000)
    props["rnnx.streaming"].value = text
    onnx.save(proto, str(target))
    return target


TAMPERINGS = ["missing output", "huge multiple", "deep", "size 1e12", "size -1", "time axis 99", "batch axis text"]


@pytest.mark.parametrize("change", TAMPERINGS)
def test_a_tampered_streaming_record_is_refused_in_one_line_everywhere(streaming_file: Path, tmp_path: Path, change: str,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    bad = _tampered(streaming_file, tmp_path / "bad.onnx", change)
    with pytest.raises(rnnx.RNNXError) as raised:
        StreamingSession(bad)
    line = str(raised.value)
    assert line.startswith("rnnx.streaming: expected rnnx's streaming record") and "\n" not in line and len(line) < 400
    (tmp_path / "m.py").write_text("import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                                   "        self.gru = torch.nn.GRU(3, 4, batch_first=True)\n    def forward(self, x):\n        return self.gru(x)[0]\n")
    done = cli(capsys, "verify", bad, "--against", f"{tmp_path / 'm.py'}:M", "--chunks", "1,2")
    assert done.returncode == 2 and "rnnx.streaming: expected rnnx's streaming record" in done.stderr, done.stderr[-2000:]
    shown = cli(capsys, "inspect", bad)
    assert shown.returncode == 0 and "streaming: the record is damaged" in shown.stdout


@pytest.mark.parametrize("axis", ["tokens:0=b:0:0", "tokens:1=t:4:4", "tokens:1=t:5:2"])
def test_a_range_of_one_value_or_none_is_refused_in_one_line(axis: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    done = cli(capsys, "export", "examples/tagger.py:model", "-o", tmp_path / "t.onnx", "--dynamic", axis)
    assert done.returncode == 2, done.stderr
    assert "expected min < max" in done.stderr and "\n" not in done.stderr.strip() and not list(tmp_path.iterdir())


def test_a_huge_argument_is_not_echoed_back_whole(streaming_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shape = "x".join(["1"] * 10_000)
    done = cli(capsys, "build", streaming_file, "-o", tmp_path / "e.engine", "--min-shapes", f"x:{shape}")
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "\n" not in line and len(line) < 1100 and "characters ...]" in line and line.startswith("rnnx build: --min-shapes")


@pytest.mark.parametrize("claim", ["huge example", "many roles", "negative size"])
def test_an_export_record_beyond_what_rnnx_writes_reads_as_absent(tmp_path: Path, claim: str, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import onnx

    from rnnx.formats.onnx_metadata import EXPORT_KEY, read_metadata, set_metadata

    path = tmp_path / "l.onnx"
    assert rnnx.export(torch.nn.LSTM(3, 4), (torch.randn(5, 2, 3),), path).passed
    proto = onnx.load(str(path))
    export, recurrences = read_metadata(proto)
    assert export is not None and recurrences
    if claim == "huge example":
        export["example"] = {name: [10**6, 10**6, 8] for name in export["inputs"]}
    elif claim == "many roles":
        export["roles"] = {f"label{k}": "other" for k in range(100_000)}
    else:
        export["inputs"] = {name: [-1] + dims[1:] for name, dims in export["inputs"].items()}
    set_metadata(proto, {EXPORT_KEY: json.dumps(export)})
    assert read_metadata(proto) == (None, [])
    onnx.save(proto, str(tmp_path / "t.onnx"))
    done = cli(capsys, "verify", tmp_path / "t.onnx")
    assert done.returncode == 0, done.stderr  # checked as a file without the record: from its graph alone


def test_a_lowered_record_whose_spec_does_not_fit_its_constants_reads_as_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import onnx

    path = tmp_path / "p.onnx"
    assert rnnx.export(torch.nn.LSTM(3, 6, proj_size=2), (torch.randn(5, 2, 3),), path).passed  # a projection: lowered to Scans
    proto = onnx.load(str(path))
    entry = next(p for p in proto.metadata_props if p.key == "rnnx.lowered")
    records = json.loads(entry.value)
    records[0]["spec"] = records[0]["spec"].replace("hidden=6", "hidden=5")
    entry.value = json.dumps(records)
    onnx.save(proto, str(tmp_path / "bad.onnx"))
    for verb in ("verify", "inspect"):
        done = cli(capsys, verb, tmp_path / "bad.onnx")
        assert done.returncode in (0, 2) and "internal error" not in done.stderr, (verb, done.stderr)


def test_a_lower_that_differs_says_one_line_and_prints_its_cases(tmp_path: Path) -> None:
    import json

    path = tmp_path / "t16.onnx"
    # float16 arithmetic: the Scans round in another order than the native node, so a tolerance
    # of 1e-12 is broken
    assert rnnx.export(torch.nn.LSTM(3, 4), (torch.randn(5, 2, 3),), path, precision="fp16", keep_io_types=True).passed
    lower = [sys.executable, "-m", "rnnx", "lower", str(path), "-o", str(tmp_path / "low.onnx"), "--atol", "1e-12", "--rtol", "0"]
    done = subprocess.run(lower, capture_output=True, text=True, timeout=300)
    if done.returncode == 0:
        pytest.skip("the lowered file matched to 1e-12 on this machine: nothing differs to report")
    assert done.returncode == 1
    line = done.stderr.strip()
    assert "\n" not in line and len(line) < 600 and line.startswith("rnnx lower: the lowered model differs from")
    assert "max abs" in done.stdout  # the table, case by case, on stdout
    done = subprocess.run(lower + ["--json"], capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout)
    assert report["kind"] == "parity" and report["check"]["cases"] and not (tmp_path / "low.onnx").exists()


LOOP = """
import torch
from torch import nn


class Loop(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(4, 6)
        self.proj = nn.Linear(6, 6)

    def forward(self, x):
        h = x.new_zeros(x.shape[0], 6)
        outs = []
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], torch.tanh(self.proj(h)))
            outs.append(h)
        return torch.stack(outs, 1)


model = Loop().eval()
example_inputs = (torch.randn(2, 30, 4),)
"""


@pytest.mark.slow
def test_a_dimension_named_dynamic_over_a_loop_keeps_its_name_once_re_rolled(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP)
    done = subprocess.run([sys.executable, "-m", "rnnx", "export", f"{tmp_path / 'loop.py'}:model", "-o", str(tmp_path / "l.onnx"),
                           "--dynamic", "x:1=frames", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["axes"]["x"]["1"] == "frames"


def test_a_dimension_named_dynamic_that_the_file_must_fix_is_refused_not_narrowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a loop whose steps differ (a weight chosen by the step) cannot be re-rolled: the file could only fix the axis
    # seven steps, not LOOP's thirty: the refusal is the same, each probe of the unrolled loop a quarter of the work
    (tmp_path / "differs.py").write_text(LOOP.replace("self.cell(x[:, t], torch.tanh(self.proj(h)))",
                                                      "self.cell(x[:, t], torch.tanh(self.proj(h) * (1.0 + (t % 2))))")
                                         .replace("torch.randn(2, 30, 4)", "torch.randn(2, 7, 4)"))
    done = cli(capsys, "export", f"{tmp_path / 'differs.py'}:model", "-o", tmp_path / "d.onnx", "--dynamic", "x:1=frames")
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert line.startswith("rnnx export: dynamic axis x:1=frames: asked dynamic, but the file can only fix it at 7") and "\n" not in line
    assert "a Python loop calls" in line and not (tmp_path / "d.onnx").exists()
