"""TensorRT's ONNX parser rules (rnnx.engines.tensorrt_parser), read from onnx-tensorrt's source:
one small model per rule, the six cases issue 28 found inspect wrong on, `rnnx inspect`
agreeing with the table node by node, and every ONNX file rnnx writes for TensorRT accepted.
Nothing here needs TensorRT: the table is a prediction from the parser's source."""

from __future__ import annotations

import dataclasses
import inspect as pyinspect
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import rnnx
from rnnx import RNNSpec, RNNWeights
from rnnx.engines import acceptance, tensorrt_parser
from rnnx.engines.acceptance import BACKEND_RULES, predict
from rnnx.engines.tensorrt_parser import ParserTable, lowered_verdicts, model_findings, parser_verdicts, resolve_version, rules_for
from rnnx.engines.tensorrt_parser_rules import ACCEPTED, DIFFERS, REFUSED, RULES, SOURCES, UNKNOWN, VERDICTS, VERSIONS
from rnnx.errors import RNNXError
from rnnx.formats.onnx_build import build_stack_model
from rnnx.graphs.inspect import inspect_model
from rnnx.graphs.lower import lower_recurrences

RECURRENT = ("LSTM", "GRU", "RNN")


def stack(text: str, **options) -> onnx.ModelProto:
    return build_stack_model(RNNWeights.random(RNNSpec.parse(text)), **options)


def lowered(text: str, **options) -> onnx.ModelProto:
    model = stack(text, **options)
    lower_recurrences(model)
    return model


def node(model: onnx.ModelProto, version: str = "10.x", op: str | None = None) -> tensorrt_parser.NodeVerdict:
    """The one recurrent node's verdict (or the one node of type ``op``)."""
    found = [v for v in parser_verdicts(model, version) if (v.op_type == op if op else v.op_type in RECURRENT)]
    assert len(found) == 1, [(v.node, v.op_type) for v in found]
    return found[0]


def keys(verdict: tensorrt_parser.NodeVerdict) -> set[str]:
    return {f.rule.key for f in verdict.findings}


