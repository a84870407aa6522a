"""Malformed-but-plausible inputs, built by structure, each with the outcome it must have.

Every attack starts from a real file made by its real producer (torch.save, safetensors,
numpy, Keras 3, h5py, rnnx's ONNX builder) and breaks one thing a reader trusts: a header
that lies, storage outside the file, a bomb, an attribute of the wrong type, a path that
aliases an input, a graph that never ends. An attack returns the command to run and what
must hold afterwards; ``test_hostile.py`` runs them and checks the invariants every run
shares (no traceback, exit 0/1/2, inputs unchanged, nothing left behind, memory bounded).

``rng`` varies each attack's sizes and names, so ``--slow`` runs thousands of distinct files.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import rnnx
from rnnx import RNNSpec, RNNWeights

SECRET = b"rnnx-hostile-corpus-secret:" + bytes(range(256)) * 4  # a local file whose bytes must never reach an output


@dataclass
class Attack:
    argv: list[str]
    exits: tuple[int, ...] = (2,)  # the allowed exit statuses
    says: str = ""  # a fragment stderr must hold (for refusals)
    outputs: list[Path] = field(default_factory=list)  # files the run may create (only on exit 0)
    term_after: float | None = None  # send SIGTERM after this many seconds
    max_rss_mib: int = 1024
    check: Callable[[Path], str | None] | None = None  # extra check after the run: a failure message or None
    file_size_limit: int | None = None  # RLIMIT_FSIZE for the run: writes past it fail as on a full disk


ATTACKS: dict[str, Callable[[Path, np.random.Generator], Attack]] = {}


def attack(fn: Callable[[Path, np.random.Generator], Attack]) -> Callable[[Path, np.random.Generator], Attack]:
    ATTACKS[fn.__name__] = fn
    return fn


def _spec(rng: np.random.Generator, cell: str = "lstm") -> RNNSpec:
    return RNNSpec.parse(f"{cell},input={rng.integers(1, 6)},hidden={rng.integers(1, 7)}")


def _torch_state(folder: Path, rng: np.random.Generator, name: str = "ck.pt") -> tuple[Path, dict]:
    import torch

    torch.manual_seed(int(rng.integers(1 << 30)))
    module = torch.nn.LSTM(int(rng.integers(1, 6)), int(rng.integers(1, 7)))
    state = module.state_dict()
    path = folder / name
    torch.save(state, path)
    return path, state


def _safetensors_bytes(header: dict, data: bytes) -> bytes:
    head = json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + data


def _no_secret(out: Path) -> Callable[[Path], str | None]:
    def check(folder: Path) -> str | None:
        for p in folder.iterdir():
            if p.is_file() and p.name != "secret.bin" and SECRET[:64] in p.read_bytes():
                return f"the secret's bytes reached {p.name}"
        return None

    return check


# --- safetensors --------------------------------------------------------------------------

@attack
def safetensors_header_longer_than_file(folder: Path, rng: np.random.Generator) -> Attack:
    (folder / "w.safetensors").write_bytes(struct.pack("<Q", int(rng.integers(1 << 20, 1 << 62))) + b"{}")
    return Attack(["convert", "w.safetensors", "-o", "out.onnx"], says="damaged")


@attack
def safetensors_nested_json_header(folder: Path, rng: np.random.Generator) -> Attack:
    depth = int(rng.integers(2000, 200000))
    (folder / "w.safetensors").write_bytes(struct.pack("<Q", 2 * depth) + b"[" * depth + b"]" * depth)
    return Attack(["convert", "w.safetensors", "-o", "out.onnx"], says="damaged")


@attack
def safetensors_header_integer_too_long(folder: Path, rng: np.random.Generator) -> Attack:
    digits = "9" * int(rng.integers(4400, 20000))
    head = ('{"weight_ih_l0": {"dtype": "F32", "shape": [' + digits + '], "data_offsets": [0, 4]}}').encode()
    (folder / "w.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + b"\0" * 4)
    return Attack(["convert", "w.safetensors", "-o", "out.onnx", "--from", "torch"], says="damaged")


@attack
def safetensors_fields_of_the_wrong_kind(folder: Path, rng: np.random.Generator) -> Attack:
    entry = [{"dtype": ["F32"], "shape": [4, 1], "data_offsets": [0, 16]},
             {"dtype": "F32", "shape": [0, 10**20], "data_offsets": [0, 0]},
             {"dtype": "F32", "shape": [0, 1 << 62, 1 << 62], "data_offsets": [0, 0]},
             {"dtype": "F32", "shape": [1] * 100, "data_offsets": [0, 4]},
             {"dtype": "F32", "shape": "4x1", "data_offsets": [0, 16]},
             {"dtype": "F32", "shape": [4, 1], "data_offsets": {"a": 1}},
             {"dtype": "F32", "shape": [4, True], "data_offsets": [0, 16]},
             "F32"][int(rng.integers(8))]
    header = {"weight_ih_l0": entry, "weight_hh_l0": {"dtype": "F32", "shape": [4, 1], "data_offsets": [0, 16]}}
    (folder / "w.safetensors").write_bytes(_safetensors_bytes(header, b"\0" * 16))
    return Attack(["convert", "w.safetensors", "-o", "out.onnx", "--from", "torch"], says="weight_ih_l0")


@attack
def safetensors_offsets_outside_data(folder: Path, rng: np.random.Generator) -> Attack:
    n = int(rng.integers(1, 64))
    header = {"weight_ih_l0": {"dtype": "F32", "shape": [4 * n, n], "data_offsets": [0, 16 * n * n]}}
    (folder / "w.safetensors").write_bytes(_safetensors_bytes(header, b"\0" * 8))
    return Attack(["convert", "w.safetensors", "-o", "out.onnx", "--from", "torch"], says="damaged")


@attack
def safetensors_shape_overflows(folder: Path, rng: np.random.Generator) -> Attack:
    header = {"weight_ih_l0": {"dtype": "F32", "shape": [1 << 62, 1 << 62, 4], "data_offsets": [0, 0]}}
    (folder / "w.safetensors").write_bytes(_safetensors_bytes(header, b""))
    return Attack(["convert", "w.safetensors", "-o", "out.onnx", "--from", "torch"], says="damaged")


@attack
def safetensors_float8(folder: Path, rng: np.random.Generator) -> Attack:
    header = {"weight_ih_l0": {"dtype": str(rng.choice(["F8_E4M3", "F8_E5M2"])), "shape": [4, 2], "data_offsets": [0, 8]}}
    (folder / "w.safetensors").write_bytes(_safetensors_bytes(header, b"\0" * 8))
    return Attack(["convert", "w.safetensors", "-o", "out.onnx", "--from", "torch"], says="dequantize")


@attack
def safetensors_bfloat16_checkpoint(folder: Path, rng: np.random.Generator) -> Attack:
    """Not an attack: a bf16 checkpoint is common and must convert, with the check passing."""
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(int(rng.integers(1 << 30)))
    module = torch.nn.GRU(int(rng.integers(1, 6)), int(rng.integers(1, 7))).to(torch.bfloat16)
    save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(folder / "bf16.safetensors"))
    return Attack(["convert", "bf16.safetensors", "-o", "out.onnx"], exits=(0,), outputs=[folder / "out.onnx"])


@attack
def safetensors_metadata_spec_huge(folder: Path, rng: np.random.Generator) -> Attack:
    from safetensors.numpy import save_file

    rnnx.save(RNNWeights.random(_spec(rng), seed=int(rng.integers(1000))), folder / "blob.safetensors", format="cudnn")
    tensors, meta = rnnx.fileio.read_safetensors(folder / "blob.safetensors")
    layers = int(rng.choice([10**9, 5000, 2**40]))
    meta = {**meta, "spec": f"lstm,input=1,hidden=2,layers={layers}"}
    meta.pop("table")
    save_file(tensors, str(folder / "blob.safetensors"), metadata=meta)
    return Attack(["convert", "blob.safetensors", "-o", "out.onnx", "--from", "cudnn"], says="num_layers")


@attack
def cudnn_table_nested_json(folder: Path, rng: np.random.Generator) -> Attack:
    weights = RNNWeights.random(_spec(rng), seed=int(rng.integers(1000)))
    rnnx.save(weights, folder / "blob.safetensors", format="cudnn")
    tensors, meta = rnnx.fileio.read_safetensors(folder / "blob.safetensors")
    depth = 50000
    meta["table"] = "[" * depth + "]" * depth
    from safetensors.numpy import save_file

    save_file(tensors, str(folder / "blob.safetensors"), metadata=meta)
    return Attack(["convert", "blob.safetensors", "-o", "out.onnx", "--from", "cudnn"], says="damaged")


# --- torch .pt ------------------------------------------------------------------------------

def _zip_bomb(path: Path, names: list[str], inflated: int, npy: bool = False) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for name in names:
            with z.open(name, "w", force_zip64=True) as f:
                if npy:
                    head = io.BytesIO()
                    np.lib.format.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": (inflated // 4,)})
                    f.write(head.getvalue())
                chunk = b"\0" * (1 << 22)
                for start in range(0, inflated, len(chunk)):
                    f.write(chunk[: inflated - start])


@attack
def torch_zip_bomb(folder: Path, rng: np.random.Generator) -> Attack:
    _zip_bomb(folder / "bomb.pt", ["archive/data.pkl", "archive/data/0"], int(rng.integers(80, 120)) << 20)
    return Attack(["convert", "bomb.pt", "-o", "out.onnx", "--max-memory", "64M"], says="memory budget")


@attack
def torch_stored_member_lies(folder: Path, rng: np.random.Generator) -> Attack:
    path, _ = _torch_state(folder, rng)
    data = bytearray(path.read_bytes())
    # The central directory's uncompressed size of every member, set past the file: a stored
    # member whose sizes disagree.
    pos = 0
    while (pos := data.find(b"PK\x01\x02", pos)) >= 0:
        data[pos + 24 : pos + 28] = struct.pack("<I", 0x7FFFFFF0)
        pos += 4
    path.write_bytes(bytes(data))
    return Attack(["convert", "ck.pt", "-o", "out.onnx"], says="ck.pt")


@attack
def torch_pickle_runs_code(folder: Path, rng: np.random.Generator) -> Attack:
    marker = folder / "PWNED"

    class Payload:
        def __reduce__(self) -> tuple:
            return (os.system, (f"touch {marker}",))

    import torch

    torch.save({"weight_ih_l0": Payload()}, folder / "evil.pt")
    return Attack(["convert", "evil.pt", "-o", "out.onnx"], says="never runs code",
                  check=lambda f: "the pickle's payload ran" if marker.exists() else None)


@attack
def torch_dicts_nested_deep(folder: Path, rng: np.random.Generator) -> Attack:
    import sys

    import torch

    depth = int(rng.integers(300, 900))
    obj: dict = {"weight_ih_l0": torch.zeros(4, 2)}
    for _ in range(depth):
        obj = {"m": obj}
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(10000)
    try:
        torch.save(obj, folder / "deep.pt")
    finally:
        sys.setrecursionlimit(old)
    return Attack(["convert", "deep.pt", "-o", "out.onnx"], says="deep.pt")


@attack
def torch_one_dimensional_weights(folder: Path, rng: np.random.Generator) -> Attack:
    import torch

    n = int(rng.integers(1, 8))
    torch.save({"weight_ih_l0": torch.zeros(4 * n), "weight_hh_l0": torch.zeros(4 * n)}, folder / "flat.pt")
    return Attack(["convert", "flat.pt", "-o", "out.onnx"], says="matrices")


@attack
def torch_cell_keys_without_suffix(folder: Path, rng: np.random.Generator) -> Attack:
    """Not an attack: an LSTMCell's state_dict has unsuffixed keys and must convert."""
    import torch

    cell = torch.nn.LSTMCell(int(rng.integers(1, 6)), int(rng.integers(1, 7)))
    torch.save(cell.state_dict(), folder / "cell.pt")
    return Attack(["convert", "cell.pt", "-o", "out.onnx"], exits=(0,), outputs=[folder / "out.onnx"])


