"""The layouts as one layer: pure numpy, each format's refusals asked through the registry
and kept true to what its pack does, and one gate-count fact shared by the formats that
infer a cell from shapes."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import numpy as np
import pytest

import rnnx
from rnnx import RNNSpec, RNNWeights, RNNXError
from rnnx.formats import registry
from rnnx.layouts import keras as keras_layout, torch as torch_layout
from rnnx.spec import CELLS_BY_GATE_COUNT, GATES

LAYOUTS = sorted((Path(rnnx.__file__).parent / "layouts").glob("*.py"))
# What a layout may not touch: frameworks, file formats and rnnx's own I/O and upper layers.
FORBIDDEN_MODULES = {"torch", "keras", "jax", "jaxlib", "h5py", "safetensors", "onnx", "onnxruntime", "onnx_ir", "tensorrt",
                     "polygraphy", "cupy", "io", "zipfile", "pickle", "shutil", "tempfile", "subprocess"}
FORBIDDEN_CALLS = {"open", "load", "save", "savez", "fromfile", "tofile", "memmap"}


def _impurities(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            if name.split(".")[0] in FORBIDDEN_MODULES or (name.startswith("rnnx.") and name.split(".")[1] not in ("errors", "spec", "weights", "layouts", "tensor_pieces")):
                found.append(f"{path.name}:{node.lineno} imports {name}")
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in FORBIDDEN_CALLS:
                found.append(f"{path.name}:{node.lineno} calls {called}()")
    return found


@pytest.mark.parametrize("path", LAYOUTS, ids=lambda p: p.name)
def test_layouts_are_pure_numpy(path: Path) -> None:
    """No framework, no file I/O, nothing above the core: even inside functions."""
    assert not _impurities(path)


def test_the_purity_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy as np\nfrom rnnx.fileio import atomic_output\n\ndef f(p):\n    import h5py\n    return np.load(p)\n")
    assert len(_impurities(bad)) == 3


def _all_specs() -> list[RNNSpec]:
    """Every variant a spec can name, small."""
    specs = []
    for cell, direction, bias, proj, peepholes, reset_after in itertools.product(
        GATES, ("forward", "reverse", "bidirectional"), (True, False), (0, 2), (False, True), (True, False)
    ):
        try:
            specs.append(RNNSpec(cell, 3, 4, num_layers=2, direction=direction, bias=bias, proj_size=proj, peepholes=peepholes, reset_after=reset_after))
        except RNNXError:
            continue  # a variant that exists for another cell only
    return specs


SPECS = _all_specs()
OWN_LAYOUTS = ["rnnx", "torch", "cudnn", "jax", "keras"]


@pytest.mark.parametrize("name", OWN_LAYOUTS)
def test_a_format_refuses_exactly_what_its_refusals_say(name: str) -> None:
    """Asking a format whether it can hold a spec (what inspect and the docs do) agrees with
    packing it: no reason, and the pack succeeds; reasons, and the pack refuses naming them all."""
    if name == "torch":
        pytest.importorskip("torch")
    fmt = registry.get(name)
    held = 0
    for spec in SPECS:
        reasons = fmt.refusals(spec)
        weights = RNNWeights.random(spec, seed=1)
        if not reasons:
            fmt.to_native(weights)
            held += 1
            continue
        with pytest.raises(RNNXError) as caught:
            fmt.to_native(weights)
        message = str(caught.value)
        assert "\n" not in message and all(reason in message for reason in reasons), (str(spec), message)
    assert 0 < held <= len(SPECS), held


def test_the_registry_names_every_format_that_cannot_hold_a_spec() -> None:
    peepholes = RNNSpec.parse("lstm,input=3,hidden=4,peepholes")
    refused = registry.refusals(peepholes)
    assert {"torch", "cudnn", "jax", "keras"} <= set(refused) and "rnnx" not in refused
    assert refused["cudnn"] == registry.get("cudnn").refusals(peepholes)
    assert registry.refusals(RNNSpec.parse("lstm,input=3,hidden=4,bidirectional")) == {}
    # Flax has no multi-layer module: a stack is one RNN per layer, converted one at a time.
    assert set(registry.refusals(RNNSpec.parse("lstm,input=3,hidden=4,layers=2,bidirectional"))) == {"flax"}


def _torch_group(cell_rows: int, hidden: int) -> dict[str, np.ndarray]:
    return {"weight_ih_l0": np.zeros((cell_rows, 3), np.float32), "weight_hh_l0": np.zeros((cell_rows, hidden), np.float32)}


def _keras_arrays(cell_rows: int, hidden: int) -> list[np.ndarray]:
    return [np.zeros((3, cell_rows), np.float32), np.zeros((hidden, cell_rows), np.float32), np.zeros((2, cell_rows), np.float32)]


@pytest.mark.parametrize("count", sorted(CELLS_BY_GATE_COUNT))
def test_torch_and_keras_read_a_gate_count_alike(count: int) -> None:
    """One fact maps a gate count to cell kinds: torch and Keras shapes with the same count
    infer the same cell, or both refuse naming every kind it could be."""
    H = 4
    cells = CELLS_BY_GATE_COUNT[count]
    if len(cells) == 1:
        assert torch_layout.infer_spec(_torch_group(count * H, H), "g").cell == cells[0]
        assert keras_layout.infer_spec(_keras_arrays(count * H, H)).cell == cells[0]
        return
    arrays = _keras_arrays(count * H, H)[:2] + [np.zeros(count * H, np.float32)]
    for infer in (lambda: torch_layout.infer_spec(_torch_group(count * H, H), "g"), lambda: keras_layout.infer_spec(arrays)):
        with pytest.raises(RNNXError) as caught:
            infer()
        assert all(f"spec={cell}," in str(caught.value) for cell in cells), str(caught.value)


def test_a_gate_count_no_cell_has_is_refused_alike() -> None:
    H, count = 4, 2
    assert count not in CELLS_BY_GATE_COUNT
    with pytest.raises(RNNXError, match="found 2 in weight_hh_l0"):
        torch_layout.infer_spec(_torch_group(count * H, H), "g")
    with pytest.raises(RNNXError, match=r"\(2 gates\)"):
        keras_layout.infer_spec(_keras_arrays(count * H, H))