def single(op: str, inputs: list[str], outputs: list[str], inits: list[TensorProto] = (), *, elem: int = TensorProto.FLOAT,
           opset: int = 17, graph_inputs: list[str] | None = None, **attrs) -> onnx.ModelProto:
    n = helper.make_node(op, inputs, outputs, name="n", **attrs)
    init_names = {i.name for i in inits}
    ins = [helper.make_tensor_value_info(i, elem, None) for i in (graph_inputs or inputs) if i and i not in init_names]
    graph = helper.make_graph([n], "g", ins, [helper.make_tensor_value_info(o, elem, None) for o in outputs if o], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def recurrent_node(op: str, spec: str, *, weights: RNNWeights | None = None, dtype=np.float32, initial: bool = True,
                   **attrs) -> onnx.ModelProto:
    """One native node with the weights rnnx lays out for ``spec`` (attributes as given)."""
    weights = weights or RNNWeights.random(RNNSpec.parse(spec), dtype=dtype)
    (w,) = rnnx.to_format(weights, "onnx")
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [numpy_helper.from_array(w[k].astype(dtype), k) for k in ("W", "R", "B") + (("P",) if "P" in w else ())]
    inputs = ["X", "W", "R", "B", "", "h0" if initial else "", "", "P" if "P" in w else ""]
    while not inputs[-1]:
        inputs.pop()
    return single(op, inputs, ["Y"], inits, elem=elem, hidden_size=weights.spec.hidden_size, **attrs)


# --- the table itself ---------------------------------------------------------------------------

def test_every_row_is_frozen_data_that_cites_a_file_a_function_and_a_condition() -> None:
    assert isinstance(RULES, tuple) and len(RULES) > 100
    for rule in RULES:
        assert dataclasses.is_dataclass(rule) and type(rule).__dataclass_params__.frozen, rule
        assert rule.verdict in VERDICTS and set(rule.versions) <= set(VERSIONS) and rule.versions, rule
        assert rule.file and rule.function and rule.condition, rule
        assert rule.verdict != DIFFERS or rule.differs, f"{rule.key}: a 'computes differently' row must say what differs"
        for version in rule.versions:
            citation = rule.citation(version)
            assert rule.file in citation and rule.condition in citation
            assert (rule.read_at or SOURCES[version].ref) in citation
    with pytest.raises(dataclasses.FrozenInstanceError):
        RULES[0].verdict = ACCEPTED  # type: ignore[misc]


def test_each_version_read_has_its_source_and_11_says_it_was_not_available() -> None:
    for version in ("8.2", "8.5", "8.6", "10.1", "10.15"):
        ref = SOURCES[version].ref
        assert any(c.isdigit() for c in ref) and "not" not in ref, ref
        assert {r.key for r in rules_for(version)} >= {"rnn.importer", "lstm.input_forget", "rnn.reverse_differs", "lstm.clip", "scan.importer"}
    assert SOURCES["8.2"].ref.startswith("8.2-GA f42daee") and SOURCES["10.1"].ref.startswith("10.1-GA 96e7811")
    assert SOURCES["10.15"].ref.startswith("main dd0a3a9")
    eleven = rules_for("11.x")
    assert [r.verdict for r in eleven] == [UNKNOWN] and "not available" in eleven[0].condition
    assert resolve_version("10.x") == "10.15" and resolve_version("10.0") == "10.1"
    with pytest.raises(RNNXError, match="10.2 to 10.14 were not read"):
        resolve_version("10.8")


def test_the_table_decides_the_verdict() -> None:
    """Without its row, input_forget is no longer refused: the verdict comes from the data."""
    model = recurrent_node("LSTM", "lstm,input=3,hidden=4", input_forget=1)
    assert node(model).verdict == REFUSED
    kept = tuple(r for r in RULES if r.key != "lstm.input_forget")
    original = tensorrt_parser.RULES
    try:
        tensorrt_parser.RULES = kept
        assert node(model).verdict == ACCEPTED
    finally:
        tensorrt_parser.RULES = original


# --- the six cases issue 28 found ---------------------------------------------------------------

def test_case_1_bidirectional_gru_hardsigmoid_is_refused_for_the_alphas_the_parser_fills_by_position() -> None:
    model = stack("gru,input=4,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/Tanh")
    for version in ("8.2", "8.5", "8.6", "10.1", "10.x"):
        v = node(model, version)
        assert v.verdict == REFUSED and keys(v) >= {"rnn.reverse_differs"}, (version, v.reasons)
        assert "reverse activation alphas [0.2, 0.0] differ from forward [0.2, 0.2]" in v.reasons[0]
    assert "DEFINE_OP_CHECKER(GRU)" in node(model).citations[0] and "DEFINE_BUILTIN_OP_IMPORTER(GRU)" in node(model, "8.6").citations[0]


def test_case_2_affine_is_not_among_the_parsers_activation_names() -> None:
    model = stack("gru,input=3,hidden=4,act=Affine:0.5:0.1/Tanh")
    for version in ("8.2", "8.6", "10.x"):
        v = node(model, version)
        assert v.verdict == REFUSED and "rnn.activation_name" in keys(v) and "'Affine'" in v.reasons[0]
    assert "activationStringToEnum" in node(model).citations[0]


def test_case_3_lstm_clip_builds_but_clips_the_cell_state_before_h() -> None:
    v = node(stack("lstm,input=3,hidden=4,clip=0.5"))
    assert v.verdict == DIFFERS and "lstm.clip" in keys(v)
    assert "clip=0.5" in v.reasons[0] and "addClip(ctx, Ct, clip)" in v.citations[0]


def test_case_3_witness_clipping_the_cell_before_h_is_not_what_onnx_runtime_computes() -> None:
    """numpy with ONNX Runtime's rule matches ONNX Runtime; with the importer's (h(clip(C))) it does not."""
    from rnnx.engines.onnxruntime import OnnxRuntimeRunner

    weights = RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4"), seed=3, scale=1.5)
    model = recurrent_node("LSTM", "lstm,input=3,hidden=4", weights=weights, clip=0.5, initial=False)
    x = np.random.default_rng(0).normal(0, 2.0, size=(6, 2, 3)).astype(np.float32)
    got = OnnxRuntimeRunner(model)({"X": x})["Y"][:, 0]
    (w,) = rnnx.to_format(weights, "onnx")
    W, R, B = w["W"][0].astype(np.float64), w["R"][0].astype(np.float64), w["B"][0].astype(np.float64)
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731

    def run(clip_cell: bool) -> np.ndarray:
        h, c, ys = np.zeros((2, 4)), np.zeros((2, 4)), []
        for t in range(6):
            g = np.clip(x[t] @ W.T + h @ R.T + B[:16] + B[16:], -0.5, 0.5)
            i, o, f, cand = sig(g[:, :4]), sig(g[:, 4:8]), sig(g[:, 8:12]), np.tanh(g[:, 12:])
            c = f * c + i * cand
            h = o * np.tanh(np.clip(c, -0.5, 0.5) if clip_cell else c)
            ys.append(h)
        return np.stack(ys)

    assert np.abs(run(False) - got).max() < 1e-5
    assert np.abs(run(True) - got).max() > 1e-3


def test_case_4_gru_leakyrelu_after_sigmoid_runs_with_the_default_alpha() -> None:
    v = node(stack("gru,input=3,hidden=4,act=Sigmoid/LeakyRelu:0.1"))
    assert v.verdict == DIFFERS and "rnn.activation_params" in keys(v)
    assert "LeakyRelu runs with alpha=0.01" in v.reasons[0] and "alpha=0.1" in v.reasons[0]
    assert "std::transform(activations.begin() + activationAlphas.size()" in v.citations[0]
    # where the position and the function agree, the value is right
    assert node(stack("gru,input=3,hidden=4,act=LeakyRelu:0.1/Tanh")).verdict == ACCEPTED
    assert node(stack("rnn_tanh,input=3,hidden=4,act=LeakyRelu:0.1")).verdict == ACCEPTED
    assert node(stack("rnn_tanh,input=3,hidden=4,bidirectional,act=LeakyRelu:0.1")).verdict == ACCEPTED
    assert node(stack("gru,input=3,hidden=4,act=Sigmoid/HardSigmoid:0.3:0.6")).verdict == DIFFERS


def test_case_5_softplus_in_an_lstm_slot_gets_alpha_and_beta_zero() -> None:
    v = node(stack("lstm,input=3,hidden=4,act=Sigmoid/Softplus/Tanh"))
    assert v.verdict == DIFFERS and "lstm.activation_params" in keys(v)
    assert "Softplus runs with alpha=0, beta=0" in v.reasons[0] and "parseLSTMActivationValues" in v.citations[0]
    # the LSTM's own fill is right where a function's default is not 0
    assert node(stack("lstm,input=3,hidden=4,bidirectional,act=HardSigmoid:0.3:0.6/Tanh/Tanh")).verdict == ACCEPTED
    assert node(stack("lstm,input=3,hidden=4,act=Sigmoid/Elu:0.7/Tanh")).verdict == ACCEPTED


def test_case_6_a_lowered_input_forget_lstm_is_judged_by_its_scans() -> None:
    native = stack("lstm,input=3,hidden=4,input_forget")
    assert node(native).verdict == REFUSED
    model = lowered("lstm,input=3,hidden=4,input_forget")
    verdicts = parser_verdicts(model)
    assert not any(v.op_type in RECURRENT for v in verdicts)
    assert {v.verdict for v in verdicts} == {ACCEPTED} and {v.lowered_from for v in verdicts if v.op_type == "Scan"} == {"LSTM_l0"}
    (record,) = lowered_verdicts(verdicts).values()
    assert record.verdict == ACCEPTED and "Scan" in record.member_ops and "Sub" in record.member_ops
    (report,) = inspect_model(model, judge=predict)
    assert report.lowered and report.backend_verdicts["tensorrt"] == ACCEPTED and report.backends["tensorrt"] == []
    assert "DEFINE_BUILTIN_OP_IMPORTER(Scan)" in report.backend_citations["tensorrt"][0]


def test_inspect_agrees_with_the_table_on_the_six_cases() -> None:
    cases = {
        "gru,input=4,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/Tanh": (REFUSED, False),
        "gru,input=3,hidden=4,act=Affine:0.5:0.1/Tanh": (REFUSED, False),
        "lstm,input=3,hidden=4,clip=0.5": (DIFFERS, False),
        "gru,input=3,hidden=4,act=Sigmoid/LeakyRelu:0.1": (DIFFERS, False),
        "lstm,input=3,hidden=4,act=Sigmoid/Softplus/Tanh": (DIFFERS, False),
        "lstm,input=3,hidden=4,input_forget": (ACCEPTED, True),
    }
    for spec, (want, lower) in cases.items():
        model = lowered(spec) if lower else stack(spec)
        (report,) = inspect_model(model, judge=predict)
        assert report.backend_verdicts["tensorrt"] == want, (spec, report.backends["tensorrt"])
        assert bool(report.backends["tensorrt"]) == (want != ACCEPTED)


# --- one model per rule -----------------------------------------------------------------------

@pytest.mark.parametrize("version", ["8.2", "8.5", "8.6", "10.1", "10.x"])
def test_default_stacks_are_accepted_with_their_importer_cited(version: str) -> None:
    for spec in ("lstm,input=3,hidden=4,bidirectional", "gru,input=3,hidden=4,reset_before", "rnn_relu,input=3,hidden=4,reverse"):
        v = node(stack(spec), version)
        assert v.verdict == ACCEPTED and "rnn.importer" in keys(v), (spec, v.reasons)
        assert f"DEFINE_BUILTIN_OP_IMPORTER({v.op_type})" in v.citations[0]


def test_activation_names_are_compared_case_sensitively_and_counted() -> None:
    v = node(recurrent_node("RNN", "rnn_tanh,input=3,hidden=4", activations=["tanh"]))
    assert v.verdict == REFUSED and "rnn.activation_name" in keys(v)
    v = node(recurrent_node("GRU", "gru,input=3,hidden=4", activations=["Sigmoid"]))
    assert v.verdict == REFUSED and "rnn.activation_count" in keys(v)


def test_reverse_activations_that_differ_are_refused() -> None:
    v = node(recurrent_node("RNN", "rnn_tanh,input=3,hidden=4,bidirectional", direction="bidirectional", activations=["Tanh", "Relu"]))
    assert v.verdict == REFUSED and "reverse activations ['Relu'] differ from forward ['Tanh']" in v.reasons[0]


def test_layout_1_builds_but_is_read_as_time_major() -> None:
    v = node(recurrent_node("GRU", "gru,input=3,hidden=4", layout=1, linear_before_reset=1))
    assert v.verdict == DIFFERS and "rnn.layout" in keys(v) and "no importer or checker reads \"layout\"" in v.citations[0]


def test_sequence_lens_peepholes_and_reset_modes_are_accepted() -> None:
    v = node(stack("lstm,input=3,hidden=4,peepholes", sequence_lens=True))
    assert v.verdict == ACCEPTED and {"rnn.sequence_lens", "lstm.peepholes"} <= keys(v)
    for spec in ("gru,input=3,hidden=4,reset_before", "gru,input=3,hidden=4"):
        assert "gru.linear_before_reset" in keys(node(stack(spec)))
    v = node(recurrent_node("GRU", "gru,input=3,hidden=4", clip=2.0, linear_before_reset=1))
    assert v.verdict == ACCEPTED and "rnn.clip" in keys(v)


def test_float16_zero_states_are_float_in_the_importer() -> None:
    """No initial state: the importers' zeros are FLOAT (the LSTM's are HALF from 10.15); what the
    builder makes of that is TensorRT's, so the table says unknown."""
    gru = stack("gru,input=3,hidden=4", initial_states=False)
    half_gru = build_stack_model(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), dtype=np.float16), initial_states=False)
    half_lstm = build_stack_model(RNNWeights.random(RNNSpec.parse("lstm,input=3,hidden=4"), dtype=np.float16), initial_states=False)
    assert node(gru).verdict == ACCEPTED
    assert node(half_gru).verdict == UNKNOWN and "rnn.half_zero_state" in keys(node(half_gru))
    assert node(half_lstm, "10.1").verdict == UNKNOWN and node(half_lstm, "10.x").verdict == ACCEPTED
    with_states = build_stack_model(RNNWeights.random(RNNSpec.parse("gru,input=3,hidden=4"), dtype=np.float16))
    assert node(with_states).verdict == ACCEPTED


