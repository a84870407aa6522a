"""trtexec command lines for a TensorRT version, each flag checked against the cited table.

:mod:`rnnx.engines.trtexec_flags` holds, per TensorRT version read, which flags trtexec's own
option parser (``samples/common/sampleOptions.cpp``) takes, with the source line for each
cell. This module writes the lines ``rnnx bundle`` puts in build.sh and check.sh and refuses a
flag the table does not show the target accepting, so a new TensorRT version is a data change.
The JetPack each version ships is :mod:`rnnx.engines.jetpack`'s table.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from rnnx.engines import jetpack as jetpack_table, trtexec_flags
from rnnx.engines.tensorrt_parser import ALIASES as PARSER_ALIASES, VERSIONS as PARSER_VERSIONS, parser_for
from rnnx.engines.tensorrt_version import TensorRTVersion, bracket, read_columns
from rnnx.errors import RNNXError, shown

# What each precision a bundle builds in adds to trtexec's build line. trtexec enables TF32 unless told
# not to (its --noTF32 help: "default is to enable tf32"), so on Ampere and later GPUs an fp32 engine
# would round its products' inputs to a 10-bit mantissa: fp32 means fp32, and TF32 is asked for by name.
PRECISION_FLAGS = {"fp32": ("--noTF32",), "tf32": (), "fp16": ("--fp16",)}
PRECISIONS = tuple(PRECISION_FLAGS)
POLYGRAPHY_PRECISION_FLAGS = {"fp32": (), "tf32": ("--tf32",), "fp16": ("--fp16",)}  # Polygraphy leaves TF32 off unless given --tf32
TIMING_CACHE = "timing.cache"
ACCEPTED = ("accepted", "deprecated")  # deprecated flags still parse (the table cites the warning); rnnx writes none it can avoid


@dataclass(frozen=True)
class Target:
    """The TensorRT a bundle is for: its version, the JetPack that ships it, the parser rules
    and trtexec flag table that judge it, and the newest opset its parser reads."""

    tensorrt: str  # as the user or the JetPack table gave it, e.g. "8.2.1"
    parser: str  # the version of tensorrt_parser's table that judges the nodes
    flags: str  # the version of trtexec_flags' table that judges the flags (the nearest read at or below)
    opset: int
    jetpack: str | None = None
    note: str = ""
    flags_above: str | None = None  # a version between two read ones: the read one above, which must accept each flag too

    @property
    def tensorrt_major_minor(self) -> str:
        return ".".join(map(str, _release(self.tensorrt).major_minor))

    def describe(self) -> str:
        return f"TensorRT {self.tensorrt}" + (f" (JetPack {self.jetpack})" if self.jetpack else "")

    def to_json(self) -> dict[str, Any]:
        return {"tensorrt": self.tensorrt, "jetpack": self.jetpack, "parser_rules": self.parser, "trtexec_flags": self.flags,
                "trtexec_flags_above": self.flags_above, "opset": self.opset, "note": self.note}


def resolve_target(tensorrt: str | None, jetpack: str | None) -> Target:
    """``--tensorrt VERSION`` or ``--jetpack VERSION`` (one, or neither: the newest TensorRT read)."""
    if tensorrt and jetpack:
        raise RNNXError("bundle: expected --tensorrt or --jetpack, found both; give one (--jetpack picks the TensorRT it ships)")
    if jetpack is not None:
        wanted = str(jetpack).strip()
        row = jetpack_table.JETPACK.get(wanted)
        if row is None or not row.get("tensorrt"):
            raise RNNXError(f"jetpack: expected one of {', '.join(supported_jetpacks())}, found {wanted}; give --tensorrt VERSION "
                            "for another device")
        try:
            return _target(str(row["tensorrt"]), wanted)
        except RNNXError as exc:
            raise RNNXError(f"jetpack: JetPack {wanted} ships TensorRT {row['tensorrt']}, which rnnx cannot target "
                            f"({str(exc).partition(': ')[2]})") from None
    if tensorrt is None:  # the newest version whose parser rnnx has read
        read = read_columns(PARSER_VERSIONS)
        return _target(max(read, key=read.__getitem__), None)
    text = str(tensorrt).strip()
    if text.endswith(".x") and text in PARSER_ALIASES:  # the parser table's name for its newest read: 10.x is 10.15
        text = PARSER_ALIASES[text]
    if TensorRTVersion.parse(text) is None:
        raise RNNXError(f"tensorrt: expected a TensorRT release from 8.2 to 10.x, like 8.6 or 10.3.0, found {tensorrt!r} "
                        "(rnnx has not read TensorRT 11's ONNX parser)")
    return _target(text, None)


def supported_jetpacks() -> list[str]:
    """The JetPacks whose TensorRT rnnx can target, in the table's order."""
    out = []
    for name, row in jetpack_table.JETPACK.items():
        try:
            if row.get("tensorrt"):
                _target(str(row["tensorrt"]), name)
                out.append(name)
        except RNNXError:
            continue
    return out