@attack
def torch_unusual_tensors(folder: Path, rng: np.random.Generator) -> Attack:
    import torch

    n = int(rng.integers(1, 5))
    kind = str(rng.choice(["sparse", "meta", "float8", "int", "complex", "nested"]))
    make = {
        "sparse": lambda: torch.zeros(4 * n, n).to_sparse(),
        "meta": lambda: torch.zeros(4 * n, n, device="meta"),
        "float8": lambda: torch.zeros(4 * n, n).to(torch.float8_e4m3fn),
        "int": lambda: torch.zeros(4 * n, n, dtype=torch.int32),
        "complex": lambda: torch.zeros(4 * n, n, dtype=torch.complex64),
        "nested": lambda: torch.nested.nested_tensor([torch.zeros(4 * n, n), torch.zeros(2, n)]),
    }[kind]
    torch.save({"weight_ih_l0": make(), "weight_hh_l0": torch.zeros(4 * n, n)}, folder / "odd.pt")
    return Attack(["convert", "odd.pt", "-o", "out.onnx"], says="weight_ih_l0")


@attack
def torch_expanded_view_bomb(folder: Path, rng: np.random.Generator) -> Attack:
    """A 0-stride view: a few bytes of storage on disk, gigabytes once made dense."""
    import torch

    n = int(rng.integers(6000, 20000))
    torch.save({"weight_ih_l0": torch.zeros(1, 1).expand(3 * n, n), "weight_hh_l0": torch.zeros(1, 1).expand(3 * n, n)}, folder / "view.pt")
    return Attack(["convert", "view.pt", "-o", "out.safetensors"], says="memory budget")


