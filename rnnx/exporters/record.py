"""What an exported file says about itself, and the names in it.

``metadata_props`` of every file ``rnnx export`` writes holds two JSON entries:

- ``rnnx.export``: each graph input's dimensions (a size, or the label of a dynamic
  dimension), what each label is (``batch``, ``length`` or ``other``), which inputs
  hold per-sequence lengths, and what values the example held (``values``: per integer
  input ``{"min", "max", "padding"}``, per float input that was never negative
  ``{"nonnegative": true, "unit": <all within [0, 1]>}``; see
  :mod:`rnnx.exporters.example_values`);
- ``rnnx.recurrences``: per recurrent module, its spec, its layout (batch-first or not),
  its ONNX nodes, and which graph inputs feed its X, initial states and sequence lengths
  and which graph outputs its Y and final states reach.

``rnnx inspect`` prints them and ``rnnx verify`` drives the file from them.

A third entry, ``rnnx.call``, says how the torch model was called: :mod:`rnnx.exporters.call_record`.
"""


from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from rnnx._version import __version__
from rnnx.exporters.call_record import CALL_KEY, only_graph_inputs
from rnnx.formats.onnx_metadata import EXPORT_KEY, RECURRENCES_KEY, read_metadata, set_metadata
from rnnx.formats.onnx_read import invented_label, value_dims
from rnnx.formats.onnx_scan import read_lowered
from rnnx.graphs import walk
from rnnx.graphs.index import all_graphs
from rnnx.layouts.onnx import INPUTS, NATIVE_OPS, NODE_OUTPUTS, PROJECTED_LSTM_INPUTS

# ONNX input/output positions of a native node (and of the projected-LSTM placeholder).
# The record names a node's tensors by ONNX's input names (part of the file's metadata, so fixed).
NODE_INPUTS = {name: INPUTS["LSTM"].index(name) for name in ("X", "sequence_lens", "initial_h", "initial_c")}
_WEIGHT_INPUTS = {PROJECTED_LSTM_INPUTS.index(key): key for key in ("W", "R", "B", "P", "proj")}
_LIFTED = re.compile(r"^(?P<module>.*?)\.?lifted_tensor_\d+$")


def rename_values(proto: Any, mapping: dict[str, str]) -> None:
    """Rename tensors everywhere they are named, subgraphs included."""
    if not mapping:
        return
    for graph in all_graphs(proto.graph):
        for node in graph.node:
            for names in (node.input, node.output):
                for i, name in enumerate(names):
                    if name in mapping:
                        names[i] = mapping[name]
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            if vi.name in mapping:
                vi.name = mapping[vi.name]
        for t in graph.initializer:
            if t.name in mapping:
                t.name = mapping[t.name]


def rename_dims(proto: Any, rename: Callable[[str], str]) -> None:
    g = proto.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_param"):
                text = tidy_dim(rename(dim.dim_param))
                if text.isdigit():  # a dimension torch specialised after tracing: a size, not a name
                    dim.dim_value = int(text)
                else:
                    dim.dim_param = text


def tidy_dim(text: str) -> str:
    """A derived dimension as a person writes it: torch prints ``(((seq - 1)//2)) + 1``;
    Python's own printer drops the parentheses precedence makes redundant, ``(seq - 1) // 2 + 1``.
    A name that does not read as an expression (or that it would change) stays as it is."""
    import ast

    if not any(op in text for op in "+-*/%()"):
        return text
    try:
        tidy = ast.unparse(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError, RecursionError):
        return text
    return tidy if tidy.replace(" ", "").replace("(", "").replace(")", "") == text.replace(" ", "").replace("(", "").replace(")", "") else text