def test_scan_at_opset_8_with_sequence_lens_is_refused() -> None:
    body = helper.make_graph([helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Identity", ["s2"], ["y"])], "b",
                             [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("s", "x")],
                             [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("s2", "y")])
    opset8 = single("Scan", ["lens", "s0", "xs"], ["s_last", "ys"], opset=8, num_scan_inputs=1, body=body)
    v = node(opset8, op="Scan")
    assert v.verdict == REFUSED and "scan.opset8_sequence_lens" in keys(v)
    opset17 = single("Scan", ["s0", "xs"], ["s_last", "ys"], num_scan_inputs=1, body=body)
    assert node(opset17, op="Scan").verdict == ACCEPTED
    assert {v.graph for v in parser_verdicts(opset17)} == {"main", "main/n.body"}  # the body's nodes are judged too


def _loop(trip_count: bool) -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["s", "s"], ["s2"]),
         helper.make_node("Identity", ["s2"], ["scan"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("cond_out", TensorProto.BOOL), ("s2", TensorProto.FLOAT),
                                                                ("scan", TensorProto.FLOAT))])
    inits = [numpy_helper.from_array(np.array(5, np.int64), "M")] if trip_count else []
    return single("Loop", ["M" if trip_count else "", "cond", "s0"], ["s_last", "scans"], inits, body=body,
                  graph_inputs=["cond", "s0"])


