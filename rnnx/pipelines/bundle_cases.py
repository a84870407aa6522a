"""The golden cases of a bundle (:mod:`rnnx.pipelines.bundle`): which shapes, their inputs, the
float64 reference's outputs and each output's rounding floor at the engine's precision, and
ONNX Runtime's run of the bundle's model.onnx held to the rule.

Cases: the example's shapes and the optimization profile's two corners (a batch-1 example
that is the min corner is one case); a streaming file's are streams of chunks, zeros for the
first chunk's states, each later chunk fed the chunk before's state outputs (the reference
chain's for the golden outputs; the engine's own on the device).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rnnx.check import Case, Rule, judge
from rnnx.check.runners import Subject, make
from rnnx.errors import BudgetExceeded, RNNXError
from rnnx.shapes.file_dims import label_sizes
from rnnx.shapes.profiles import ProfileChoice, shapes_text
from rnnx.shapes.sizes import BUNDLE_CHUNKS, multiple_of
from rnnx.tolerance import calibrated, rounding_floor
from rnnx.verify.feeds import make_feed

MAX_CASE_VALUES = 1 << 24  # per case, all inputs together: a profile corner larger than this is left out, with a note


@dataclass
class Chunk:
    """One run of a case (:class:`rnnx.check.Case`, whose ``chunks`` they are; a stream's
    ``carry`` says which state input each later chunk takes from which output of the one before)."""

    shapes: dict[str, list[int]]
    feed: dict[str, np.ndarray]  # every input; a later chunk's states are the reference chain's (for Polygraphy)
    golden: dict[str, np.ndarray] = field(default_factory=dict)
    floors: dict[str, float] = field(default_factory=dict)


def plan_cases(proto: Any, specs: list[Any], choice: ProfileChoice | None, example: dict[str, list[int]], record: Any, seed: int,
                notes: list[str]) -> list[Case]:
    """The example's shapes and the profile's two corners; a streaming file's are sequences of chunks."""
    static = {s.name: [d if isinstance(d, int) else None for d in s.dims] for s in specs}
    shaped: list[tuple[str, Mapping[str, Sequence[int | None]]]] = []  # None: a size nothing gave, refused below
    if choice is None:
        shaped.append(("static", {n: list(d) for n, d in static.items()}))
    else:
        profile = choice.profile.shapes
        corner = {end: {n: list(t[i]) for n, t in profile.items()} for i, end in enumerate(("min", "opt", "max"))}
        first = {n: example.get(n) or corner["opt"].get(n) or static[n] for n in static}
        shaped += [("example", first), ("min", corner["min"] | {n: v for n, v in first.items() if n not in profile}),
                   ("max", corner["max"] | {n: v for n, v in first.items() if n not in profile})]
    cases: list[Case] = []
    for k, (name, given) in enumerate(shaped):
        if any(s is None for dims in given.values() for s in dims):
            raise RNNXError(f"bundle: expected a size for every dimension of the {name} case, found none for "
                            f"{next(n for n, d in given.items() if None in d)}; give --opt-shapes")
        shapes = {n: [s for s in d if s is not None] for n, d in given.items()}  # every size known (refused above if not)
        if sum(math.prod(s) for s in shapes.values()) > MAX_CASE_VALUES:  # Python's ints: np.prod wraps past 2^63 to a small number
            notes.append(f"the {name} case ({shapes_text(shapes)}) holds over {MAX_CASE_VALUES} values: left out")
            continue
        case = Case(name, chunks=[Chunk(shapes, _feed(specs, shapes, seed + k))]) if record is None else \
            _stream_case(name, specs, shapes, record, seed + k, choice)
        if any([c.shapes for c in case.chunks] == [c.shapes for c in other.chunks] for other in cases):
            continue  # a stream at the example's batch is the min corner's stream too
        cases.append(case)
    if not cases:  # a folder with no case would print PASS on the device without running the engine once
        raise RNNXError(f"bundle: expected at least one case to check, found every case over {MAX_CASE_VALUES} values "
                        f"({'; '.join(shapes_text(dict(s)) for _, s in shaped)}); give smaller --opt-shapes/--max-shapes (or --profile), "
                        "or export the model with smaller fixed dimensions")
    return cases


