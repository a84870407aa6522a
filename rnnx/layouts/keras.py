"""Keras 3's LSTM / GRU / SimpleRNN weight arrays: gate order, bias forms, pack, unpack,
spec inference and what Keras cannot hold (pure numpy; files are :mod:`rnnx.formats.keras`).

Per layer ``get_weights()`` is [kernel (in, gates*units), recurrent_kernel (units,
gates*units), bias]: matrices transposed relative to ours, gates in :data:`GATE_ORDER`
along the last axis. Biases: LSTM and SimpleRNN one (gates*units,), read as the input bias
with a zero recurrent bias and written as their sum; GRU ``reset_after=True`` (2,
3*units) = [input; recurrent]; GRU ``reset_after=False`` one (3*units,) like LSTM's;
``use_bias=False`` no bias array at all. A Bidirectional layer lists its forward layer's
weights, then its backward layer's, and concatenates their outputs like our
``bidirectional``; a layer with ``go_backwards=True`` is our ``reverse`` (Keras returns its
sequence in the order it ran, last step first). Keras has no projection and no peepholes.

The natural object is the flat list of arrays, layer after layer, each layer's forward
then backward weights: ``model.get_weights()`` of a model made of exactly these layers,
and what ``model.set_weights`` takes. A list of one layer's 2 or 3 arrays describes itself
(except SimpleRNN's tanh or relu, and a bias-free GRU's reset mode), as a layer built with
Keras's default activations running forward; a longer list needs its spec. The arrays carry
no activations: a spec read with them may state the layer's (any Keras names, an LSTM's
candidate and output alike), but weights written as Keras arrays must use the defaults.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from rnnx.errors import RNNXError, refuse_spec
from rnnx.spec import CELLS_BY_GATE_COUNT, Activation, RNNSpec
from rnnx.weights import RNNWeights, split_gates, tensor_name

GATE_ORDER: dict[str, tuple[str, ...]] = {
    "lstm": ("i", "f", "g", "o"),  # Keras calls g "c"
    "gru": ("z", "r", "n"),  # Keras calls n "h"
    "rnn_tanh": ("h",),
    "rnn_relu": ("h",),
}


def layer_refusals(spec: RNNSpec) -> list[str]:
    """Why no Keras layer computes ``spec`` (empty when one does): what reading Keras's arrays
    under ``spec`` refuses. Activations Keras names are the layer's to state, not its arrays'."""
    reasons = []
    if spec.proj_size:
        reasons.append(f"Keras LSTMs have no projection (proj={spec.proj_size})")
    if spec.peepholes:
        reasons.append("Keras LSTMs have no peepholes")
    if spec.clip:
        reasons.append(f"Keras layers have no cell clip (clip={spec.clip:g})")
    if spec.input_forget:
        reasons.append("Keras LSTMs have no input_forget")
    if spec.cell == "lstm" and spec.activations and spec.activations[1] != spec.activations[2]:
        # LSTMCell applies its one ``activation`` to the candidate (ONNX g) and to the cell state (h) alike.
        g, h = spec.activations[1:]
        reasons.append(f"a Keras LSTM uses one activation for the candidate and the output (act=f/g/g), found {g} and {h}")
    return reasons


#: What rnnx tells a user whose Keras layer was read with direction reverse (go_backwards=True):
#: Keras returns the steps in the order it ran them, the canonical reverse direction in input order.
GO_BACKWARDS_NOTE = ("Keras returns a go_backwards layer's sequence last step first (return_sequences=True); the converted "
                     "direction reverse gives Y in input time order, as ONNX and torch do: flip the time axis to compare with Keras")


def unrecorded_note(what: str) -> str:
    """The note on a layer read from shapes alone: ``what`` (a .weights.h5 file, ...) does not say
    how the layer was built, so Keras's own defaults are taken."""
    return (f"{what} records no activations or go_backwards; read with Keras's defaults (tanh, sigmoid, forward); "
            "pass spec= if the layer was built otherwise")


def refusals(spec: RNNSpec) -> list[str]:
    """Why Keras's weight arrays cannot hold ``spec`` (empty when they can): what writing refuses."""
    reasons = layer_refusals(spec)
    if spec.activations:
        reasons.append(f"Keras weight arrays carry no activations ({spec.activation_text}): the layer that loads them sets its own")
    return reasons


