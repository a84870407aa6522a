"""TensorRT's ONNX parser (onnx-tensorrt) as data: what its importers do with each construct,
in which TensorRT versions, with the source file, function and condition each rule rests on.

Read from onnx-tensorrt's own source (``git show TAG:FILE`` on a mirror of
github.com/onnx/onnx-tensorrt, and GitHub's stored copy of ``main``), not from its
documentation, where the two disagree (``docs/operators.md`` says an LSTM's ``layout`` must
be 0; no importer reads ``layout``). Where a version's source was not read, the row says so;
TensorRT 11.x had no branch or tag in that source, so every 11.x verdict is "unknown".

Verdicts: ``accepted``; ``refused`` (the parser reports an error and builds nothing);
``builds but computes differently`` (the network builds, and computes something other than
the ONNX node as ONNX Runtime runs it: what differs is in the rule); ``unknown`` (the table
holds none of the conditions that decide, or the version's source was not read).

:func:`parser_verdicts` applies the table to every node of a model (subgraphs included) and
judges a recurrence rnnx lowered into Scans by those Scans (the record in ``rnnx.lowered``),
never by the native node's rule. :class:`ParserTable` is the same table for ``rnnx inspect``
(:mod:`rnnx.engines.acceptance`). A verdict is a prediction: nothing here builds an engine.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rnnx.errors import RNNXError
from rnnx.formats.onnx_read import read_lowered
from rnnx.graphs.inspect import NodeReport
from rnnx.spec import ACTIVATION_PARAMETERS

ACCEPTED = "accepted"
REFUSED = "refused"
DIFFERS = "builds but computes differently"
UNKNOWN = "unknown"
VERDICTS = (ACCEPTED, REFUSED, DIFFERS, UNKNOWN)
_RANK = {ACCEPTED: 0, UNKNOWN: 1, DIFFERS: 2, REFUSED: 3}

#: The versions the table distinguishes. "10.x" is the newest 10.x read (10.15); "10.0" reads
#: as 10.1 (both tags read; they agree on every rule here). 10.2 to 10.14 were not read.
VERSIONS = ("8.2", "8.5", "8.6", "10.1", "10.15", "11.x")
ALIASES = {"10.x": "10.15", "10.0": "10.1"}
KNOWN_VERSIONS = VERSIONS + tuple(ALIASES)
DEFAULT_VERSION = "10.x"

V8 = ("8.2", "8.5", "8.6")
V10 = ("10.1", "10.15")
ALL = V8 + V10


@dataclass(frozen=True)
class Source:
    """What was read for one version: the tag or commit, and where that version keeps its importers."""

    version: str
    ref: str  # tag and commit, as read
    importers: str  # the file holding DEFINE_BUILTIN_OP_IMPORTER
    checks: str  # where a node's conditions are tested
    utils: str  # convertDtype, getActivationDefaultAlpha, parseLSTMActivationValues
    read: str  # the files read, and how


SOURCES: dict[str, Source] = {
    "8.2": Source("8.2", "8.2-GA f42daee", "builtin_op_importers.cpp", "builtin_op_importers.cpp (ASSERT inside the importer)",
                  "onnx2trt_utils.cpp", "git show 8.2-GA:{builtin_op_importers.cpp, onnx2trt_utils.cpp, OnnxAttrs.cpp, RNNHelpers.cpp, "
                  "ModelImporter.cpp, docs/operators.md}"),
    "8.5": Source("8.5", "8.5-GA fdeeaca", "builtin_op_importers.cpp", "builtin_op_importers.cpp (ASSERT inside the importer)",
                  "onnx2trt_utils.cpp", "git show 8.5-GA:{the same files}"),
    "8.6": Source("8.6", "8.6-GA ee0b139", "builtin_op_importers.cpp", "builtin_op_importers.cpp (ASSERT inside the importer)",
                  "onnx2trt_utils.cpp", "git show 8.6-GA:{the same files}"),
    "10.1": Source("10.1", "10.1-GA 96e7811 (10.0-GA 73f629e agrees)", "onnxOpImporters.cpp",
                   "onnxOpCheckers.cpp (STATIC_CHECK, before any importer runs) and onnxOpImporters.cpp (ASSERT_NODE)",
                   "importerUtils.cpp", "git show 10.1-GA:{onnxOpImporters.cpp, onnxOpCheckers.cpp, importerUtils.cpp, OnnxAttrs.cpp, "
                   "RNNHelpers.cpp, ModelImporter.cpp, docs/operators.md}; 10.0-GA's onnxOpImporters.cpp and onnxOpCheckers.cpp"),
    "10.15": Source("10.15", "main dd0a3a9 (its README: TensorRT 10.15)", "onnxOpImporters.cpp",
                    "onnxOpCheckers.cpp (STATIC_CHECK) and onnxOpImporters.cpp (ONNXTRT_CHECK_NODE)", "importerUtils.cpp",
                    "GitHub's stored main: onnxOpCheckers.cpp (all of it); onnxOpImporters.cpp: the LSTM, GRU, RNN, Scan, Loop, If, "
                    "Cast, Clip, Concat, Constant, ConstantOfShape, Shape, Slice, Reshape, Sigmoid, HardSigmoid, LeakyRelu, Less "
                    "and Identity importers; importerUtils.cpp at fa5aa9f (a later 10.x main commit: convertDtype, "
                    "getActivationDefaultAlpha, parseLSTMActivationValues). Not available at 10.15: OnnxAttrs.cpp, RNNHelpers.cpp, "
                    "ModelImporter.cpp (rows citing them rest on 10.1-GA)"),
    "11.x": Source("11.x", "not available", "", "", "",
                   "no onnx-tensorrt branch or tag for TensorRT 11 in the source read (newest tag 10.1-GA; main is 10.15)"),
}


@dataclass(frozen=True)
class ParserRule:
    """One construct: what the parser does with it in ``versions``, and where the source says so."""

    key: str  # what the rule is about; rows with one key differ only in versions and source
    construct: str
    ops: tuple[str, ...]  # the op types it applies to; ("*",) every node; () the model
    versions: tuple[str, ...]
    verdict: str
    file: str
    function: str
    condition: str  # the source's own test, or what the code does
    differs: str = ""  # for DIFFERS: what is computed instead
    read_at: str = ""  # where this row was read when not every version's source holds it
    note: str = ""

    def citation(self, version: str) -> str:
        where = self.read_at or SOURCES[version].ref
        return f"{self.file} {self.function}: {self.condition} [{where}]"


def _rows() -> tuple[ParserRule, ...]:
    R = ParserRule
    I8, I10, C10, U8, U10 = "builtin_op_importers.cpp", "onnxOpImporters.cpp", "onnxOpCheckers.cpp", "onnx2trt_utils.cpp", "importerUtils.cpp"
    not_read_1015 = "10.1-GA 96e7811; at 10.15 (main dd0a3a9) only the op's checker was read, an empty one"
    attrs_1015 = "10.1-GA 96e7811; OnnxAttrs.cpp at 10.15 was not available (10.15's checkers and importers call it the same way)"
    rows: list[ParserRule] = []

    # --- the recurrent ops ---------------------------------------------------------------
    for op, fn in (("LSTM", "LSTM"), ("GRU", "GRU"), ("RNN", "RNN")):
        rows += [
            R("rnn.importer", f"{op}: imported as a TensorRT loop over X's first axis", (op,), V8, ACCEPTED, I8,
              f"DEFINE_BUILTIN_OP_IMPORTER({fn})", "addLoop(); tripLimit = getAxisLength(ctx, input, 0) (\"The input is in SBE format\")"),
            R("rnn.importer", f"{op}: imported as a TensorRT loop over X's first axis", (op,), V10, ACCEPTED, I10,
              f"DEFINE_BUILTIN_OP_IMPORTER({fn}) after DEFINE_OP_CHECKER({fn}) in {C10}",
              "addLoop(); tripLimit = getAxisLength(ctx, input, 0) (\"The input is in SBE format\")"),
            R("rnn.activation_name", f"{op}: an activation name the parser does not know (Affine, or any other spelling)", (op,), V8 + V10,
              REFUSED, "OnnxAttrs.cpp", "activationStringToEnum",
              "compares case-sensitively with Relu, Tanh, Sigmoid, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, "
              "Softsign, Softplus; else throw std::runtime_error(\"Unknown activation type: \" + type)",
              read_at="8.2-GA, 8.5-GA, 8.6-GA, " + attrs_1015),
            R("rnn.activation_count", f"{op}: fewer activations than functions per direction times directions", (op,), ALL, REFUSED,
              I8 + " / " + I10, f"DEFINE_BUILTIN_OP_IMPORTER({fn})",
              "activations.at(k) past the list throws std::out_of_range (the bidirectional check's std::equal reads past it); "
              "ONNX Runtime refuses such a node too", read_at="8.2-GA to 10.1-GA; main dd0a3a9"),
            R("rnn.reverse_differs", f"{op} bidirectional: reverse activations, alphas or betas (as the parser fills them) differ from forward",
              (op,), V8, REFUSED, I8, f"DEFINE_BUILTIN_OP_IMPORTER({fn})",
              "ASSERT(std::equal(activations.begin(), activations.begin() + NUM_ACTIVATIONS, activations.begin() + NUM_ACTIVATIONS) "
              "&& ...), the same for activationAlphas and activationBetas"),
            R("rnn.reverse_differs", f"{op} bidirectional: reverse activations, alphas or betas (as the parser fills them) differ from forward",
              (op,), V10, REFUSED, C10, f"DEFINE_OP_CHECKER({fn})",
              "STATIC_CHECK(std::equal(activations.begin(), activations.begin() + NUM_ACTIVATIONS, activations.begin() + "
              "NUM_ACTIVATIONS) && \"The parser does not currently support cases where activations for the reverse pass of the "
              f"{op} do not match the forward pass.\"), the same for activationAlphas and activationBetas"),
            R("rnn.layout", f"{op} with layout=1 (batch-major)", (op,), ALL, DIFFERS, I8 + " / " + I10, f"DEFINE_BUILTIN_OP_IMPORTER({fn})",
              "no importer or checker reads \"layout\": X is taken as [seq, batch, input] (\"The input is in SBE format\")",
              differs="the batch axis is iterated as time and the time axis as batch (a build error instead where initial states "
                      "or sequence_lens give the real batch size)",
              note="docs/operators.md (10.x) says \"`layout` attribute must be 0\"; nothing in the code checks it"),
            R("rnn.sequence_lens", f"{op} with sequence_lens", (op,), ALL, ACCEPTED, "RNNHelpers.cpp",
              "addRNNInput / maskRNNHidden / maskBidirRNNHidden; concatenateRNNOutputs",
              "inputs past each sequence's end are zeroed and the state carried; the reverse direction starts at each sequence's "
              "own end (getRaggedMask: maxLen - counter); Y past the end is zeroed (clearMissingSequenceElements)",
              read_at="8.2-GA to 10.1-GA; RNNHelpers.cpp at 10.15 was not available (its importers call the same helpers)"),
        ]
    rows += [
        R("lstm.input_forget", "LSTM with input_forget=1 (coupled input and forget gates)", ("LSTM",), V8, REFUSED, I8,
          "DEFINE_BUILTIN_OP_IMPORTER(LSTM)", "ASSERT(inputForget == 0 && \"Coupled input/forget is unsupported in the LSTM converter\")"),
        R("lstm.input_forget", "LSTM with input_forget=1 (coupled input and forget gates)", ("LSTM",), V10, REFUSED, C10,
          "DEFINE_OP_CHECKER(LSTM)", "STATIC_CHECK(inputForget == 0 && \"Coupled input/forget is unsupported in the LSTM converter\")"),
        R("lstm.clip", "LSTM with clip", ("LSTM",), ALL, DIFFERS, I8 + " / " + I10, "DEFINE_BUILTIN_OP_IMPORTER(LSTM)",
          "hAct = addActivation(*addClip(ctx, Ct, clip), activations.at(2)): the cell state is clipped before h()",
          differs="h() is applied to C(t) clipped to [-clip, clip]; ONNX Runtime clips only the gates' inputs and applies h() to "
                  "the unclipped cell state"),
        R("rnn.clip", "GRU or RNN with clip", ("GRU", "RNN"), ALL, ACCEPTED, I8 + " / " + I10, "DEFINE_BUILTIN_OP_IMPORTER(GRU|RNN)",
          "addClip(ctx, <gate input>, clip) before each activation, as ONNX Runtime clips"),
        R("lstm.peepholes", "LSTM with peepholes (P)", ("LSTM",), ALL, ACCEPTED, I8 + " / " + I10, "DEFINE_BUILTIN_OP_IMPORTER(LSTM)",
          "if (inputs.size() > 7 && inputs.at(7)): addPeephole(i, C(t-1), 0), (f, C(t-1), 2), (o, C(t), 1): ONNX's P[iof] order"),
        R("gru.linear_before_reset", "GRU with linear_before_reset 0 or 1", ("GRU",), ALL, ACCEPTED, I8 + " / " + I10,
          "DEFINE_BUILTIN_OP_IMPORTER(GRU)", "if (linearBeforeReset == 0) ... else ...: both forms built"),
        R("lstm.activation_params", "LSTM: an activation whose alpha or beta the parser fills otherwise than ONNX Runtime reads it",
          ("LSTM",), V8, DIFFERS, U8, "parseLSTMActivationValues",
          "a value is taken from activation_alpha/beta only where getActivationDefaultAlpha/Beta(type) != 0.f; else the default",
          differs="Softplus (default alpha and beta 0): alpha*log(exp(beta*x)+1) with 0 and 0 outputs 0, where ONNX's Softplus is "
                  "log(1+exp(x)); ThresholdedRelu/ScaledTanh without a value get 1.0 where ONNX Runtime uses 0"),
        R("lstm.activation_params", "LSTM: an activation whose alpha or beta the parser fills otherwise than ONNX Runtime reads it",
          ("LSTM",), V10, DIFFERS, U10, "parseLSTMActivationValues",
          "a value is taken from activation_alpha/beta only where getActivationDefaultAlpha/Beta(type) != 0.f; else the default",
          differs="Softplus (default alpha and beta 0): alpha*log(exp(beta*x)+1) with 0 and 0 outputs 0, where ONNX's Softplus is "
                  "log(1+exp(x)); ThresholdedRelu/ScaledTanh without a value get 1.0 where ONNX Runtime uses 0",
          read_at="10.1-GA 96e7811; importerUtils.cpp @ fa5aa9f (after 10.8); main dd0a3a9's checker and importer call it"),
    ]
    for op in ("GRU", "RNN"):
        rows += [
            R("rnn.activation_params", f"{op}: activation_alpha/beta filled by position, not handed to the functions that take them",
              (op,), V8, DIFFERS, I8, f"DEFINE_BUILTIN_OP_IMPORTER({op})",
              "std::transform(activations.begin() + activationAlphas.size(), activations.end(), std::back_inserter(activationAlphas), "
              "&getActivationDefaultAlpha): function k gets activation_alpha[k], the rest their defaults",
              differs="a function that takes alpha after one that does not gets the wrong value (GRU Sigmoid/LeakyRelu:0.1 runs "
                      "LeakyRelu with 0.01)"),
            R("rnn.activation_params", f"{op}: activation_alpha/beta filled by position, not handed to the functions that take them",
              (op,), V10, DIFFERS, I10 + " and " + C10, f"DEFINE_BUILTIN_OP_IMPORTER({op}), DEFINE_OP_CHECKER({op})",
              "std::transform(activations.begin() + activationAlphas.size(), activations.end(), std::back_inserter(activationAlphas), "
              "&getActivationDefaultAlpha): function k gets activation_alpha[k], the rest their defaults",
              differs="a function that takes alpha after one that does not gets the wrong value (GRU Sigmoid/LeakyRelu:0.1 runs "
                      "LeakyRelu with 0.01)"),
        ]
    rows += [
        R("rnn.half_zero_state", "LSTM/GRU/RNN with float16 or bfloat16 X and no initial state: the importer's zero state is FLOAT",
          ("LSTM", "GRU", "RNN"), V8 + ("10.1",), UNKNOWN, I8 + " / " + I10, "getInitialInputValue (in each importer)",
          "constantOfShape(ctx, addConstantScalar(ctx, 0.f, TensorProto_DataType_FLOAT, ...)) feeds addRecurrence",
          note="whether TensorRT's builder then casts or fails is in TensorRT, not in the parser"),
        R("rnn.half_zero_state", "GRU/RNN with float16 or bfloat16 X and no initial state: the importer's zero state is FLOAT",
          ("GRU", "RNN"), ("10.15",), UNKNOWN, I10, "getInitialInputValue (GRU, RNN importers)",
          "constantOfShape(ctx, addConstantScalar(ctx, 0.f, TensorProto_DataType_FLOAT, 1)->getOutput(0), ...) (the LSTM importer "
          "makes HALF or BF16 zeros at 10.15)", note="whether TensorRT's builder then casts or fails is in TensorRT, not in the parser"),
    ]

    # --- Scan, Loop, If --------------------------------------------------------------------
    for versions, file, ref in ((V8, I8, ""), (V10, I10, "")):
        rows += [
            R("scan.importer", "Scan: a TensorRT loop; scan_input_directions / scan_output_directions honoured", ("Scan",), versions,
              ACCEPTED, file, "DEFINE_BUILTIN_OP_IMPORTER(Scan)",
              "tripLimit from the last scan input's axis; scanInput->setReverse(scanInputDirections.at(i) == 1); "
              "scan outputs kCONCATENATE or kREVERSE; state outputs kLAST_VALUE", read_at=ref),
            R("scan.opset8_sequence_lens", "Scan at opset 8 with a sequence_lens input", ("Scan",), versions, REFUSED, file,
              "DEFINE_BUILTIN_OP_IMPORTER(Scan)", "opset 8: inputs.at(0).isNullTensor() && \"TensorRT doesn't support sequence_lens input "
              "for this node!\""),
            R("loop.importer", "Loop: a TensorRT loop with the trip count and/or the condition", ("Loop",), versions, ACCEPTED, file,
              "DEFINE_BUILTIN_OP_IMPORTER(Loop)", "inputs.size() >= 2; addTripLimit(kCOUNT) for M, addTripLimit(kWHILE) for cond"),
            R("if.importer", "If: both branches imported into an IIfConditionalLayer (a constant condition imports one branch, 10.x)",
              ("If",), versions, ACCEPTED, file, "DEFINE_BUILTIN_OP_IMPORTER(If)",
              "thenGraph.output_size() == elseGraph.output_size()"),
            R("if.output_count", "If whose branches have different numbers of outputs", ("If",), versions, REFUSED, file,
              "DEFINE_BUILTIN_OP_IMPORTER(If)" + (f" and DEFINE_OP_CHECKER(If) in {C10}" if versions == V10 else ""),
              "thenGraph.output_size() == elseGraph.output_size() && \"then/else subgraphs should have the same number of outputs.\""),
        ]
    rows += [
        R("loop.scan_output_length", "Loop with scan outputs and no trip count (M absent, or INT32_MAX as \"use cond\")", ("Loop",),
          V8 + ("10.1",), DIFFERS, I8 + " / " + I10, "DEFINE_BUILTIN_OP_IMPORTER(Loop)",
          "if (tripLimit) trtScanOut->setInput(1, *tripLimit); else setInput(1, addConstantScalar(ctx, MAX_SCAN_OUTPUT_LENGTH (8.2, "
          "8.5) / DUMMY_SCAN_OUTPUT_LENGTH (8.6, 10.x) = 1024)) (\"the scan outputs must not be used in the rest of the model\")",
          differs="each scan output has a fixed length of 1024, whatever the number of iterations"),
        R("loop.scan_output_length", "Loop with scan outputs and no trip count (M absent, or INT32_MAX as \"use cond\")", ("Loop",),
          ("10.15",), REFUSED, I10, "DEFINE_BUILTIN_OP_IMPORTER(Loop)",
          "ONNXTRT_CHECK_NODE(false, \"TensorRT cannot infer the shape of scan output ... since no trip limit was set.\")"),
    ]

    # --- graph ops rnnx writes, and common ones ------------------------------------------
    layers = {
        "MatMul": "IMatrixMultiplyLayer", "Gemm": "IMatrixMultiplyLayer + bias", "Add": "elementwiseHelper(kSUM)",
        "Sub": "elementwiseHelper(kSUB)", "Mul": "elementwiseHelper(kPROD)", "Div": "elementwiseHelper(kDIV)",
        "Less": "elementwiseHelper(kLESS)", "Greater": "elementwiseHelper(kGREATER)", "Equal": "elementwiseHelper(kEQUAL)",
        "Sigmoid": "activationHelper(kSIGMOID)", "Tanh": "activationHelper(kTANH)", "Relu": "activationHelper(kRELU)",
        "HardSigmoid": "activationHelper(kHARD_SIGMOID, alpha (0.2), beta (0.5) from the node)",
        "LeakyRelu": "activationHelper(kLEAKY_RELU, alpha (0.01) from the node)",
        "ThresholdedRelu": "activationHelper(kTHRESHOLDED_RELU, alpha (1.0) from the node)",
        "Elu": "activationHelper(kELU, alpha (1.0) from the node)", "Softsign": "activationHelper(kSOFTSIGN)",
        "Softplus": "activationHelper(kSOFTPLUS) with no alpha or beta passed",
        "Concat": "IConcatenationLayer", "Slice": "ISliceLayer (3 to 5 inputs at opset >= 10)", "Gather": "IGatherLayer",
        "Squeeze": "IShuffleLayer (axes input at opset >= 13)", "Unsqueeze": "IShuffleLayer (axes input at opset >= 13)",
        "Transpose": "IShuffleLayer", "Reshape": "IShuffleLayer", "Cast": "ICastLayer (10.x) / identity with output type (8.x)",
        "Shape": "IShapeLayer", "ConstantOfShape": "constantOfShape(value)", "Constant": "weights (not a layer)",
        "Expand": "ISliceLayer with stride 0", "Split": "ISliceLayer per output (split sizes input at opset >= 13)",
        "Where": "ISelectLayer", "Range": "IFillLayer (kLINSPACE)", "Clip": "activationHelper(kCLIP) (constant bounds) or max/min "
        "elementwise (tensor bounds)", "Identity": "IIdentityLayer", "Neg": "unaryHelper(kNEG)", "Flatten": "IShuffleLayer",
        "ReverseSequence": "IReverseSequenceLayer",
    }
    read_1015 = {"Cast", "Clip", "Concat", "Constant", "ConstantOfShape", "Shape", "Slice", "Reshape", "Sigmoid", "HardSigmoid",
                 "LeakyRelu", "Less", "Identity"}
    for op, layer in layers.items():
        rows.append(R("op.importer", f"{op}", (op,), V8, ACCEPTED, I8, f"DEFINE_BUILTIN_OP_IMPORTER({op})", layer))
        rows.append(R("op.importer", f"{op}", (op,), V10, ACCEPTED, I10, f"DEFINE_BUILTIN_OP_IMPORTER({op})", layer,
                      read_at="" if op in read_1015 else not_read_1015,
                      note="standalone Softplus: the layer keeps IActivationLayer's own alpha/beta, which TensorRT sets, not the "
                           "parser (not verified here)" if op == "Softplus" else ""))
    rows += [
        R("elementwise.bool", "Add/Sub/Mul/Div/Less/Greater on a BOOL input", ("Add", "Sub", "Mul", "Div", "Less", "Greater"), V8,
          REFUSED, U8, "elementwiseCheck", "ASSERT(elementwiseCheck(inputs, binary_op) && \"Elementwise layer does not support the given "
          "inputs and operator.\"): kSUM, kSUB, kPROD, kDIV, kLESS, kGREATER refuse isBool()"),
        R("elementwise.bool", "Add/Sub/Mul/Div/Less/Greater on a BOOL input", ("Add", "Sub", "Mul", "Div", "Less", "Greater"), V10,
          REFUSED, U10, "elementwiseCheck", "ASSERT_NODE(!std::any_of(..., input.isBool()), \"Elementwise layer does not support "
          "operator ... and the given inputs with type BOOL.\")", read_at="10.1-GA 96e7811; importerUtils.cpp @ fa5aa9f"),
        R("matmul.int", "MatMul/Gemm on INT32 (8.x) or INT32/INT64 (10.x) inputs", ("MatMul", "Gemm"), V8, REFUSED, I8,
          "DEFINE_BUILTIN_OP_IMPORTER(MatMul|Gemm)", "8.2: ASSERT(inputA->getType() != kINT32 && inputB->getType() != kINT32); "
          "8.5, 8.6: CHECK(notInvalidType(inputs.at(0), {\"INT32\"}))"),
        R("matmul.int", "MatMul/Gemm on INT32 (8.x) or INT32/INT64 (10.x) inputs", ("MatMul", "Gemm"), V10, REFUSED, I10,
          "DEFINE_BUILTIN_OP_IMPORTER(MatMul|Gemm)", "CHECK_STATUS(notInvalidType(inputs.at(0), {\"INT32\", \"INT64\"}, node, nodeIdx))",
          read_at=not_read_1015),
        R("constant.value_kind", "Constant with sparse_value, value_string or value_strings", ("Constant",), V8, REFUSED, I8,
          "DEFINE_BUILTIN_OP_IMPORTER(Constant)", "ASSERT((!attrs.count(\"sparse_value\")) && (!attrs.count(\"value_string\")) && "
          "(!attrs.count(\"value_strings\")) && ...)"),
        R("constant.value_kind", "Constant with sparse_value, value_string or value_strings", ("Constant",), V10, REFUSED, C10,
          "DEFINE_OP_CHECKER(Constant)", "STATIC_CHECK((!attrs.count(\"sparse_value\")) && (!attrs.count(\"value_string\")) && "
          "(!attrs.count(\"value_strings\")) && \"This version of TensorRT does not support the sparse_value, value_string and "
          "value_strings attributes.\")"),
        R("constantofshape.uint8", "ConstantOfShape whose value is UINT8", ("ConstantOfShape",), ("8.5", "8.6"), REFUSED, I8,
          "DEFINE_BUILTIN_OP_IMPORTER(ConstantOfShape)", "CHECK(notInvalidType(valueWeights, {\"UINT8\"}))"),
        R("constantofshape.uint8", "ConstantOfShape whose value is UINT8", ("ConstantOfShape",), V10, REFUSED, C10,
          "DEFINE_OP_CHECKER(ConstantOfShape)", "STATIC_CHECK(notInvalidType(valueWeights, {\"UINT8\"}, ...).is_success() && "
          "\"Invalid input type for ConstantOfShape\")"),
        R("slice.inputs", "Slice at opset >= 10 with other than 3 to 5 inputs", ("Slice",), V8, REFUSED, I8,
          "DEFINE_BUILTIN_OP_IMPORTER(Slice)", "ASSERT((nbInputs >= 3 && nbInputs <= 5) && \"Post-opset 10 Slice operator requires "
          "3 - 5 inputs.\")"),
        R("slice.inputs", "Slice at opset >= 10 with other than 3 to 5 inputs", ("Slice",), V10, REFUSED, C10,
          "DEFINE_OP_CHECKER(Slice)", "STATIC_CHECK((nbInputs >= 3 && nbInputs <= 5) && \"Post-opset 10 Slice operator requires 3 - 5 "
          "inputs.\")"),
        R("op.no_importer", "an op type with no importer of that name (its domain is not looked at)", ("*",), V8, REFUSED, I8,
          "DEFINE_BUILTIN_OP_IMPORTER(FallbackPluginImporter), reached from ModelImporter.cpp parseGraph",
          "ASSERT(creator && \"Plugin not found, are the plugin name, version, and namespace correct?\")",
          note="refused unless a TensorRT plugin of that name is registered"),
        R("op.no_importer", "an op type with no importer of that name (its domain is not looked at)", ("*",), V10, REFUSED, C10,
          "DEFINE_OP_CHECKER(FallbackPluginImporter), reached from ModelImporter.cpp parseNodeStaticCheck",
          "STATIC_CHECK(creator && \"Plugin not found, are the plugin name, version, and namespace correct?\")",
          note="refused unless a TensorRT plugin of that name is registered"),
        R("op.not_in_table", "an op with an importer whose conditions this table does not hold", ("*",), ALL, UNKNOWN,
          I8 + " / " + I10, "DEFINE_BUILTIN_OP_IMPORTER(<op>)", "the importer exists; its conditions were not tabulated"),
        R("graph.nesting", "subgraphs nested more than 24 deep", ("*",), V10, REFUSED, "ModelImporter.cpp", "parseNode",
          "ctx->getNestedDepth() > kMAX_NESTED_SUBGRAPHS (24): \"ONNX graph contains nested structures that exceed the maximum "
          "allowed by TensorRT!\"", read_at="10.1-GA 96e7811; ModelImporter.cpp at 10.15 was not available"),
    ]

    # --- element types -------------------------------------------------------------------
    rows += [
        R("dtype.unsupported", "a tensor of an element type convertDtype does not map", ("*",), V8, REFUSED, U8, "convertDtype",
          "default: std::cerr << \"Unsupported ONNX data type\" ...; return false (8.x maps DOUBLE, FLOAT, INT8, FLOAT16, BOOL, INT32, "
          "INT64, and UINT8 from 8.5: no BFLOAT16)"),
        R("dtype.unsupported", "a tensor of an element type convertDtype does not map", ("*",), V10, REFUSED, U10, "convertDtype",
          "default: ... return false (maps DOUBLE, FLOAT, INT8, UINT8, FLOAT16, BFLOAT16, BOOL, INT32, INT64, FLOAT8E4M3FN, INT4, "
          "and FLOAT4E2M1 at 10.15)", read_at="10.1-GA 96e7811; importerUtils.cpp @ fa5aa9f"),
        R("dtype.double", "a DOUBLE tensor", ("*",), ALL, DIFFERS, U8 + " / " + U10, "convertDtype",
          "case ::ONNX_NAMESPACE::TensorProto::DOUBLE: *trt_dtype = nvinfer1::DataType::kFLOAT",
          differs="computed in float32 (docs/operators.md: values clamped to +-FLT_MAX)"),
        R("dtype.int64", "an INT64 tensor (8.x)", ("*",), V8, ACCEPTED, U8, "convertDtype",
          "case INT64: *trt_dtype = nvinfer1::DataType::kINT32 (\"See convertOnnxWeights for sanity check if all values can be "
          "safetly downcasted to INT32\")", note="values past INT32 are clamped"),
    ]

    # --- the model -----------------------------------------------------------------------
    documented = {"8.2": "up to Opset 13", "8.5": "up to Opset 17", "8.6": "up to Opset 17", "10.1": "opset 9 to opset 20 (written for 10.0)",
                  "10.15": "not read at 10.15 (10.1-GA's docs: opset 9 to opset 20)"}
    for version, text in documented.items():
        rows.append(R("model.opset", "the model's ai.onnx opset", (), (version,), ACCEPTED, "ModelImporter.cpp",
                      "ModelImporter::importModel", "if ((domain.empty() || domain == \"ai.onnx\") && version < 7) LOG_WARNING(...): no "
                      "upper bound in the code", read_at=SOURCES[version].ref if version != "10.15" else "10.1-GA 96e7811",
                      note=f"docs/operators.md: {text}"))

    # --- TensorRT 11 ------------------------------------------------------------------------
    rows.append(R("version.unavailable", "anything, in TensorRT 11.x", ("*",), ("11.x",), UNKNOWN, "-", "-",
                  "onnx-tensorrt's source for TensorRT 11 was not available", read_at="not read",
                  note="no branch or tag for 11 in the mirror read (newest: 10.1-GA; main at dd0a3a9 is 10.15)"))
    return tuple(rows)


#: The table: every row, each a frozen dataclass.
RULES: tuple[ParserRule, ...] = _rows()


def rules_for(version: str) -> tuple[ParserRule, ...]:
    v = resolve_version(version)
    return tuple(r for r in RULES if v in r.versions)


def resolve_version(version: str | None) -> str:
    """``version`` as the table names it ("10.x" is 10.15, "10.0" reads as 10.1)."""
    v = DEFAULT_VERSION if version is None else str(version).strip()
    v = ALIASES.get(v, v)
    if v not in VERSIONS:
        raise RNNXError(f"TensorRT version: expected one of {', '.join(KNOWN_VERSIONS)}, found {version!r} "
                        "(10.2 to 10.14 were not read; 10.x is the newest read, 10.15)")
    return v


def parser_for(version: str | None) -> tuple[str, str]:
    """The table version that judges the nodes for TensorRT ``version`` (any release, ``8.6.1``,
    ``10.3``), and a note where it is not that version's own: a version between two read ones of
    the same major is judged by the one below it. Refused where neither side was read."""
    text = DEFAULT_VERSION if version is None else str(version).strip()
    if text in KNOWN_VERSIONS:
        table = resolve_version(text)
        alias = text in ALIASES and text != DEFAULT_VERSION and not text.endswith(".x")
        return table, (f"TensorRT {text}'s parser is judged by {table}'s rules (both tags read; they agree on every rule rnnx keeps)"
                       if alias else "")
    import re

    if not re.fullmatch(r"\d+\.\d+(\.\d+)*", text):
        raise RNNXError(f"tensorrt: expected a TensorRT version like 8.6 or 10.3.0 (or one of {', '.join(KNOWN_VERSIONS)}), found {version!r}")

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split(".")[:2])

    wanted = key(text)
    read = [v for v in VERSIONS if re.fullmatch(r"\d+\.\d+", v)]
    exact = [v for v in read if key(v) == wanted]
    if exact:
        return exact[0], ""
    below = [v for v in read if key(v) < wanted and key(v)[0] == wanted[0]]
    above = [v for v in read if key(v) > wanted and key(v)[0] == wanted[0]]
    if not below or not above:
        raise RNNXError(f"tensorrt: expected a TensorRT whose ONNX parser rnnx has read ({', '.join(read)}), or a release between two read "
                        f"ones of the same major, found {text}; give one of those")
    lower, upper = max(below, key=key), min(above, key=key)
    return lower, (f"TensorRT {text}'s parser source was not read: its nodes are judged by {lower}'s rules (the read version below it; "
                   f"{upper} is the one above)")


def version_label(version: str | None) -> str:
    v = resolve_version(version)
    return "10.x (10.15)" if v == "10.15" else v


# --- which op types have an importer (every DEFINE_BUILTIN_OP_IMPORTER, per version) ---------

_IMPORTERS_82 = frozenset("""
Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization Cast Ceil Celu Clip Concat Constant
ConstantOfShape Conv ConvTranspose Cos Cosh CumSum DepthToSpace DequantizeLinear Div Dropout Einsum Elu Equal Erf Exp Expand
EyeLike Flatten Floor GRU Gather GatherElements GatherND Gemm GlobalAveragePool GlobalLpPool GlobalMaxPool Greater GreaterOrEqual
HardSigmoid Identity If ImageScaler InstanceNormalization IsNaN LRN LSTM LeakyRelu Less LessOrEqual Log LogSoftmax Loop
LpNormalization LpPool MatMul Max MaxPool Mean Min Mul Neg NonMaxSuppression Not Or PRelu Pad ParametricSoftplus Pow
QuantizeLinear RNN RandomUniform RandomUniformLike Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax
ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize ReverseSequence Round ScaledTanh Scan Scatter
ScatterElements ScatterND Selu Shape Sigmoid Sign Sin Sinh Size Slice Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze
Sub Sum TRT_AveragePool TRT_Conv TRT_Deconv TRT_FloorDiv TRT_FullyConnected TRT_Gather TRT_MatMul TRT_MaxAverageBlendPool
TRT_MaxPool TRT_PluginV2 TRT_RNNv2 TRT_RaggedSoftmax TRT_Resize TRT_Scale TRT_Shuffle TRT_Slice TRT_TopK_Min Tan Tanh
ThresholdedRelu Tile TopK Transpose Unsqueeze Upsample Where
""".split())
_IMPORTERS_85 = _IMPORTERS_82 | frozenset("GridSample HardSwish MeanVarianceNormalization Mod NonZero OneHot RandomNormal "
                                          "RandomNormalLike RoiAlign Shrink Trilu Xor".split())
_IMPORTERS_86 = _IMPORTERS_85 | frozenset("GroupNormalization IsInf LayerNormalization TRT_FP8DequantizeLinear "
                                          "TRT_FP8QuantizeLinear".split())
_IMPORTERS_101 = (_IMPORTERS_86 - {"TRT_FullyConnected", "TRT_RNNv2"}) | frozenset(
    "CastLike DeformConv Gelu Hardmax Mish TRT_INT4DequantizeLinear TRT_INT4QuantizeLinear".split())
# 10.15: 10.1's, and the checkers main dd0a3a9 adds (every importer needs a checker: ModelImporter.cpp parseNodeStaticCheck)
_IMPORTERS_1015 = _IMPORTERS_101 | frozenset(
    "Attention TRT_QuantizedAttention TRT_FP4DynamicQuantize TRT_DynamicQuantize TRT_BlockQuantize TRT_BlockDequantize "
    "BlackmanWindow HammingWindow HannWindow STFT RMSNormalization RotaryEmbedding TensorScatter TRT_MXFP8QuantizeLinear "
    "TRT_MXFP8DequantizeLinear TRT_MXFP8DynamicQuantize".split())
IMPORTERS: dict[str, frozenset[str]] = {"8.2": _IMPORTERS_82, "8.5": _IMPORTERS_85, "8.6": _IMPORTERS_86, "10.1": _IMPORTERS_101,
                                        "10.15": _IMPORTERS_1015}

# ONNX element types (TensorProto.DataType) convertDtype maps, per version
_DT = {"FLOAT": 1, "UINT8": 2, "INT8": 3, "INT32": 6, "INT64": 7, "BOOL": 9, "FLOAT16": 10, "DOUBLE": 11, "BFLOAT16": 16,
       "FLOAT8E4M3FN": 17, "INT4": 22, "FLOAT4E2M1": 23}
_DT_NAMES = {1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64", 8: "STRING", 9: "BOOL", 10: "FLOAT16",
             11: "DOUBLE", 12: "UINT32", 13: "UINT64", 14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16", 17: "FLOAT8E4M3FN",
             18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1"}
_DTYPES_82 = frozenset(_DT[n] for n in ("DOUBLE", "FLOAT", "INT8", "FLOAT16", "BOOL", "INT32", "INT64"))
_DTYPES_85 = _DTYPES_82 | {_DT["UINT8"]}
_DTYPES_101 = _DTYPES_85 | {_DT["BFLOAT16"], _DT["FLOAT8E4M3FN"], _DT["INT4"]}
DTYPES: dict[str, frozenset[int]] = {"8.2": _DTYPES_82, "8.5": _DTYPES_85, "8.6": _DTYPES_85, "10.1": _DTYPES_101,
                                     "10.15": _DTYPES_101 | {_DT["FLOAT4E2M1"]}}

# --- activations as the parser fills them ---------------------------------------------------

#: activationStringToEnum's names (OnnxAttrs.cpp), compared case-sensitively
TRT_ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus")
#: getActivationDefaultAlpha / getActivationDefaultBeta (utils), the same in every version read
TRT_DEFAULT_ALPHA = {"Relu": 0.0, "Tanh": 0.0, "Sigmoid": 0.0, "LeakyRelu": 0.01, "ThresholdedRelu": 1.0, "ScaledTanh": 1.0,
                     "HardSigmoid": 0.2, "Elu": 1.0, "Softsign": 0.0, "Softplus": 0.0}
TRT_DEFAULT_BETA = {"Relu": 0.0, "Tanh": 0.0, "Sigmoid": 0.0, "LeakyRelu": 0.0, "ThresholdedRelu": 0.0, "ScaledTanh": 1.0,
                    "HardSigmoid": 0.5, "Elu": 0.0, "Softsign": 0.0, "Softplus": 0.0}
# which of alpha and beta each TensorRT activation reads (ActivationType: alpha*log(exp(beta*x)+1) for kSOFTPLUS)
_TRT_READS = {"LeakyRelu": ("alpha",), "ThresholdedRelu": ("alpha",), "Elu": ("alpha",), "ScaledTanh": ("alpha", "beta"),
              "HardSigmoid": ("alpha", "beta"), "Softplus": ("alpha", "beta")}
_SLOTS = {"LSTM": 3, "GRU": 2, "RNN": 1}
_SLOT_NAMES = {"LSTM": ("f", "g", "h"), "GRU": ("f", "g"), "RNN": ("f",)}
_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
_PARAMS_LOWER = {name.lower(): name for name in ACTIVATION_PARAMETERS}


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


# --- what a rule is applied to ----------------------------------------------------------------

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


# rules whose detail already says what the node computes instead
_SELF_CONTAINED = {"lstm.activation_params", "rnn.activation_params"}


@dataclass(frozen=True)
class Finding:
    rule: ParserRule
    detail: str
    version: str

    @property
    def verdict(self) -> str:
        return self.rule.verdict

    def text(self) -> str:
        what = self.detail or self.rule.construct
        if self.rule.verdict == DIFFERS and self.rule.differs and not (self.detail and self.rule.key in _SELF_CONTAINED):
            return f"{what}: {self.rule.differs}"
        return what


@dataclass
class NodeVerdict:
    """The table's verdict on one node, with every rule that applied."""

    node: str
    op_type: str
    domain: str
    graph: str
    version: str
    verdict: str
    findings: list[Finding]
    lowered_from: str | None = None  # the recurrence rnnx lowered into the Scans this node belongs to
    member_ops: list[str] = field(default_factory=list)  # a lowered recurrence's verdict: the op types of its Scans

    @property
    def reasons(self) -> list[str]:
        return [f.text() for f in self.findings if f.verdict != ACCEPTED]

    @property
    def citations(self) -> list[str]:
        decisive = [f for f in self.findings if f.verdict == self.verdict] or self.findings
        seen: list[str] = []
        for f in decisive:
            c = f.rule.citation(self.version)
            if c not in seen:
                seen.append(c)
        if self.member_ops and self.verdict == ACCEPTED:
            seen.append(f"and the importer rows of every op in its Scans, each node accepted: {', '.join(self.member_ops)}")
        return seen

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "op_type": self.op_type, "domain": self.domain, "graph": self.graph, "version": self.version,
                "verdict": self.verdict, "reasons": self.reasons, "citations": self.citations, "lowered_from": self.lowered_from}