def test_loop_scan_outputs_without_a_trip_count() -> None:
    assert node(_loop(True), "10.x", op="Loop").verdict == ACCEPTED
    assert node(_loop(False), "8.6", op="Loop").verdict == DIFFERS
    assert node(_loop(False), "10.1", op="Loop").verdict == DIFFERS
    v = node(_loop(False), "10.x", op="Loop")
    assert v.verdict == REFUSED and "no trip limit was set" in v.citations[0]


def test_if_branches_and_nodes_inside_them() -> None:
    inner = recurrent_node("LSTM", "lstm,input=3,hidden=4", input_forget=1).graph
    inner.input.pop()  # h0 from the outer scope
    same = single("If", ["c"], ["Y"], then_branch=inner, else_branch=inner, graph_inputs=["c", "X", "h0"])
    verdicts = parser_verdicts(same)
    assert [v.verdict for v in verdicts if v.op_type == "If"] == [ACCEPTED]
    assert sorted((v.graph, v.verdict) for v in verdicts if v.op_type == "LSTM") == [
        ("main/n.else_branch", REFUSED), ("main/n.then_branch", REFUSED)]
    two = helper.make_graph([helper.make_node("Identity", ["X"], ["a"]), helper.make_node("Identity", ["X"], ["b"])], "two", [],
                            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("a", "b")])
    one = helper.make_graph([helper.make_node("Identity", ["X"], ["a1"])], "one", [], [helper.make_tensor_value_info("a1", TensorProto.FLOAT, None)])
    odd = single("If", ["c"], ["a", "b"], then_branch=two, else_branch=one, graph_inputs=["c", "X"])
    v = node(odd, op="If")
    assert v.verdict == REFUSED and "if.output_count" in keys(v)