def check_expressible(spec: RNNSpec) -> None:
    refuse_spec(spec, refusals(spec))


def check_readable(spec: RNNSpec) -> None:
    """Refuses a spec no Keras layer computes; activations are allowed: ``spec=`` states what the
    layer that held these arrays was built with."""
    refuse_spec(spec, layer_refusals(spec), "check spec=")


def arrays_per_cell(spec: RNNSpec) -> int:
    """Arrays per layer and direction: kernel, recurrent_kernel and, with a bias, the bias."""
    return 3 if spec.bias else 2


def _keras_bias(weights: RNNWeights, layer: int, direction: str) -> np.ndarray:
    spec, order = weights.spec, GATE_ORDER[weights.spec.cell]
    bw, br = weights.stacked(layer, direction, "bW", order), weights.stacked(layer, direction, "bR", order)
    if spec.cell == "gru" and spec.reset_after:
        return np.stack([bw, br])
    # One bias: the sum. A zero recurrent bias (what reading Keras gives) adds nothing, not even a sign flip of -0.0.
    return bw + br if np.any(br) else bw


def to_native(weights: RNNWeights) -> list[np.ndarray]:
    """Keras's arrays, layer after layer (forward then backward): ``model.set_weights`` order."""
    return list(native_arrays(weights))


def native_arrays(weights: RNNWeights) -> Iterator[np.ndarray]:
    """:func:`to_native`'s arrays one at a time, each made as it is asked for (a writer holds
    one, not the whole model). A kernel is (input, gates*hidden): the gates' matrices
    transposed side by side, made in one copy."""
    spec = weights.spec
    check_expressible(spec)
    order = GATE_ORDER[spec.cell]
    for layer, d in weights.cells():
        for kind in ("W", "R"):
            yield np.concatenate([weights[tensor_name(layer, d, kind, g)].T for g in order], axis=1)
        if spec.bias:
            yield _keras_bias(weights, layer, d)


def infer_spec(arrays: Sequence[np.ndarray], where: str = "Keras weights: ") -> RNNSpec:
    """One layer's spec from its 2 or 3 arrays, where the shapes settle it; ``where`` starts each message."""
    if len(arrays) not in (2, 3):
        raise RNNXError(
            f"{where}{len(arrays)} arrays cannot be read without a spec (one layer has 2 or 3: kernel, "
            "recurrent_kernel[, bias]); pass the spec (spec=SPEC) saying layers and direction"
        )
    kernel, recurrent = arrays[0], arrays[1]
    if kernel.ndim != 2 or recurrent.ndim != 2 or recurrent.shape[0] == 0 or recurrent.shape[1] % recurrent.shape[0]:
        raise RNNXError(
            f"{where}expected kernel (in, gates*units) and recurrent_kernel (units, gates*units), "
            f"found shapes {kernel.shape} and {recurrent.shape}"
        )
    units = recurrent.shape[0]
    n_gates = recurrent.shape[1] // units
    cells = CELLS_BY_GATE_COUNT.get(n_gates)
    if cells is None:
        raise RNNXError(f"{where}expected 4 (LSTM), 3 (GRU) or 1 (SimpleRNN) gates, found recurrent_kernel {recurrent.shape} ({n_gates} gates)")
    bias = len(arrays) == 3
    fields: dict[str, Any] = {"input_size": int(kernel.shape[0]), "hidden_size": int(units), "bias": bias}
    if len(cells) > 1:
        specs = " or ".join(f"spec={RNNSpec(cell, **fields)}" for cell in cells)
        raise RNNXError(f"{where}a SimpleRNN's weights do not say tanh or relu; pass {specs}")
    (cell,) = cells
    if cell == "gru" and not bias:
        after, before = RNNSpec("gru", **fields), RNNSpec("gru", reset_after=False, **fields)
        raise RNNXError(f"{where}a GRU without bias does not say its reset mode; pass spec={after} or spec={before}")
    reset_after = not (cell == "gru" and arrays[2].ndim == 1)
    return RNNSpec(cell, reset_after=reset_after, **fields)