def output_names(program: Any, bare: bool, count: int) -> list[str]:
    """Names from what forward returns: dict keys and namedtuple fields where it has them,
    ``output_<i>`` (nested: ``output_<i>_<j>``) otherwise; Y, h_n, c_n for a bare module."""
    import torch
    from torch.utils._pytree import tree_flatten_with_path, tree_unflatten

    if bare:
        return ["Y", "h_n", "c_n"][:count]
    spec = program.call_spec.out_spec
    placeholder = [torch.empty(0)] * spec.num_leaves if spec is not None else []
    try:
        paths = [p for p, v in tree_flatten_with_path(tree_unflatten(placeholder, spec))[0]] if spec is not None else []
    except Exception:  # an output structure pytree cannot rebuild: fall back to positions
        paths = []
    tensors = [n for n in program.graph.nodes if n.op == "output"]
    values = tensors[0].args[0] if tensors else []
    kept = [p for p, v in zip(paths, values) if v is not None and hasattr(v, "meta") and isinstance(v.meta.get("val"), torch.Tensor)]
    if len(kept) != count:
        return [f"output_{i}" for i in range(count)]
    names = []
    for path in kept:
        keys = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]
        if not keys:
            names.append("output")
        elif all(k.isdigit() for k in keys):
            names.append("output_" + "_".join(keys))
        else:
            names.append("_".join(keys))
    return names if len(set(names)) == len(names) else [f"output_{i}" for i in range(count)]


def name_weights(proto: Any) -> None:
    """Give the recurrences' weights readable names: ``<module>.l<k>_W`` per layer,
    ``<module>.W`` for a cell's (shared by its steps)."""
    graph = proto.graph
    initializers = {t.name for t in graph.initializer}
    users: dict[str, int] = {}
    nodes = [n for n in graph.node if n.op_type in NATIVE_OPS or n.op_type == "LSTMProjected"]
    for n in nodes:
        if len(n.input) > 1:
            users[n.input[1]] = users.get(n.input[1], 0) + 1
    mapping: dict[str, str] = {}
    layer_of: dict[str, int] = {}
    taken = set(initializers)
    for n in nodes:
        if len(n.input) < 2 or n.input[1] in mapping:
            continue
        m = _LIFTED.match(n.input[1])
        if m is None:
            continue
        module = m.group("module") or "rnn"
        cell = users.get(n.input[1], 0) > 1
        k = layer_of.setdefault(module, 0)
        layer_of[module] = k + (0 if cell else 1)
        for pos, key in _WEIGHT_INPUTS.items():
            if pos < len(n.input) and n.input[pos] in initializers and _LIFTED.match(n.input[pos]) and n.input[pos] not in mapping:
                new = f"{module}.{key}" if cell else f"{module}.l{k}_{key}"
                if new not in taken:
                    mapping[n.input[pos]] = new
                    taken.add(new)
    rename_values(proto, mapping)


def drop_unused_initializers(proto: Any) -> None:
    used = {o.name for o in proto.graph.output}
    for graph in all_graphs(proto.graph):
        for node in graph.node:
            used.update(node.input)
    keep = [t for t in proto.graph.initializer if t.name in used]
    if len(keep) != len(proto.graph.initializer):
        del proto.graph.initializer[:]
        proto.graph.initializer.extend(keep)


def fix_dimensions(proto: Any, naming: Any, leaves: Any, labels: Any) -> dict[str, int]:
    """Make the dimensions called ``labels`` static at the example's size, in the graph's
    declared shapes and in ``naming``; returns label -> size."""
    sizes: dict[str, int] = {}
    for leaf in leaves:
        for d, v in enumerate(naming.input_dims.get(leaf.name, [])):
            if v in labels and v not in sizes:
                sizes[v] = int(leaf.value.shape[d])
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sizes)) + r")\b")

    def settle(text: str) -> str:
        text = pattern.sub(lambda m: str(sizes[m.group(0)]), text)
        try:
            import sympy

            value = sympy.sympify(text)
            return str(int(value)) if value.is_number else text
        except Exception:  # not an expression sympy reads: leave the name as it is
            return text

    rename_dims(proto, settle)
    for name, dims in naming.input_dims.items():
        naming.input_dims[name] = [sizes.get(v, v) if isinstance(v, str) else v for v in dims]
    for label in sizes:
        naming.roles.pop(label, None)
    update_record(proto, inputs=naming.input_dims, roles=naming.roles, outputs=_output_dims(proto))
    return sizes