@attack
def torch_legacy_format_claims_huge_storage(folder: Path, rng: np.random.Generator) -> Attack:
    import torch

    torch.save({"weight_ih_l0": torch.zeros(8, 2), "weight_hh_l0": torch.zeros(8, 2)}, folder / "legacy.pt", _use_new_zipfile_serialization=False)
    data = bytearray((folder / "legacy.pt").read_bytes())
    # Legacy files give each storage's element count as a little-endian int64 before its bytes.
    for count in (16,):
        pos = data.find(struct.pack("<q", count))
        while pos >= 0:
            data[pos : pos + 8] = struct.pack("<q", int(rng.integers(1 << 33, 1 << 40)))
            pos = data.find(struct.pack("<q", count), pos + 8)
    (folder / "legacy.pt").write_bytes(bytes(data))
    return Attack(["convert", "legacy.pt", "-o", "out.onnx"], says="legacy.pt")


# --- npz --------------------------------------------------------------------------------------

@attack
def npz_zip_bomb(folder: Path, rng: np.random.Generator) -> Attack:
    _zip_bomb(folder / "bomb.npz", ["weights.npy"], int(rng.integers(80, 120)) << 20, npy=True)
    return Attack(["convert", "bomb.npz", "-o", "out.onnx", "--spec", "lstm,input=2,hidden=3", "--max-memory", "64M"], says="memory budget")