def test_graph_ops_rnnx_writes_are_accepted_and_their_conditions_refuse() -> None:
    for op in ("Add", "Mul", "Sub", "MatMul", "Sigmoid", "Tanh", "Relu", "Transpose", "Identity"):
        ins = ["a", "b"] if op in ("Add", "Mul", "Sub", "MatMul") else ["a"]
        v = node(single(op, ins, ["y"]), op=op)
        assert v.verdict == ACCEPTED and f"DEFINE_BUILTIN_OP_IMPORTER({op})" in v.citations[0], op
    assert node(single("Add", ["a", "b"], ["y"], elem=TensorProto.BOOL), op="Add").verdict == REFUSED
    int64 = single("MatMul", ["a", "b"], ["y"], elem=TensorProto.INT64)
    assert node(int64, "8.6", op="MatMul").verdict == ACCEPTED and node(int64, "10.x", op="MatMul").verdict == REFUSED
    assert node(single("MatMul", ["a", "b"], ["y"], elem=TensorProto.INT32), "8.2", op="MatMul").verdict == REFUSED
    strings = helper.make_node("Constant", [], ["s"], name="n", value_strings=["a"])
    model = helper.make_model(helper.make_graph([strings], "g", [], [helper.make_tensor_value_info("s", TensorProto.STRING, None)]),
                              opset_imports=[helper.make_opsetid("", 17)])
    v = node(model, op="Constant")
    assert v.verdict == REFUSED and {"constant.value_kind", "dtype.unsupported"} <= keys(v)
    u8 = single("ConstantOfShape", ["shape"], ["y"], value=numpy_helper.from_array(np.array([1], np.uint8)))
    assert node(u8, "10.x", op="ConstantOfShape").verdict == REFUSED and node(u8, "8.5", op="ConstantOfShape").verdict == REFUSED
    assert node(single("Slice", ["a", "starts"], ["y"]), op="Slice").verdict == REFUSED


