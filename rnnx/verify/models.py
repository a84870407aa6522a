"""Whole models: an ONNX file against the PyTorch code it came from, end to end and layer by layer.

``rnnx verify model.onnx --against file.py:NAME [--checkpoint ck.pt]`` (or a TorchScript
file) runs the torch model and the ONNX file in ONNX Runtime on the same seeded inputs:

- shapes: the ONNX file's dynamic axes are read (each labelled dimension is a batch, a
  length or something else, as ``rnnx export``'s record says, else as its name says
  (``batch``, ``N``; ``seq``, ``time``, ``frames``, ...), else as the graph's wiring says:
  an axis that reaches a recurrence's batch or time axis; tf2onnx's ``unk__NNN``), and then
  the torch model decides: every dimension it takes at other sizes as a batch or a length is
  varied, even one the file fixes (:mod:`rnnx.verify.model_dims`, export's dimension audit).
  Batches and lengths are varied (batch 1 always included); any other dynamic size keeps the
  example's (the module's ``example_inputs``) or ``--dim LABEL=SIZE``;
- floats are standard normal; integer inputs that hold sequence lengths get sorted
  lengths whose longest fills the sequence; token ids stay below the vocabulary of the
  embedding table the input indexes; ids of another input's axis (a graph's node ids, as the
  torch model confirms: :mod:`rnnx.verify.id_axes`) stay below that axis' size at each case;
  others stay within the example's range;
- where the torch model raises at a batch or length verify chose, the size is rounded up to a
  multiple the sizes it ran at share (:meth:`rnnx.verify.model_dims.ModelDims.instead`); where it
  raises at every case, the example's shapes are run, and the report says so;
- the torch model is called as the file's ``rnnx.call`` record says ``rnnx export`` called
  it (a state tuple, None, flags, ``*tensors``: :mod:`rnnx.verify.calls`), else through the
  model's ``example_inputs``, else with one tensor per graph input; a forward that binds the
  recorded call differently is refused by name;
- every ONNX output is held against the torch model's output at the same position, in
  float64 (a float64 copy of the torch model is the reference) and in float32;
- every recurrent layer is checked on its own inputs (:mod:`rnnx.verify.layers`) with the
  weights of the torch module it came from, found through ``rnnx export``'s record or,
  for files from other exporters, by matching each layer's spec in module order.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rnnx import limits, progress
from rnnx.check import Case, Rule, judge
from rnnx.check.case import unvaried
from rnnx.check.runners import Subject, make
from rnnx.check.truths import TorchTruth
from rnnx.errors import CAUSE_CHARS, RNNXError, one_line
from rnnx.exporters.precision import cast_edges
from rnnx.formats.onnx_lazy import for_runtime
from rnnx.formats.onnx_metadata import read_metadata
from rnnx.formats.onnx_read import load_model as load_onnx, to_array
from rnnx.graphs.precision import computes_in_float16
from rnnx.shapes.cases import shape_note
from rnnx.shapes.file_dims import InputSpec, read_file_dims
from rnnx.shapes.roles import BATCH, LENGTH
from rnnx.tolerance import Tolerances
from rnnx.verify.calls import plan_call, torch_outputs
from rnnx.verify.cases import example_case, plan_cases
from rnnx.verify.feeds import make_feed
from rnnx.verify.id_axes import IdAxes, find_id_axes, torch_runs
from rnnx.verify.layers import Layer, Truth, check_layers, find_layers, mark_outputs, single_layer
from rnnx.verify.model_dims import ModelDims, ask_model
from rnnx.verify.model_report import WholeModelReport, judge_returns
from rnnx.verify.quantized import saturation_note
from rnnx.verify.torch_side import is_model_code, layer_truths, load_torch_model  # noqa: F401  (the CLI and tests import them from here)

# --- running ------------------------------------------------------------------------------


def verify_model(model_path: Path, against: str, checkpoint: Path | None = None, seq_lens: list[int] | None = None,
                 batches: list[int] | None = None, dims: dict[str, int] | None = None, seed: int = 0,
                 tolerances: Tolerances | None = None, static: set[tuple[str, int]] | None = None) -> WholeModelReport:
    """The ONNX file at ``model_path`` against the torch model ``against`` (see the module docstring)."""
    torch_model, example = load_torch_model(against, checkpoint)
    return verify_loaded(Path(model_path), torch_model, example, str(against), seq_lens, batches, dims, seed, tolerances, static=static)


def verify_loaded(model_path: Path, torch_model: Any, example: Any, against: str, seq_lens: list[int] | None = None,
                  batches: list[int] | None = None, dims: dict[str, int] | None = None, seed: int = 0,
                  tolerances: Tolerances | None = None, max_cases: int | None = None,
                  isolated: bool = True, layers_calibrated: bool = False, static: set[tuple[str, int]] | None = None,
                  ask: bool = True) -> WholeModelReport:
    """:func:`verify_model` with the torch model already loaded (``against`` names it in
    messages); ``max_cases`` keeps the first cases only; ``isolated=False`` runs ONNX Runtime
    in this process (a file rnnx has just written); ``layers_calibrated`` holds the layers to the
    calibrated rule even where the outputs have tolerances set (they name outputs, not layers);
    ``static``: (input, axis) pairs checked at the file's size only (``--static``); ``ask=False``
    takes the shapes from the file alone (export's layer check: its audit already asked the model)."""
    import torch

    proto = load_onnx(model_path, lazy=True)  # its weights read through memory maps: a model of any size
    export, recurrences = read_metadata(proto)
    read = read_file_dims(proto, export)
    specs, roles = read.specs, read.roles
    names = [s.name for s in specs]
    call = plan_call(proto, torch_model, example, names, str(against))
    example_arrays = call.example_arrays
    shapes = {**read.example, **{k: list(v.shape) for k, v in example_arrays.items()}}
    ids = find_id_axes(specs, shapes, example_arrays, seed, torch_runs(torch_model, call))  # a graph's node ids: below the node count at every case
    first = plan_cases(specs, roles, shapes, None, None, dims or {})[0]
    every = {**first.shapes, **shapes}  # an input the example lacks at the first case's shape
    asked = None
    if ask:  # the torch model decides which shapes count (rnnx.verify.model_dims), asked from the example's shapes
        at_example = example_case(specs, every)
        asked = ask_model(torch_model, call, read, make_feed(specs, first, example_arrays, seed, ids.bounds), static or set(), dims or {},
                          example=make_feed(specs, at_example, example_arrays, seed, ids.bounds) if at_example is not None else None)
        specs, roles = asked.specs, asked.roles
        cases = _cases_by_model(asked, every, seq_lens, batches, dims or {})
    else:
        cases = plan_cases(specs, roles, shapes, seq_lens, batches, dims or {})
    cases = cases[:max_cases]
    at_example = example_case(specs, every) if max_cases is None else None  # run where the model takes no case verify chose
    given = set(dims or {}) | {k for k, r in roles.items() if (r == LENGTH and seq_lens) or (r == BATCH and batches)}
    report = WholeModelReport(str(model_path), str(against), {s.name: s.dims for s in read.specs}, roles, called=call.shown,
                              dimensions=asked.to_json() if asked is not None else [])
    limits.check_claim("the largest case's inputs", max((sum(int(np.prod(c.shapes[s.name])) * 8 for s in specs) for c in cases), default=0)
                       * limits.WORKING_COPIES, model_path.stat().st_size)
    layers = find_layers(proto)
    runner, known = _layer_runner(proto, layers, model_path, isolated=isolated)
    graph_outputs = [o.name for o in proto.graph.output]
    truths, report.notes = layer_truths(torch_model, layers, recurrences)
    one_shape = shape_note(roles) if asked is None or len(cases) == 1 else ""  # the model's sizes may vary what the file's labels do not
    report.notes += [n for n in [read.wiring_note(), one_shape] if n] + call.notes + (asked.notes if asked is not None else []) + ids.notes()
    torch64 = TorchTruth(torch_model, report.notes, "outputs compared with torch in float32 only")
    tolerances = tolerances or Tolerances()
    honest_model = torch_model
    if computes_in_float16(proto):  # --precision fp16: the honest run is the model in float16, fed what the file takes
        honest_model = cast_edges(copy.deepcopy(torch_model).half())
        report.notes.append("the file computes in float16: its rounding floor is the torch model's in float16, against its float64 copy")
    runs = []
    for k, case in enumerate(_stepped(cases)):  # a case the torch model refuses may add one after it (_instead)
        feed = make_feed(specs, case, example_arrays, seed + k, ids.bounds)
        try:
            want32 = torch_outputs(honest_model, call, feed)
        except Exception as exc:  # noqa: BLE001  the user's model may raise anything at a shape it does not take
            case.skipped = f"the torch model itself raised {one_line(exc, CAUSE_CHARS, typed=True)}"

            def runs_at(other: Case, k: int = k) -> None:
                torch_outputs(honest_model, call, make_feed(specs, other, example_arrays, seed + k, ids.bounds))

            _instead(cases, k, asked, specs, given, runs_at, at_example, report.notes)
            continue
        want64 = torch64.float64(lambda model64: torch_outputs(model64, call, feed, dtype=torch.float64))
        _refuse_non_finite(want64 if want64 is not None else want32, graph_outputs, case, specs, feed)
        try:
            got = runner(feed)
        except RNNXError as exc:
            said = asked.refusal(case, refused=True) if asked is not None else ""
            case.error = f"{said}; ONNX Runtime: {exc}" if said else f"ONNX Runtime failed where torch ran: {exc}"
            continue
        if len(want32) != len(graph_outputs):
            raise RNNXError(f"the ONNX file has {len(graph_outputs)} outputs ({', '.join(graph_outputs)}), the torch model returned "
                            f"{len(want32)} tensors; is this the model the file was exported from?")
        for i, out in enumerate(graph_outputs):
            if want64 is not None:  # the float32 model's distance from it is the rounding floor (rnnx.tolerance)
                rule = Rule.of(tolerances, out, np.asarray(want32[i]).dtype.name, want32[i], fixed_in="float32")
                report.rows.append(judge(got.get(out), want64[i], rule, case=case.name, output=out, against="torch float64"))
            report.rows.append(judge(got.get(out), want32[i], Rule(tolerances.get(out, "float32")), case=case.name, output=out, against="torch float32"))
        runs.append((case.name, {**known, **feed, **got}))
    report.cases = cases
    if asked is not None:
        report.refused = _first_refusal(asked, report)
    if not report.ran:
        raise RNNXError(f"the torch model raised at every shape tried ({cases[0].skipped if cases else 'no cases'}); is it the model the file was exported from? "
                        "If it is, give shapes it takes with seq_lens=, batches= or dims=")
    _said_unvaried(report, read.specs, roles, given | set(asked.fixed if asked is not None else {}))
    report.layers = check_layers(layers, truths, runs, tolerances.get("", "float32"), calibrate=layers_calibrated or tolerances.calibrates())
    report.notes += [n for n in [saturation_note([la.quantization for la in layers if la.quantization is not None])] if n]
    return report


def _cases_by_model(asked: ModelDims, shapes: dict[str, list[int]], seq_lens: list[int] | None, batches: list[int] | None,
                    dims: dict[str, int]) -> list[Case]:
    """verify's cases with the inputs as the torch model sizes them, then one case per size the
    model ran an untraced dimension at (the others as in the first case)."""
    cases = plan_cases(asked.specs, asked.roles, shapes, seq_lens, batches, {**dims, **asked.fixed})
    for label, sizes in asked.extra.items():
        for size in sizes:
            name = f"{label}={size}" if cases[0].name == "fixed shapes" else f"{cases[0].name}, {label}={size}"
            cases.append(Case.at(asked.specs, name, {**cases[0].sizes, label: size}))
    return cases


def _instead(cases: list[Case], k: int, asked: ModelDims | None, specs: list[InputSpec], given: set[str], runs_at: Any,
             at_example: Case | None, notes: list[str]) -> None:
    """After the torch model raised at ``cases[k]``: a case it takes put after it (a batch or length
    verify chose rounded to a multiple: :meth:`ModelDims.case_instead`); else, where it took none
    of the cases, the example's shapes (appended once, and said)."""
    other = asked.case_instead(cases[k], specs, given, runs_at) if asked is not None and not cases[k].at_example else None
    if other is not None and all(c.sizes != other.sizes for c in cases):
        cases.insert(k + 1, other)
    elif (at_example is not None and k == len(cases) - 1 and all(c.skipped for c in cases)
            and not any(c.sizes == at_example.sizes for c in cases)):
        cases.append(at_example)
        notes.append(f"the torch model raised at every shape verify chose, and nothing known says how its inputs must change together "
                     f"(which axis an integer input's values index, which sizes it takes): checked at the example's shapes ({_shapes_text(at_example)}) "
                     "only; give others it takes with --seq-lens, --batch and --dim")


def _said_unvaried(report: WholeModelReport, specs: list[InputSpec], roles: dict[str, str], given: set[str]) -> None:
    """Each dynamic batch or length of the file that no case that ran varied goes on the verdict line;
    where verify's own cases varied one and the torch model took none of them (every such case
    skipped), nothing was checked there and it is bad input (exit 2), unless the file already failed
    (exit 1) or only the example's shapes could run (said in a note)."""
    dynamic = {v: roles[v] for s in specs for v in s.dims if isinstance(v, str) and roles.get(v) in (BATCH, LENGTH)}
    skipped_all, report.not_varied = unvaried(report.cases, dynamic, given)
    fell_back = any(c.at_example for c in report.ran)
    if skipped_all and report.passed and not fell_back:
        raise RNNXError(f"verify checked nothing at other sizes of what the file declares dynamic: every case with {'; '.join(skipped_all)} was skipped, "
                        "so a PASS would rest on one size; give sizes the torch model takes with --seq-lens, --batch or --dim LABEL=SIZE, or --static "
                        "INPUT:DIM to check the file at the example's size only")


def _shapes_text(case: Case) -> str:
    return ", ".join(f"{name} {'x'.join(map(str, shape))}" for name, shape in case.shapes.items())


def _first_refusal(asked: ModelDims, report: WholeModelReport) -> str:
    """The first failed case's line naming a size only the torch model vouched for, or ""."""
    judged = [r for r in report.rows if r.against == "torch float64"] or report.rows  # as the verdict reads them
    failed = {r.case for r in judged if not r.passed}
    for case in report.cases:
        if case.error or case.name in failed:
            said = asked.refusal(case, refused=bool(case.error))
            if said:
                return said
    return ""


def _refuse_non_finite(want: list[Any], names: list[str], case: Any, specs: list[Any], feed: dict[str, np.ndarray]) -> None:
    """A NaN or an infinity in the torch model's own output is an input problem (ids it never
    sees, a row of padding that leaves attention nothing), not a parity failure: exit 2, saying
    which inputs were drawn and how to give others."""
    for i, w in enumerate(want):
        w = np.asarray(w)
        if w.dtype.kind == "f" and not np.isfinite(w).all():
            drawn = "; ".join(f"{s.name} ids {int(feed[s.name].min())}..{int(feed[s.name].max())}" for s in specs
                              if s.dtype.kind in "iu" and s.lengths_of is None and feed[s.name].size)
            raise RNNXError(f"the torch model's own output {names[i] if i < len(names) else i} is {'NaN' if np.isnan(w).any() else 'infinite'} "
                            f"at {case.name} on the inputs verify drew ({drawn or 'standard normal floats'}): the model does not take such inputs, so "
                            "nothing can be compared. Export with an example whose integer inputs show their range and padding (rnnx records "
                            "them), or give sizes the model takes with --seq-lens, --batch and --dim")


def verify_file(model_path: Path, seq_lens: list[int] | None = None, batches: list[int] | None = None, dims: dict[str, int] | None = None,
                seed: int = 0, tolerances: Tolerances | None = None, isolated: bool = True,
                weights: Path | None = None, select: str | None = None) -> WholeModelReport:
    """The file alone: it runs in ONNX Runtime at varied shapes, and each recurrent layer
    computes what the float64 reference computes with the weights the file stores. This
    proves the file loads, runs and takes its dynamic shapes; not that the weights are the
    ones they should be (that needs ``--against``).

    With ``weights`` (a weights file, its group ``select`` or all of them), each layer is held
    instead to the reference with the weights of the group layer whose spec it has: "check this
    file's recurrences against these weights", for a whole model whose inputs are not a stack's.
    """

    model_path = Path(model_path)
    proto = load_onnx(model_path, lazy=True)  # its weights read through memory maps: a model of any size
    read = read_file_dims(proto)
    specs, roles = read.specs, read.roles
    layers = find_layers(proto)
    outputs = [o.name for o in proto.graph.output]
    if not outputs:  # its layers could all match while it returns nothing: nothing a user gets from it would be checked
        raise RNNXError(f"{model_path}: the graph declares no outputs, so it returns nothing to check; expected at least one graph output "
                        "(the model's result): re-export the model")
    if not layers:  # said before any shape question: with no layer there is nothing to size
        raise RNNXError(f"{model_path}: no LSTM, GRU or RNN layer in its main graph (nor a lowered one rnnx recorded): nothing to check on its own; "
                        "give --against with the source it was made from")
    truths, matched = weights_truths(layers, Path(weights), select) if weights is not None else ({}, [])
    cases = plan_cases(specs, roles, read.example, seq_lens, batches, dims or {})
    runner, known = _layer_runner(proto, layers, model_path, isolated)
    ids = find_id_axes(specs, read.example, {}, seed, _file_runs(runner))  # with no torch model, the file says which axis ids index
    against = "its own weights" if weights is None else f"the weights in {weights}" + (f" (group {select})" if select else "")
    report = WholeModelReport(str(model_path), against, {s.name: s.dims for s in specs}, roles, cases, self_check=True,
                              notes=[n for n in [read.wiring_note(), shape_note(roles)] if n] + matched + ids.notes("the file"))
    runs: list[tuple[str, dict[str, np.ndarray]]] = []
    at_example = example_case(specs, read.example) if ids.unknown else None  # where ids nothing bounds leave no case running
    for k, case in enumerate(_stepped(cases)):
        feed = make_feed(specs, case, {}, seed + k, ids.bounds)
        try:
            got = runner(feed)
        except RNNXError as exc:
            case.error = f"ONNX Runtime failed: {exc}"
            if at_example is not None and k == len(cases) - 1 and not runs and all(c.sizes != at_example.sizes for c in cases):
                cases.append(at_example)
            continue
        runs.append((case.name, {**known, **feed, **got}))
    if cases[-1] is at_example and not at_example.error:
        _only_example_ran(cases, ids, report.notes)
    if not runs:
        raise RNNXError(f"{model_path}: ONNX Runtime could not run it at any of the shapes tried ({cases[0].error if cases else 'no shapes'})")
    _lengths_it_refuses(cases, roles)
    judge_returns(cases, runs, outputs)
    tolerances = tolerances or Tolerances()
    report.layers = check_layers([la for la in layers if weights is None or la.name in truths], truths, runs, tolerances.get("", _elem_dtype(proto)),
                                 calibrate=tolerances.calibrates())
    report.notes += [n for n in [saturation_note([la.quantization for la in layers if la.quantization is not None])] if n]
    if not any(la.status != "not checked" for la in report.layers):
        raise RNNXError(f"{model_path}: it runs, but none of its recurrent layers can be checked on its own "
                        f"({report.layers[0].reason}): nothing to check without against=")
    return report


def _file_runs(runner: Any) -> Any:
    """Asks the file, in ONNX Runtime, whether it runs on a feed (:data:`rnnx.verify.id_axes.Runs`)."""
    def runs(feed: dict[str, np.ndarray], what: str) -> bool:
        try:
            runner(feed)
        except RNNXError:
            return False
        return True
    return runs


def _only_example_ran(cases: list[Case], ids: IdAxes, notes: list[str]) -> None:
    """With no torch model: the file ran at the example's shapes only, with integer ids nothing
    bounds. The other cases are not failures: ids from the example's range may index past them."""
    for case in cases:
        if case.error:
            case.skipped, case.error = f"{case.error.removeprefix('ONNX Runtime failed: ')}; {', '.join(ids.unknown)} drawn from the example's range may index past these sizes", ""
    notes.append(f"the file ran at none of the shapes verify chose, and nothing says which axis the ids in {', '.join(ids.unknown)} index: checked at the "
                 f"example's shapes ({_shapes_text(cases[-1])}) only; give --against the model code to check others")


def _lengths_it_refuses(cases: list[Case], roles: dict[str, str]) -> None:
    """With no torch model to ask, a case ONNX Runtime cannot run is a length the file refuses,
    not a failure, where the file ran another case at the same batch and other sizes: a model
    may take only some lengths (a reshape into groups of 4 frames). A batch it refuses, or a
    case with nothing like it that ran, stays a failure."""
    def held(case: Case) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((k, v) for k, v in case.sizes.items() if roles.get(k) != LENGTH))

    ran = {held(c) for c in cases if not c.error and not c.skipped}
    for case in cases:
        if case.error and held(case) in ran:
            case.skipped = (f"the file does not run at these lengths ({case.error.removeprefix('ONNX Runtime failed: ')}); "
                            "a model may take only some lengths: give those it takes with --seq-lens")
            case.error = ""