@attack
def npz_header_claims_huge_shape(folder: Path, rng: np.random.Generator) -> Attack:
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": (int(rng.integers(1 << 36, 1 << 45)),)})
    with zipfile.ZipFile(folder / "w.npz", "w") as z:
        z.writestr("weights.npy", head.getvalue() + b"\0" * 64)
    return Attack(["convert", "w.npz", "-o", "out.onnx", "--spec", "lstm,input=2,hidden=3"], says="w.npz")


@attack
def npz_object_array(folder: Path, rng: np.random.Generator) -> Attack:
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(folder / "w.npz", "w") as z:
        z.writestr("weights.npy", buf.getvalue())
    return Attack(["convert", "w.npz", "-o", "out.onnx", "--spec", "lstm,input=2,hidden=3"], says="w.npz")


# --- Keras --------------------------------------------------------------------------------------

def _keras_weights(folder: Path, rng: np.random.Generator, name: str = "m.weights.h5") -> Path:
    """A real Keras 3 .weights.h5, written by rnnx's writer in Keras's layout (no Keras import)."""
    rnnx.save(RNNWeights.random(_spec(rng), seed=int(rng.integers(1000))), folder / name, format="keras")
    return folder / name


def _replace_dataset(path: Path, make: Callable[[object, str, tuple, np.dtype], None]) -> None:
    import h5py

    with h5py.File(path, "r+") as f:
        names: list[str] = []
        f.visititems(lambda n, obj: names.append(n) if isinstance(obj, h5py.Dataset) else None)
        target = names[0]
        shape, dtype = f[target].shape, f[target].dtype
        del f[target]
        make(f, target, shape, dtype)


@attack
def keras_external_storage_leaks_a_file(folder: Path, rng: np.random.Generator) -> Attack:
    path = _keras_weights(folder, rng)
    (folder / "secret.bin").write_bytes(SECRET)
    _replace_dataset(path, lambda f, n, shape, dt: f.create_dataset(n, shape, dt, external=[(str(folder / "secret.bin"), 0, int(np.prod(shape)) * dt.itemsize)]))  # type: ignore[attr-defined]
    return Attack(["convert", path.name, "-o", "out.onnx"], says="m.weights.h5", check=_no_secret(folder / "out.onnx"))


@attack
def keras_virtual_dataset(folder: Path, rng: np.random.Generator) -> Attack:
    import h5py

    path = _keras_weights(folder, rng)
    source = str(rng.choice([str(path), str(folder / "missing.h5"), "."]))

    def virtual(f: object, name: str, shape: tuple, dtype: np.dtype) -> None:
        layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
        layout[...] = h5py.VirtualSource(source, name, shape=shape)
        f.create_virtual_dataset(name, layout, fillvalue=0)  # type: ignore[attr-defined]

    _replace_dataset(path, virtual)
    return Attack(["convert", path.name, "-o", "out.onnx"], says="m.weights.h5")


@attack
def keras_external_link(folder: Path, rng: np.random.Generator) -> Attack:
    import h5py

    path = _keras_weights(folder, rng)
    other = _keras_weights(folder, rng, "other.weights.h5")
    with h5py.File(path, "r+") as f:
        key = next(iter(f["layers"]))
        del f[f"layers/{key}"]
        f[f"layers/{key}"] = h5py.ExternalLink(str(other), f"/layers/{key}")
    return Attack(["convert", path.name, "-o", "out.onnx"], says="m.weights.h5")


@attack
def keras_chunked_dataset_claims_huge_shape(folder: Path, rng: np.random.Generator) -> Attack:
    path = _keras_weights(folder, rng)
    n = int(rng.choice([32768, 65536]))
    _replace_dataset(path, lambda f, name, shape, dt: f.create_dataset(name, (n, n), "f4", chunks=(64, 64), compression="gzip"))  # type: ignore[attr-defined]
    return Attack(["convert", path.name, "-o", "out.onnx", "--spec", "lstm,input=2,hidden=3"], says="m.weights.h5")


def _keras_archive(folder: Path, rng: np.random.Generator, config: object) -> Path:
    weights = _keras_weights(folder, rng)
    with zipfile.ZipFile(folder / "m.keras", "w") as z:
        z.writestr("config.json", json.dumps(config))
        z.writestr("metadata.json", json.dumps({"keras_version": "3.6.0"}))
        z.write(weights, "model.weights.h5")
    weights.unlink()
    return folder / "m.keras"


