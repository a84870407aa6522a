"""The conditions of TensorRT's ONNX parser table (:mod:`rnnx.engines.tensorrt_parser_rules`):
for each row key, whether a node meets it, with a detail string saying how; and the node facts
they read (:class:`_Node`). :mod:`rnnx.engines.tensorrt_parser` walks a model and applies them."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any

from rnnx.engines.tensorrt_parser_rules import (
    _DEFAULT_ACTS,
    _DT,
    _DT_NAMES,
    _PARAMS_LOWER,
    _SLOT_NAMES,
    _SLOTS,
    _TRT_READS,
    DTYPES,
    IMPORTERS,
    TRT_ACTIVATIONS,
    TRT_DEFAULT_ALPHA,
    TRT_DEFAULT_BETA,
    V8,
    V10,
    ParserRule,
)
from rnnx.spec import ACTIVATION_PARAMETERS


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", float(x)))[0] if math.isfinite(float(x)) else float(x)


def _parser_values(op: str, names: list[str], given: list[float], param: str) -> list[float]:
    """activation_alpha (or _beta) as the parser fills it: LSTM by parseLSTMActivationValues, GRU/RNN by position."""
    default = TRT_DEFAULT_ALPHA if param == "alpha" else TRT_DEFAULT_BETA
    if op == "LSTM":
        out, used = [], 0
        for name in names:
            d = default[name]
            if d == 0.0 or used == len(given):
                out.append(d)
            else:
                out.append(given[used])
                used += 1
        return [_f32(v) for v in out]
    return [_f32(v) for v in given[: len(names)]] + [default[n] for n in names[len(given):]]


def _onnx_values(names: list[str], alphas: list[float], betas: list[float]) -> list[tuple[str, dict[str, float]]] | None:
    """Each function with the alpha and beta ONNX Runtime hands it (in order, to the functions that
    take one; a missing value: ONNX's default where rnnx.spec has one, else 0 as ONNX Runtime uses)."""
    given, used, out = {"alpha": alphas, "beta": betas}, {"alpha": 0, "beta": 0}, []
    for name in names:
        canonical = _PARAMS_LOWER.get(name.lower())
        if canonical is None:
            return None
        values = {}
        for param, default in ACTIVATION_PARAMETERS[canonical]:
            if used[param] < len(given[param]):
                values[param] = _f32(given[param][used[param]])
                used[param] += 1
            else:
                values[param] = _f32(default) if default is not None else 0.0
        out.append((canonical, values))
    return out


def _as_trt(name: str, values: dict[str, float]) -> dict[str, float]:
    """An ONNX function's parameters in TensorRT's form of the same function."""
    if name == "Softplus":
        return {"alpha": 1.0, "beta": 1.0}  # log(1+exp(x)) = 1*log(exp(1*x)+1)
    return values


@dataclass
class _Node:
    """One node with what the rules read: its attributes as Python values, and what is known of
    its graph (constants in scope, element types, opset, subgraph depth)."""

    op_type: str
    domain: str
    name: str
    graph: str
    attrs: dict[str, Any]
    inputs: list[str]
    outputs: list[str]
    opset: int = 0
    depth: int = 0
    types: dict[str, int] = field(default_factory=dict)
    proto: Any = None

    def given(self, i: int) -> bool:
        return len(self.inputs) > i and bool(self.inputs[i])


# --- the tests: each key's condition on a node (a detail string where it holds, else None) ----

def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def _floats(value: Any) -> list[float]:
    try:
        return [float(x) for x in (value if isinstance(value, (list, tuple)) else [value] if value is not None else [])]
    except (TypeError, ValueError):
        return []


def _recurrent(n: _Node, version: str) -> list[tuple[str, str]]:
    """(key, detail) for every recurrent rule that holds on an LSTM/GRU/RNN node."""
    op, a = n.op_type, n.attrs
    out: list[tuple[str, str]] = [("rnn.importer", "")]
    slots = _SLOTS[op]
    direction = str(a.get("direction", "forward"))
    dirs = 2 if direction == "bidirectional" else 1
    acts = a.get("activations")
    names = ([str(x) for x in acts] if isinstance(acts, (list, tuple)) else []) or _DEFAULT_ACTS[op] * dirs
    alphas, betas = _floats(a.get("activation_alpha")), _floats(a.get("activation_beta"))
    if op == "LSTM" and _int(a.get("input_forget")):
        out.append(("lstm.input_forget", f"input_forget={_int(a.get('input_forget'))}: coupled input and forget gates"))
    unknown = [x for x in names if x not in TRT_ACTIVATIONS]
    if unknown:
        out.append(("rnn.activation_name", f"activation {unknown[0]!r} is not among the parser's names "
                                           f"({', '.join(TRT_ACTIVATIONS)}; compared case-sensitively)"))
    if len(names) < slots * dirs:
        out.append(("rnn.activation_count", f"activations {names}: {slots * dirs} expected ({slots} per direction)"))
    if _int(a.get("layout")) == 1:
        out.append(("rnn.layout", "layout=1"))
    if n.given(4):
        out.append(("rnn.sequence_lens", "sequence_lens"))
    if a.get("clip") is not None:
        out.append(("lstm.clip" if op == "LSTM" else "rnn.clip", f"clip={a['clip']}"))
    if op == "LSTM" and n.given(7):
        out.append(("lstm.peepholes", "peepholes"))
    if op == "GRU":
        out.append(("gru.linear_before_reset", f"linear_before_reset={_int(a.get('linear_before_reset'))}"))
    x_type = n.types.get(n.inputs[0]) if n.inputs else None
    if x_type in (_DT["FLOAT16"], _DT["BFLOAT16"]) and (not n.given(5) or (op == "LSTM" and not n.given(6))):
        if op != "LSTM" or version != "10.15":
            out.append(("rnn.half_zero_state", f"X is {_DT_NAMES[x_type]} and an initial state is absent"))
    if unknown or len(names) < slots * dirs:
        return out
    trt_alpha = _parser_values(op, names, alphas, "alpha")
    trt_beta = _parser_values(op, names, betas, "beta")
    if dirs == 2:
        for label, values in (("activations", names), ("activation alphas", trt_alpha), ("activation betas", trt_beta)):
            forward, reverse = values[:slots], values[slots:2 * slots]
            if forward != reverse:
                shown = (lambda v: [round(x, 6) for x in v]) if label != "activations" else list
                out.append(("rnn.reverse_differs", f"reverse {label} {shown(reverse)} differ from forward {shown(forward)} "
                                                   f"(as the parser fills them)"))
                return out
    onnx = _onnx_values(names, alphas, betas)
    if onnx is None:
        return out
    key = "lstm.activation_params" if op == "LSTM" else "rnn.activation_params"
    for d in range(dirs):
        for i in range(slots):
            name, params = onnx[d * slots + i]
            wanted = _as_trt(name, params)
            applied = {"alpha": trt_alpha[i], "beta": trt_beta[i]}
            for param in _TRT_READS.get(names[i], ()):
                if not math.isclose(applied[param], wanted.get(param, 0.0), rel_tol=1e-6, abs_tol=1e-7):
                    got = ", ".join(f"{p}={applied[p]:g}" for p in _TRT_READS[names[i]])
                    want = ", ".join(f"{p}={wanted.get(p, 0.0):g}" for p in _TRT_READS[names[i]])
                    direction_text = ("forward", "reverse")[d] if dirs == 2 else direction
                    out.append((key, f"{direction_text} {_SLOT_NAMES[op][i]} function {names[i]} runs with {got}; ONNX's reading "
                                     f"of the node gives {want}"))
                    return out
    return out


def _loop_without_trip_count(n: _Node, constants: dict[str, Any]) -> bool:
    body = n.attrs.get("body")
    if body is None:
        return False
    state = max(len(n.inputs) - 2, 0)
    if len(body.output) <= 1 + state:
        return False
    if not n.given(0):
        return True
    value = constants.get(n.inputs[0])
    try:
        return value is not None and int(value.reshape(-1)[0]) >= 2**31 - 1
    except (TypeError, ValueError, IndexError, AttributeError):
        return False


def _applies(n: _Node, version: str, constants: dict[str, Any], keys: dict[str, ParserRule]) -> list[tuple[str, str]]:
    """(key, detail) of every rule whose condition holds on ``n`` (accepted rows included); ``keys``: the table's rows for its op."""
    op, a = n.op_type, n.attrs
    found: list[tuple[str, str]] = []
    if version == "11.x":
        return [("version.unavailable", "TensorRT 11.x: onnx-tensorrt's source was not available")]
    if n.depth > 24 and version in V10:
        found.append(("graph.nesting", f"nested {n.depth} subgraphs deep"))
    if op not in IMPORTERS[version]:
        where = f"{n.domain}::{op}" if n.domain not in ("", "ai.onnx") else op
        found.append(("op.no_importer", f"{where}: no importer named {op!r} in TensorRT {version}"))
        return found
    # element types the node reads or writes
    seen_types = {n.types[t] for t in list(n.inputs) + list(n.outputs) if t and t in n.types}
    if op == "Cast" and "to" in a:
        seen_types.add(_int(a["to"], -1))
    for t in sorted(seen_types):
        if t not in DTYPES[version]:
            found.append(("dtype.unsupported", f"a {_DT_NAMES.get(t, str(t))} tensor"))
        elif t == _DT["DOUBLE"]:
            found.append(("dtype.double", "a DOUBLE tensor"))
        elif t == _DT["INT64"] and version in V8:
            found.append(("dtype.int64", "an INT64 tensor, read as INT32"))
    if op in _SLOTS:
        found += _recurrent(n, version)
    elif op == "Scan":
        found.append(("scan.importer", ""))
        if n.opset == 8 and n.given(0):
            found.append(("scan.opset8_sequence_lens", "opset 8 with sequence_lens"))
    elif op == "Loop":
        found.append(("loop.importer", ""))
        if _loop_without_trip_count(n, constants):
            found.append(("loop.scan_output_length", "scan outputs, and no trip count"))
    elif op == "If":
        found.append(("if.importer", ""))
        then_g, else_g = a.get("then_branch"), a.get("else_branch")
        if then_g is not None and else_g is not None and len(then_g.output) != len(else_g.output):
            found.append(("if.output_count", f"then_branch has {len(then_g.output)} outputs, else_branch {len(else_g.output)}"))
    else:
        found.append(("op.importer", ""))
        if op in ("Add", "Sub", "Mul", "Div", "Less", "Greater") and any(n.types.get(i) == _DT["BOOL"] for i in n.inputs if i):
            found.append(("elementwise.bool", f"{op} on a BOOL input"))
        if op in ("MatMul", "Gemm"):
            ints = {_DT["INT32"]} | ({_DT["INT64"]} if version in V10 else set())
            checked = n.inputs[:2] if version == "8.2" else n.inputs[:1]
            if any(n.types.get(i) in ints for i in checked if i):
                found.append(("matmul.int", f"{op} on an integer input"))
        if op == "Constant" and any(k in a for k in ("sparse_value", "value_string", "value_strings")):
            found.append(("constant.value_kind", "a sparse or string value"))
        if op == "ConstantOfShape" and version != "8.2" and getattr(a.get("value"), "data_type", None) == _DT["UINT8"]:
            found.append(("constantofshape.uint8", "a UINT8 value"))
        if op == "Slice" and n.opset >= 10 and not 3 <= len(n.inputs) <= 5:
            found.append(("slice.inputs", f"{len(n.inputs)} inputs"))
    if not any(k in keys for k, _ in found if k not in ("dtype.unsupported", "dtype.double", "dtype.int64", "graph.nesting")):
        found.append(("op.not_in_table", f"{op}: its importer's conditions are not in this table"))
    return found
