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

A third entry, ``rnnx.call`` (:data:`CALL_KEY`), says how the torch model was called when
the file was exported, so that ``rnnx verify --against code.py:NAME`` can call it the same
way with fresh inputs. It is JSON::

    {"version": 1,
     "parameters": ["input", "hidden"],          # or null
     "args": [{"tensor": "input"},
              {"tuple": [{"tensor": "hidden_0"}, {"tensor": "hidden_1"}]}]}

- ``version``: :data:`CALL_VERSION` (1). A reader refuses other versions (reads the entry
  as absent).
- ``parameters``: per positional argument, the forward parameter it binds to, as torch
  names them (``_get_forward_arg_names``): the parameter's name, or ``<name>_<k>`` for the
  k-th argument that ``*<name>`` collects (``forward(self, *tensors)``: ``tensors_0``,
  ``tensors_1``). null where the forward has no signature to read.
- ``args``: the positional arguments, each one node of the example's structure (torch's
  pytree: tuples, lists, dicts, namedtuples, nested), one JSON object with one of these keys:

  - ``{"tensor": NAME}``: a tensor leaf, fed from graph input NAME;
  - ``{"value": V}``: a leaf that is None, a bool, an int, a finite float or a str, as it was;
  - ``{"unrecorded": TYPE}``: any other leaf (an object, a non-finite float, a tensor that
    became no graph input), by its type's name; a reader takes it from the model's own
    example inputs, or refuses by name;
  - ``{"tuple": [NODE, ...]}``, ``{"list": [NODE, ...]}``;
  - ``{"dict": [[KEY, NODE], ...]}`` (KEY a str or an int; order kept; OrderedDict and
    defaultdict are written as dicts);
  - ``{"namedtuple": TYPENAME, "fields": [[FIELD, NODE], ...]}``.

Keyword arguments are not recorded (``rnnx export`` takes positional example inputs). A file
without the entry (older files, other producers) is called with one tensor per graph input,
or through the model's own ``example_inputs``. An example whose structure rnnx cannot write
down (a custom pytree node holding tensors) gets no entry.
"""

from __future__ import annotations

import collections
import inspect
import json
import keyword
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rnnx.layouts.onnx import INPUTS, NATIVE_OPS, NODE_OUTPUTS, PROJECTED_LSTM_INPUTS
from rnnx.graphs import walk
from rnnx.graphs.index import all_graphs
from rnnx.formats.onnx_scan import read_lowered
from rnnx.formats.onnx_metadata import EXPORT_KEY, RECURRENCES_KEY, read_metadata, set_metadata
from rnnx._version import __version__

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
    export, _ = read_metadata(proto)
    if export is not None:
        export.update(inputs=naming.input_dims, roles=naming.roles, outputs=_output_dims(proto))
        set_metadata(proto, {EXPORT_KEY: json.dumps(export)})
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
    export, _ = read_metadata(proto)
    if export is not None:
        export.update(inputs=naming.input_dims, roles=naming.roles, outputs=_output_dims(proto), lengths_inputs=naming.lengths_inputs)
        set_metadata(proto, {EXPORT_KEY: json.dumps(export)})


def free_output_dims(proto: Any, cases: Sequence[Any]) -> list[str]:
    """Declare dynamic each output dimension that torch.onnx declared static but that ONNX
    Runtime returned at other sizes in the self-check's ``cases`` (a batch-1 trace can leave
    an output's batch declared 1 while the input's is dynamic: other runtimes warn on every
    run, or trust the declaration). Named after the input label whose size it took in every
    case, else ``<output>_dim<k>``. Returns what was freed."""
    ran = [c for c in cases if c.skipped is None and c.error is None and c.output_shapes]
    freed = []
    for out in proto.graph.output:
        for d, dim in enumerate(out.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                continue
            seen = [c.output_shapes[out.name][d] if d < len(c.output_shapes.get(out.name, [])) else None for c in ran]
            if not seen or all(size == dim.dim_value for size in seen):
                continue
            labels = sorted({label for c in ran for label in c.sizes})
            label = next((lab for lab in labels if all(c.sizes.get(lab) == size for c, size in zip(ran, seen))), f"{out.name}_dim{d}")
            dim.ClearField("dim_value")
            dim.dim_param = label
            freed.append(f"{out.name}[{d}]={label}")
    if freed:
        export, _ = read_metadata(proto)
        if export is not None:
            export.update(outputs=_output_dims(proto))
            set_metadata(proto, {EXPORT_KEY: json.dumps(export)})
    return freed


def _output_dims(proto: Any) -> dict[str, list[int | str]]:
    return {o.name: [d.dim_param if d.HasField("dim_param") else int(d.dim_value) for d in o.type.tensor_type.shape.dim] for o in proto.graph.output}


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
    the model was called (:func:`call_record`, :func:`call_of_program`), written as
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
        entries[CALL_KEY] = json.dumps({**call, "args": [_only_graph_inputs(node, fed) for node in call["args"]]})
    set_metadata(proto, entries)


# --- how the model was called: the ``rnnx.call`` entry (see the module docstring) -------------

CALL_KEY = "rnnx.call"
CALL_VERSION = 1
_MAX_CALL = 4 * 1024 * 1024  # characters of JSON: a call's structure is small; more is not a record
_MAX_DEPTH = 64
_MAX_NODES = 100_000
_LEAF_KEYS = ("tensor", "value", "unrecorded")
_SEQUENCES = ("tuple", "list")


@dataclass
class CallRecord:
    """The ``rnnx.call`` entry as read: ``parameters`` (or None) and ``args``, one node per
    positional argument (validated: see the module docstring)."""

    parameters: list[str] | None
    args: list[dict[str, Any]]

    def tensors(self) -> list[str]:
        """The graph inputs the tensor leaves are fed from, in the call's order."""
        found: list[str] = []

        def visit(node: dict[str, Any]) -> None:
            if "tensor" in node:
                found.append(node["tensor"])
            for child in _children(node):
                visit(child)

        for node in self.args:
            visit(node)
        return found