@attack
def keras_config_of_the_wrong_shape(folder: Path, rng: np.random.Generator) -> Attack:
    config = [
        [1, 2, 3],
        {"class_name": "Sequential", "config": {"layers": "lstm"}},
        {"class_name": "Sequential", "config": {"layers": [{"class_name": "LSTM", "config": {"units": "many", "name": 7}}]}},
        {"class_name": "Sequential", "config": {"layers": [{"class_name": "LSTM", "config": {"units": 0, "name": "lstm"}}]}},
        {"class_name": "Sequential", "config": {"layers": [{"class_name": "Bidirectional", "config": {"layer": [1], "name": "bidirectional"}}]}},
        {"class_name": "Sequential", "config": {"layers": [None, 3, "x"]}},
    ][int(rng.integers(6))]
    path = _keras_archive(folder, rng, config)
    # Read from the weights alone, or refused: never a crash.
    return Attack(["convert", path.name, "-o", "out.onnx"], exits=(0, 2), says="m.keras", outputs=[folder / "out.onnx"])


@attack
def keras_archive_bomb(folder: Path, rng: np.random.Generator) -> Attack:
    _zip_bomb(folder / "bomb.keras", ["config.json", "model.weights.h5"], int(rng.integers(80, 120)) << 20)
    return Attack(["convert", "bomb.keras", "-o", "out.onnx", "--max-memory", "64M"], says="memory budget")


@attack
def keras_zero_units(folder: Path, rng: np.random.Generator) -> Attack:
    import h5py

    path = _keras_weights(folder, rng)
    _replace_dataset(path, lambda f, name, shape, dt: f.create_dataset(name, (shape[0], 0), dt))  # type: ignore[attr-defined]
    del h5py
    return Attack(["convert", path.name, "-o", "out.onnx"], says="m.weights.h5")


# --- ONNX ----------------------------------------------------------------------------------------

def _onnx(folder: Path, rng: np.random.Generator, name: str = "m.onnx") -> tuple[Path, RNNWeights]:
    import onnx

    from rnnx.formats.onnx_build import build_stack_model

    weights = RNNWeights.random(_spec(rng, str(rng.choice(["lstm", "gru"]))), seed=int(rng.integers(1000)))
    onnx.save(build_stack_model(weights), str(folder / name))
    rnnx.save(weights, folder / "w.safetensors")
    return folder / name, weights


def _edit_node(path: Path, edit: Callable[[object], None]) -> None:
    import onnx

    model = onnx.load(str(path))
    node = next(n for n in model.graph.node if n.op_type in ("LSTM", "GRU", "RNN"))
    edit(node)
    onnx.save(model, str(path))


@attack
def onnx_attribute_of_the_wrong_type(folder: Path, rng: np.random.Generator) -> Attack:
    from onnx import helper

    path, _ = _onnx(folder, rng)
    which = int(rng.integers(3))

    def edit(node: object) -> None:
        attrs = node.attribute  # type: ignore[attr-defined]
        keep = [a for a in attrs if a.name not in ("hidden_size", "layout", "direction")]
        del attrs[:]
        attrs.extend(keep)
        attrs.append([helper.make_attribute("hidden_size", "abc"), helper.make_attribute("layout", "batch"),
                      helper.make_attribute("direction", 3)][which])

    _edit_node(path, edit)
    verb = str(rng.choice(["convert", "inspect", "lower"]))
    argv = {"convert": ["convert", "m.onnx", "-o", "out.safetensors"], "inspect": ["inspect", "m.onnx"], "lower": ["lower", "m.onnx", "-o", "out.onnx"]}[verb]
    # lower may leave the node alone, saying why, and write the graph unchanged
    return Attack(argv, says="m.onnx" if verb != "inspect" else "", exits=(0, 2) if verb == "lower" else (2,), outputs=[folder / "out.onnx"])


def _loop_model(folder: Path, rng: np.random.Generator) -> None:
    import onnx
    from onnx import TensorProto as T, helper as h, numpy_helper as nh

    path, _ = _onnx(folder, rng)
    model = onnx.load(str(path))
    body = h.make_graph(
        [h.make_node("Add", ["acc_in", "one"], ["acc_out"]), h.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []), h.make_tensor_value_info("acc_in", T.FLOAT, [])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("acc_out", T.FLOAT, [])],
        [nh.from_array(np.array(1, np.float32), "one")])
    model.graph.initializer.extend([nh.from_array(np.array(int(rng.integers(10**14, 10**15)), np.int64), "trips"),
                                    nh.from_array(np.array(True), "keep_going"), nh.from_array(np.array(0, np.float32), "acc0")])
    model.graph.node.append(h.make_node("Loop", ["trips", "keep_going", "acc0"], ["spin"], body=body))
    model.graph.output.append(h.make_tensor_value_info("spin", T.FLOAT, []))
    onnx.save(model, str(path))


@attack
def onnx_loop_that_never_ends(folder: Path, rng: np.random.Generator) -> Attack:
    _loop_model(folder, rng)
    verb = str(rng.choice(["lower", "verify"]))
    argv = ["lower", "m.onnx", "-o", "out.onnx"] if verb == "lower" else ["verify", "m.onnx", "--against", "w.safetensors", "--backends", "ort,reference"]
    return Attack(argv + ["--time-limit", "4"], says="without finishing")


