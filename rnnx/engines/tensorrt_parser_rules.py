"""TensorRT's ONNX parser (onnx-tensorrt) as data: one row per construct and version range, each
with the source file, function and condition it rests on; which op types have an importer and
which element types convertDtype maps, per version; the activations' defaults as the parser
fills them.

Data only: :mod:`rnnx.engines.tensorrt_parser` applies it. A new TensorRT version is a change
here, with its citations (rows for the recurrent ops are made per op type by :func:`_rows`, the
one loop, so that LSTM, GRU and RNN rows read alike).
"""

from __future__ import annotations

from dataclasses import dataclass

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