def test_element_types_by_version() -> None:
    bf16 = single("Add", ["a", "b"], ["y"], elem=TensorProto.BFLOAT16)
    assert node(bf16, "8.6", op="Add").verdict == REFUSED and node(bf16, "10.x", op="Add").verdict == ACCEPTED
    double = node(single("Add", ["a", "b"], ["y"], elem=TensorProto.DOUBLE), op="Add")
    assert double.verdict == DIFFERS and "computed in float32" in double.reasons[0]
    cast = single("Cast", ["a"], ["y"], to=TensorProto.UINT16)
    assert node(cast, op="Cast").verdict == REFUSED


def test_ops_without_an_importer_and_ops_outside_the_table() -> None:
    quant = helper.make_node("DynamicQuantizeLSTM", ["X"], ["Y"], name="q", domain="com.microsoft")
    model = helper.make_model(helper.make_graph([quant], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)],
                                                [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    v = node(model, op="DynamicQuantizeLSTM")
    assert v.verdict == REFUSED and "op.no_importer" in keys(v) and "FallbackPluginImporter" in v.citations[0]
    layernorm = single("LayerNormalization", ["a", "s"], ["y"])
    assert node(layernorm, "8.5", op="LayerNormalization").verdict == REFUSED  # its importer came in 8.6
    assert node(layernorm, "8.6", op="LayerNormalization").verdict == UNKNOWN  # an importer, whose conditions are not tabulated
    assert node(single("Pow", ["a", "b"], ["y"]), op="Pow").verdict == UNKNOWN


def test_deep_nesting_is_refused_in_10x() -> None:
    def leaf(name: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node("Identity", ["X"], [name], name=name)], name, [],
                                 [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)])

    graph = leaf("y0")
    for depth in range(1, 27):  # 26 Ifs, each holding the next in its then_branch
        wrap = helper.make_node("If", ["c"], [f"y{depth}"], name=f"if{depth}", then_branch=graph, else_branch=leaf(f"e{depth}"))
        graph = helper.make_graph([wrap], f"g{depth}", [], [helper.make_tensor_value_info(f"y{depth}", TensorProto.FLOAT, None)])
    model = helper.make_model(helper.make_graph(list(graph.node), "main", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                                                          helper.make_tensor_value_info("X", TensorProto.FLOAT, None)],
                                                list(graph.output)), opset_imports=[helper.make_opsetid("", 17)])
    by_name = {v.node: v for v in parser_verdicts(model, "10.x")}
    assert by_name["y0"].verdict == REFUSED and "graph.nesting" in keys(by_name["y0"])  # 26 subgraphs deep
    assert by_name["e26"].verdict == ACCEPTED  # one deep
    assert {v.verdict for v in parser_verdicts(model, "8.6") if v.op_type == "Identity"} == {ACCEPTED}


def test_opset_findings_and_tensorrt_11() -> None:
    model = stack("lstm,input=3,hidden=4")
    (finding,) = model_findings(model, "8.2")
    assert finding.verdict == ACCEPTED and finding.detail == "opset 17" and "up to Opset 13" in finding.rule.note
    assert {v.verdict for v in parser_verdicts(model, "11.x")} == {UNKNOWN}


# --- rnnx inspect -------------------------------------------------------------------------------