@attack
def onnx_constant_of_shape_bomb(folder: Path, rng: np.random.Generator) -> Attack:
    import onnx
    from onnx import TensorProto as T, helper as h, numpy_helper as nh

    path, _ = _onnx(folder, rng)
    model = onnx.load(str(path))
    n = int(rng.integers(60000, 200000))
    model.graph.initializer.append(nh.from_array(np.array([n, n], np.int64), "huge"))
    model.graph.node.extend([h.make_node("ConstantOfShape", ["huge"], ["big"], value=nh.from_array(np.array([1.0], np.float32))),
                             h.make_node("ReduceSum", ["big"], ["total"], keepdims=0)])
    model.graph.output.append(h.make_tensor_value_info("total", T.FLOAT, []))
    onnx.save(model, str(path))
    return Attack(["lower", "m.onnx", "-o", "out.onnx"], says="memory", max_rss_mib=1300)


@attack
def onnx_external_data_path_tricks(folder: Path, rng: np.random.Generator) -> Attack:
    import onnx

    path, _ = _onnx(folder, rng)
    (folder / "secret.bin").write_bytes(SECRET)
    model = onnx.load(str(path))
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    trick = str(rng.choice(["nul", "long", "absolute", "parent", "symlink", "hardlink", "loop", "fifo"]))
    location = {"nul": "m\0.data", "long": "x" * 5000, "absolute": str(folder / "secret.bin"), "parent": "../secret.bin",
                "symlink": "link.data", "hardlink": "hard.data", "loop": "loop1", "fifo": "pipe.data"}[trick]
    sub = folder / "model"
    sub.mkdir()
    shutil.move(str(path), sub / "m.onnx")
    shutil.move(str(folder / "m.data"), sub / "m.data")
    if trick == "symlink":
        os.symlink(folder / "secret.bin", sub / "link.data")
    elif trick == "hardlink":
        os.link(folder / "secret.bin", sub / "hard.data")
    elif trick == "loop":
        os.symlink("loop2", sub / "loop1")
        os.symlink("loop1", sub / "loop2")
    elif trick == "fifo":
        os.mkfifo(sub / "pipe.data")
    model = onnx.load(str(sub / "m.onnx"), load_external_data=False)
    for init in model.graph.initializer:
        for entry in init.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, str(sub / "m.onnx"))
    verb = str(rng.choice(["convert", "inspect", "fuse"]))
    argv = {"convert": ["convert", "model/m.onnx", "-o", "out.safetensors"], "inspect": ["inspect", "model/m.onnx"],
            "fuse": ["fuse", "model/m.onnx", "-o", "out.onnx"]}[verb]
    return Attack(argv, says="m.onnx", check=_no_secret(folder / "out.safetensors"))


@attack
def onnx_opset_out_of_range(folder: Path, rng: np.random.Generator) -> Attack:
    import onnx

    path, _ = _onnx(folder, rng)
    model = onnx.load(str(path))
    model.opset_import[0].version = int(rng.choice([99999, 0, -5, 2**40]))
    onnx.save(model, str(path))
    return Attack(["lower", "m.onnx", "-o", "out.onnx"], says="m.onnx")


@attack
def onnx_opset_version_absurd(folder: Path, rng: np.random.Generator) -> Attack:
    import onnx

    path, _ = _onnx(folder, rng)
    model = onnx.load(str(path))
    model.opset_import[0].version = int(rng.choice([1 << 62, 99999, -1]))
    onnx.save(model, str(path))
    verb = str(rng.choice(["fuse", "lower", "inspect"]))
    argv = {"inspect": ["inspect", "m.onnx"], "fuse": ["fuse", "m.onnx", "-o", "out.onnx"], "lower": ["lower", "m.onnx", "-o", "out.onnx"]}[verb]
    return Attack(argv, says="opset")


@attack
def onnx_too_many_nodes_to_rewrite(folder: Path, rng: np.random.Generator) -> Attack:
    """A few MB of protobuf that would take a gigabyte as Python objects once copied."""
    import onnx
    from onnx import helper as h

    path, _ = _onnx(folder, rng)
    model = onnx.load(str(path))
    n = int(rng.integers(270_000, 320_000))
    model.graph.node.extend(h.make_node("Identity", [f"t{i}" if i else "X"], [f"t{i + 1}"]) for i in range(n))
    model.graph.output.append(h.make_tensor_value_info(f"t{n}", onnx.TensorProto.FLOAT, None))
    onnx.save(model, str(path))
    return Attack([str(rng.choice(["lower", "fuse"])), "m.onnx", "-o", "out.onnx"], says="memory budget")


@attack
def verify_with_thousands_of_cases(folder: Path, rng: np.random.Generator) -> Attack:
    _onnx(folder, rng)
    lengths = ",".join(["100"] * int(rng.integers(40, 3000)))
    return Attack(["verify", "m.onnx", "--against", "w.safetensors", "--seq-lens", lengths], says="at most")


