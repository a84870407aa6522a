"""Every verb that reads an ONNX file refuses the same hostile inputs, in one line, at once.

A FIFO once blocked bundle and verify for ever; a symbolic link to /dev/zero was "nothing"; a
192-byte tensor whose external data claims 8 GiB of a sparse file took bundle, lower and fuse
past 8 GB, where verify and inspect refused it in a second.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

VERBS = {
    "inspect": ["inspect", "{m}"],
    "verify": ["verify", "{m}"],
    "bundle": ["bundle", "{m}", "-o", "{out}/b", "--tensorrt", "8.6"],
    "lower": ["lower", "{m}", "--for", "tensorrt=10.3", "-o", "{out}/l.onnx"],
    "fuse": ["fuse", "{m}", "-o", "{out}/f.onnx"],
    "convert": ["convert", "{m}", "-o", "{out}/c.safetensors"],
}


def _lstm(path: Path, external: bool) -> None:
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in (("W", (1, 16, 3)), ("R", (1, 16, 4)))]
    graph = helper.make_graph([helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=4)], "g",
                              [helper.make_tensor_value_info("x", 1, ["T", 1, 3])], [helper.make_tensor_value_info("y", 1, None)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path, save_as_external_data=external, all_tensors_to_one_file=True, location=path.stem + ".data", size_threshold=0)


def _sparse_claim(folder: Path) -> Path:
    """W's external data claims 8 GiB, and the data file (sparse) is that long."""
    path = folder / "sparse.onnx"
    _lstm(path, external=True)
    model = onnx.load(path, load_external_data=False)
    for entry in next(t for t in model.graph.initializer if t.name == "W").external_data:
        if entry.key == "length":
            entry.value = str(8 << 30)
    onnx.save(model, path)
    with open(folder / "sparse.data", "r+b") as f:
        f.truncate((8 << 30) + 4096)
    return path


def _fifo(folder: Path) -> Path:
    path = folder / "pipe.onnx"
    os.mkfifo(path)
    return path


def _device(folder: Path) -> Path:
    path = folder / "zero.onnx"
    path.symlink_to("/dev/zero")
    return path


HOSTILE = {  # name -> (make, words the refusal must hold)
    "fifo": (_fifo, "a named pipe (FIFO)"),
    "link to /dev/zero": (_device, "a character device"),
    "external data claims 8 GiB": (_sparse_claim, "do not fit its shape"),
}


@pytest.mark.parametrize("verb", list(VERBS))
@pytest.mark.parametrize("hostile", list(HOSTILE))
def test_every_verb_refuses_the_hostile_corpus_in_one_line(tmp_path: Path, verb: str, hostile: str) -> None:
    make, words = HOSTILE[hostile]
    model = make(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(m=model, out=out) for a in VERBS[verb]]
    done = subprocess.run([sys.executable, "-m", "rnnx", *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (verb, hostile, done.returncode, done.stderr[-1500:])
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert not any(out.iterdir()) and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing written or staged