def _worst(verdicts: list[str]) -> str:
    return max(verdicts, key=_RANK.__getitem__) if verdicts else ACCEPTED


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
            name, values = onnx[d * slots + i]
            wanted = _as_trt(name, values)
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


def _applies(n: _Node, version: str, constants: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, detail) of every rule whose condition holds on ``n`` (accepted rows included)."""
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
    keys = _rows_for(version, op)
    if not any(k in keys for k, _ in found if k not in ("dtype.unsupported", "dtype.double", "dtype.int64", "graph.nesting")):
        found.append(("op.not_in_table", f"{op}: its importer's conditions are not in this table"))
    return found


_ROWS_CACHE: dict[tuple[int, str, str], dict[str, ParserRule]] = {}


def _rows_for(version: str, op: str) -> dict[str, ParserRule]:
    """key -> the row for ``op`` in ``version`` (cached per table: a model may hold many nodes)."""
    cache_key = (id(RULES), version, op)
    if cache_key not in _ROWS_CACHE:
        _ROWS_CACHE[cache_key] = {r.key: r for r in RULES if version in r.versions and (op in r.ops or "*" in r.ops)}
    return _ROWS_CACHE[cache_key]


def _judge(n: _Node, version: str, constants: dict[str, Any]) -> NodeVerdict:
    rows = _rows_for(version, n.op_type)
    findings = [Finding(rows[k], detail, version) for k, detail in _applies(n, version, constants) if k in rows]
    return NodeVerdict(n.name, n.op_type, n.domain, n.graph, version, _worst([f.verdict for f in findings]), findings)


# --- walking a model ----------------------------------------------------------------------

def _attributes(node: Any) -> dict[str, Any]:
    from onnx import helper

    out = {}
    for attr in node.attribute:
        try:
            value = helper.get_attribute_value(attr)
        except Exception:  # an attribute of an unknown type: the rules read none such
            continue
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", "replace") for v in value]
        out[attr.name] = value
    return out


def _walk(graph: Any, path: str, depth: int, types: dict[str, int], constants: dict[str, Any], opset: int) -> Iterator[tuple[_Node, dict[str, Any]]]:
    """Every node of ``graph`` and its subgraphs, with the element types and constants in scope
    (names as rnnx.formats.onnx_read names its subgraphs: main/NODE.ATTR)."""
    from onnx import numpy_helper

    types = dict(types)
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if elem:
            types[vi.name] = elem
    constants = dict(constants)
    for init in graph.initializer:
        types[init.name] = init.data_type
        constants[init.name] = init
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.t is not None and node.output:
                    types[node.output[0]] = attr.t.data_type
                    constants[node.output[0]] = attr.t
    for index, node in enumerate(graph.node):
        attrs = _attributes(node)
        if node.op_type == "Cast" and "to" in attrs and node.output:
            types.setdefault(node.output[0], _int(attrs["to"], -1))
        n = _Node(node.op_type, node.domain, node.name or f"{node.op_type}#{index}", path, attrs, list(node.input), list(node.output),
                  opset, depth, types, node)
        arrays = {}
        if node.op_type == "Loop" and node.input and node.input[0] in constants:
            try:
                arrays[node.input[0]] = numpy_helper.to_array(constants[node.input[0]])
            except Exception:
                pass
        yield n, arrays
        for attr in node.attribute:
            if attr.type == attr.GRAPH:
                yield from _walk(attr.g, f"{path}/{node.name or node.op_type}.{attr.name}", depth + 1, types, constants, opset)
            for i, g in enumerate(attr.graphs):
                yield from _walk(g, f"{path}/{node.name or node.op_type}.{attr.name}[{i}]", depth + 1, types, constants, opset)


def _opset(model: Any) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def parser_verdicts(model_proto: Any, version: str = DEFAULT_VERSION) -> list[NodeVerdict]:
    """The table applied to every node of ``model_proto`` (Scan, Loop and If bodies included),
    in graph order. A node in the Scans of a recurrence rnnx lowered carries ``lowered_from``;
    :func:`lowered_verdicts` gives each such recurrence's verdict from its Scans."""
    v = resolve_version(version)
    prefixes = [(str(r.get("prefix") or f"{r.get('node')}__"), {str(x) for x in r["outputs"].values()}, str(r.get("node")))
                for r in read_lowered(model_proto)]
    out = []
    owner_of_graph: dict[str, str] = {}
    for n, arrays in _walk(model_proto.graph, "main", 0, {}, {}, _opset(model_proto)):
        verdict = _judge(n, v, arrays)
        owner = next((name for prefix, outs, name in prefixes
                      if any(o.startswith(prefix) or o in outs for o in n.outputs if o)), None)
        if owner is None:
            owner = next((name for g, name in owner_of_graph.items() if n.graph == g or n.graph.startswith(g + "/")), None)
        if owner is not None and n.op_type in ("Scan", "Loop", "If"):
            for attr in n.proto.attribute:
                if attr.type == attr.GRAPH:
                    owner_of_graph[f"{n.graph}/{n.proto.name or n.op_type}.{attr.name}"] = owner
        verdict.lowered_from = owner
        out.append(verdict)
    return out


