"""Issue 47's smaller items: hostile names, sizes and records that once crashed (exit 3), blamed
the wrong thing, or forged a line of a report. Each is one line on stderr, exit 2, naming the
real cause, with nothing written (or, where the file is fine, a report that prints the name
escaped). Every file is built here with onnx.helper and run through the real CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

BIG = 1 << 62


def _lstm(path: Path, dims: list, name: str = "x", nodes: tuple = (), initializers: tuple = ()) -> Path:
    """One LSTM over ``name`` (time, batch, 3); ``nodes`` compute y from its output y0."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in (("W", (1, 16, 3)), ("R", (1, 16, 4)))]
    lstm = helper.make_node("LSTM", [name, "W", "R"], ["y0" if nodes else "y"], hidden_size=4)
    graph = helper.make_graph([lstm, *nodes], "g", [helper.make_tensor_value_info(name, 1, dims)],
                              [helper.make_tensor_value_info("y", 1, None)], weights + list(initializers))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _rnnx(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rnnx", *map(str, args)], capture_output=True, text=True, timeout=300)


def _refused(done: subprocess.CompletedProcess[str], folder: Path, inputs: set[str], *words: str) -> str:
    """Exit 2, one line naming ``words``, no traceback, nothing but the inputs left in ``folder``."""
    line = done.stderr.strip()
    assert done.returncode == 2 and len(line.splitlines()) == 1 and "Traceback" not in line, done.stderr[-2000:]
    for word in words:
        assert word in line, line
    assert {p.name for p in folder.iterdir()} == inputs, sorted(p.name for p in folder.iterdir())
    return line


def test_a_fixed_dimension_of_2_to_the_62_is_refused_naming_the_input(tmp_path: Path) -> None:
    model = _lstm(tmp_path / "m.onnx", [BIG, 1, 3])
    for verb in (("bundle", model, "-o", tmp_path / "b", "--tensorrt", "8.6"), ("verify", model), ("lower", model, "-o", tmp_path / "l.onnx")):
        _refused(_rnnx(*verb), tmp_path, {"m.onnx"}, "input 'x' is fixed at", str(BIG), "2147483647")
    shown = _rnnx("inspect", model)  # inspect reports what the file says
    assert shown.returncode == 0 and f"x: ({BIG}, 1, 3)" in shown.stdout, shown.stderr
    # a size given for a profile is held to the same bound (np.prod once wrapped 2^62 x 32 x 3 to a small number)
    dynamic = _lstm(tmp_path / "d.onnx", ["seq", "batch", 3])
    _refused(_rnnx("bundle", dynamic, "-o", tmp_path / "b", "--tensorrt", "8.6", "--max-shapes", f"x:{BIG}x32x3"),
             tmp_path, {"m.onnx", "d.onnx"}, "--max-shapes", "at most 2147483647", str(BIG))


def test_a_10_kB_input_name_is_named_cut_short_not_blamed_on_the_output(tmp_path: Path) -> None:
    name = "a," * 5000
    model = _lstm(tmp_path / "m.onnx", ["seq", "batch", 3], name=name)
    line = _refused(_rnnx("bundle", model, "-o", tmp_path / "out", "--tensorrt", "8.6"), tmp_path, {"m.onnx"},
                    "input 'a,a,a", "(10000 characters)", "found ','", "rename the input")
    assert len(line) < 600 and "-o" not in line and "out" not in line.split(":")[1], line


def test_profile_splits_a_name_at_its_last_colon_as_min_shapes_does(tmp_path: Path) -> None:
    from rnnx.shapes.profiles import Profile, parse_shapes

    assert Profile.parse("input:0:1x1x3,4x2x3,8x4x3").shapes == {"input:0": ((1, 1, 3), (4, 2, 3), (8, 4, 3))}
    assert Profile.parse("'a;b':1x3,2x3,3x3;h:1,1,1").shapes == {"a;b": ((1, 3), (2, 3), (3, 3)), "h": ((1,), (1,), (1,))}
    assert parse_shapes("input:0:1x1x3", "--min-shapes") == {"input:0": (1, 1, 3)}
    model = _lstm(tmp_path / "m.onnx", ["seq", "batch", 3], name="input:0")
    done = _rnnx("bundle", model, "-o", tmp_path / "b", "--tensorrt", "8.6", "--profile", "input:0:1x1x3,4x2x3,8x4x3")
    assert done.returncode == 0, done.stderr
    profile = json.loads((tmp_path / "b" / "BUNDLE.json").read_text())["profile"]
    assert profile["shapes"] == {"input:0": [[1, 1, 3], [4, 2, 3], [8, 4, 3]]}, profile
    _refused(_rnnx("bundle", model, "-o", tmp_path / "c", "--tensorrt", "8.6", "--profile", "input:0:1x1x3,4x2x3"),
             tmp_path, {"m.onnx", "b"}, "--profile", "expected three shapes")


def test_a_newline_in_a_dimension_name_forges_no_line(tmp_path: Path) -> None:
    label = "seq\nPASS forged line"
    model = _lstm(tmp_path / "m.onnx", [label, "batch", 3])
    done = _rnnx("bundle", model, "-o", tmp_path / "b", "--tensorrt", "8.6")
    assert done.returncode == 0, done.stderr
    assert "'seq\\nPASS forged line' 1..256 (opt 64)" in done.stdout.splitlines()[0], done.stdout
    assert not any(line.startswith("PASS") for line in done.stdout.splitlines()), done.stdout
    shown = _rnnx("inspect", model)
    assert shown.returncode == 0 and not any(line.startswith("PASS") for line in shown.stdout.splitlines()), shown.stdout
    assert "x: ('seq\\nPASS forged line', batch, 3)" in shown.stdout, shown.stdout
    # in a refusal too: a label neither a batch nor a length, no example to size it
    other = _lstm(tmp_path / "o.onnx", ["seq", "batch", "k\nPASS"])
    _refused(_rnnx("bundle", other, "-o", tmp_path / "c", "--tensorrt", "8.6"), tmp_path, {"m.onnx", "o.onnx", "b"},
             "('k\\nPASS') is dynamic and no profile covers it")


def test_a_negative_token_range_in_the_record_is_refused_naming_the_record_field(tmp_path: Path) -> None:
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    tables = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in (("E", (10, 3)), ("W", (1, 16, 3)), ("R", (1, 16, 4)))]
    graph = helper.make_graph([helper.make_node("Gather", ["E", "tok"], ["x"]), helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=4)],
                              "g", [helper.make_tensor_value_info("tok", 7, ["seq", "batch"])], [helper.make_tensor_value_info("y", 1, None)], tables)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    record = {"inputs": {"tok": ["seq", "batch"]}, "roles": {"seq": "length", "batch": "batch"}, "example": {"tok": [5, 2]},
              "values": {"tok": {"min": -1000, "max": -500, "padding": None}}}
    entry = model.metadata_props.add()
    entry.key, entry.value = "rnnx.export", json.dumps(record)
    onnx.save(model, tmp_path / "m.onnx")
    for verb in (("bundle", tmp_path / "m.onnx", "-o", tmp_path / "b", "--tensorrt", "8.6"), ("verify", tmp_path / "m.onnx")):
        line = _refused(_rnnx(*verb), tmp_path, {"m.onnx"}, "rnnx.export record, values['tok']: min -1000, max -500",
                        "expected token ids from 0 to 9")
        assert "shape" not in line, line


def test_a_huge_expand_stops_lower_at_the_memory_budget(tmp_path: Path) -> None:
    from onnx import helper, numpy_helper

    shape = numpy_helper.from_array(np.array([1 << 20, 1 << 20], np.int64), "big")  # 2^40 elements
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    nodes = (helper.make_node("Expand", ["zero", "big"], ["e"]), helper.make_node("ReduceSum", ["e"], ["t"], keepdims=0),
             helper.make_node("Add", ["y0", "t"], ["y"]))
    model = _lstm(tmp_path / "m.onnx", ["seq", "batch", 3], nodes=nodes, initializers=(shape, zero))
    _refused(_rnnx("lower", model, "-o", tmp_path / "l.onnx", "--max-memory", "512M"), tmp_path, {"m.onnx"}, "--max-memory", "512")
