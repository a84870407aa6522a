"""The validation notebooks run top to bottom on a CPU machine (GPU cells skip themselves)."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("torch")

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_three_notebooks() -> None:
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_keeps_its_plots(path: Path, tmp_path: Path) -> None:
    work = tmp_path / "notebooks"
    work.mkdir()
    shutil.copy(path, work / path.name)
    (tmp_path / "rnnx").symlink_to(Path(__file__).parents[1] / "rnnx")  # the notebooks import from ..
    notebook = nbformat.read(work / path.name, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    committed = nbformat.read(path, as_version=4)
    committed_images = sum("image/png" in o.get("data", {}) for c in committed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    fresh_images = sum("image/png" in o.get("data", {}) for o in outputs)
    if path.name.startswith("03") and importlib.util.find_spec("tensorrt") is not None:
        assert fresh_images >= committed_images  # TensorRT's cell redraws the plot with the engines' curves
    else:
        assert committed_images == fresh_images  # the committed notebook keeps what a fresh run draws
    assert fresh_images >= 1  # every notebook draws at least one plot on a CPU machine
    if path.name.startswith("03"):
        check_engine_notebook_error_plot(notebook)


WORST_STEP = re.compile(r"^\s+(native LSTM nodes|lowered \(TensorRT form\))\s+worst step (\S+) \(step (\d+)\)", re.MULTILINE)


def check_engine_notebook_error_plot(notebook: nbformat.NotebookNode) -> None:
    """Notebook 03 draws the lowered model's error per step, in the cell that prints it, and that error is float32's."""
    from rnnx.parity import TOLERANCES

    cells = [c for c in notebook.cells if c.cell_type == "code" and "per-step max |error| of Y" in _text(c)]
    assert len(cells) == 1, "notebook 03 prints the per-step error of Y in one cell"
    cell = cells[0]
    assert any("image/png" in o.get("data", {}) for o in cell.outputs), "the per-step error cell draws its plot"
    assert "semilogy" in cell.source and "per_step" in cell.source
    worst = {name: (float(value), int(step)) for name, value, step in WORST_STEP.findall(_text(cell))}
    assert set(worst) == {"native LSTM nodes", "lowered (TensorRT form)"}
    atol = TOLERANCES["float32"][0]
    for name, (value, step) in worst.items():
        assert 0 <= value < atol, f"{name}: worst per-step error {value:g} is not below float32's atol {atol:g}"
        assert 0 <= step < 200
    assert "T=200, B=8" in _text(cell)


def _text(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
