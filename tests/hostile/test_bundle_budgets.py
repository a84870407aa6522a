"""``rnnx bundle`` holds a hostile graph to --max-memory and --time-limit, as verify does.

Its shape probe, golden runs and check once ran in-process, unbounded: a ConstantOfShape of
L^3 x 64 elements took 13 GB; a Loop that never ends ran past SIGTERM. Every run of the file now
happens in a child process held to the budgets (rnnx.engines.isolated), and a probe that passes
one stops the bundle in one line naming the flag.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _hostile(path: Path, nodes: list, initializers: list) -> None:
    """An LSTM over x (batch, time, 3), with ``nodes`` computing y from its output y0 and the length L."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in (("W", (1, 16, 3)), ("R", (1, 16, 4)))]
    core = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]), helper.make_node("LSTM", ["xt", "W", "R"], ["y0"], hidden_size=4),
            helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["L"])]
    consts = [numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    graph = helper.make_graph(core + nodes, "hostile", [helper.make_tensor_value_info("x", 1, ["batch", "time", 3])],
                              [helper.make_tensor_value_info("y", 1, None)], weights + consts + initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _claims_gigabytes(path: Path) -> None:
    """A ConstantOfShape of L^3 x 64 floats, summed and multiplied by 0."""
    from onnx import helper, numpy_helper

    _hostile(path, [helper.make_node("Mul", ["L", "L"], ["L2"]), helper.make_node("Mul", ["L2", "L"], ["L3"]),
                    helper.make_node("Mul", ["L3", "k"], ["n"]), helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
                    helper.make_node("ConstantOfShape", ["n1"], ["big"], value=helper.make_tensor("v", 1, [1], [1.0])),
                    helper.make_node("ReduceSum", ["big"], ["total"], keepdims=0), helper.make_node("Mul", ["total", "zero"], ["z"]),
                    helper.make_node("Add", ["y0", "z"], ["y"])],
             [numpy_helper.from_array(np.array(64, np.int64), "k"), numpy_helper.from_array(np.array([0], np.int64), "ax")])


def _never_ends(path: Path) -> None:
    """A Loop with no trip count whose condition stays true."""
    from onnx import helper, numpy_helper

    body = helper.make_graph([helper.make_node("Identity", ["c"], ["c2"]), helper.make_node("Identity", ["v"], ["v2"])], "body",
                             [helper.make_tensor_value_info("i", 7, []), helper.make_tensor_value_info("c", 9, []),
                              helper.make_tensor_value_info("v", 1, [])],
                             [helper.make_tensor_value_info("c2", 9, []), helper.make_tensor_value_info("v2", 1, [])])
    _hostile(path, [helper.make_node("Loop", ["", "true", "zero"], ["lv"], body=body), helper.make_node("Add", ["y0", "lv"], ["y"])],
             [numpy_helper.from_array(np.array(True), "true")])


def _bundle(model: Path, out: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "rnnx", "bundle", str(model), "-o", str(out), "--tensorrt", "8.6", *flags]


def test_a_graph_that_claims_gigabytes_is_stopped_at_the_memory_budget(tmp_path: Path) -> None:
    _claims_gigabytes(tmp_path / "big.onnx")
    start = time.monotonic()
    done = subprocess.run(_bundle(tmp_path / "big.onnx", tmp_path / "b", "--max-memory", "768M"), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--max-memory" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "asking the file whether it runs at" in done.stderr and time.monotonic() - start < 120
    assert not (tmp_path / "b").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_loop_that_never_ends_is_stopped_at_the_time_limit_and_by_sigterm(tmp_path: Path) -> None:
    _never_ends(tmp_path / "loop.onnx")
    start = time.monotonic()
    done = subprocess.run(_bundle(tmp_path / "loop.onnx", tmp_path / "b", "--time-limit", "4"), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--time-limit" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert time.monotonic() - start < 60
    child = subprocess.Popen(_bundle(tmp_path / "loop.onnx", tmp_path / "b"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(6)  # inside the Loop by now (the process starts, lowers, and asks its first shape in about 3 s)
    child.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    _, err = child.communicate(timeout=60)
    assert time.monotonic() - stopped < 2 and child.returncode == 128 + signal.SIGTERM, err
    assert "no output was left behind" in err and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