def is_whole_model(path: Path) -> bool:
    """Whether an ONNX file is a whole model: no graph input reaches its first recurrence's X
    (the sequence is computed, by a conv or an embedding), so it cannot be driven as a stack."""
    from rnnx.verify.drive import reaches_x

    proto = load_onnx(Path(path), lazy=True)
    layers = find_layers(proto)
    if not layers or layers[0].spec is None:
        return False  # nothing a weights file could be matched to: the stack path says why
    try:
        from rnnx.formats.files import load as load_weights

        return not reaches_x(proto, load_weights(path).spec)
    except RNNXError:
        return False  # the stack path refuses it in its own words


def weights_truths(layers: list[Layer], path: Path, select: str | None) -> tuple[dict[str, Truth], list[str]]:
    """Each recurrent layer of a file, matched to a layer of a group of the weights file by
    spec, in order (a group's layer k to the first unmatched layer of the file with that
    layer's spec); notes for what matched nothing. Refuses when nothing matches."""
    from rnnx.formats.files import groups as file_groups, load as load_weights

    names = [select] if select else file_groups(path)
    truths: dict[str, Truth] = {}
    unused: list[str] = []
    for group in names:
        weights = load_weights(path, select=group if len(names) > 1 or select else None)
        for k in range(weights.spec.num_layers):
            one = single_layer(weights, k)
            layer = next((la for la in layers if la.name not in truths and la.spec == one.spec), None)
            said = f"{path.name}" + (f" group '{group}'" if group else "") + (f" layer {k}" if weights.spec.num_layers > 1 else "")
            if layer is None:
                unused.append(f"{said} ({one.spec})")
                continue
            truths[layer.name] = Truth(one, said, k)
    if not truths:
        found = ", ".join(f"{la.name}: {la.spec}" for la in layers) or "none readable"
        raise RNNXError(f"--against {path}: expected a group whose layers have the specs of this file's recurrent layers ({found}), found "
                        f"{', '.join(unused) or 'no group'}; give the weights the file was made from, or --select the group")
    notes = [f"layer {la.name} matches no layer of {path.name} by spec ({la.spec}): not checked" for la in layers if la.name not in truths]
    notes += [f"{u}: no layer of the file has its spec" for u in unused]
    return truths, notes


