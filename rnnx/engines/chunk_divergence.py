"""Where a streaming file's chunks part from its whole sequence: the operation that loses context.

A streaming file run chunk by chunk, each chunk's state outputs fed to the next, must give
what the same file gives on the whole sequence at once. When it does not, some operation keeps
context along time that no state carries (the previous frame made by concatenating zeros, a
functional convolution, a pad of its own). This module finds it by running the file both
ways with every intermediate value exposed as an output:

- a value's frames are joined along the one axis where the whole run's size is the chunks'
  sizes summed (the others equal); a value with no such axis (a pad's output, which holds
  the chunk plus its zeros; a shape) is not compared;
- from each graph output that differs, the walk goes back through the inputs that differ too,
  to a node whose own inputs do not: the operation where the chunks first part. A state
  carried correctly (a cumsum plus the sum before the chunk) does not lead there, though its
  raw cumsum differs, because the value after it agrees.

The node is named with what the torch exporter recorded on it (the aten operator, the module,
and the line of the user's code), where it recorded that.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

# Joined chunks against the whole run: the same arithmetic on the same frames in another
# grouping differs by rounding (1e-6 of the values' size in float32); a lost frame of
# context differs by the values' own size.
RELATIVE = {"float16": 2e-2, "bfloat16": 5e-2}
DEFAULT_RELATIVE = 1e-3
MAX_NODES = 20_000  # a larger graph is not diagnosed: every value of it is kept per chunk

_FLOATS = (1, 10, 11, 16)  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16


def first_divergence(proto: Any, feed: Mapping[str, np.ndarray], time_axes: Mapping[str, int | None], pairs: Sequence[tuple[str, str]],
                     chunk: int, runner: Callable[[Any], Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]]) -> str | None:
    """A sentence naming the operation where the file's chunked run first parts from its
    whole run over ``feed`` (the states at zeros), or None where they agree or the file cannot
    be run with its values exposed. ``time_axes``: each streamed input's time axis (None: fed
    whole to every chunk); ``pairs``: (state input, state output); ``runner``: makes a session
    from a ModelProto."""
    import onnx

    if len(proto.graph.node) > MAX_NODES:
        return None
    exposed = onnx.ModelProto()
    exposed.CopyFrom(proto)
    try:
        inferred = onnx.shape_inference.infer_shapes(exposed)
    except Exception:  # noqa: BLE001  a graph shape inference cannot read is still run; its values' types come from elsewhere
        inferred = exposed
    elem = {v.name: v.type.tensor_type.elem_type for v in (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input)}
    present = {o.name for o in exposed.graph.output}
    for node in exposed.graph.node:
        for name in node.output:
            if name and name not in present and elem.get(name) in _FLOATS:
                exposed.graph.output.append(onnx.helper.make_tensor_value_info(name, elem[name], None))
                present.add(name)
    try:
        run = runner(exposed)
        whole = run(dict(feed))
        parts = _chunked(run, feed, time_axes, pairs, chunk)
    except Exception:  # noqa: BLE001  a diagnosis only: the check's own verdict stands without it
        return None
    states = {out for _, out in pairs}
    status = {name: _differs(whole[name], [p[name] for p in parts], name in states)
              for name in whole if name in parts[0]}
    origin = _origin(proto.graph, status)
    if origin is None:
        return None
    node, fed_by = origin
    text = f"the first operation whose chunked output differs from the whole sequence's is {_describe(node)}"
    if fed_by:
        text += ", reading the output of " + " and ".join(_describe(n, short=True) for n in fed_by)
    return text


def _chunked(run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]], feed: Mapping[str, np.ndarray], time_axes: Mapping[str, int | None],
             pairs: Sequence[tuple[str, str]], chunk: int) -> list[dict[str, np.ndarray]]:
    frames = next(feed[n].shape[a] for n, a in time_axes.items() if a is not None)
    carried = {i: feed[i] for i, _ in pairs}
    parts = []
    for start in range(0, frames, chunk):
        step = dict(feed)
        step.update(carried)
        for name, axis in time_axes.items():
            if axis is not None:
                step[name] = np.take(feed[name], np.arange(start, min(start + chunk, frames)), axis=axis)
        out = run(step)
        parts.append(out)
        carried = {i: out[o] for i, o in pairs}
    return parts


def _differs(whole: np.ndarray, parts: list[np.ndarray], state: bool) -> bool | None:
    """Whether the chunks' joined value differs from the whole run's; None where it cannot be
    joined (no axis holds the chunks' frames) or is not floating point."""
    whole = np.asarray(whole)
    if whole.dtype.kind != "f" or any(np.asarray(p).dtype != whole.dtype for p in parts):
        return None
    if state:  # a state output: as it stands after the last chunk
        joined = np.asarray(parts[-1])
    else:
        axis = _join_axis(whole.shape, [np.shape(p) for p in parts])
        if axis is None:
            return None
        joined = np.concatenate(parts, axis=axis)
    if joined.shape != whole.shape:
        return None
    if whole.size == 0:
        return False
    scale = 1.0 + float(np.nanmax(np.abs(whole))) if np.isfinite(whole).any() else 1.0
    relative = RELATIVE.get(whole.dtype.name, DEFAULT_RELATIVE)
    gap = np.abs(joined.astype(np.float64) - whole.astype(np.float64))
    gap = np.where(np.isnan(joined) & np.isnan(whole), 0.0, gap)
    return bool(np.nanmax(np.where(np.isnan(gap), np.inf, gap)) > relative * scale)


def _join_axis(whole: tuple[int, ...], parts: list[tuple[int, ...]]) -> int | None:
    if len(parts) < 2 or any(len(p) != len(whole) for p in parts):
        return None
    axes = [a for a in range(len(whole))
            if sum(p[a] for p in parts) == whole[a] and all(p[:a] + p[a + 1:] == whole[:a] + whole[a + 1:] for p in parts)]
    return axes[0] if len(axes) == 1 else None


def _origin(graph: Any, status: Mapping[str, bool | None]) -> tuple[Any, list[Any]] | None:
    """The earliest node reached back from a differing graph output through differing values
    whose inputs do not differ, and the nodes making its inputs that could not be compared."""
    producer = {name: (k, node) for k, node in enumerate(graph.node) for name in node.output if name}
    todo = [o.name for o in graph.output if status.get(o.name)]
    seen: set[str] = set()
    origins: dict[int, Any] = {}
    while todo:
        name = todo.pop()
        if name in seen or name not in producer:
            continue
        seen.add(name)
        k, node = producer[name]
        differing = [i for i in node.input if status.get(i)]
        if differing:
            todo += differing
        else:
            origins[k] = node
    if not origins:
        return None
    node = origins[min(origins)]
    unknown = [producer[i][1] for i in node.input if i in producer and status.get(i) is None and producer[i][1].op_type not in ("Constant", "Shape")]
    return node, unknown


def _describe(node: Any, short: bool = False) -> str:
    """``Concat 'node_cat' (aten.cat, in Delta's forward at model.py:12: prev = torch.cat(...))``,
    from the exporter's metadata where it left some."""
    meta = {p.key: p.value for p in node.metadata_props}
    name = f"{node.op_type} {node.name!r}" if node.name else node.op_type
    if short:
        return name
    found = re.search(r"target=torch\.ops\.([\w.]+?)(?:\.default|\.Tensor|\.int)?\]", meta.get("pkg.torch.onnx.fx_node", ""))
    details = [found.group(1)] if found else []
    hierarchy = re.findall(r"'([^']+)'", meta.get("pkg.torch.onnx.class_hierarchy", ""))
    if len(hierarchy) > 1:
        details.append(f"in {hierarchy[-2].rpartition('.')[2]}'s forward")
    elif not meta and node.name.startswith("/"):  # TorchScript's scoped names: /rnn/GRU is module rnn's
        scope = ".".join(node.name.split("/")[1:-1])
        details.append(f"in {scope}'s forward" if scope else "in the model's forward")
    line = _user_line(meta.get("pkg.torch.onnx.stack_trace", ""))
    if line:
        details.append(f"at {line}")
    return name + (f" ({', '.join(details)})" if details else "")


def _user_line(trace: str) -> str:
    """The innermost frame of the trace outside torch and rnnx: ``file.py:12: the code``."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)', trace)
    mine = [(f, n, code) for f, n, code in frames if not re.search(r"[/\\](torch|rnnx)[/\\]", f)]
    if not mine:
        return ""
    path, number, code = mine[-1]
    code = code.strip()
    return f"{path.rsplit('/', 1)[-1]}:{number}" + (f": {code[:80]}" if code else "")
