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
    new_code_cell("""from rnnx.formats.onnx_build import build_stack_model, save_model
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
from rnnx.layouts import cudnn

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
    new_markdown_cell("# 03: build and check an engine\n\nThe TensorRT-oriented form (input product hoisted out of the loop, only the recurrent product inside) is made by `rnnx lower`'s function, checked in ONNX Runtime on the CPU, and its error drawn step by step against the float64 reference beside the native-node model's. Building and running the engine needs TensorRT and a GPU: the last cell says so and skips where they are missing, and the cell before it says what it would add."),
    new_code_cell(SETUP),
    new_code_cell("""import collections, importlib.util, onnx, rnnx
from rnnx import RNNSpec, RNNWeights, parity
from rnnx.check import stack
from rnnx.engines.onnxruntime import OnnxRuntimeRunner
from rnnx.formats.onnx_build import build_stack_model, save_model
from rnnx.pipelines.lower import lower_file

weights = RNNWeights.random(RNNSpec.parse("lstm,input=16,hidden=32,layers=2,bidirectional"), seed=1)
rnnx.save(weights, "stack.safetensors")
save_model(build_stack_model(weights), "stack.onnx")  # native LSTM nodes
result = lower_file("stack.onnx", "stack_lowered.onnx")  # what `rnnx lower stack.onnx -o stack_lowered.onnx` does
print(f"lowered {', '.join(result.lowered)}; checked against stack.onnx in ONNX Runtime before writing: {'passed' if result.check else 'FAILED'}")
lowered = onnx.load("stack_lowered.onnx")
print(collections.Counter(n.op_type for n in lowered.graph.node))
print(stack.check("onnxruntime (lowered)", OnnxRuntimeRunner(lowered), weights, shapes=[(1, 1), (50, 8), (200, 4)]))"""),
    new_markdown_cell("Error per time step, on one seeded batch of 200 steps. Like with like: each lowered node keeps the ONNX node's `Y` layout, (seq, dirs, batch, hidden), and the stack graph's `Transpose` + `Reshape` after it (still there after lowering) merge it to (seq, batch, dirs·hidden), the reference's layout; the cell shows that on the last node's `Y` and checks the shapes before subtracting."),
    new_code_cell("""import numpy as np, matplotlib.pyplot as plt

T, B = 200, 8
inputs = parity.random_inputs(weights, T, B, seed=7)  # X, h0, c0 in float32
want = parity.reference_outputs(weights, inputs)["Y"]  # float64, (seq, batch, dirs*hidden)

probe = onnx.load("stack_lowered.onnx")  # the lowered file, with the last node's own Y as an extra output
probe.graph.output.append(onnx.helper.make_tensor_value_info("l1_Y", onnx.TensorProto.FLOAT, None))
out = OnnxRuntimeRunner(probe)(inputs)
assert np.array_equal(out["l1_Y"].transpose(0, 2, 1, 3).reshape(T, B, -1), out["Y"])
print(f"last lowered node's Y {out['l1_Y'].shape} (seq, dirs, batch, hidden) -> graph's Y {out['Y'].shape}; reference Y {want.shape}")

per_step = {}  # max |error| of Y over batch and features, per time step
for name, path in [("native LSTM nodes", "stack.onnx"), ("lowered (TensorRT form)", "stack_lowered.onnx")]:
    got = OnnxRuntimeRunner(path)(inputs)["Y"]
    assert got.shape == want.shape, (name, got.shape, want.shape)
    per_step[name] = np.abs(got.astype(np.float64) - want).max(axis=(1, 2))

atol, rtol = parity.TOLERANCES["float32"]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.5), sharey=True)
for ax, name, color in zip(axes, ["native LSTM nodes", "lowered (TensorRT form)"], ["tab:blue", "tab:orange"]):
    ax.semilogy(np.arange(T), np.maximum(per_step[name], 1e-12), color=color, linewidth=0.9, label=f"{name}, ONNX Runtime fp32")
    ax.axhline(atol, color="grey", linestyle=":", linewidth=1, label=f"float32 tolerance (atol {atol:g})")
    ax.set_title(name); ax.set_xlabel("time step"); ax.legend(fontsize=8, loc="center right")
