"""Every reader against damaged files: truncated, bit-flipped, overwritten, emptied.

Each mutated file goes through the CLI's own entry point (in process, for speed): the run
may succeed (a flipped bit in a float is still a float) or fail, but a failure is exit
status 2 with one line on stderr, never an uncaught exception, and no output is left.
RNNX_FUZZ_FILES sets how many mutated files per run (default 260; `--slow` runs 5,000).
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights
from rnnx.cli import main
from rnnx.formats.onnx_build import build_stack_model

torch = pytest.importorskip("torch")


def _seed_files(folder: Path) -> list[tuple[Path, list[str]]]:
    """One valid file per reader, with the extra CLI arguments it needs."""
    lstm = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4,layers=2,bidirectional"), seed=1)
    gru = RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), seed=2)
    files = []
    for name, weights, fmt in (("canon.safetensors", gru, "rnnx"), ("torch.pt", lstm, "torch"), ("torch.safetensors", gru, "torch"),
                               ("blob.safetensors", lstm, "cudnn"), ("vector.npz", lstm, "jax")):
        rnnx.save(weights, folder / name, format=fmt)
        files.append((folder / name, ["--from", fmt]))
    onnx.save(build_stack_model(lstm), str(folder / "stack.onnx"))
    files.append((folder / "stack.onnx", ["--from", "onnx"]))
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    inp = keras.Input((None, 3))
    layer = keras.layers.GRU(4, return_sequences=True)
    model = keras.Model(inp, layer(inp))
    layer.set_weights(rnnx.to_format(gru, "keras"))  # seeded weights: every run mutates the same bytes
    model.save(folder / "model.keras")
    model.save_weights(folder / "model.weights.h5")
    files += [(folder / "model.keras", ["--from", "keras"]), (folder / "model.weights.h5", ["--from", "keras"])]
    return files


def _mutate(data: bytes, rng: np.random.Generator) -> bytes:
    kind = rng.integers(6)
    buf = bytearray(data)
    if kind == 0 or not buf:
        return bytes(buf[: rng.integers(0, max(len(buf), 1))])  # truncated
    if kind == 1:
        for _ in range(rng.integers(1, 9)):  # bit flips
            i = rng.integers(len(buf))
            buf[i] ^= 1 << int(rng.integers(8))
        return bytes(buf)
    if kind == 2:  # a run overwritten with random bytes
        start = rng.integers(len(buf))
        n = int(rng.integers(1, 64))
        buf[start : start + n] = rng.integers(0, 256, size=len(buf[start : start + n]), dtype=np.uint8).tobytes()
        return bytes(buf)
    if kind == 3:  # the header region scrambled
        n = min(len(buf), 64)
        buf[:n] = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
        return bytes(buf)
    if kind == 4:  # bytes duplicated (e.g. keys or tensors twice)
        start = rng.integers(len(buf))
        return bytes(buf[:start] + buf[start : start + 256] + buf[start:])
    return b""


@pytest.mark.parametrize("budget", [int(os.environ.get("RNNX_FUZZ_FILES", "260"))])
def test_mutated_files_fail_cleanly(tmp_path: Path, budget: int, request: pytest.FixtureRequest) -> None:
    if request.config.getoption("--slow"):
        budget = max(budget, 5000)
    seeds = _seed_files(tmp_path)
    rng = np.random.default_rng(int(os.environ.get("RNNX_FUZZ_SEED", "2026")))
    outcomes = {0: 0, 1: 0, 2: 0}
    for k in range(budget):
        source, extra = seeds[k % len(seeds)]
        mutated = tmp_path / f"m{k}{''.join(source.suffixes)}"
        mutated.write_bytes(_mutate(source.read_bytes(), rng))
        before = mutated.read_bytes()
        # convert for every file; and the verb that reads this kind of file besides
        out = tmp_path / f"out{k}.safetensors"
        second = (["inspect", str(mutated)], ["fuse", str(mutated), "-o", str(tmp_path / f"out{k}.onnx")], ["lower", str(mutated), "-o", str(tmp_path / f"out{k}.onnx")])[k % 3] \
            if source.suffix == ".onnx" else ["layout", str(mutated), *extra]
        for argv in (["convert", str(mutated), "-o", str(out), *extra], second):
            written = Path(argv[argv.index("-o") + 1]) if "-o" in argv else None
            stderr = io.StringIO()
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                code = main(argv)
            outcomes[code] = outcomes.get(code, 0) + 1
            assert mutated.read_bytes() == before, "the input was modified"
            if code == 2:
                lines = stderr.getvalue().strip().splitlines()
                assert len(lines) == 1 and "Traceback" not in stderr.getvalue(), (argv[0], source.name, stderr.getvalue())
                assert written is None or not written.exists(), "a failed run left an output"
            else:
                assert code in (0, 1), code
            assert not [p for p in tmp_path.glob(".out*")], "a temporary file was left behind"
        mutated.unlink()
        out.unlink(missing_ok=True)
        (tmp_path / f"out{k}.onnx").unlink(missing_ok=True)
    assert sum(outcomes.values()) == 2 * budget and outcomes[2] > budget // 4, outcomes