def tie_dimensions(proto: Any, naming: Any, tied: dict[str, str]) -> None:
    """Rename each label in ``tied`` to the label it is tied to, in the graph's declared
    shapes, in ``naming`` and in the file's record (the two dimensions are then one)."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, tied)) + r")\b")
    rename_dims(proto, lambda text: pattern.sub(lambda m: tied[m.group(0)], text))
    for name, dims in naming.input_dims.items():
        naming.input_dims[name] = [pattern.sub(lambda m: tied[m.group(0)], v) if isinstance(v, str) else v for v in dims]
    for label in tied:
        naming.roles.pop(label, None)
    naming.symbol_labels = {k: tied.get(v, v) for k, v in naming.symbol_labels.items()}
    naming.lengths_inputs = {k: tied.get(v, v) for k, v in naming.lengths_inputs.items()}
    update_record(proto, inputs=naming.input_dims, roles=naming.roles, outputs=_output_dims(proto), lengths_inputs=naming.lengths_inputs)


def free_output_dims(proto: Any, cases: Sequence[Any]) -> list[str]:
    """Declare dynamic each output dimension that torch.onnx declared static but that ONNX
    Runtime returned at other sizes in the self-check's ``cases`` (a batch-1 trace can leave
    an output's batch declared 1 while the input's is dynamic: other runtimes warn on every
    run, or trust the declaration). Named after the input label whose size it took in every
    case, else ``<output>_dim<k>``. Returns what was freed."""
    ran = [c for c in cases if not c.skipped and not c.error and c.output_shapes]
    freed = []
    for out in proto.graph.output:
        for d, dim in enumerate(out.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                continue
            seen = [c.output_shapes[out.name][d] if d < len(c.output_shapes.get(out.name, [])) else None for c in ran]
            if not seen or all(size == dim.dim_value for size in seen):
                continue
            labels = sorted({label for c in ran for label in c.sizes})
            label = next((lab for lab in labels if all(c.sizes.get(lab) == size for c, size in zip(ran, seen))), invented_label(out.name, d))
            dim.ClearField("dim_value")
            dim.dim_param = label
            freed.append(f"{out.name}[{d}]={label}")
    if freed:
        update_record(proto, outputs=_output_dims(proto))
    return freed


def update_record(proto: Any, **fields: Any) -> None:
    """Set ``fields`` in the file's export record, where it has one."""
    export, _ = read_metadata(proto)
    if export is not None:
        export.update(fields)
        set_metadata(proto, {EXPORT_KEY: json.dumps(export)})


def _output_dims(proto: Any) -> dict[str, list[int | str]]:
    return {o.name: value_dims(o, unnamed=0) for o in proto.graph.output}


def free_label(naming: Any, wanted: str) -> str:
    labels = set(naming.roles)
    label, k = wanted, 2
    while label in labels:
        label, k = f"{wanted}_{k}", k + 1
    return label


_SCOPES_KEY = "pkg.torch.onnx.name_scopes"


def module_of_node_name(name: str, modules: Sequence[str]) -> str | None:
    """The one module of ``modules`` whose call scopes a TorchScript-exported node's name
    spells (``/encoder/rnn/LSTM_1``: scopes ``encoder``, ``rnn``), where just one matches: the
    scopes are the called modules' attribute names, so a container never called (a
    ModuleDict) is left out and the scopes are a subsequence of the module's dotted path,
    ending at its last part."""
    scopes = [p for p in name.split("/")[1:-1] if p]
    if not scopes:
        return None

    def spells(module: str) -> bool:
        parts = module.split(".")
        if parts[-1] != scopes[-1]:
            return False
        it = iter(parts)
        return all(any(part == scope for part in it) for scope in scopes)

    found = [m for m in modules if m and spells(m)]
    return found[0] if len(found) == 1 else None


def module_of(node: Any) -> str | None:
    return _module_of_scopes({p.key: p.value for p in node.metadata_props}.get(_SCOPES_KEY))