axes[0].set_ylabel("max |error| of Y vs float64")
axes[0].set_ylim(1e-9, 1e-3)
fig.suptitle(f"{weights.spec}: error along the sequence, T={T}, B={B}")
fig.tight_layout()
plt.show()
print(f"per-step max |error| of Y against the float64 reference, T={T}, B={B}:")
for name, err in per_step.items():
    print(f"  {name:<24} worst step {err.max():.3e} (step {int(err.argmax())}), mean {err.mean():.3e}")
print(f"  float32 tolerance        atol {atol:g}, rtol {rtol:g}")"""),
    new_markdown_cell("""**What a GPU with TensorRT adds (not run here: this machine has neither).** The engine is built from the same lowered file, `stack_lowered.onnx`, through TensorRT's ONNX parser, e.g. at TF32:

    rnnx build stack_lowered.onnx -o stack_tf32.engine --precision tf32 \\
        --profile "X:1x1x16,50x8x16,200x32x16;h0:4x1x32,4x8x32,4x32x32;c0:4x1x32,4x8x32,4x32x32"
    rnnx verify stack_tf32.engine --against stack.safetensors --seq-lens 1,17,200 --tol trt=1e-2,1e-2 --html tf32.html

(`rnnx build --from-weights stack.safetensors -o stack_tf32.engine --precision tf32` lowers the same way and uses that profile by default.) `rnnx verify` runs the engine on seeded inputs against the float64 reference and draws the same error-per-step curve in `tf32.html`; builds at `--precision fp16` (and fp32) give their own curves. The next cell does the same in the notebook: it builds fp32, TF32 and FP16 engines from `stack_lowered.onnx`, runs them on the inputs above and adds their curves to the right-hand plot. TF32 rounds the matrix products' inputs to a 10-bit mantissa and FP16 computes in half precision, so their curves are expected above the float32 line; what the plot shows is whether the error stays flat along the sequence or grows with it. `rnnx verify` holds every engine to the float32 tolerance unless `--tol trt=ATOL,RTOL` says otherwise."""),
    new_code_cell("""if importlib.util.find_spec("tensorrt") is None:
    print("skipped: TensorRT's Python bindings are not installed here (on Jetson they come with JetPack); no engine was built or run")
else:
    from IPython.display import display
    from rnnx.engines.tensorrt import BuildOptions, TensorRTRunner, build_engine, default_profile
    for precision, color in [("fp32", "tab:green"), ("tf32", "tab:red"), ("fp16", "tab:purple")]:
        meta = build_engine("stack_lowered.onnx", f"stack_{precision}.engine", BuildOptions(precision=precision, profiles=[default_profile(weights.spec)]))
        got = TensorRTRunner(f"stack_{precision}.engine")(inputs)["Y"]
        err = np.abs(got.astype(np.float64) - want).max(axis=(1, 2))
        per_step[f"TensorRT {precision}"] = err
        axes[1].semilogy(np.arange(T), np.maximum(err, 1e-12), color=color, linewidth=0.9, label=f"TensorRT {meta['tensorrt']} {precision}")
        print(f"  TensorRT {precision:<15} worst step {err.max():.3e} (step {int(err.argmax())}), mean {err.mean():.3e}")
    axes[1].set_ylim(1e-9, 1); axes[1].legend(fontsize=8, loc="upper left")
    display(fig)
    print(stack.check("tensorrt fp32", TensorRTRunner("stack_fp32.engine"), weights, shapes=[(1, 1), (50, 8), (200, 32)]))"""),
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
    leftovers = ["tagger.onnx", "tagger_rnn.onnx", "tagger_rnn.safetensors", "stack.safetensors", "stack.onnx", "stack_lowered.onnx"]
    leftovers += [f"stack_{p}.engine{suffix}" for p in ("fp32", "tf32", "fp16") for suffix in ("", ".json")]
    for leftover in leftovers:
        (NOTEBOOKS / leftover).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
