"""Write and execute the validation notebooks in notebooks/ (outputs, plots included, are kept).

Run: .venv/bin/python tools/make_notebooks.py   The test suite executes the same notebooks again.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

SETUP = """import os, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, os.path.abspath(".."))  # run from notebooks/ against the working tree
%matplotlib inline"""

EXPORT = [
    new_markdown_cell("# 01: export a PyTorch model and verify it\n\nA small tagger with a 2-layer bidirectional LSTM goes to ONNX with native `LSTM` nodes; the export checks itself at shapes unlike the example's, then `rnnx verify` holds the recurrent stack against the float64 reference and PyTorch at several lengths."),
    new_code_cell(SETUP),
    new_code_cell("""import torch, rnnx
from torch import nn
torch.manual_seed(0)

class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.front = nn.Linear(6, 8)
        self.rnn = nn.LSTM(8, 10, num_layers=2, bidirectional=True)
        self.head = nn.Linear(20, 3)
    def forward(self, x):
        y, _ = self.rnn(torch.relu(self.front(x)))
        return self.head(y)

model = Tagger().eval()
report = rnnx.export(model, (torch.randn(5, 3, 6),), "tagger.onnx")
print(report)"""),
    new_code_cell("""import onnx, collections
collections.Counter(n.op_type for n in onnx.load("tagger.onnx").graph.node)"""),
    new_markdown_cell("The recurrent stack alone, from the module's own weights, verified against the reference and torch:"),
    new_code_cell("""from rnnx.graphs.build import build_stack_model, save_model
from rnnx.verify import verify
from rnnx.verify.plots import error_over_time

weights = rnnx.from_format(model.rnn.state_dict(), "torch")
rnnx.save(weights, "tagger_rnn.safetensors")
save_model(build_stack_model(weights, sequence_lens=True), "tagger_rnn.onnx")
result = verify("tagger_rnn.safetensors", "tagger_rnn.onnx", backends=["ort", "torch", "cudnn"], seq_lens=(1, 17, 128), batches=(1, 8))
print("\\n".join(str(result).splitlines()[:6]), "...", "PASS" if result.passed else "FAIL", sep="\\n")
error_over_time(result);"""),
]

LAYOUT = [
    new_markdown_cell("# 02: cuDNN's weight layout, drawn\n\nWhich bytes of the packed blob belong to which gate, for a 2-layer bidirectional LSTM with projection; then the widely copied packing (transposed, gates i,f,o,g, each layer's biases after its matrices) shown wrong by numbers."),
    new_code_cell(SETUP),
    new_code_cell("""import numpy as np, matplotlib.pyplot as plt
import rnnx
from rnnx import RNNSpec, RNNWeights, reference
from rnnx.formats import cudnn

spec = RNNSpec.parse("lstm,input=8,hidden=16,layers=2,bidirectional,proj=4")
table = cudnn.offset_table(spec)
colors = {"i": "tab:blue", "f": "tab:orange", "g": "tab:green", "o": "tab:red", None: "tab:purple"}
fig, ax = plt.subplots(figsize=(11, 2.2))
for e in table:
    ax.barh(0 if e.kind in ("W", "R", "proj") else 1, e.size, left=e.offset, color=colors[e.gate], edgecolor="white", linewidth=0.3)
ax.set_yticks([0, 1], ["matrices", "biases"]); ax.set_xlabel("element offset in the blob")
ax.set_title(f"cuDNN weight space of {spec}: every pseudo-layer's matrices, then every bias")
ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()], labels=["i", "f", "g", "o", "projection"], ncol=5, fontsize=8)
plt.show()
print(f"{cudnn.blob_size(spec)} elements; first rows of the table:")
for e in table[:10]:
    print(f"  pseudo-layer {e.pseudo_layer} linLayerID {e.lin_layer_id} {e.kind:<4} gate {e.gate or '-'} offset {e.offset:>5} shape {e.shape}")"""),
    new_code_cell("""spec = RNNSpec.parse("lstm,input=4,hidden=5,layers=2")
weights = RNNWeights.random(spec, seed=0, scale=1.0)
right = rnnx.to_format(weights, "cudnn")

def forum_pack(w):
    parts = []
    for layer, d in w.cells():
        for kind in ("W", "R"):
            parts.append(np.concatenate([w.get(layer, d, kind, g) for g in "ifog"]).T.reshape(-1))
        for kind in ("bW", "bR"):
            parts.append(np.concatenate([w.get(layer, d, kind, g) for g in "ifog"]))
    return np.concatenate(parts)

wrong = forum_pack(weights)
x = np.random.default_rng(1).standard_normal((6, 2, 4))
y_right = reference.forward(weights, x).y
y_wrong = reference.forward(rnnx.from_format(wrong, "cudnn", spec=spec), x).y
print(f"same size: {wrong.size == right.size}; elements that differ: {np.mean(wrong != right):.0%}")
print(f"max output error if cuDNN were handed the forum blob: {np.abs(y_wrong - y_right).max():.3f}")"""),
]

ENGINE = [
    new_markdown_cell("# 03: build and check an engine\n\nThe TensorRT-oriented form (input product hoisted out of the loop, only the recurrent product inside) is checked in ONNX Runtime on the CPU; building and running the engine needs TensorRT and a GPU, and those cells say so and skip where they are missing."),
    new_code_cell(SETUP),
    new_code_cell("""import collections, importlib.util, onnx, rnnx
from rnnx import RNNSpec, RNNWeights, parity
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.graphs.build import build_stack_model
from rnnx.graphs.lower import lower_recurrences

weights = RNNWeights.random(RNNSpec.parse("lstm,input=16,hidden=32,layers=2,bidirectional"), seed=1)
model = build_stack_model(weights)
lower_recurrences(model)
print(collections.Counter(n.op_type for n in model.graph.node))
print(parity.check("onnxruntime (lowered)", OnnxRuntimeRunner(model), weights, shapes=[(1, 1), (50, 8), (200, 4)]))"""),
    new_code_cell("""if importlib.util.find_spec("tensorrt") is None:
    print("skipped: TensorRT's Python bindings are not installed here (on Jetson they come with JetPack)")
else:
    from rnnx.engines.tensorrt import BuildOptions, TensorRTRunner, build_from_weights
    meta = build_from_weights(weights, "stack.engine", BuildOptions(precision="fp32"))
    print(meta)
    print(parity.check("tensorrt", TensorRTRunner("stack.engine"), weights, shapes=[(1, 1), (50, 8), (200, 32)]))"""),
]

NOTEBOOK_CELLS = {"01_export_and_verify.ipynb": EXPORT, "02_cudnn_layout.ipynb": LAYOUT, "03_build_and_check_engine.ipynb": ENGINE}


def execute(path: Path, cwd: Path) -> nbformat.NotebookNode:
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return notebook


def main() -> None:
    for name, cells in NOTEBOOK_CELLS.items():
        path = NOTEBOOKS / name
        nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}), path)
        executed = execute(path, NOTEBOOKS)
        nbformat.write(executed, path)
        print(f"wrote and ran {path}")
    for leftover in ("tagger.onnx", "tagger_rnn.onnx", "tagger_rnn.safetensors", "stack.engine", "stack.engine.json", "stack.engine.onnx"):
        (NOTEBOOKS / leftover).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