def _module_of_scopes(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        scopes = json.loads(value.replace("'", '"'))
    except json.JSONDecodeError:
        return None
    # Each scope is a module's full dotted name ('', 'rnn', 'rnn.0', 'rnn.0.rnn'), then the op.
    return str(scopes[-2]) if isinstance(scopes, list) and len(scopes) >= 2 else None


# A value made from another's shape alone (zero states sized like the input) is not fed by it.
_SHAPE_ONLY = ("Shape", "Size", "ConstantOfShape")


class _Flow:
    """Which graph inputs a value depends on and which graph outputs depend on it, over
    producer and consumer maps built once per graph."""

    def __init__(self, graph: Any) -> None:
        self.inputs = [i.name for i in graph.input]
        self.outputs = [o.name for o in graph.output]
        self.producer = walk.producers_of(graph)
        self.consumers = walk.consumers_of(graph)

    def reach(self, start: str, forward: bool) -> list[str]:
        if not start:
            return []
        if forward:  # every op passes a dependence on
            found = set(walk.forward(start, self.consumers, None, set(self.outputs)))
            return [n for n in self.outputs if n in found]
        ends = set(self.inputs)
        seen, stack, found = set(), [start], set()
        while stack:  # back through every input of each producer, except a mere shape's
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in ends:
                found.add(name)
            if name in self.producer and self.producer[name].op_type not in _SHAPE_ONLY:
                stack.extend(i for i in self.producer[name].input if i)
        return [n for n in self.inputs if n in found]


def write_metadata(proto: Any, naming: Any, recurrences: list[dict[str, Any]], example: dict[str, list[int]] | None = None,
                   call: dict[str, Any] | None = None, values: dict[str, Any] | None = None) -> None:
    """Record the recurrences and the axes in ``metadata_props`` (see the module docstring);
    ``example`` is each input's shape in the example it was exported from: the sizes a
    dynamic dimension that is neither a batch nor a length is known to take; ``call`` is how
    the model was called (:func:`~rnnx.exporters.call_record.call_record`, :func:`~rnnx.exporters.call_record.call_of_program`), written as
    ``rnnx.call`` when given, with each tensor that became no graph input unrecorded;
    ``values`` is each input's summary (:func:`rnnx.exporters.example_values.value_summary`)."""

    graph = proto.graph
    flow = _Flow(graph)
    # Each layer as (node name, its input tensors, its output tensors), native nodes and
    # lowered ones alike (a lowered layer's Scans keep the node's tensor names).
    by_module: dict[str, list[tuple[str, list[str], list[str]]]] = {}
    names = [str(r["module"]) for r in recurrences]
    for n in graph.node:
        if n.op_type in NATIVE_OPS:
            module = module_of(n)
            if module is None:
                module = module_of_node_name(n.name, names)
            if module is not None:
                by_module.setdefault(module, []).append((n.name, list(n.input), list(n.output)))
    for low in read_lowered(proto):
        module = _module_of_scopes((low.get("node_metadata") or {}).get(_SCOPES_KEY))
        if module is not None:
            ins = [low["inputs"].get(k, "") for k in ("X", "W", "R", "B", "seq_lens", "h0", "c0")]
            by_module.setdefault(module, []).append((str(low.get("node")), ins, [low["outputs"].get(k, "") for k in ("Y", "Y_h", "Y_c")]))
    records = []
    for r in recurrences:
        nodes = by_module.get(r["module"], [])
        layout = "steps" if r.get("cell") else "batch_first" if r.get("batch_first") else "seq_first"
        rec = {**r, "layout": layout, "nodes": [name for name, _, _ in nodes], "inputs": {}, "outputs": {}}
        for key, pos in NODE_INPUTS.items():
            reached = sorted({i for _, ins, _ in nodes if pos < len(ins) for i in flow.reach(ins[pos], False)})
            if key == "X" and nodes:
                reached = flow.reach(nodes[0][1][0], False)
            if reached:
                rec["inputs"][key] = reached
        for key, pos in NODE_OUTPUTS.items():
            sources = [nodes[-1]] if key == "Y" and nodes else nodes
            reached = sorted({o for _, _, outs in sources if pos < len(outs) for o in flow.reach(outs[pos], True)})
            if reached:
                rec["outputs"][key] = reached
        records.append(rec)
    export = {"rnnx_version": __version__, "inputs": naming.input_dims, "outputs": _output_dims(proto), "roles": naming.roles, "lengths_inputs": naming.lengths_inputs,
              "example": example or {}, "values": {k: v for k, v in (values or {}).items() if v is not None}}
    entries = {EXPORT_KEY: json.dumps(export), RECURRENCES_KEY: json.dumps(records)}
    if call is not None:
        initializers = {t.name for t in graph.initializer}
        fed = {i.name for i in graph.input if i.name not in initializers}
        entries[CALL_KEY] = json.dumps({**call, "args": [only_graph_inputs(node, fed) for node in call["args"]]})
    set_metadata(proto, entries)
