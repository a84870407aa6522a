"""The validation notebooks run top to bottom on a CPU machine (GPU cells skip themselves)."""

from __future__ import annotations

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
    assert committed_images == fresh_images  # the committed notebook keeps what a fresh run draws
    if path.name.startswith(("01", "02")):
        assert fresh_images >= 1