@attack
def usage_errors(folder: Path, rng: np.random.Generator) -> Attack:
    argv = [["explode"], ["verify", "m.onnx", "--seed", "-1", "--against", "w"], ["convert"], ["layout", "--spec"], ["convert", "a", "-o", "b", "--opset", "x"]]
    return Attack(argv[int(rng.integers(len(argv)))], says="--help")


@attack
def output_onto_an_inputs_external_data(folder: Path, rng: np.random.Generator) -> Attack:
    import onnx

    path, _ = _onnx(folder, rng)
    target = str(rng.choice(["out.safetensors", "w.bin", "o.onnx.data"]))
    onnx.save(onnx.load(str(path)), str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=target, size_threshold=0)
    argv = {"out.safetensors": ["convert", "m.onnx", "-o", "out.safetensors", "--no-check"], "w.bin": ["lower", "m.onnx", "-o", "w.bin", "--no-check"],
            "o.onnx.data": ["convert", "m.onnx", "-o", "o.onnx", "--no-check"]}[target]
    return Attack(argv, says="would overwrite the input")


@attack
def onnx_graph_input_of_negative_size(folder: Path, rng: np.random.Generator) -> Attack:
    import onnx

    path, _ = _onnx(folder, rng)
    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -int(rng.integers(1, 9))
    onnx.save(model, str(path))
    return Attack(["lower", "m.onnx", "-o", "out.onnx"], says="negative")


@attack
def keras_long_double_weights(folder: Path, rng: np.random.Generator) -> Attack:
    path = _keras_weights(folder, rng)
    _replace_dataset(path, lambda f, name, shape, dt: f.create_dataset(name, data=np.zeros(shape, np.longdouble)))  # type: ignore[attr-defined]
    return Attack(["convert", path.name, "-o", "out.safetensors"], says="float16/32/64")


@attack
def output_path_too_long(folder: Path, rng: np.random.Generator) -> Attack:
    _torch_state(folder, rng)
    deep = "/".join(["d" * 250] * int(rng.integers(17, 30)))
    return Attack(["convert", "ck.pt", "-o", f"{deep}/x.onnx"], says="cannot be used")


@attack
def export_input_values_out_of_range(folder: Path, rng: np.random.Generator) -> Attack:
    (folder / "model.py").write_text("import torch\nmodel = torch.nn.GRU(3, 4)\n")
    values = ",".join([str(10 ** int(rng.integers(20, 40)))] * 3)
    return Attack(["export", "model.py:model", "--input", "x:5x3x3", "--input", f"lengths:values={values}:int64", "-o", "out.onnx"], says="does not fit")


@attack
def onnx_not_a_model(folder: Path, rng: np.random.Generator) -> Attack:
    (folder / "m.onnx").write_bytes(bytes(rng.integers(0, 256, int(rng.integers(0, 4096)), dtype=np.uint8)))
    verb = str(rng.choice(["inspect", "fuse", "lower", "convert"]))
    argv = {"inspect": ["inspect", "m.onnx"], "fuse": ["fuse", "m.onnx", "-o", "out.onnx"], "lower": ["lower", "m.onnx", "-o", "out.onnx"],
            "convert": ["convert", "m.onnx", "-o", "out.safetensors"]}[verb]
    return Attack(argv)


# --- outputs and arguments ---------------------------------------------------------------------------

@attack
def output_is_the_input(folder: Path, rng: np.random.Generator) -> Attack:
    _torch_state(folder, rng)
    how = str(rng.choice(["same", "symlink", "hardlink", "dotted"]))
    target = {"same": "ck.pt", "symlink": "alias.pt", "hardlink": "hard.pt", "dotted": "./sub/../ck.pt"}[how]
    (folder / "sub").mkdir()
    if how == "symlink":
        os.symlink("ck.pt", folder / "alias.pt")
    if how == "hardlink":
        os.link(folder / "ck.pt", folder / "hard.pt")
    return Attack(["convert", "ck.pt", "-o", target, "--to", "torch"], says="overwrite the input")


@attack
def verify_report_onto_an_input(folder: Path, rng: np.random.Generator) -> Attack:
    _onnx(folder, rng)
    flag, target = [("--report", "m.onnx"), ("--html", "w.safetensors"), ("--report", "w.safetensors")][int(rng.integers(3))]
    return Attack(["verify", "m.onnx", "--against", "w.safetensors", flag, target], says="would overwrite the input")


@attack
def output_is_special(folder: Path, rng: np.random.Generator) -> Attack:
    _torch_state(folder, rng)
    kind = str(rng.choice(["folder", "fifo", "socket"]))
    if kind == "folder":
        (folder / "out.onnx").mkdir()
    elif kind == "fifo":
        os.mkfifo(folder / "out.onnx")
    else:
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(folder / "out.onnx"))
        sock.close()
    return Attack(["convert", "ck.pt", "-o", "out.onnx"], check=lambda f: None if not (f / "out.onnx").is_file() else "the special file was replaced")