def _stream_case(name: str, specs: list[Any], shapes: dict[str, list[int]], record: Any, seed: int, choice: ProfileChoice | None) -> Case:
    """A stream of chunks (BUNDLE_CHUNKS x the chunk multiple frames, within the profile) at this case's batch, states at zeros first."""
    states = {s.input: s.output for s in record.states}
    chunks = []
    # the max corner's stream takes the profile's longest chunk in its middle
    for k, units in enumerate((BUNDLE_CHUNKS[0], 1 << 30, BUNDLE_CHUNKS[2]) if name == "max" else BUNDLE_CHUNKS):
        frames = units * record.multiple
        at = {}
        for n, shape in shapes.items():
            axis = (record.inputs.get(n) or {}).get("time_axis")
            shape = list(shape)
            if axis is not None:
                shape[axis] = _within(n, axis, frames, choice, record.multiple)
            at[n] = shape
        feed = _feed(specs, at, seed * 10 + k)
        for s in record.states:
            feed[s.input] = np.zeros(at[s.input], dtype=feed[s.input].dtype)
        chunks.append(Chunk(at, feed))
    return Case(f"{name} stream", chunks=chunks, carry=states)


def _within(name: str, axis: int, frames: int, choice: ProfileChoice | None, multiple: int) -> int:
    if choice is None or name not in choice.profile.shapes:
        return frames
    lo, _, hi = (t[axis] for t in choice.profile.shapes[name])
    frames = max(frames, multiple_of(lo, multiple))
    return min(frames, hi // multiple * multiple) if hi >= multiple else frames


def _feed(specs: list[Any], shapes: dict[str, list[int]], seed: int) -> dict[str, np.ndarray]:
    return make_feed(specs, Case("bundle", label_sizes(specs, shapes), shapes), {}, seed)  # the sizes bound a lengths input


# --- the reference and the floors -----------------------------------------------------------------

# The honest run that measures each precision's rounding floor: ONNX Runtime in float32 for fp32;
# ONNX's reference evaluator with TF32 products (onnx_reference's "tf32") or in float16 otherwise.
HONEST_DTYPES = {"fp32": "float32", "tf32": "tf32", "fp16": "float16"}
HONEST_NOTES = {
    "tf32": "the rounding floor is measured by the file computing in float32 with its matrix products' and convolutions' inputs rounded "
            "to TF32 (ONNX's reference evaluator, the recurrences' per-step products included)",
    "fp16": "the rounding floor is measured by the file computing in float16 (ONNX's reference evaluator): an fp16 engine that keeps "
            "some layers in float32 lies within it",
}


def golden(original: Any, cases: list[Case], precision: str, notes: list[str]) -> None:
    """Golden outputs (the float64 reference on the source file, a stream's chunks chained
    through its own states) and each output's rounding floor: an honest run at the engine's
    precision (ONNX Runtime in float32; ONNX's reference evaluator in float16 for fp16)."""
    reference = isolated(original, "reference:float64")
    honest_dtype = HONEST_DTYPES[precision]
    if precision in HONEST_NOTES:
        try:
            honest: Any = isolated(original, f"reference:{honest_dtype}")
        except BudgetExceeded:
            raise
        except RNNXError as exc:
            raise RNNXError(f"bundle --precision {precision}: the honest {precision} run that measures the rounding floor failed ({exc})") from None
        notes.append(HONEST_NOTES[precision])
    else:
        honest = isolated(original)
    for case in cases:
        ref_states: dict[str, np.ndarray] = {}
        honest_states: dict[str, np.ndarray] = {}
        for chunk in case.chunks:
            feed = {**chunk.feed, **{i: v.astype(chunk.feed[i].dtype) for i, v in ref_states.items()}}
            chunk.feed = feed
            try:
                want = reference(feed)
                got = honest({**feed, **honest_states})
            except BudgetExceeded as exc:
                raise BudgetExceeded(f"bundle: the golden outputs of the {case.name} case ({shapes_text(chunk.shapes)}): {exc}") from None
            except RNNXError as exc:
                raise RNNXError(refused_case(case.name, chunk.shapes, exc)) from None
            for name, value in want.items():
                chunk.golden[name] = value
                if value.dtype.kind != "f":
                    unchecked = (f"output {name} ({value.dtype}) is not compared on the device: an index or a flag can differ between "
                                 "precisions where two values nearly tie; the floating outputs are")
                    if unchecked not in notes:
                        notes.append(unchecked)
                    continue
                # at the output's own scale: an output of 0.01 in fp16 is held to fp16's epsilon of 0.01, not of 1
                floor = rounding_floor(np.asarray(got[name], np.float64), value, "float16" if precision == "fp16" else "float32", least_scale=0.0)
                chunk.floors[name] = floor if floor is not None else float(np.finfo(np.float32).eps)
            ref_states = {i: want[o] for i, o in case.carry.items()}
            honest_states = {i: np.asarray(got[o]) for i, o in case.carry.items()}
            if not any(chunk.golden[n].size for n in chunk.floors):  # integer or empty outputs alone: the check would compare nothing
                raise RNNXError(f"bundle: expected a floating output to hold to the reference, found none ({', '.join(f'{n}: {v.dtype}' for n, v in want.items())}); "
                                "bundle the file before its outputs are turned into indices (export the logits, not their argmax)")


def refused_case(name: str, shapes: dict[str, list[int]], exc: Exception) -> str:
    """A case the model does not run at, named with its shapes and what to give instead."""
    end = {"min": "--min-shapes", "max": "--max-shapes"}.get(name.split()[0], "--opt-shapes")
    return (f"bundle: expected the model to run at the {name} case ({shapes_text(shapes)}), found it does not ({exc}); give {end} "
            "(or --profile) within the shapes the model takes")


def isolated(proto: Any, backend: str = "onnxruntime", folder: Path | None = None) -> Any:
    """``proto`` run in a child process held to --max-memory and --time-limit (a file is a program:
    a length can make it claim gigabytes or loop for ever), ONNX Runtime or ``reference:DTYPE``
    (ONNX's reference evaluator); ``folder``: where its external data lies."""
    engine, _, dtype = backend.partition(":")
    try:
        return make("ort" if engine == "onnxruntime" else "onnx-reference", Subject(proto=proto, folder=folder, dtype=dtype or None, label="the model"))
    except ValueError:  # protobuf holds 2 GB at most in one message
        raise RNNXError("bundle: expected a model under 2 GB held whole (with its weights inline), found a larger one; a TensorRT engine "
                        "for a device of this class is built from a smaller model") from None


def check_here(runner: Any, case: Case) -> dict[str, Any]:
    """ONNX Runtime on the bundle's model.onnx, each chunk fed the state outputs of its own
    chunk before, held to the rule."""
    chunks = []
    states: dict[str, np.ndarray] = {}
    for chunk in case.chunks:
        try:
            got = runner({**chunk.feed, **states})
        except BudgetExceeded as exc:
            raise BudgetExceeded(f"bundle: checking the {case.name} case ({shapes_text(chunk.shapes)}): {exc}") from None
        except RNNXError as exc:
            raise RNNXError(refused_case(case.name, chunk.shapes, exc)) from None
        outputs = {}
        for name, floor in chunk.floors.items():
            # the floor was measured once, at golden time (the device's check.py holds the same one): a fixed rule of it
            row = judge(got.get(name), chunk.golden[name], Rule(calibrated(floor)), output=name)
            error = float(row.max_abs) if row.max_abs is not None else math.inf
            outputs[name] = {"output": name, "max_abs": error, "floor": floor, "ratio": error / floor, "passed": row.passed}
        chunks.append({"shapes": chunk.shapes, "outputs": outputs})
        states = {i: np.asarray(got[o]) for i, o in case.carry.items()}
    return {"name": case.name, "chunks": chunks}
