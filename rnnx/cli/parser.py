"""``rnnx``'s grammar: each verb, built from the shared groups of :mod:`rnnx.cli.groups`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from rnnx import __version__
from rnnx.cli import commands, types
from rnnx.cli.groups import (
    BATCH_FIRST,
    CHECKPOINT,
    DIM,
    DTYPE,
    FROM,
    OUTPUT,
    PRECISION,
    SEED,
    SELECT,
    SPEC,
    STATIC,
    BackendToleranceArgs,
    CheckArgs,
    CommonArgs,
    OnnxArgs,
    Renamed,
    ShapeArgs,
    SourceArgs,
    ToleranceArgs,
)
from rnnx.engines import trtexec
from rnnx.engines.tensorrt_parser import KNOWN_VERSIONS as TENSORRT_PARSER_VERSIONS


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line like every other refusal (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {' '.join(message.split())} (see {self.prog} --help)\n")


def _graph_rewrite(p: argparse.ArgumentParser, what: str) -> None:
    """The arguments every ONNX-to-ONNX verb shares."""
    p.add_argument("model", type=Path, help="ONNX model (never modified)")
    OUTPUT.add(p, help=f"{what} ONNX model (written atomically)")
    CheckArgs().add_parser_args(p)
    ToleranceArgs("graph output").add_parser_args(p)
    shapes = p.add_argument_group(
        "the check's shapes", "By default the check runs where the input model runs: at the example rnnx export recorded (else batch 3, "
        "lengths 16, other sizes 3; where the input refuses those, larger lengths and other sizes are tried), then at batch 1 and with "
        "every batch and length larger. These set sizes instead; a size the input model refuses is an error (exit 2).")
    DIM.add(shapes, help="size of the dynamic dimension the graph names LABEL (dim_param; tf2onnx's unk__12, or INPUT_dimK for "
                         "an unnamed one), repeated; e.g. --dim seq=64")
    shapes.add_argument("--input", action="append", metavar="NAME:SHAPE",
                        help="a graph input's whole shape, repeated: x:1x16000 or x:[1,16000] (a bare SHAPE for a model with one input)")


def _profile_args(shapes: argparse._ArgumentGroup, profile_help: str, shapes_more: str = "") -> None:
    """--profile and trtexec's --min/opt/max-shapes, as build and bundle take them."""
    shapes.add_argument("--profile", type=types.profile, action="append", metavar="NAME:MIN,OPT,MAX[;...]", help=profile_help)
    for end, kind in (("min", "smallest"), ("opt", "tuned-for"), ("max", "largest")):
        shapes.add_argument(f"--{end}-shapes", type=getattr(types, f"{end}_shapes"), action="append", metavar="NAME:AxBxC[,...]",
                            help=f"the {kind} shape of each input named, as trtexec's --{end}Shapes{shapes_more}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rnnx",
        description="Move recurrent networks (LSTM, GRU, RNN) between frameworks, ONNX and cuDNN, with parity checked.",
        epilog="Specs are written like lstm,input=8,hidden=16,layers=2,bidirectional,proj=4. "
               "Exit status: 0 ok, 1 parity failure, 2 bad input, 3 internal error (a bug: please report it with --debug's traceback).",
    )
    parser.add_argument("--version", action="version", version=f"rnnx {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.add_argument("--json", action="store_true", help="print JSON on stdout (also accepted after the verb)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def verb(name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=description)
        CommonArgs().add_parser_args(p)
        return p

    p = verb("convert", help="convert weights between formats and check the result",
             description="Convert recurrent weights between formats. The written file is re-read and run against the float64 reference unless --no-check.")
    p.add_argument("input", type=Path, help="weights file (.pt .pth .safetensors .onnx .npz .keras .weights.h5 .h5, .bin: a raw cuDNN blob)")
    OUTPUT.add(p)
    SourceArgs("the input").add_parser_args(p)
    p.add_argument("--to", dest="to_format", metavar="FORMAT", help="output format (default: from extension; .safetensors means rnnx)")
    OnnxArgs(stack=True).add_parser_args(p)
    p.add_argument("--no-check", action="store_true", help="skip running the written file against the reference")
    p.add_argument("--nonfinite", choices=["error", "warn"], default="error", help="NaN/Inf weights: refuse (default) or convert with a warning, unchecked")
    p.add_argument("--quantize", choices=["dynamic"], help="ONNX output only: quantize the LSTM's weights to int8 with ONNX Runtime's "
                   "quantize_dynamic (7-bit range, safe on CPUs without VNNI), then check the quantized file against the float reference "
                   "within a bound derived from its scales, and report its error")
    DTYPE.add(p, help="element type of a headerless cuDNN .bin blob read or written (with --spec to read it): float32 (default), "
              "float16, bfloat16 or float64, little-endian")
    ToleranceArgs("output (Y, h_n, c_n)").add_parser_args(p)
    p.set_defaults(func=commands.convert)

    p = verb("export", help="export a PyTorch model to ONNX with native LSTM/GRU/RNN nodes, checked",
             description="Export a PyTorch model to ONNX with native recurrent nodes (projections lowered to Scans). torch.export "
             "decides which input dimensions are dynamic (every one is offered); rnnx names them (batch, seq, <input>_dim<k>) by where "
             "they flow. The file is checked in ONNX Runtime against the model at batch 1 and with each dynamic dimension varied, "
             "and written only if the check passes (exit 1 otherwise).")
    p.add_argument("model", help="file.py:NAME or package.module:NAME (a module, class or factory), or a TorchScript file")
    OUTPUT.add(p, help="ONNX file to write (atomically)")
    CHECKPOINT.add(p, help="state_dict to load first (.pt/.pth/.ckpt weights-only, .safetensors), or a training checkpoint holding "
                           "one (under state_dict, model_state_dict, model or net; DataParallel's module. and Lightning's model. "
                           "prefixes removed); the report says which key and prefix it used")
    p.add_argument("--input", action="append", metavar="[NAME:]SHAPE[:DTYPE]",
                   help="example input, repeated: x:5x3x8, [5,3,8], tokens:4x12:int64 (shapes, seeded random values; integers are ones), "
                   "or lengths:values=12,9,4:int64 (those values); named inputs go to forward's parameter of that name")
    p.add_argument("--dynamic", type=types.dynamic_dim, action="append", metavar="NAME:DIM[=LABEL[:MIN[:MAX]]]",
                   help="make this input dimension dynamic (and name it, with the sizes it takes: feats:2=frames:6:4096); "
                        "by default torch decides for every dimension, and a range torch finds for a named one is applied")
    STATIC.add(p)
    p.add_argument("--input-names", type=types.names, metavar="A,B,...", help="names of the graph inputs, one per tensor input (default: forward's parameter names)")
    p.add_argument("--output-names", type=types.names, metavar="A,B,...", help="names of the graph outputs (default: dict keys or output_0, output_1, ...)")
    p.add_argument("--streaming", action="store_true",
                   help="every LSTM/GRU/RNN's initial states become graph inputs (<module>.h_in, .c_in; zeros to start) and its final "
                        "states graph outputs (.h_out, .c_out), recorded in the file; checked chunk by chunk against the whole sequence; "
                        "a bidirectional recurrence is refused (exit 2)")
    OnnxArgs(stack=False).add_parser_args(p)
    CheckArgs().add_parser_args(p)
    ToleranceArgs("graph output (see --output-names)").add_parser_args(p)
    p.add_argument("--nondeterministic-atol", type=types.tolerance_value, metavar="VALUE",
                   help="the model is not deterministic (its outputs move between two runs on the same inputs, which is refused by "
                        "default, exit 2): hold the outputs that move to this max abs error against torch, never to a rounding floor; "
                        "the report names them and says the tolerance was yours")
    p.set_defaults(func=commands.export)

    p = verb("inspect", help="list the recurrent nodes of an ONNX model (and what rnnx fuse would make native), or the groups of a weight file",
             description="An ONNX model: find every LSTM, GRU and RNN node (subgraphs included), say what it is (activations with "
             "their alpha and beta, clip, input_forget), where its weights come from, and whether ONNX Runtime, TensorRT's ONNX parser "
             "and cuDNN accept it as it is; list the decomposed cells, Loops and Scans over one step, and chains of steps that "
             "`rnnx fuse` would rewrite into native nodes, with the command to run. Any other file rnnx reads (Keras .h5/.keras, "
             "PyTorch .pt, Flax .msgpack, JAX .npz, safetensors, cuDNN .bin with --spec): list its recurrent groups and the spec each "
             "is read with.")
    p.add_argument("model", type=Path, help="ONNX model or weight file")
    FROM.add(p)
    SELECT.add(p, help="a weight file's recurrent group to read (with --spec where that group does not say its own)")
    SPEC.add(p, help="spec of weights that do not describe themselves (a headerless cuDNN .bin blob, jax) or cannot tell tanh from relu")
    DTYPE.add(p, help="element type of a headerless cuDNN .bin blob (with --spec): float32 (default), float16, bfloat16 or float64")
    p.add_argument("--tensorrt", metavar="VERSION", type=types.tensorrt_version,
                   help="the TensorRT whose ONNX parser rules judge the nodes, a release like 8.6 or 10.3.0 (rules read: "
                   f"{', '.join(TENSORRT_PARSER_VERSIONS)}; a release between two read ones is judged by the one below; default 10.x, "
                   "the newest read: 10.15)")
    p.set_defaults(func=commands.inspect)

    p = verb("fuse", help="turn decomposed LSTM/GRU/RNN cells, Loops and Scans over one step, and unrolled steps of an ONNX model into native nodes, checked",
             description="Recognise LSTM, GRU and RNN cells that an exporter decomposed (MatMul/Gemm + Split or Slices + "
             "Sigmoid/Tanh/Relu/HardSigmoid + Mul/Add) and make each a native one-step node (streaming single steps included); "
             "turn a Loop or Scan over one such step (tf2onnx's while loops, scripted loops) into one native node over the sequence; "
             "join a forward node and one over the reversed sequence into a bidirectional node; join chains of steps over a "
             "sequence into one node with a dynamic length. Check the result against the input in ONNX Runtime and say what was "
             "left alone and why. `rnnx inspect` lists what would be rewritten.")
    _graph_rewrite(p, "fused")
    p.set_defaults(func=commands.fuse)

    p = verb("doctor", help="show what is installed and check the cuDNN layout against this GPU",
             description="Print versions of rnnx's dependencies, ONNX Runtime providers and the GPU; where a GPU with cuDNN is present, "
             "check rnnx's cuDNN offset table against cudnnGetRNNWeightParams and PyTorch's flattened buffer (exit 1 on a mismatch).")
    p.set_defaults(func=commands.check_environment)

    p = verb("lower", help="rewrite LSTM/GRU/RNN nodes as Scans with the input product hoisted (TensorRT form), checked",
             description="Rewrite native recurrent nodes (or the one given by --node) into one hoisted input MatMul (cuDNN gate "
             "order) plus a Scan holding only the recurrent product, as TensorRT builds from; check against the input in ONNX Runtime.")
    _graph_rewrite(p, "lowered")
    p.add_argument("--node", metavar="NODE", help="lower only this node")
    p.add_argument("--for", dest="for_target", type=types.lowering_target, metavar="tensorrt[=VERSION]",
                   help="lower exactly the nodes this TensorRT's ONNX parser would refuse or compute differently (its rules as "
                        f"rnnx reads them from onnx-tensorrt's source; VERSION one of {', '.join(TENSORRT_PARSER_VERSIONS)}, default 10.x), "
                        "keep the rest native, and judge the written file by the same rules")
    # --select names a recurrent group in every other verb
    p.add_argument("--select", dest="node", action=Renamed, now="--node", metavar="NODE", help=argparse.SUPPRESS)
    p.set_defaults(func=commands.lower)

    p = verb("build", help="build a TensorRT engine from ONNX (or, with --from-weights, from a weights file)",
             description="Build a TensorRT engine through TensorRT's ONNX parser and write a metadata file beside it. With --from-weights, "
             "the weights become rnnx's lowered ONNX stack (hoisted input product, recurrent product in a loop) first.")
    p.add_argument("input", type=Path, help="ONNX model, or a weights file with --from-weights")
    OUTPUT.add(p, help="engine file (metadata goes to ENGINE.json)")
    p.add_argument("--from-weights", action="store_true", help="INPUT is a weights file in any rnnx format")
    SourceArgs("the weights file").add_parser_args(p)
    PRECISION.add(p, help="default fp32; int8 only from a file quantized with QuantizeLinear/DequantizeLinear nodes (implicit INT8, "
                   "the flag with no scales, is refused), and a file so quantized only at int8")
    shapes = p.add_argument_group(
        "optimization profile", "By default one profile is decided from the file: rnnx export's record (each dynamic dimension's "
        "role and the example), else the dimensions' names. A batch takes 1..32 (opt 8); a length 1..4x the example's (opt the "
        "example's; without an example 1..256, opt 64); any other dynamic dimension the example's size, and without one it must be "
        "given. A dynamic dimension no profile covers is refused before building (exit 2). ENGINE.json records the profiles.")
    _profile_args(shapes, "a whole optimization profile, repeated for several, e.g. X:1x1x8,50x8x8,200x32x8;h0:... (inputs it "
                  "leaves out take the sizes it gives their dimensions, else the defaults)",
                  " (e.g. x:1x16x80,h0:1x1x32); the rest of the profile stays the default")
    p.add_argument("--workspace", type=int, metavar="MiB", help="workspace memory limit")
    p.add_argument("--timing-cache", type=Path, metavar="FILE", help="timing cache to read and update")
    p.add_argument("--opt-level", type=int, choices=range(6), metavar="0-5", help="builder optimization level (TensorRT 8.6+)")
    p.add_argument("--dla-core", type=int, metavar="N", help="build for this DLA core, with GPU fallback")
    p.add_argument("--hardware-compatible", action="store_true", help="engine runs on Ampere and later GPUs (TensorRT 8.6+)")
    p.add_argument("--version-compatible", action="store_true", help="engine runs on later TensorRT versions (TensorRT 8.6+)")
    p.set_defaults(func=commands.build)

    p = verb("bundle", help="write a folder that builds and checks a TensorRT engine on the device with trtexec alone",
             description="Write DIR: model.onnx as the target TensorRT's parser needs it (lowered where its rules say, at an opset it "
             "reads), build.sh (trtexec with the planned profile; every flag one that version's trtexec accepts), golden cases from the "
             "float64 reference at the example's shapes and the profile's corners (chunk sequences for a streaming file), check.sh and "
             "check.py (standard library only, Python 3.6+), Polygraphy's inputs.json and golden.json, BUNDLE.json and README.txt. "
             "ONNX Runtime runs model.onnx on every case here first; nothing is written if it differs (exit 1). On the device: "
             "bash build.sh && bash check.sh.")
    p.add_argument("input", type=Path, help="the ONNX model")
    OUTPUT.add(p, help="the folder to write (must not exist)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--tensorrt", metavar="VERSION", type=types.tensorrt_version,
                        help="the TensorRT on the device, a release like 8.6 or 10.3.0 (default: 10.15, the newest whose parser rnnx has read)")
    target.add_argument("--jetpack", metavar="VERSION", help="the device's JetPack, e.g. 4.6.1, 5.1.2, 6.1: picks the TensorRT it ships")
    PRECISION.add(p, choices=trtexec.PRECISIONS, help="the engine's precision: fp32 (default; build.sh passes --noTF32, since trtexec "
                  "enables TF32 otherwise), tf32 (products' inputs rounded to a 10-bit mantissa on Ampere and later GPUs) or fp16; the "
                  "rounding floor the check allows is measured at it")
    bundle_shapes = p.add_argument_group("optimization profile", "As rnnx build plans it: a batch 1..32 (opt 8), a length 1..4x the "
                                         "example's (opt the example's), other dynamic dimensions the example's size.")
    _profile_args(bundle_shapes, "the whole profile (one: trtexec builds one)")
    SEED.add(p, help="seed of the golden cases' inputs (default 0)")
    p.set_defaults(func=commands.bundle)

    p = verb("verify", help="check a model against its weights, its PyTorch code, or on its own, against the float64 reference",
             description="Three forms. (1) MODEL --against WEIGHTS: a recurrent stack and the weights it was made from, in every available "
             "backend and in the source's framework at several lengths and batches, with errors per output and per time step against the "
             "float64 reference and a diagnosis of layout mistakes. (2) MODEL.onnx --against file.py:NAME (or package.module:NAME, or a "
             "TorchScript file) [--checkpoint CK]: a whole model against its PyTorch code, in float64 and float32, at lengths and batches "
             "taken from the file's dynamic axes, and layer by layer: each recurrent layer on the inputs it received, naming the first "
             "that drifts. (3) MODEL.onnx alone: it runs at varied shapes and each recurrent layer matches the reference for the weights it "
             "stores. Exit 0 pass, 1 parity failure, 2 bad input, 3 internal error.")
    p.add_argument("model", nargs="?", type=Path, help="ONNX model (or TensorRT engine) to check")
    p.add_argument("--against", type=Path, metavar="SOURCE", help="the weights it was made from, in any rnnx format; or the model code "
                   "(file.py:NAME, package.module:NAME, a TorchScript file); leave out to check MODEL on its own")
    CHECKPOINT.add(p)
    ShapeArgs().add_parser_args(p)
    SELECT.add(p, help="the recurrent group of SOURCE when it holds several")
    SPEC.add(p, help="spec for a SOURCE that does not describe itself")
    p.add_argument("--backends", type=types.backend_list, default="ort,torch,cudnn,trt,reference", metavar="A,B,...",
                   help="comma-separated, from ort,trt,cudnn,torch,reference (default all; unavailable ones are listed as skipped)")
    DTYPE.add(p, help="dtypes to run in, from fp32,fp16,bf16,fp64 (or float32,...), e.g. fp32,bf16 (default fp32): each backend "
                   "that can computes in it on inputs rounded to it, against the float64 reference, with that dtype's tolerance; one that "
                   "cannot is listed as skipped (ONNX Runtime has no bfloat16 LSTM, so bf16 runs torch)")
    ToleranceArgs("output (Y, h_n, c_n)").add_parser_args(p)
    BackendToleranceArgs().add_parser_args(p)
    p.add_argument("--input-map", type=types.role, action="append", metavar="NAME=ROLE", help="what a graph input or output is (X, h0, c0, "
                   "seq_lens, Y, h_n, c_n), where neither rnnx export's record nor the graph's wiring says; repeated")
    BATCH_FIRST.add(p, help="the model takes X and gives Y as (batch, seq, features), where its wiring does not show it")
    SEED.add(p, help="seed of the inputs (default 0)")
    p.add_argument("--chunks", type=types.chunk_sizes, metavar="N,N,...", help="a streaming file (states as inputs and outputs) run in "
                   "ONNX Runtime in chunks of these many frames, each chunk's states fed to the next, against --against on the whole sequence")
    p.add_argument("--state", action="append", metavar="IN=OUT", help="with --chunks: the state fed through input IN and returned as "
                   "output OUT, where the file's rnnx.streaming record or the names do not pair them; repeated")
    p.add_argument("--report", type=Path, metavar="FILE", help="write the JSON report here")
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML page with plots here")
    p.set_defaults(func=commands.verify)

    p = verb("layout", help="print cuDNN's offset table for a spec or a weights file",
             description="Print where each gate's matrix and bias lies in cuDNN's packed weight space.")
    p.add_argument("file", nargs="?", type=Path, help="weights file to take the spec from")
    SPEC.add(p, help="spec string instead of a file")
    FROM.add(p, help="format of FILE (default: from extension and content)")
    SELECT.add(p, help="the recurrent group of FILE when it holds several")
    DTYPE.add(p, help="element type the byte offsets are counted in: float32 (default with --spec; else FILE's), float16, bfloat16, float64")
    p.set_defaults(func=commands.layout)

    p = verb("formats", help="list the weight formats rnnx reads and writes")
    p.set_defaults(func=commands.list_formats)
    return parser