def _as_arrays(arrays: Any) -> list[np.ndarray]:
    if isinstance(arrays, (np.ndarray, dict, str, bytes)) or not isinstance(arrays, Sequence):
        raise RNNXError(
            f"Keras weights: expected a list of arrays (layer.get_weights() or model.get_weights()), found {type(arrays).__name__}"
        )
    return [np.asarray(a) for a in arrays]


def from_native(arrays: Sequence[Any], spec: RNNSpec | None = None) -> RNNWeights:
    """Canonical weights from ``get_weights()`` arrays; ``spec`` may be left out for one layer's list."""
    arrays = _as_arrays(arrays)
    spec = spec or infer_spec(arrays)
    check_readable(spec)
    order = GATE_ORDER[spec.cell]
    per_cell = arrays_per_cell(spec)
    cells = [(layer, d) for layer in range(spec.num_layers) for d in spec.directions]
    if len(arrays) != per_cell * len(cells):
        raise RNNXError(
            f"Keras weights: expected {per_cell * len(cells)} arrays for spec {spec} "
            f"({per_cell} per layer and direction), found {len(arrays)}; check spec="
        )
    H, G = spec.hidden_size, len(order)
    tensors: dict[str, np.ndarray] = {}
    for k, (layer, d) in enumerate(cells):
        kernel, recurrent, *rest = arrays[k * per_cell : (k + 1) * per_cell]
        where = f"layer {layer} {d}"
        for name, array, shape in (("kernel", kernel, (spec.layer_input_size(layer), G * H)), ("recurrent_kernel", recurrent, (H, G * H))):
            if array.shape != shape:
                raise RNNXError(f"tensor {name} of {where}: expected shape {shape} for spec {spec}, found {array.shape}; check spec=")
        for kind, array in (("W", kernel.T), ("R", recurrent.T)):
            for gate, part in split_gates(array, order).items():
                tensors[tensor_name(layer, d, kind, gate)] = part
        if spec.bias:
            (bias,) = rest
            two_rows = spec.cell == "gru" and spec.reset_after
            expected = (2, G * H) if two_rows else (G * H,)
            if bias.shape != expected:
                hint = "; a (2, 3*units) bias is reset_after=True, a (3*units,) one reset_before" if spec.cell == "gru" else ""
                raise RNNXError(f"tensor bias of {where}: expected shape {expected} for spec {spec}, found {bias.shape}{hint}")
            bw, br = (bias[0], bias[1]) if two_rows else (bias, np.zeros_like(bias))
            for kind, array in (("bW", bw), ("bR", br)):
                for gate, part in split_gates(array, order).items():
                    tensors[tensor_name(layer, d, kind, gate)] = part
    return RNNWeights(spec, tensors)


# --- Keras 2's CuDNNLSTM and CuDNNGRU (legacy .h5 files) ---------------------------------
#
# These layers keep cuDNN's own parameter blocks in Keras-shaped arrays: kernel (in,
# gates*units), recurrent_kernel (units, gates*units) and one bias (2*gates*units,). tf_keras
# (layers/rnn/cudnn_lstm.py, cudnn_gru.py) slices each gate's columns out and hands
# ``reshape(slice, [-1])`` to cuDNN with no transpose, so a gate's (in, units) slice holds
# cuDNN's row-major (units, in) matrix as is. The bias is every gate's input bias, then every
# gate's recurrent bias. cuDNN's GRU applies the reset gate after the recurrent product.

#: Gate order along the CuDNN layers' columns and along each half of their bias: Keras's own
#: (tf_keras passes z, r, h to cuDNN as r, z, n by slicing).
CUDNN_LAYER_GATE_ORDER: dict[str, tuple[str, ...]] = {"lstm": ("i", "f", "g", "o"), "gru": ("z", "r", "n")}
#: The CuDNN layers' class names in Keras 2 and the cell each computes.
CUDNN_LAYER_CELLS: dict[str, str] = {"CuDNNLSTM": "lstm", "CuDNNGRU": "gru"}
#: The recurrent layer and cell classes of a model config and the cell family each computes.
LAYER_CLASSES = {"LSTM": "lstm", "GRU": "gru", "SimpleRNN": "rnn"}
CELL_CLASSES = {"LSTMCell": "lstm", "GRUCell": "gru", "SimpleRNNCell": "rnn"}
_LIKE_KEYS = ("activation", "recurrent_activation", "use_bias", "reset_after", "units")


