"""``rnnx verify MODEL`` alone on files made by other tools (tests/fixtures/wild/, see its
manifest.json): tf2onnx names its dynamic axes ``unk__NNN``, which say nothing, so verify
reads each one's role from the graph's wiring to the recurrence. Each file must then run at
batch 1 and other batches and at several lengths; a file that breaks at batch 1 must fail; a
dimension whose role cannot be traced is still refused in one line.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

pytest.importorskip("onnxruntime")

from rnnx.engines.ort_int8 import int8_pair_sums_saturate  # noqa: E402
from rnnx.shapes.file_dims import read_file_dims  # noqa: E402
from rnnx.shapes.roles import BATCH, LENGTH  # noqa: E402
from tests.helpers import rnnx_in_process  # noqa: E402

WILD = Path(__file__).resolve().parents[1] / "fixtures" / "wild"
MANIFEST = json.loads((WILD / "manifest.json").read_text())
NATIVE = ("LSTM", "GRU", "RNN")
# tf2onnx files whose recurrence is a native node (the Loop-based ones have no layer to check on its own)
T2O_NATIVE = sorted(k for k, v in MANIFEST.items() if k.endswith(".onnx") and v.get("producer") == "tf2onnx"
                    and any(c in NATIVE for c in v.get("recurrence_carriers", [])))
QUANTIZED = sorted(k for k, v in MANIFEST.items() if k.endswith(".onnx") and "quantized_from" in v)


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    # in-process (rnnx.cli.main): what verify reads from the files is tested, not the process
    return rnnx_in_process("verify", *args)


def _roles_from_the_producer(name: str) -> dict[str, str]:
    """Each dynamic label of the file's inputs by what the producer itself fed it: the axis
    whose size follows the recorded batches (1, then 3) is the batch, the one that follows the
    recorded lengths (5, then 6) is the length."""
    batches = MANIFEST["_generated_by"]["batches"]  # {"b1": [batch, length], "b3": [...]}
    recorded = np.load(WILD / MANIFEST[name]["outputs"])
    proto = onnx.load(str(WILD / name))
    roles = {}
    for vi in proto.graph.input:
        dims = vi.type.tensor_type.shape.dim
        for d, dim in enumerate(dims):
            if not dim.dim_param:
                continue
            seen = [recorded[f"{vi.name}_{key}"].shape[d] for key in sorted(batches)]
            if seen == [b for b, _ in (batches[k] for k in sorted(batches))]:
                roles[dim.dim_param] = BATCH
            elif seen == [t for _, t in (batches[k] for k in sorted(batches))]:
                roles[dim.dim_param] = LENGTH
    return roles


def test_the_fixtures_are_there() -> None:
    assert len(T2O_NATIVE) >= 6 and len(QUANTIZED) == 2, (T2O_NATIVE, QUANTIZED)


@pytest.mark.parametrize("name", T2O_NATIVE + QUANTIZED)
def test_the_wiring_says_what_the_producer_fed(name: str) -> None:
    proto = onnx.load(str(WILD / name))
    roles = read_file_dims(proto).roles
    want = _roles_from_the_producer(name)
    assert want and set(want.values()) == {BATCH, LENGTH}, want
    assert roles == want


def test_inspect_shows_each_dimension_as_the_verbs_read_it(capsys: pytest.CaptureFixture[str]) -> None:
    """rnnx inspect says what verify, build and bundle will take each dimension for, and why."""
    from rnnx.cli import main
    from rnnx.shapes.file_dims import FROM_WIRING

    name = T2O_NATIVE[0]
    want = _roles_from_the_producer(name)
    assert main(["inspect", "--json", str(WILD / name)]) == 0
    dims = json.loads(capsys.readouterr().out)["dimensions"]
    assert {k: v["role"] for k, v in dims.items()} == want and {v["from"] for v in dims.values()} == {FROM_WIRING}
    assert main(["inspect", str(WILD / name)]) == 0
    text = capsys.readouterr().out
    assert all(f"  {label}: a {role} ({FROM_WIRING})" in text for label, role in want.items()), text


@pytest.mark.parametrize("name", T2O_NATIVE)
def test_a_tf2onnx_file_alone_runs_at_batch_1_and_several_lengths(name: str, tmp_path: Path) -> None:
    done = cli(WILD / name, "--json")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] and report["layers"] and all(la["status"] == "ok" for la in report["layers"]), report["layers"]
    batch = [k for k, v in report["roles"].items() if v == BATCH]
    length = [k for k, v in report["roles"].items() if v == LENGTH]
    ran = [c["sizes"] for c in report["cases"] if not c["skipped"] and not c["error"]]
    assert {c[batch[0]] for c in ran} >= {1, 8} and len({c[length[0]] for c in ran}) >= 2, ran
    assert any("graph's wiring" in n for n in report["notes"]), report["notes"]


@pytest.mark.parametrize("name", QUANTIZED)
def test_a_quantized_file_alone_gets_past_its_dimensions_to_a_verdict(name: str) -> None:
    done = cli(WILD / name, "--json")
    assert done.returncode in (0, 1), done.stderr  # never 2: its dimensions are read, the layer is judged
    report = json.loads(done.stdout)
    assert {c["sizes"][k] for c in report["cases"] for k, v in report["roles"].items() if v == BATCH} >= {1, 8}
    if int8_pair_sums_saturate():  # full-range int8 where the kernel saturates: the note says why ONNX Runtime may be far off
        assert any("saturation" in n for n in report["notes"]), report["notes"]
    else:
        assert not any("saturation" in n for n in report["notes"]), report["notes"]
    if done.returncode == 1:
        assert report["first_drift"] and done.stderr.strip().startswith("rnnx verify: verification failed"), done.stderr


def _squeeze_all(src: Path, dst: Path) -> None:
    """tf2onnx's Squeeze of the LSTM's direction axis made to squeeze every axis of size 1: the
    file still runs at batch 8, and breaks at batch 1 (a bug one shape would never show)."""
    proto = onnx.load(str(src))
    node = next(n for n in proto.graph.node if n.op_type == "Squeeze" and n.input[0].startswith("LSTM"))
    del node.input[1:]
    onnx.save(proto, str(dst))


def test_a_file_that_breaks_at_batch_1_fails(tmp_path: Path) -> None:
    _squeeze_all(WILD / "t2o_lstm.onnx", tmp_path / "bad.onnx")
    roles = read_file_dims(onnx.load(str(tmp_path / "bad.onnx"))).roles
    batch = next(k for k, v in roles.items() if v == BATCH)
    one = cli(tmp_path / "bad.onnx", "--dim", f"{batch}=8", "--seq-lens", "4")  # one shape: the bug hides
    assert one.returncode == 0, one.stdout + one.stderr
    done = cli(tmp_path / "bad.onnx", "--json")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr
    report = json.loads(done.stdout)
    failed = [c for c in report["cases"] if c["error"]]
    assert failed and all(c["sizes"][batch] == 1 for c in failed), report["cases"]
    assert all(c["sizes"][batch] != 1 for c in report["cases"] if not c["error"])


def test_a_dimension_whose_role_cannot_be_traced_is_refused(tmp_path: Path) -> None:
    """X reaches the LSTM through a Reshape (whose axes cannot be told): its unk__ labels stay
    unknown and the refusal asks for their sizes, in one line."""
    proto = onnx.load(str(WILD / "t2o_lstm.onnx"))
    lstm = next(n for n in proto.graph.node if n.op_type == "LSTM")
    proto.graph.initializer.append(helper.make_tensor("keep_shape", onnx.TensorProto.INT64, [3], [0, 0, -1]))
    proto.graph.node.insert(list(proto.graph.node).index(lstm), helper.make_node("Reshape", [lstm.input[0], "keep_shape"], ["x_reshaped"]))
    lstm.input[0] = "x_reshaped"
    onnx.save(proto, str(tmp_path / "reshaped.onnx"))
    done = cli(tmp_path / "reshaped.onnx")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "neither a batch nor a length by the record, its name or its wiring; give its size with --dim unk__" in done.stderr


def test_a_cudnn_blob_given_to_against_is_read_at_the_dtype_its_size_fits(tmp_path: Path) -> None:
    """verify's --dtype is what to compute in, so a headerless .bin's element type comes from
    its size: float32 and float64 blobs load; a 2-byte one (float16 or bfloat16, which no size
    tells apart) is refused with the conversion that settles it, and that conversion works."""
    import rnnx
    from rnnx import RNNSpec, RNNWeights

    spec = "lstm,input=3,hidden=5,bidirectional"
    weights = RNNWeights.random(RNNSpec.parse(spec), seed=zlib_seed("wild blob"))
    rnnx.save(weights, tmp_path / "w.safetensors")
    assert rnnx_in_process("convert", tmp_path / "w.safetensors", "-o", tmp_path / "m.onnx").returncode == 0
    for dtype in ("float32", "float64"):
        rnnx.save(weights, tmp_path / f"w_{dtype}.bin", dtype=dtype)
        done = cli(tmp_path / "m.onnx", "--against", tmp_path / f"w_{dtype}.bin", "--spec", spec, "--seq-lens", "1,6", "--batch", "1,3")
        assert done.returncode == 0, (dtype, done.stdout[-1500:], done.stderr)
    rnnx.save(weights, tmp_path / "w_f16.bin", dtype="float16")
    refused = cli(tmp_path / "m.onnx", "--against", tmp_path / "w_f16.bin", "--spec", spec, "--dtype", "fp16")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "cannot say whether they are float16 or bfloat16" in refused.stderr
    told = refused.stderr.split("(rnnx convert ", 1)[1].split(", or --dtype", 1)[0].split()
    told[told.index("-o") + 1] = str(tmp_path / "w16.safetensors")
    converted = rnnx_in_process("convert", *told)
    assert converted.returncode == 0, converted.stderr
    back = rnnx.load(tmp_path / "w16.safetensors")  # the blob's values, read as the float16 they are
    assert back.spec == weights.spec
    for name, value in weights.tensors.items():
        np.testing.assert_array_equal(np.asarray(back.tensors[name], np.float32), np.asarray(value, np.float16).astype(np.float32), err_msg=name)


def zlib_seed(text: str) -> int:
    import zlib

    return zlib.crc32(text.encode())