@attack
def output_name_too_long(folder: Path, rng: np.random.Generator) -> Attack:
    _torch_state(folder, rng)
    return Attack(["convert", "ck.pt", "-o", "x" * int(rng.integers(250, 400)) + ".onnx"], says="name")


@attack
def output_folder_missing(folder: Path, rng: np.random.Generator) -> Attack:
    _torch_state(folder, rng)
    return Attack(["convert", "ck.pt", "-o", "nowhere/out.onnx"], says="does not exist")


@attack
def disk_full_while_writing(folder: Path, rng: np.random.Generator) -> Attack:
    import torch

    torch.manual_seed(0)
    torch.save(torch.nn.GRU(64, 128, num_layers=2).state_dict(), folder / "ck.pt")
    out = str(rng.choice(["out.onnx", "out.pt", "out.safetensors", "out.npz", "out.weights.h5"]))
    to = {"out.npz": ["--to", "jax", "--spec", "lstm,input=64,hidden=128"]}.get(out, [])
    if out == "out.npz":  # jax holds LSTMs only: give it one
        torch.save(torch.nn.LSTM(64, 128).state_dict(), folder / "ck.pt")
    return Attack(["convert", "ck.pt", "-o", out, *to], says="writing failed", file_size_limit=int(rng.integers(1000, 100_000)))


@attack
def output_keeps_its_mode(folder: Path, rng: np.random.Generator) -> Attack:
    """Not an attack: replacing a private file keeps it private."""
    _torch_state(folder, rng)
    out = folder / "out.onnx"
    out.write_bytes(b"earlier, private")
    mode = int(rng.choice([0o600, 0o640, 0o400]))
    os.chmod(out, mode)
    return Attack(["convert", "ck.pt", "-o", "out.onnx"], exits=(0,), outputs=[out],
                  check=lambda f: None if (os.stat(out).st_mode & 0o777) == mode else f"mode {oct(os.stat(out).st_mode & 0o777)} != {oct(mode)}")


@attack
def existing_output_does_not_decide_format(folder: Path, rng: np.random.Generator) -> Attack:
    _torch_state(folder, rng)
    rnnx.save(RNNWeights.random(_spec(rng), seed=3), folder / "out.safetensors", format="cudnn")  # an earlier blob under the name
    os.chmod(folder / "out.safetensors", 0o644)

    def check(f: Path) -> str | None:
        meta = rnnx.fileio.safetensors_metadata(f / "out.safetensors")
        return None if meta.get("format") == "rnnx" else f"written as {meta.get('format')}, not rnnx as --help says for .safetensors"

    return Attack(["convert", "ck.pt", "-o", "out.safetensors"], exits=(0,), outputs=[folder / "out.safetensors"], check=check)


@attack
def export_over_its_own_inputs(folder: Path, rng: np.random.Generator) -> Attack:
    import torch

    (folder / "model.py").write_text("import torch\nmodel = torch.nn.GRU(3, 4)\nexample_inputs = (torch.zeros(5, 2, 3),)\n")
    torch.save(torch.nn.GRU(3, 4).state_dict(), folder / "ck.pt")
    target = str(rng.choice(["model.py", "ck.pt"]))
    return Attack(["export", "model.py:model", "--checkpoint", "ck.pt", "-o", target], says="would overwrite the input")


@attack
def huge_check_sizes(folder: Path, rng: np.random.Generator) -> Attack:
    _onnx(folder, rng)
    flag = str(rng.choice(["--seq-lens", "--batch"]))
    return Attack(["verify", "m.onnx", "--against", "w.safetensors", flag, str(int(rng.integers(10**6, 10**12)))], says="at most")


@attack
def huge_opset_argument(folder: Path, rng: np.random.Generator) -> Attack:
    _torch_state(folder, rng)
    return Attack(["convert", "ck.pt", "-o", "out.onnx", "--opset", str(int(rng.choice([99999, 0, -3, 2**63])))], says="opset")


@attack
def huge_spec_argument(folder: Path, rng: np.random.Generator) -> Attack:
    spec = str(rng.choice(["lstm,input=1,hidden=2,layers=1000000000", "gru,input=1,hidden=99999999999", "lstm,input=1,hidden=2,proj=1,layers=99999999"]))
    return Attack(["layout", "--spec", spec], says="spec" if "hidden=9" in spec else "num_layers")


@attack
def sigterm_during_a_conversion(folder: Path, rng: np.random.Generator) -> Attack:
    import torch

    torch.manual_seed(0)
    torch.save(torch.nn.LSTM(512, 512, num_layers=2, bidirectional=True).state_dict(), folder / "big.pt")
    return Attack(["convert", "big.pt", "-o", "out.onnx"], exits=(0, 143), outputs=[folder / "out.onnx"],
                  term_after=float(rng.uniform(1.0, 3.0)), max_rss_mib=2048)