def config_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def layer_name(cfg: dict[str, Any]) -> str | None:
    name = config_dict(cfg.get("config")).get("name", cfg.get("name"))
    return name if isinstance(name, str) else None


def layer_family(cfg: dict[str, Any], cudnn_layers: bool = False) -> tuple[str | None, dict[str, Any], dict[str, Any], bool]:
    """(cell family or None, the layer's config, its cell's config, whether a CuDNN layer) of one
    non-wrapper entry of a model config; CuDNNLSTM/CuDNNGRU count only with ``cudnn_layers`` (Keras 2)."""
    cls, conf = cfg.get("class_name"), config_dict(cfg.get("config"))
    if isinstance(cls, str) and cls in LAYER_CLASSES:
        return LAYER_CLASSES[cls], conf, conf, False
    if cudnn_layers and isinstance(cls, str) and cls in CUDNN_LAYER_CELLS:
        return CUDNN_LAYER_CELLS[cls], conf, conf, True
    if cls == "RNN":
        cell = config_dict(conf.get("cell"))
        cell_cls = cell.get("class_name")
        if isinstance(cell_cls, str) and cell_cls in CELL_CLASSES:
            return CELL_CLASSES[cell_cls], conf, config_dict(cell.get("config")), False
    return None, conf, conf, False


def bidirectional_family(conf: dict[str, Any], shown: str, cudnn_layers: bool = False) -> tuple[str | None, dict[str, Any], dict[str, Any], bool]:
    """:func:`layer_family` of a Bidirectional wrapper's config ``conf``, refused (naming it
    ``shown``) where its backward layer is not like its forward one or its forward one runs backwards."""
    fwd, bwd = config_dict(conf.get("layer")), config_dict(conf.get("backward_layer"))
    family, rnn_cfg, cell_cfg, cudnn = layer_family(fwd, cudnn_layers)
    if bwd:
        b_family, b_rnn, b_cell, b_cudnn = layer_family(bwd, cudnn_layers)
        if (b_family, b_cudnn) != (family, cudnn) or any(b_cell.get(k) != cell_cfg.get(k) for k in _LIKE_KEYS) or b_rnn.get("go_backwards", True) is not True:
            raise RNNXError(f"{shown}: its backward layer differs from its forward one; rnnx's bidirectional needs two like layers")
    if rnn_cfg.get("go_backwards"):
        raise RNNXError(f"{shown}: its forward layer runs backwards (go_backwards=True); this has no canonical form")
    return family, rnn_cfg, cell_cfg, cudnn


def cudnn_layer_spec(arrays: Sequence[np.ndarray], where: str = "") -> RNNSpec | None:
    """The spec of one direction's CuDNNLSTM/CuDNNGRU arrays when their 1-D bias of
    2*gates*units says so (Keras's own test: LSTM and GRU biases are half that, or 2-D); else None."""
    if len(arrays) != 3:
        return None
    kernel, recurrent, bias = (np.asarray(a) for a in arrays)
    if kernel.ndim != 2 or recurrent.ndim != 2 or bias.ndim != 1 or recurrent.shape[0] == 0:
        return None
    units = recurrent.shape[0]
    for cell, order in CUDNN_LAYER_GATE_ORDER.items():
        if recurrent.shape[1] == len(order) * units and bias.shape[0] == 2 * len(order) * units:
            return RNNSpec(cell, input_size=int(kernel.shape[0]), hidden_size=int(units))
    return None


