"""Make each decomposed LSTM, GRU or plain RNN cell (:mod:`rnnx.graphs.cell_match` lists the rules) a
native one-step node, which :mod:`rnnx.graphs.fuse_steps` then joins over time.

Rewrite: ``Unsqueeze`` x, h (and c) to one step, the native node with the cell's weights in
ONNX's gate order, ``Squeeze`` its Y_h (and Y_c) into the cell's h' (and c'); steps of one
cell share one set of weights, so that fuse_steps can chain them. A candidate that breaks a
rule is left alone, and the result names the rule.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from rnnx.graphs.cell_match import CellMatch, match_gru, match_rnn
from rnnx.graphs.gru_forms import match_gru_forms
from rnnx.graphs.index import Carried, GraphIndex, carried_state, graphs, name_dynamic_axes, rewrite
from rnnx.graphs.lstm_match import lstm_gate_parts, match_lstm
from rnnx.pass_result import Declined, PassResult


def _candidate(g: GraphIndex, anchor: Any) -> CellMatch | Declined | None:
    gates = lstm_gate_parts(g, anchor)
    if gates is not None:
        return match_lstm(g, *gates)
    if anchor.op_type == "Tanh":
        found = match_gru(g, anchor)
        if isinstance(found, CellMatch):
            return found
        other = match_gru_forms(g, anchor)  # the same cell written another way
        if other is not None:
            return other if isinstance(other, CellMatch) or found is None else found
    return match_rnn(g, anchor)


def fuse_cells(model: Any) -> PassResult[str]:
    """Replace decomposed LSTM, GRU and RNN cells, in the main graph and in If/Loop/Scan bodies,
    by one-step native nodes, in place; the result lists the steps' node names."""
    result: PassResult[str] = PassResult()
    names = itertools.count()
    bodies: dict[int, Carried] = {}  # id(body) -> how its Loop or Scan binds it (which holds the body, so its id stays its own)
    for graph, outer in list(graphs(model.graph)):
        g = GraphIndex(graph, outer)
        bound = bodies.get(id(graph))
        if bound is not None:
            g.carried = bound.pairs
            for name, source in bound.invariants().items():  # weights tf2onnx carries through the loop unchanged
                if source in outer:
                    g.constants.put(name, outer[source])
        for node in g.nodes:
            found = carried_state(node) if node.op_type in ("Loop", "Scan") else None
            if found is not None:
                bodies[id(found.body)] = found
        _fuse_cells_in(g, result, names)
    return result


def _fuse_cells_in(g: GraphIndex, result: PassResult[str], names: Iterator[int]) -> None:
    from onnx import helper, numpy_helper

    fused_before = len(result.rewritten)
    shared: dict[tuple[Any, ...], str] = {}  # weights_key -> the prefix of the weights that cell's steps share
    new_nodes, removed, inits = [], set(), []
    batch_axes: dict[tuple[str, int], str] = {}
    for anchor in g.nodes:
        match = _candidate(g, anchor)
        if match is None:
            continue
        if isinstance(match, Declined):
            result.left_alone.append(match.at(anchor.name or anchor.output[0]))
            continue
        op = match.op
        prefix = shared.get(match.weights_key)
        if prefix is None:
            prefix = f"{op.lower()}_cell{next(names)}"
            shared[match.weights_key] = prefix
            for key, value in zip("WRB", match.onnx_weights()):
                inits.append(numpy_helper.from_array(value[None], f"{prefix}_{key}"))
            inits.append(numpy_helper.from_array(np.array([0], np.int64), f"{prefix}_axis0"))
        step = f"{anchor.name or anchor.output[0]}_step"
        ax = f"{prefix}_axis0"
        ins = [f"{step}_x", f"{prefix}_W", f"{prefix}_R", f"{prefix}_B", "", f"{step}_h" if match.h else ""]
        new_nodes.append(helper.make_node("Unsqueeze", [match.x, ax], [f"{step}_x"]))
        if match.h:  # none: a first step whose zero state the exporter folded away
            new_nodes.append(helper.make_node("Unsqueeze", [match.h, ax], [f"{step}_h"]))
        if op == "LSTM":
            extra: dict[str, list[str] | list[float]] = {"activations": list(match.activations)} if match.activations else {}
            if match.activation_params is not None:
                extra.update(activation_alpha=[match.activation_params[0]], activation_beta=[match.activation_params[1]])
            new_nodes += [
                helper.make_node("Unsqueeze", [match.c, ax], [f"{step}_c"]),
                helper.make_node("LSTM", ins + [f"{step}_c"], ["", f"{step}_Y_h", f"{step}_Y_c"], name=step, hidden_size=match.hidden, **extra),
                helper.make_node("Squeeze", [f"{step}_Y_c", ax], [match.c_new]),
            ]
        elif op == "GRU":
            new_nodes.append(helper.make_node("GRU", ins, ["", f"{step}_Y_h"], name=step, hidden_size=match.hidden,
                                              linear_before_reset=match.linear_before_reset))
        else:
            extra = {"activations": list(match.activations)} if match.activations else {}
            new_nodes.append(helper.make_node("RNN", ins, ["", f"{step}_Y_h"], name=step, hidden_size=match.hidden, **extra))
        new_nodes.append(helper.make_node("Squeeze", [f"{step}_Y_h", ax], [match.h_new]))
        removed |= {id(n) for n in match.remove}
        batch_axes.update({(name, 0): "batch" for name in (match.x, match.h, match.c) if name})
        result.rewritten.append(step)
    if len(result.rewritten) > fused_before:
        rewrite(g.graph, removed, new_nodes, inits)
        name_dynamic_axes(g.graph, batch_axes)  # a streaming step's x, h (and c): (batch, features)