def _elem_dtype(proto: Any) -> str:
    from onnx import helper

    floats = [vi.type.tensor_type.elem_type for vi in proto.graph.input if vi.type.tensor_type.elem_type in (1, 10, 11, 16)]
    return str(np.dtype(helper.tensor_dtype_to_np_dtype(floats[0]))) if floats and floats[0] != 16 else ("bfloat16" if floats else "float32")


def _layer_runner(proto: Any, layers: list[Layer], model_path: Path, isolated: bool) -> tuple[Any, dict[str, np.ndarray]]:
    """ONNX Runtime on the file with every layer's tensors marked as outputs (in a child process
    under rnnx's limits unless ``isolated`` is False: files rnnx wrote itself); and the layers'
    tensors that are initializers (from ``proto``, read lazily), which no run returns.

    What ONNX Runtime gets is the lazily read ``proto`` with every weight pointing into the file
    that holds it (the .onnx itself, or its external data), which ONNX Runtime reads from the
    model's folder: the proto handed over stays small, even for a model past protobuf's 2 GiB."""
    marked, _ = mark_outputs(for_runtime(proto, model_path.resolve().parent), layers)
    runner = make("ort", Subject(model=model_path, proto=marked, trusted=not isolated))
    wanted = {t for la in layers for t in [*la.inputs.values(), *la.outputs.values()]}
    return runner, {i.name: to_array(i) for i in proto.graph.initializer if i.name in wanted}