def from_cudnn_layer(arrays: Sequence[Any], spec: RNNSpec) -> RNNWeights:
    """Canonical weights from a CuDNNLSTM/CuDNNGRU layer's arrays, forward then backward for a
    Bidirectional wrapper; ``spec`` is the layer's (lstm, or gru with reset_after)."""
    arrays = _as_arrays(arrays)
    if spec.cell not in CUDNN_LAYER_GATE_ORDER or not spec.bias or not spec.reset_after or spec.num_layers != 1 or not spec.uses_default_activations:
        raise RNNXError(f"Keras CuDNN layer: expected one layer of lstm, or gru with reset_after, with a bias and cuDNN's sigmoid/tanh, found spec {spec}")
    order = CUDNN_LAYER_GATE_ORDER[spec.cell]
    H, G, I = spec.hidden_size, len(order), spec.input_size
    if len(arrays) != 3 * spec.num_directions:
        raise RNNXError(f"Keras CuDNN layer: expected {3 * spec.num_directions} arrays for spec {spec}, found {len(arrays)}")
    tensors: dict[str, np.ndarray] = {}
    for k, d in enumerate(spec.directions):
        kernel, recurrent, bias = arrays[3 * k : 3 * k + 3]
        for name, array, shape in (("kernel", kernel, (I, G * H)), ("recurrent_kernel", recurrent, (H, G * H)), ("bias", bias, (2 * G * H,))):
            if array.shape != shape:
                raise RNNXError(f"tensor {name} of {d}: expected shape {shape} for a CuDNN layer of spec {spec}, found {array.shape}")
        for j, gate in enumerate(order):
            columns = slice(j * H, (j + 1) * H)
            tensors[tensor_name(0, d, "W", gate)] = kernel[:, columns].reshape(H, I)
            tensors[tensor_name(0, d, "R", gate)] = recurrent[:, columns].reshape(H, H)
        for half, kind in enumerate(("bW", "bR")):
            for gate, part in split_gates(bias[half * G * H : (half + 1) * G * H], order).items():
                tensors[tensor_name(0, d, kind, gate)] = part
    return RNNWeights(spec, tensors)


# --- activations by name -------------------------------------------------------------------

_SHARED_ACTIVATIONS = {
    "tanh": Activation("Tanh"),
    "sigmoid": Activation("Sigmoid"),
    "relu": Activation("Relu"),
    "linear": Activation("Affine", 1.0, 0.0),
    "softsign": Activation("Softsign"),
    "softplus": Activation("Softplus"),
    "elu": Activation("Elu", 1.0),
}
#: Keras's activation names as ONNX's recurrent activations, by the major version of the Keras
#: that wrote the file. ``hard_sigmoid`` is clip(0.2x+0.5, 0, 1) in Keras 1 and 2 (tf_keras
#: backend.hard_sigmoid) and clip(x/6+0.5, 0, 1) in Keras 3 (keras.activations.hard_sigmoid).
#: Names not listed (selu, swish, gelu, exponential, ...) have no ONNX recurrent form.
KERAS_ACTIVATIONS: dict[int, dict[str, Activation]] = {
    1: {**_SHARED_ACTIVATIONS, "hard_sigmoid": Activation("HardSigmoid", 0.2, 0.5)},
    2: {**_SHARED_ACTIVATIONS, "hard_sigmoid": Activation("HardSigmoid", 0.2, 0.5)},
    3: {**_SHARED_ACTIVATIONS, "hard_sigmoid": Activation("HardSigmoid", 1 / 6, 0.5)},
}


def layer_activations(family: str, activation: object, recurrent_activation: object, major: int) -> tuple[str, tuple[Activation, ...]]:
    """(canonical cell, ONNX activation list) of a Keras layer of ``family`` (lstm, gru or rnn)
    from its config's ``activation`` and ``recurrent_activation``, as Keras ``major`` defines
    them. Keras uses ``activation`` for both an LSTM's candidate (ONNX g) and its output (h)."""
    table = KERAS_ACTIVATIONS.get(major)
    if table is None:
        raise RNNXError(f"keras_version {major}: expected Keras 1, 2 or 3, whose activations rnnx knows; the file is damaged or from a newer Keras")

    def one(name: object, what: str) -> Activation:
        found = table.get(name) if isinstance(name, str) else None
        if found is None:
            raise RNNXError(f"{what} {name!r} has no ONNX recurrent form; expected one of {', '.join(table)}")
        return found

    if family == "rnn":
        return "rnn_tanh", (one(activation, "activation"),)  # the spec names Tanh and Relu by cell kind
    g, f = one(activation, "activation"), one(recurrent_activation, "recurrent_activation")
    return family, ((f, g, g) if family == "lstm" else (f, g))