def bound_names(model: Any, count: int) -> list[str] | None:
    """The forward parameter each of ``count`` positional arguments binds to, named as torch
    names them: the parameter's name, ``<name>_<k>`` for the k-th that ``*<name>`` collects.
    None where forward has no signature to read; raises TypeError where forward cannot take
    that many positional arguments."""
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError, AttributeError):  # builtins, some TorchScript methods
        return None
    bound = sig.bind_partial(*range(count)).arguments
    names: list[str] = []
    for name, value in bound.items():
        if sig.parameters[name].kind == inspect.Parameter.VAR_POSITIONAL:
            names.extend(f"{name}_{k}" for k in range(len(value)))
        else:
            names.append(name)
    return names


def call_record(args: Sequence[Any], tensor_names: Sequence[str], parameters: Sequence[str] | None) -> dict[str, Any] | None:
    """The ``rnnx.call`` entry for a call with positional ``args`` whose tensor leaves, in
    torch's pytree order, became the graph inputs ``tensor_names``; ``parameters`` as
    :func:`bound_names` gives them. None where the structure cannot be written down (a
    custom pytree node holding tensors)."""
    import torch
    from torch.utils._pytree import tree_flatten

    seen: list[Any] = []

    def node(value: Any) -> dict[str, Any]:
        if isinstance(value, torch.Tensor):
            seen.append(value)
            k = len(seen) - 1
            return {"tensor": str(tensor_names[k])} if k < len(tensor_names) else {"unrecorded": "Tensor"}
        if value is None or isinstance(value, (bool, int, str)):
            return {"value": value}
        if isinstance(value, float):
            return {"value": value} if math.isfinite(value) else {"unrecorded": "float"}
        if isinstance(value, tuple) and isinstance(getattr(type(value), "_fields", None), tuple):
            return {"namedtuple": type(value).__name__, "fields": [[f, node(v)] for f, v in zip(type(value)._fields, value)]}
        if type(value) in (tuple, list):
            return {type(value).__name__: [node(v) for v in value]}
        if type(value) in (dict, collections.OrderedDict, collections.defaultdict):
            if all(isinstance(k, (str, int)) for k in value):
                return {"dict": [[k, node(v)] for k, v in value.items()]}
            return {"unrecorded": f"dict with {type(next(k for k in value if not isinstance(k, (str, int)))).__name__} keys"}
        return {"unrecorded": type(value).__name__}

    nodes = [node(a) for a in args]
    leaves = [v for v in tree_flatten(tuple(args))[0] if isinstance(v, torch.Tensor)]
    if len(seen) != len(leaves) or any(a is not b for a, b in zip(seen, leaves)) or len(seen) != len(tensor_names):
        return None  # torch's pytree holds tensors where rnnx's walk sees an opaque leaf
    params = [str(p) for p in parameters] if parameters is not None and len(parameters) == len(args) else None
    return {"version": CALL_VERSION, "parameters": params, "args": nodes}