def lowered_verdicts(verdicts: list[NodeVerdict]) -> dict[str, NodeVerdict]:
    """Each lowered recurrence (by its node's name) judged by the nodes of its Scans."""
    groups: dict[str, list[NodeVerdict]] = {}
    for v in verdicts:
        if v.lowered_from is not None:
            groups.setdefault(v.lowered_from, []).append(v)
    out = {}
    for name, members in groups.items():
        worst = _worst([m.verdict for m in members])
        findings = [Finding(f.rule, f"{m.op_type} {m.node} in {m.graph}: {f.detail or f.rule.construct}", f.version)
                    for m in members for f in m.findings if f.verdict != ACCEPTED]
        if not findings:  # accepted: cite the Scans' importer
            scans = [f for m in members for f in m.findings if f.rule.key == "scan.importer"]
            findings = scans[:1] or [f for m in members for f in m.findings][:1]
        out[name] = NodeVerdict(name, "Scan", "", members[0].graph, members[0].version, worst, findings, lowered_from=name,
                                member_ops=sorted({m.op_type for m in members}))
    return out


def model_findings(model_proto: Any, version: str = DEFAULT_VERSION) -> list[Finding]:
    """What the table says of the model as a whole (its opset), apart from any node."""
    v = resolve_version(version)
    opset = _opset(model_proto)
    return [Finding(r, f"opset {opset}", v) for r in RULES if r.key == "model.opset" and v in r.versions]