def _release(version: str) -> TensorRTVersion:
    found = TensorRTVersion.parse(version)
    if found is None:  # the callers read it already: a user's text is checked, a table's is a release
        raise RNNXError(f"tensorrt: expected a TensorRT release like 8.6 or 10.3.0, found {shown(version)}")
    return found


def _target(version: str, jetpack: str | None) -> Target:
    release = _release(version)
    flags, flags_above = _flag_columns(release)
    parser, note = parser_for(version)
    opset = 13 if release.major_minor < (8, 5) else 17
    return Target(version, parser, flags, opset, jetpack, note, flags_above)


def _flag_columns(release: TensorRTVersion) -> tuple[str, str | None]:
    """The flag table's column for ``release``: its own, else the nearest read below it within
    the same major, with the nearest read above it (which must accept each flag too; None where
    the release has its own column or nothing above was read)."""
    read = {v: _release(str(source.get("version", v))) for v, source in trtexec_flags.SOURCES.items()}
    near = bracket(release, read)
    if near.own is not None:
        return near.own, None
    if near.below is None:
        raise RNNXError(f"tensorrt: expected a TensorRT whose trtexec's options rnnx has read ({', '.join(read)}), or a release above one "
                        f"of the same major, found {'.'.join(map(str, release.major_minor))}; give one of those")
    return near.below, near.above


def accepts(version: str, flag: str) -> bool:
    """Whether trtexec of table version ``version`` takes ``flag`` (``--minShapes``)."""
    row = trtexec_flags.FLAGS.get(flag)
    return row is not None and row["versions"].get(version) in ACCEPTED


def check_argv(target: Target, argv: list[str]) -> None:
    """Refuse a line with a flag the table does not show this trtexec accepting (a bug in rnnx: exit 3)."""
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if not accepts(target.flags, flag) or (target.flags_above is not None and not accepts(target.flags_above, flag)):
            state = (trtexec_flags.FLAGS.get(flag) or {}).get("versions", {}).get(target.flags, "not in the table")
            raise RuntimeError(f"trtexec {target.flags}: rnnx wrote {flag}, which that version's table marks {state}")


def shape_spec(shapes: dict[str, Any]) -> str:
    """``x:1x20x16,rnn.h_in:1x1x24``: trtexec's shape syntax (SHAPE_SPEC). Names go unquoted:
    every version splits each pair at its last colon, while quotes mean different things
    across versions (8.0 and 8.2 delete them; --loadInputs there keeps them, and then matches
    no input)."""
    return ",".join(f"{_name(n)}:{'x'.join(str(int(d)) for d in s)}" for n, s in shapes.items())