def call_of_program(program: Any, leaves: Sequence[Any]) -> dict[str, Any] | None:
    """The ``rnnx.call`` entry of a torch.export program: its example's structure, torch's
    names for forward's arguments, and each tensor leaf as the graph input its leaf in
    ``leaves`` became. None without a program (a route that did not go through torch.export)
    or with keyword arguments."""
    example = getattr(program, "example_inputs", None) if program is not None else None
    if not isinstance(example, tuple) or len(example) != 2 or not isinstance(example[0], tuple) or example[1]:
        return None
    try:
        names = program.module_call_graph[0].signature.forward_arg_names
    except (AttributeError, IndexError):
        names = None
    return call_record(example[0], [leaf.name for leaf in leaves if leaf.is_tensor], names)


def call_of_module(model: Any, args: Sequence[Any], tensor_names: Sequence[str]) -> dict[str, Any] | None:
    """The ``rnnx.call`` entry of ``model`` called with positional ``args`` (a TorchScript
    module's, say), its forward's parameters read from its signature where it has one."""
    try:
        names = bound_names(model, len(args))
    except TypeError:
        names = None
    return call_record(args, tensor_names, names)


def read_call(proto: Any) -> tuple[CallRecord | None, str]:
    """The ``rnnx.call`` entry of a file: (the record, "") where it holds a valid one, (None, "")
    where it has none, (None, why) where the entry is damaged or of another version. Files are
    untrusted: every node is checked before anything is built from it."""
    text = next((p.value for p in proto.metadata_props if p.key == CALL_KEY), None)
    if text is None:
        return None, ""
    if len(text) > _MAX_CALL:
        return None, f"its {CALL_KEY} entry is {len(text):,} characters, more than a call record holds"
    try:
        entry = json.loads(text)
    except (ValueError, RecursionError):
        return None, f"its {CALL_KEY} entry is not valid JSON"
    if not isinstance(entry, dict) or entry.get("version") != CALL_VERSION:
        version = entry.get("version") if isinstance(entry, dict) else None
        return None, f"its {CALL_KEY} entry is version {version!r}; this rnnx reads version {CALL_VERSION}"
    args, params = entry.get("args"), entry.get("parameters")
    if not isinstance(args, list) or not (params is None or (isinstance(params, list) and len(params) == len(args) and all(isinstance(p, str) for p in params))):
        return None, f"its {CALL_KEY} entry has no valid args/parameters"
    count = [0]
    why = next((w for w in (_invalid(a, 0, count) for a in args) if w), "")
    if why:
        return None, f"its {CALL_KEY} entry is damaged: {why}"
    return CallRecord(params, args), ""


def build_call(record: CallRecord, tensor: Callable[[str], Any], unrecorded: Callable[[tuple[Any, ...], str], Any]) -> tuple[Any, ...]:
    """The positional arguments ``record`` describes: each tensor leaf ``tensor(graph input)``,
    each recorded value as it was, each unrecorded leaf ``unrecorded(path, type name)`` (path:
    the keys from the arguments down to it)."""

    def build(node: dict[str, Any], path: tuple[Any, ...]) -> Any:
        if "tensor" in node:
            return tensor(node["tensor"])
        if "value" in node:
            return node["value"]
        if "unrecorded" in node:
            return unrecorded(path, node["unrecorded"])
        if "dict" in node:
            return {k: build(v, path + (k,)) for k, v in node["dict"]}
        if "namedtuple" in node:
            cls = _namedtuple(node["namedtuple"], tuple(f for f, _ in node["fields"]))
            return cls(*(build(v, path + (k,)) for k, (_, v) in enumerate(node["fields"])))
        items = [build(v, path + (k,)) for k, v in enumerate(node["tuple"] if "tuple" in node else node["list"])]
        return tuple(items) if "tuple" in node else items

    return tuple(build(node, (k,)) for k, node in enumerate(record.args))