# --- the table for ``rnnx inspect`` (a BackendRules-compatible object) ---------------------

def _facts(report: NodeReport) -> _Node:
    """A NodeReport as the node the rules read (no graph around it: no element types)."""
    attrs: dict[str, Any] = {"direction": report.direction, "layout": report.layout, "input_forget": report.input_forget}
    if report.activations:
        attrs["activations"] = list(report.activations)
    if report.activation_alpha:
        attrs["activation_alpha"] = list(report.activation_alpha)
    if report.activation_beta:
        attrs["activation_beta"] = list(report.activation_beta)
    if report.clip is not None:
        attrs["clip"] = report.clip
    if report.linear_before_reset is not None:
        attrs["linear_before_reset"] = report.linear_before_reset
    inputs = ["X", "W", "R", "B", "sequence_lens" if report.sequence_lens else "", "", "", "P" if report.peepholes else ""]
    return _Node(report.op_type, "", report.name, report.graph, attrs, inputs, ["Y"])


class ParserTable:
    """The table for one TensorRT version, as :mod:`rnnx.engines.acceptance` applies a backend's
    rules: ``backend``, ``basis`` and ``refusals(node)``; :meth:`judge` gives the whole verdict.
    Bound to a model (:meth:`for_model`), a node is judged as the graph holds it (element types,
    its Scans when rnnx lowered it); unbound, from the report's facts alone."""

    backend = "tensorrt"

    def __init__(self, version: str | None = DEFAULT_VERSION, model: Any = None) -> None:
        self.version = resolve_version(version)
        self.model = model
        self.basis = f"predicted from onnx-tensorrt's parser source for TensorRT {version_label(self.version)}; not built"
        self._verdicts: tuple[dict[tuple[str, str], NodeVerdict], dict[str, NodeVerdict]] | None = None

    @property
    def rules(self) -> tuple[ParserRule, ...]:
        return rules_for(self.version)

    def for_model(self, model: Any) -> ParserTable:
        return ParserTable(self.version, model)

    def _model_verdicts(self) -> tuple[dict[tuple[str, str], NodeVerdict], dict[str, NodeVerdict]]:
        if self._verdicts is None:  # computed on first use: inspect has named the unnamed recurrent nodes by then
            all_ = parser_verdicts(self.model, self.version)
            by_node: dict[tuple[str, str], NodeVerdict] = {}
            for v in all_:
                by_node.setdefault((v.graph, v.node), v)
            self._verdicts = (by_node, lowered_verdicts(all_))
        return self._verdicts

    def judge(self, report: NodeReport) -> NodeVerdict:
        if self.model is not None:
            by_node, lowered = self._model_verdicts()
            if report.lowered:
                if report.name in lowered:
                    return lowered[report.name]
                rule = next(r for r in RULES if r.key == "op.not_in_table" and self.version in r.versions) \
                    if self.version != "11.x" else next(r for r in RULES if r.key == "version.unavailable")
                return NodeVerdict(report.name, report.op_type, "", report.graph, self.version, UNKNOWN,
                                   [Finding(rule, "lowered by rnnx, but its Scans were not found in the graph", self.version)])
            found = by_node.get((report.graph, report.name))
            if found is not None and found.op_type == report.op_type:
                return found
        if report.lowered:  # no graph to find its Scans in
            rule = next(r for r in RULES if r.key in ("op.not_in_table", "version.unavailable") and self.version in r.versions)
            return NodeVerdict(report.name, report.op_type, "", report.graph, self.version, UNKNOWN,
                               [Finding(rule, "lowered by rnnx: judged by its Scans, which only the model holds "
                                              "(ParserTable.for_model)", self.version)])
        return _judge(_facts(report), self.version, {})

    def refusals(self, node: NodeReport) -> list[str]:
        """What keeps the node from running in TensorRT as ONNX defines it: a refusal, a
        difference in what it computes, or what the table cannot tell ([] = accepted)."""
        return self.judge(node).reasons


def table_rows(version: str | None = None) -> list[dict[str, Any]]:
    """The table as plain data (every row, or one version's), for documentation and tests."""
    rows = RULES if version is None else rules_for(version)
    return [{"key": r.key, "construct": r.construct, "ops": list(r.ops), "versions": list(r.versions), "verdict": r.verdict,
             "file": r.file, "function": r.function, "condition": r.condition, "differs": r.differs, "read_at": r.read_at,
             "note": r.note} for r in rows]


Judge = Callable[[NodeReport], NodeVerdict]