def _name(name: str, kind: str = "input") -> str:
    """A tensor name as trtexec's lines take it. Its name:value lists split at commas and treat
    quotes apart, and --exportOutput writes names unescaped inside JSON quotes (EXPORT_OUTPUT's
    json_caveats), so a comma, a quote, a backslash or a control character cannot be carried."""
    bad = next((c for c in name if c in "',\"\\" or ord(c) < 32 or ord(c) == 127), None)
    if bad is not None or not name:
        what = f"{bad!r}" if bad is not None else "an empty name"
        raise RNNXError(f"bundle: {kind} {shown(name)}: expected a name trtexec carries in its name:value lists and its JSON (no comma, quote, "
                        f"backslash or control character), found {what}; rename the {kind} (input_names= / output_names= at export)")
    return name


def check_names(inputs: list[str], outputs: list[str]) -> None:
    """Refuse (exit 2) any input or output name trtexec cannot carry (see :func:`_name`)."""
    for kind, names in (("input", inputs), ("output", outputs)):
        for name in names:
            _name(name, kind)


def build_argv(target: Target, profile: Any, precision: str) -> list[str]:
    argv = ["--onnx=model.onnx", "--saveEngine=model.engine"]
    if profile is not None:
        ends = {end: {n: t[i] for n, t in profile.shapes.items()} for i, end in enumerate(("min", "opt", "max"))}
        argv += [f"--minShapes={shape_spec(ends['min'])}", f"--optShapes={shape_spec(ends['opt'])}", f"--maxShapes={shape_spec(ends['max'])}"]
    argv += PRECISION_FLAGS[precision]
    argv.append(f"--timingCacheFile={TIMING_CACHE}")
    if trtexec_flags.EXPLICIT_BATCH_NEEDED.get(target.flags):  # no column needs it (check_argv below holds the flag to the table)
        argv.insert(1, "--explicitBatch")
    check_argv(target, argv)
    return argv


def run_argv(target: Target, shapes: dict[str, list[int]], files: dict[str, str], export: str) -> list[str]:
    argv = ["--loadEngine=model.engine"]
    if shapes:
        argv.append(f"--shapes={shape_spec(shapes)}")
    argv += [f"--loadInputs={','.join(f'{_name(n)}:{f}' for n, f in files.items())}", f"--exportOutput={export}",
             "--iterations=1", "--warmUp=0", "--duration=0"]
    check_argv(target, argv)
    return argv


def quote(arg: str) -> str:
    return shlex.quote(arg)


def polygraphy_profile(shapes: dict[str, list[list[int]]]) -> list[str]:
    """Polygraphy's ``--trt-min-shapes``/``--trt-opt-shapes``/``--trt-max-shapes`` for the profile."""
    if not shapes:
        return []
    out = []
    for i, flag in enumerate(("--trt-min-shapes", "--trt-opt-shapes", "--trt-max-shapes")):
        out += [flag, *[f"{n}:[{','.join(map(str, t[i]))}]" for n, t in shapes.items()]]
    return out


def citations(target: Target, argv: list[str]) -> dict[str, Any]:
    """Where the table shows each flag of ``argv`` accepted by this version's trtexec (and by
    the column above, for a release between two read ones)."""
    columns = [target.flags] + ([target.flags_above] if target.flags_above else [])
    out: dict[str, Any] = {"source": [trtexec_flags.SOURCES[c] for c in columns]}
    for arg in argv:
        flag = arg.split("=", 1)[0]
        out[flag] = [next((c for c in trtexec_flags.FLAGS[flag].get("cite", []) if c.get("version") == column), None) for column in columns]
    return out


def deprecations(target: Target, argv: list[str]) -> list[str]:
    """A note for each flag of ``argv`` that the target's column (or the one above) marks deprecated."""
    notes = []
    for arg in argv:
        flag = arg.split("=", 1)[0]
        columns = [c for c in (target.flags, target.flags_above) if c and trtexec_flags.FLAGS[flag]["versions"].get(c) == "deprecated"]
        if columns:
            source = trtexec_flags.SOURCES[columns[0]]
            notes.append(f"trtexec {source.get('version', columns[0])} marks {flag} deprecated (it still takes it, with a warning)"
                         + ("; fp16 there is a strongly typed network's own types" if flag == "--fp16" else ""))
    return notes