def describe_call(record: CallRecord) -> str:
    """The recorded arguments as text, for messages: ``input, (hidden_0, hidden_1), None``."""

    def text(node: dict[str, Any]) -> str:
        if "tensor" in node:
            return str(node["tensor"])
        if "value" in node:
            return repr(node["value"])
        if "unrecorded" in node:
            return f"<{node['unrecorded']}>"
        if "dict" in node:
            return "{" + ", ".join(f"{k!r}: {text(v)}" for k, v in node["dict"]) + "}"
        if "namedtuple" in node:
            return f"{node['namedtuple']}(" + ", ".join(f"{f}={text(v)}" for f, v in node["fields"]) + ")"
        items = [text(v) for v in (node["tuple"] if "tuple" in node else node["list"])]
        return ("(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")") if "tuple" in node else "[" + ", ".join(items) + "]"

    return ", ".join(text(a) for a in record.args)


def _children(node: dict[str, Any]) -> list[dict[str, Any]]:
    if "tuple" in node or "list" in node:
        return list(node.get("tuple", node.get("list")))
    if "dict" in node:
        return [v for _, v in node["dict"]]
    if "fields" in node:
        return [v for _, v in node["fields"]]
    return []


def _invalid(node: Any, depth: int, count: list[int]) -> str:
    """Why ``node`` is not a node of the record (see the module docstring), or ""."""
    count[0] += 1
    if depth > _MAX_DEPTH or count[0] > _MAX_NODES:
        return "nested deeper or holding more than a call record does"
    if not isinstance(node, dict) or len(node) != (2 if "namedtuple" in node else 1):
        return f"a node must be an object with one key, found {str(node)[:60]}"
    key = "namedtuple" if "namedtuple" in node else next(iter(node))
    value = node[key]
    if key == "tensor":
        return "" if isinstance(value, str) and value else "a tensor node names no graph input"
    if key == "value":
        return "" if value is None or isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)) else f"value {value!r}"
    if key == "unrecorded":
        return "" if isinstance(value, str) else "an unrecorded node names no type"
    if key in _SEQUENCES:
        if not isinstance(value, list):
            return f"{key} holds no list"
        return next((w for w in (_invalid(v, depth + 1, count) for v in value) if w), "")
    if key in ("dict", "namedtuple"):
        pairs = value if key == "dict" else node.get("fields")
        if key == "namedtuple":
            if not _name_ok(value) or not isinstance(pairs, list):
                return "a namedtuple node needs an identifier and fields"
            fields = [p[0] if isinstance(p, list) and p else None for p in pairs]
            if not all(_name_ok(f) and not f.startswith("_") for f in fields) or len(set(fields)) != len(fields):
                return f"namedtuple {value} has fields that are not distinct identifiers"
        if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], (str, int)) for p in pairs):
            return f"{key} holds no [key, node] pairs"
        return next((w for w in (_invalid(v, depth + 1, count) for _, v in pairs) if w), "")
    return f"unknown node {key!r}"


def _name_ok(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


_NAMEDTUPLES: dict[tuple[str, tuple[str, ...]], Any] = {}


def _namedtuple(name: str, fields: tuple[str, ...]) -> Any:
    key = (name, fields)
    if key not in _NAMEDTUPLES:
        _NAMEDTUPLES[key] = collections.namedtuple(name, fields)  # type: ignore[misc]
    return _NAMEDTUPLES[key]


def _only_graph_inputs(node: dict[str, Any], fed: set[str]) -> dict[str, Any]:
    """``node`` with each tensor leaf that feeds no graph input written as unrecorded."""
    if "tensor" in node:
        return node if node["tensor"] in fed else {"unrecorded": "Tensor"}
    if "tuple" in node or "list" in node:
        key = "tuple" if "tuple" in node else "list"
        return {key: [_only_graph_inputs(v, fed) for v in node[key]]}
    if "dict" in node:
        return {"dict": [[k, _only_graph_inputs(v, fed)] for k, v in node["dict"]]}
    if "namedtuple" in node:
        return {"namedtuple": node["namedtuple"], "fields": [[f, _only_graph_inputs(v, fed)] for f, v in node["fields"]]}
    return node