def test_acceptance_uses_the_parser_table_and_no_longer_tensorrt_py_rules() -> None:
    assert isinstance(BACKEND_RULES[1], ParserTable) and BACKEND_RULES[1].backend == "tensorrt"
    assert "PARSER_RULES" not in pyinspect.getsource(acceptance)
    report = inspect_model(recurrent_node("LSTM", "lstm,input=3,hidden=4", input_forget=1), judge=predict)[0]
    assert BACKEND_RULES[1].refusals(report) == report.backends["tensorrt"]


def test_inspect_matches_the_table_on_every_recurrent_node_of_several_models() -> None:
    models = [stack("lstm,input=3,hidden=4,layers=2,bidirectional"), stack("gru,input=3,hidden=4,clip=1.5"),
              lowered("gru,input=4,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/Tanh"), stack("lstm,input=3,hidden=4,proj=2"),
              recurrent_node("GRU", "gru,input=3,hidden=4", layout=1, linear_before_reset=1)]
    for version in ("8.2", "10.1", "10.x"):
        judge = predict.with_tensorrt(version)
        for model in models:
            reports = inspect_model(model, judge=judge)
            verdicts = parser_verdicts(model, version)
            by_node = {(v.graph, v.node): v for v in verdicts}
            records = lowered_verdicts(verdicts)
            assert reports
            for r in reports:
                want = records[r.name] if r.lowered else by_node[(r.graph, r.name)]
                assert r.backend_verdicts["tensorrt"] == want.verdict and r.backends["tensorrt"] == want.reasons
                assert r.backend_citations["tensorrt"] == want.citations
                assert f"TensorRT {tensorrt_parser.version_label(version)}" in r.backend_basis["tensorrt"]


def test_cli_prints_the_version_and_citation_and_takes_tensorrt(tmp_path) -> None:
    path = tmp_path / "g.onnx"
    onnx.save(stack("gru,input=4,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/Tanh"), str(path))
    from tests.helpers import rnnx_in_process  # in-process: what inspect prints is tested, not the process

    out = rnnx_in_process("inspect", path, "--tensorrt", "8.6")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  tensorrt     refuses: reverse activation alphas"))
    assert "TensorRT 8.6; not built" in lines[at]
    assert lines[at + 1].strip().startswith("cites builtin_op_importers.cpp DEFINE_BUILTIN_OP_IMPORTER(GRU)") and "8.6-GA ee0b139" in lines[at + 1]
    out = rnnx_in_process("inspect", path, "--json")
    (n,) = json.loads(out.stdout)["nodes"]
    assert n["backend_verdicts"]["tensorrt"] == REFUSED and "10.15" in n["backend_basis"]["tensorrt"]
    bad = rnnx_in_process("inspect", path, "--tensorrt", "9.0")
    assert bad.returncode == 2 and "--tensorrt" in bad.stderr


# --- the files rnnx writes for TensorRT ------------------------------------------------------

WRITABLE = [
    "lstm,input=4,hidden=5", "lstm,input=4,hidden=5,layers=2,bidirectional", "gru,input=4,hidden=5,bidirectional",
    "gru,input=3,hidden=4,reset_before", "rnn_tanh,input=3,hidden=4,reverse", "rnn_relu,input=3,hidden=4,layers=2",
    "lstm,input=3,hidden=4,peepholes", "lstm,input=3,hidden=4,proj=2", "lstm,input=3,hidden=4,clip=0.5,input_forget",
    "gru,input=4,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/Tanh", "gru,input=3,hidden=4,act=Sigmoid/LeakyRelu:0.1",
    "lstm,input=3,hidden=4,act=Sigmoid/Softplus/Tanh", "rnn_tanh,input=3,hidden=4,act=Affine:0.5:0.1",
    "gru,input=3,hidden=4,act=Sigmoid/ScaledTanh:1:2", "rnn_tanh,input=3,hidden=4,bidirectional,act=ThresholdedRelu:0.3",
]
# the native nodes rnnx writes with the cells' default functions, no clip and no coupled gates
DEFAULT_NATIVE = WRITABLE[:7]


def _not_accepted(model: onnx.ModelProto, version: str) -> list[tuple[str, str, list[str]]]:
    return [(v.node, v.verdict, v.reasons) for v in parser_verdicts(model, version) if v.verdict != ACCEPTED]