def _stepped(cases: list[Case]) -> Iterator[Case]:
    """Each case in turn, said as the step under way (:func:`rnnx.progress.step`: shown where the
    CLI opened a display, free elsewhere); a case appended while running is run too."""
    for k, case in enumerate(cases):
        progress.step(f"case {k + 1} of {len(cases)}: {case.name}")
        yield case


EXPORT_LAYER_CASES = 1  # the export's layer check: verify's first case (the recorded example's shape); a wrong layer shows at any shape, and the self-check varies the shapes


def export_layer_check(torch_model: Any, seed: int = 0, tolerances: Tolerances | None = None) -> Any:
    """The layer-by-layer check ``rnnx.export`` runs on the file it is about to write (see
    :data:`rnnx.exporters.selfcheck.LAYER_CHECK`): verify's check of every recurrent layer
    against the float64 reference on the torch module's weights, on the inputs that layer
    received. Returns (the first drifting layer's one line or "", the layers as JSON, notes)."""

    def check(path: Path) -> tuple[str, list[dict[str, Any]], list[str]]:
        report = verify_loaded(Path(path), torch_model, None, "the model being exported", seed=seed, tolerances=tolerances,
                               max_cases=EXPORT_LAYER_CASES, isolated=False, layers_calibrated=True, ask=False)
        first = report.first_drift
        line = ""
        if first is not None:
            cause = f"; {first.diagnosis[0]}" if first.diagnosis else ""
            line = (f"layer check: {first.name} ({first.op}, {first.truth}) drifts from the float64 reference by {first.max_abs:.3e} "
                    f"at {first.worst_case} ({first.tolerance}){cause}")
        return line, [la.to_json() for la in report.layers], report.notes
    return check
