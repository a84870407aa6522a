"""The ``rnnx.call`` entry (:data:`CALL_KEY`) of a file ``rnnx export`` writes says how the torch model was called when
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

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
        return [node["tensor"] for _, node in self.leaves() if "tensor" in node]

    def leaves(self) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        """(path, node) of every leaf (a tensor, a value, an unrecorded one), in the call's order;
        a path is the keys from the arguments down to it, as :func:`build_call` gives them."""
        found: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        todo: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((k,), node) for k, node in reversed(list(enumerate(self.args)))]
        while todo:
            path, node = todo.pop()
            items = _items(node)
            if items is None:
                found.append((path, node))
            else:
                todo += [(path + (k,), child) for k, child in reversed(items)]
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
        fields = getattr(type(value), "_fields", None)
        if isinstance(value, tuple) and isinstance(fields, tuple):
            return {"namedtuple": type(value).__name__, "fields": [[f, node(v)] for f, v in zip(fields, value)]}
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


def _items(node: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]] | None:
    """(key, child) of a container node, keyed as :func:`build_call` keys a path; None for a leaf."""
    if "tuple" in node or "list" in node:
        return list(enumerate(node["tuple"] if "tuple" in node else node["list"]))
    if "dict" in node:
        return [(k, v) for k, v in node["dict"]]
    if "fields" in node:
        return [(k, v) for k, (_, v) in enumerate(node["fields"])]
    return None


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


def _name_ok(name: Any) -> TypeGuard[str]:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


_NAMEDTUPLES: dict[tuple[str, tuple[str, ...]], Any] = {}


def _namedtuple(name: str, fields: tuple[str, ...]) -> Any:
    key = (name, fields)
    if key not in _NAMEDTUPLES:
        _NAMEDTUPLES[key] = collections.namedtuple(name, fields)
    return _NAMEDTUPLES[key]


def only_graph_inputs(node: dict[str, Any], fed: set[str]) -> dict[str, Any]:
    """``node`` with each tensor leaf that feeds no graph input written as unrecorded."""
    if "tensor" in node:
        return node if node["tensor"] in fed else {"unrecorded": "Tensor"}
    if "tuple" in node or "list" in node:
        key = "tuple" if "tuple" in node else "list"
        return {key: [only_graph_inputs(v, fed) for v in node[key]]}
    if "dict" in node:
        return {"dict": [[k, only_graph_inputs(v, fed)] for k, v in node["dict"]]}
    if "namedtuple" in node:
        return {"namedtuple": node["namedtuple"], "fields": [[f, only_graph_inputs(v, fed)] for f, v in node["fields"]]}
    return node