@pytest.mark.parametrize("version", ["8.5", "8.6", "10.1", "10.x"])
def test_the_lowered_form_rnnx_builds_engines_from_is_accepted(version: str) -> None:
    """build_from_weights' ONNX (the stack, lowered): every node of every spec rnnx writes."""
    for spec in WRITABLE:
        for options in ({}, {"batch_first": True, "sequence_lens": True}):
            model = lowered(spec, **options)
            assert not _not_accepted(model, version), (spec, options, _not_accepted(model, version))
            assert all(r.backend_verdicts["tensorrt"] == ACCEPTED for r in inspect_model(model, judge=predict.with_tensorrt(version)))


def test_the_lowered_form_at_opset_13_is_accepted_by_8_2() -> None:
    for spec in WRITABLE:
        model = lowered(spec, opset=13)
        assert not _not_accepted(model, "8.2"), (spec, _not_accepted(model, "8.2"))


def test_rnnx_lower_output_is_accepted(tmp_path) -> None:
    from rnnx.pipelines.lower import lower_file

    for i, spec in enumerate(["lstm,input=3,hidden=4,layers=2,bidirectional", "gru,input=3,hidden=4,act=Sigmoid/LeakyRelu:0.1",
                              "lstm,input=3,hidden=4,clip=0.5,input_forget"]):
        source, out = tmp_path / f"s{i}.onnx", tmp_path / f"l{i}.onnx"
        rnnx.save(RNNWeights.random(RNNSpec.parse(spec)), source)
        report = lower_file(source, out)
        assert report.lowered and not report.left_alone
        model = onnx.load(str(out))
        for version in ("8.6", "10.x"):
            assert not _not_accepted(model, version), (spec, version, _not_accepted(model, version))


@pytest.mark.parametrize("version", ["8.5", "8.6", "10.1", "10.x"])
def test_converts_native_nodes_with_the_default_functions_are_accepted(tmp_path, version: str) -> None:
    for i, spec in enumerate(DEFAULT_NATIVE):
        path = tmp_path / f"c{i}.onnx"
        rnnx.save(RNNWeights.random(RNNSpec.parse(spec)), path)
        model = onnx.load(str(path))
        assert not _not_accepted(model, version), (spec, _not_accepted(model, version))


def test_converts_native_nodes_that_tensorrt_does_not_run_as_written(tmp_path) -> None:
    """The other specs convert writes as native nodes, and what the table says of them (10.x);
    rnnx lower (or rnnx build --from-weights) gives these a form TensorRT accepts, tested above."""
    want = {
        "lstm,input=3,hidden=4,clip=0.5,input_forget": (REFUSED, "lstm.input_forget"),
        "gru,input=4,hidden=5,bidirectional,act=HardSigmoid:0.2:0.5/Tanh": (REFUSED, "rnn.reverse_differs"),
        "gru,input=3,hidden=4,act=Sigmoid/LeakyRelu:0.1": (DIFFERS, "rnn.activation_params"),
        "lstm,input=3,hidden=4,act=Sigmoid/Softplus/Tanh": (DIFFERS, "lstm.activation_params"),
        "rnn_tanh,input=3,hidden=4,act=Affine:0.5:0.1": (REFUSED, "rnn.activation_name"),
        "gru,input=3,hidden=4,act=Sigmoid/ScaledTanh:1:2": (DIFFERS, "rnn.activation_params"),  # beta 2 read by position: 1.0
        "rnn_tanh,input=3,hidden=4,bidirectional,act=ThresholdedRelu:0.3": (ACCEPTED, "rnn.importer"),
        "lstm,input=3,hidden=4,proj=2": (ACCEPTED, "scan.importer"),  # a projection is written as Scans
    }
    assert set(want) | set(DEFAULT_NATIVE) == set(WRITABLE)
    for i, (spec, (verdict, key)) in enumerate(want.items()):
        path = tmp_path / f"n{i}.onnx"
        rnnx.save(RNNWeights.random(RNNSpec.parse(spec)), path)
        verdicts = [v for v in parser_verdicts(onnx.load(str(path))) if v.op_type in RECURRENT + ("Scan",)]
        assert verdicts and tensorrt_parser.worst_verdict([v.verdict for v in verdicts]) == verdict, (spec, [v.reasons for v in verdicts])
        assert any(key in keys(v) for v in verdicts), spec
