#!/usr/bin/env python3
"""check.py of an rnnx bundle: the engine's outputs, as trtexec exported them, against the golden ones.

This file is copied into every folder ``rnnx bundle`` writes, and runs on the device with the
standard library alone, from Python 3.6 on (JetPack 4.6 ships 3.6): no rnnx, numpy or torch.

    python3 check.py                 validate the folder, then compare every case (after check.sh ran trtexec on each)
    python3 check.py --folder        validate the folder only (check.sh runs it before any trtexec)
    python3 check.py --carry CASE K  write chunk K's state inputs from chunk K-1's outputs

Nothing is compared until the folder is what rnnx wrote: every file BUNDLE.json lists has its
size and SHA-256 (an interrupted copy, an emptied or cut golden file, appended bytes are
refused), cases.json holds the types and ranges rnnx writes (at least one case, each chunk at
least one output), every path stays inside the folder, and every golden file and every output
trtexec exported holds exactly as many values as its shape.

``cases.json`` lists the cases. Each holds one or more chunks (a streaming file's chunks feed
their state outputs to the next chunk's state inputs); each chunk, its input files (raw
little-endian, as trtexec's ``--loadInputs`` reads them) and, per output, the golden values
(raw little-endian float64, from the float64 reference) and the rule: the max abs error
within ``multiple`` times the rounding floor, measured at the precision the engine is built
in. trtexec prints each value to ``printed_digits`` significant digits (std::ostream's
default, %g style), so a printed value may miss by half a unit of that last digit; a printed
zero is exact.

Exit status: 0 every output holds, 1 one fails, 2 the folder or trtexec's files are not as
expected, 3 a bug in this file.

One module, though long: it is copied alone into every bundle and runs on the device with the
standard library only, so what it needs cannot live in another module.
"""

import hashlib
import json
import math
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
_CODES = {"float32": "f", "float16": "e", "int32": "i", "int64": "q", "int8": "b", "uint8": "B", "bool": "?", "float64": "d"}
_PRECISIONS = ("fp32", "tf32", "fp16")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_MAX_VALUES = 1 << 31  # no tensor rnnx writes comes near this: a shape past it is not one it wrote


class Refused(Exception):
    """The folder or trtexec's output is not what this check reads (exit 2)."""


class Failed(Exception):
    """The engine gave something it must not (a state output of the wrong size): exit 1."""


def _say(text, stream=None):
    """Print, whatever the terminal's encoding (Python 3.6 under LANG=C writes ASCII) and whether
    or not the reader is still there (``check.sh | head``): the exit status must stay the verdict's."""
    stream = stream or sys.stdout
    try:
        stream.write(text.encode(stream.encoding or "ascii", "backslashreplace").decode(stream.encoding or "ascii") + "\n")
        stream.flush()
    except (BrokenPipeError, OSError):
        pass


# --- the folder -----------------------------------------------------------------------------------


def _path(relative):
    """``relative`` inside the folder; anything that could lead out of it is refused."""
    if not isinstance(relative, str) or not relative or relative.startswith("/") or "\\" in relative or "\0" in relative:
        raise Refused(f"expected a relative path inside the bundle folder, found {relative!r}")
    parts = relative.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise Refused(f"expected a path inside the bundle folder, found {relative!r}")
    path = os.path.join(HERE, *parts)
    real, root = os.path.realpath(path), os.path.realpath(HERE)
    if os.path.commonpath([real, root]) != root:
        raise Refused(f"{relative}: expected a file inside the bundle folder, found one that leads to {real}")
    return path


def _read_json(relative):
    try:
        with open(_path(relative), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise Refused(f"expected {relative} as rnnx bundle wrote it, found: {exc}") from None


def load_manifest():
    """cases.json, its types and ranges checked (see :func:`_check_manifest`)."""
    manifest = _read_json("cases.json")
    _check_manifest(manifest)
    return manifest


def check_files():
    """Every file BUNDLE.json lists: present, a regular file inside the folder, its size and SHA-256 as written."""
    bundle = _read_json("BUNDLE.json")
    files = bundle.get("files") if isinstance(bundle, dict) else None
    if not isinstance(files, dict) or not files:
        raise Refused(f"BUNDLE.json: expected 'files', each file's size and SHA-256, found {type(files).__name__!r}")
    for relative, want in sorted(files.items()):
        if not (isinstance(want, dict) and _is_int(want.get("bytes")) and want["bytes"] >= 0
                and isinstance(want.get("sha256"), str) and _SHA256.match(want["sha256"])):
            raise Refused(f"BUNDLE.json: expected {{bytes, sha256}} for {relative}, found {want!r}")
        path = _path(relative)
        if os.path.islink(path) or not os.path.isfile(path):
            raise Refused("{}: expected the file BUNDLE.json lists ({} bytes), found {}; copy the whole folder again".format(
                relative, want["bytes"], "a link" if os.path.islink(path) else "none"))
        size = os.path.getsize(path)
        if size != want["bytes"]:
            raise Refused("{}: expected {} bytes (BUNDLE.json), found {}; the folder was cut or changed: copy it again".format(
                relative, want["bytes"], size))
        if _sha256(path) != want["sha256"]:
            raise Refused("{}: expected SHA-256 {} (BUNDLE.json), found another; the file was changed: copy the folder again".format(
                relative, want["sha256"][:16] + "..."))
    return files


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _need(ok, where, expected, found):
    if not ok:
        raise Refused(f"cases.json: {where}: expected {expected}, found {found!r}")


def _shape(value, where):
    _need(isinstance(value, list) and all(_is_int(d) and d >= 0 for d in value), where, "a list of sizes", value)
    _need(_size(value) <= _MAX_VALUES, where, f"a shape of at most {_MAX_VALUES} values", value)
    return value


def _size(shape):
    size = 1
    for d in shape:
        size *= d
    return size


def _check_manifest(manifest):
    """The types and ranges rnnx writes, so that nothing below meets a value it does not expect."""
    _need(isinstance(manifest, dict), "the file", "an object", type(manifest).__name__)
    rule = manifest.get("rule")
    _need(isinstance(rule, dict) and _is_number(rule.get("multiple")) and rule["multiple"] >= 1, "rule.multiple",
          "a number of at least 1", rule.get("multiple") if isinstance(rule, dict) else rule)
    _need(manifest.get("precision") in _PRECISIONS, "precision", " or ".join(_PRECISIONS), manifest.get("precision"))
    digits = manifest.get("printed_digits")
    _need(_is_int(digits) and 1 <= digits <= 17, "printed_digits", "trtexec's significant digits, 1 to 17", digits)
    for key in ("engine", "target"):
        _need(isinstance(manifest.get(key), str), key, "a string", manifest.get(key))
    cases = manifest.get("cases")
    _need(isinstance(cases, list) and cases, "cases", "at least one case (a bundle with none checks nothing)", cases)
    paths = {}
    for i, case in enumerate(cases):
        where = f"cases[{i}]"
        _need(isinstance(case, dict) and isinstance(case.get("name"), str) and case["name"], where + ".name", "a name", case)
        chunks, carry = case.get("chunks"), case.get("carry")
        _need(isinstance(chunks, list) and chunks, where + ".chunks", "at least one chunk", chunks)
        _need(isinstance(carry, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in carry.items()),
              where + ".carry", "state input -> output names", carry)
        for k, chunk in enumerate(chunks):
            _check_chunk(chunk, f"{where}.chunks[{k}]", carry if k else {}, paths)
    if len({c["name"] for c in cases}) != len(cases):
        raise Refused("cases.json: expected each case's name once, found one twice")


def _check_chunk(chunk, where, carry, paths):
    _need(isinstance(chunk, dict), where, "an object", chunk)
    inputs, outputs = chunk.get("inputs"), chunk.get("outputs")
    _need(isinstance(inputs, dict), where + ".inputs", "input name -> file", inputs)
    _need(isinstance(outputs, dict) and outputs, where + ".outputs", "at least one output to compare", outputs)
    _need(any(isinstance(o, dict) and isinstance(o.get("shape"), list) and _size(o["shape"]) for o in outputs.values()),
          where + ".outputs", "at least one output with values (empty ones compare nothing)", [o.get("shape") for o in outputs.values()])
    _claim(paths, chunk.get("export"), where + ".export", "out/")
    for name, spec in inputs.items():
        at = f"{where}.inputs[{name!r}]"
        _need(isinstance(spec, dict) and spec.get("dtype") in _CODES, at + ".dtype", " or ".join(_CODES), spec)
        _shape(spec.get("shape"), at + ".shape")
        _claim(paths, spec.get("file"), at + ".file", "out/" if name in carry else "cases/")
    for state in carry:
        _need(state in inputs, where + ".carry", "state inputs of this chunk", state)
    for name, spec in outputs.items():
        at = f"{where}.outputs[{name!r}]"
        _need(isinstance(spec, dict), at, "an object", spec)
        shape = _shape(spec.get("shape"), at + ".shape")
        _need(_is_number(spec.get("floor")) and spec["floor"] > 0, at + ".floor", "a positive number", spec.get("floor"))
        axis = spec.get("time_axis")
        _need(axis is None or (_is_int(axis) and 0 <= axis < len(shape)), at + ".time_axis", "an axis of the shape or null", axis)
        _claim(paths, spec.get("golden"), at + ".golden", "golden/")


def _claim(paths, relative, where, under):
    """A path under ``under``, inside the folder, used by one tensor only (case-insensitively: a
    copy through a filesystem that folds case would merge two)."""
    _need(isinstance(relative, str) and relative.startswith(under), where, "a path under " + under, relative)
    try:
        _path(relative)
    except Refused as exc:
        raise Refused(f"cases.json: {where}: {exc}") from None
    if relative.lower() in paths:
        raise Refused(f"cases.json: {paths[relative.lower()]} and {where} name one file, {relative}")
    paths[relative.lower()] = where


def check_folder(manifest, files):
    """The files cases.json reads that rnnx wrote are listed in BUNDLE.json (so their size and
    hash were held), and each holds exactly its shape's values."""
    for case in manifest["cases"]:
        for chunk in case["chunks"]:
            for spec in chunk["inputs"].values():
                if spec["file"].startswith("cases/"):
                    _listed(files, spec["file"], _size(spec["shape"]) * struct.calcsize("<" + _CODES[spec["dtype"]]))
            for spec in chunk["outputs"].values():
                _listed(files, spec["golden"], _size(spec["shape"]) * 8)
    for script in ("cases.json", "check.py", "model.onnx"):
        if script not in files:
            raise Refused(f"BUNDLE.json: expected {script} among its files, found it missing")


def _listed(files, relative, size):
    if relative not in files:
        raise Refused(f"{relative}: expected a file BUNDLE.json lists, found it not listed")
    if files[relative]["bytes"] != size:
        raise Refused("{}: expected {} bytes for its shape, found {}".format(relative, size, files[relative]["bytes"]))


def read_raw(relative, dtype, count):
    """A raw little-endian file of exactly ``count`` values, as a flat list of Python numbers."""
    code = _CODES[dtype]
    size = struct.calcsize("<" + code)
    try:
        with open(_path(relative), "rb") as f:
            data = f.read(count * size + 1)
    except OSError as exc:
        raise Refused(f"expected {relative}, found: {exc}") from None
    if len(data) != count * size:
        raise Refused("{}: expected {} {} values ({} bytes), found {}{} bytes".format(
            relative, count, dtype, count * size, "over " if len(data) > count * size else "", len(data)))
    return list(struct.unpack(f"<{count}{code}", data))


def write_raw(relative, values, dtype):
    path = _path(relative)
    if not os.path.isdir(os.path.dirname(path)):
        os.makedirs(os.path.dirname(path))
    code = _CODES[dtype]
    if os.path.lexists(path + ".tmp"):  # a stale one, or a link planted to make this write land elsewhere
        os.unlink(path + ".tmp")
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(struct.pack(f"<{len(values)}{code}", *values))
    os.replace(path + ".tmp", path)


# --- trtexec's exported outputs -------------------------------------------------------------------


def _quantum(text, digits):
    """How far a printed value may lie from the value it stands for: half a unit of its last
    significant digit at trtexec's precision (``digits`` significant digits, %g style, trailing
    zeros dropped), or of the last digit printed where more were printed. A printed zero is exact."""
    mantissa, _, exponent = text.lower().lstrip("-+").partition("e")
    whole, _, fraction = mantissa.partition(".")
    significant = (whole + fraction).lstrip("0")
    if not significant.strip("0"):
        return 0.0
    decimals = len(fraction) - int(exponent or 0)  # where the last printed digit lies
    leading = len(whole.lstrip("0")) - 1 if whole.lstrip("0") else -(len(fraction) - len(fraction.lstrip("0")) + 1)
    position = max(decimals, digits - 1 - (leading + int(exponent or 0)))
    return 0.5 * 10.0 ** (-position)


_VALUES = re.compile(r'("values" : \[)([^\]"]*)(\])')  # names hold no '"' (the bundle refuses them), so this finds values only
_NON_FINITE = re.compile(r"(?<![\w.])(-?(?:inf|nan))(?![\w.])")


def _exported_after_engine(relative):
    """An export older than model.engine is a stale run's, not this engine's. A missing export is
    left to read_export, whose refusal names it (getmtime here would raise past every refusal)."""
    engine, export = os.path.join(HERE, "model.engine"), _path(relative)
    if os.path.isfile(engine) and os.path.isfile(export) and os.path.getmtime(export) < os.path.getmtime(engine):
        raise Refused(f"{relative}: expected trtexec's output of this model.engine, found one written before it was built; run bash check.sh")


def read_export(relative, digits):
    """trtexec's --exportOutput file: {name: (dimensions, [values], [quanta])}, each output's
    values exactly as many as its dimensions. trtexec prints non-finite values as inf / -inf /
    nan, which JSON does not hold: they are read as such."""
    try:
        with open(_path(relative), encoding="utf-8") as f:
            text = f.read()
    except (OSError, ValueError) as exc:
        raise Refused(f"expected trtexec's output {relative}, found: {exc}; did check.sh run trtexec on this case?") from None
    text = _VALUES.sub(lambda m: m.group(1) + _NON_FINITE.sub(r'"\1"', m.group(2)) + m.group(3), text)  # in values only, not in names
    try:
        items = json.loads(text, parse_float=lambda s: (float(s), _quantum(s, digits)), parse_int=lambda s: (float(s), _quantum(s, digits)))
    except ValueError as exc:
        raise Refused(f"{relative}: expected trtexec's --exportOutput JSON, found text it cannot read ({exc})") from None
    if not isinstance(items, list):
        raise Refused(f"{relative}: expected trtexec's --exportOutput list of outputs, found {type(items).__name__}")
    out = {}
    for item in items:
        if not (isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("dimensions"), str)
                and isinstance(item.get("values"), list) and re.match(r"(\d+(x\d+)*)?\Z", item["dimensions"])):
            raise Refused(f"{relative}: expected each output as {{name, dimensions, values}}, found {str(item)[:80]!r}")
        if item["name"] in out:
            raise Refused("{}: expected each output once, found {!r} twice".format(relative, item["name"]))
        dims = [int(d) for d in item["dimensions"].split("x") if d]
        values = [(float(v), 0.0) if isinstance(v, str) and v.lstrip("-") in ("inf", "nan") else v for v in item["values"]]
        if not all(isinstance(v, tuple) for v in values):
            raise Refused("{}: output {!r}: expected numbers, found {!r}".format(relative, item["name"], next(v for v in values if not isinstance(v, tuple))))
        if len(values) != _size(dims):
            raise Refused("{}: output {!r}: expected {} values for its dimensions {}, found {}; trtexec's file was cut or "
                          "changed: run check.sh again".format(relative, item["name"], _size(dims), item["dimensions"] or "(scalar)", len(values)))
        out[item["name"]] = (dims, [v[0] for v in values], [v[1] for v in values])
    return out


def carry(manifest, case_name, k):
    """Chunk k's state inputs, from chunk k-1's exported outputs, in the inputs' dtypes."""
    case = next((c for c in manifest["cases"] if c["name"] == case_name), None)
    if case is None or not 0 < k < len(case["chunks"]) or not case["carry"]:
        raise Refused(f"--carry {case_name} {k}: expected a streaming case and a chunk after its first")
    before = read_export(case["chunks"][k - 1]["export"], manifest["printed_digits"])
    for state_in, state_out in case["carry"].items():
        spec = case["chunks"][k]["inputs"][state_in]
        if state_out not in before:
            raise Refused("--carry {} {}: expected output {!r} in {}, found none".format(case_name, k, state_out, case["chunks"][k - 1]["export"]))
        values = before[state_out][1]
        if len(values) != _size(spec["shape"]):
            raise Failed("{} chunk {}: the engine's state output {!r} has {} values where its input {!r} takes {}: the engine's "
                         "outputs are not the model's".format(case_name, k - 1, state_out, len(values), state_in, _size(spec["shape"])))
        if spec["dtype"] in ("float32", "float16", "float64"):
            write_raw(spec["file"], values, spec["dtype"])
        else:
            write_raw(spec["file"], [int(v) for v in values], spec["dtype"])


# --- the comparison -------------------------------------------------------------------------------


def compare(manifest):
    """One line per case, chunk and output; True when every output holds."""
    ok = True
    multiple, digits = manifest["rule"]["multiple"], manifest["printed_digits"]
    for case in manifest["cases"]:
        for k, chunk in enumerate(case["chunks"]):
            _exported_after_engine(chunk["export"])
            got = read_export(chunk["export"], digits)
            label = case["name"] + ("" if len(case["chunks"]) == 1 else f" chunk {k}")
            for name, want in chunk["outputs"].items():
                line, passed = _compare_one(label, name, got.get(name), want, multiple)
                ok = ok and passed
                _say(line)
                if not passed:
                    cause = _cause(case, k, name, got.get(name), want, manifest)
                    if cause:
                        _say("    likely cause: " + cause)
    return ok


def _errors(found, want):
    """Per element: |engine - golden| less what the printed digits may miss by (never below 0);
    NaN where the engine's value is not finite and the golden one is."""
    golden = read_raw(want["golden"], "float64", _size(want["shape"]))
    _, values, quanta = found
    if len(values) != len(golden):  # read_export held values to their dimensions, and the caller dimensions to the shape
        raise Refused("{}: expected {} values, found {} exported".format(want["golden"], len(golden), len(values)))
    out = []
    for g, v, q in zip(golden, values, quanta):
        if math.isnan(v) or math.isinf(v):
            out.append(0.0 if (v == g or (math.isnan(v) and math.isnan(g))) else float("nan"))
        else:
            out.append(max(abs(v - g) - q, 0.0))
    return out


def _compare_one(label, name, found, want, multiple):
    if found is None:
        return f"{label:<22} {name:<20} FAIL: the engine returned no output {name!r}", False
    dims = found[0]
    if dims != want["shape"]:
        return "{:<22} {:<20} FAIL: shape {} where the golden output is {}".format(label, name, "x".join(map(str, dims)),
                                                                                 "x".join(map(str, want["shape"]))), False
    errors = _errors(found, want)
    bad = any(math.isnan(e) for e in errors)
    worst = max(errors) if errors and not bad else (float("nan") if bad else 0.0)
    allowed = multiple * want["floor"]
    passed = not bad and worst <= allowed
    ratio = worst / want["floor"] if not bad else float("nan")
    return ("{:<22} {:<20} max abs {:.3e}  {:>9} x floor {:.2e}  {}".format(
        label, name, worst, f"{ratio:.3g}", want["floor"], "ok" if passed else f"FAIL (allowed {multiple:g} x floor)"), passed)


# A small error everywhere is what a lower precision gives; a wrong weight or gate order moves an
# output by a large share of its own scale. TF32 and fp16 keep 10 mantissa bits (2^-11 relative
# per rounding); through a recurrence that grows, but stays well under 1% of the outputs' scale.
_PRECISION_SHARE = 1e-2


def _cause(case, k, name, found, want, manifest):
    """What the outputs alone can tell: the first chunk held and a later one did not (the states
    carried between chunks); the error small and at every frame (a lower precision than the
    bundle's, such as TF32 left on); the first frame holds and later frames drift (the
    recurrence's own path: its recurrent weights or a gate order); the first frame is already
    off (the path into the recurrence)."""
    if found is None or found[0] != want["shape"]:
        return ""
    multiple = manifest["rule"]["multiple"]
    values = found[1]
    if values and all(v == values[0] for v in values):
        return (f"every value the engine gave for this output is {values[0]!r}: it did not compute it (an engine that ran on nothing, or an "
                "output left unset)")
    if k > 0:
        first = case["chunks"][0]
        exported = read_export(first["export"], manifest["printed_digits"])
        held = all(_compare_one("", n, exported.get(n), w, multiple)[1] for n, w in first["outputs"].items())
        if held and _exercises_recurrence(first):  # a one-frame chunk from zero states never uses the recurrent weights
            return ("the first chunk holds and chunk {} does not: the states carried between chunks (is each state output fed to its "
                    "input, in this order: {})".format(k, ", ".join(f"{o} -> {i}" for i, o in case["carry"].items())))
    errors = _errors(found, want)
    if any(math.isnan(e) for e in errors):
        return ""
    allowed = multiple * want["floor"]
    per_frame = _per_frame(errors, want)
    golden = read_raw(want["golden"], "float64", _size(want["shape"]))
    scale = max((abs(g) for g in golden if math.isfinite(g)), default=0.0)
    worst = max(errors, default=0.0)
    if scale and worst <= _PRECISION_SHARE * scale and all(e > allowed / multiple for e in (per_frame or [worst])):
        return ("the error is small and everywhere ({:.2e}, {:.1e} of the output's scale, at every frame): the size a lower precision "
                "gives, not a wrong weight. Was the engine built in another precision than this bundle's {}? An fp32 bundle's "
                "build.sh passes --noTF32 (trtexec enables TF32 otherwise); check build.log and the flags the engine was built "
                "with, or make the bundle with --precision tf32 or fp16 if that is what the device should run".format(
                    worst, worst / scale, manifest["precision"]))
    if not per_frame or len(per_frame) < 3:
        return ""
    if per_frame[0] <= allowed < max(per_frame):
        later = next(t for t, e in enumerate(per_frame) if e > allowed)
        return (f"frame 0 holds and frame {later} does not: the error enters through the recurrence's state path (its recurrent weights, "
                "or a gate order), not its input")
    if per_frame[0] > allowed:
        return "frame 0 is already off: the path into the recurrence (its input weights or biases, or the layers before it) differs"
    return ""


def _exercises_recurrence(chunk):
    """Whether a chunk runs its recurrence over two frames or more (else it says nothing of the
    recurrent weights, and a later chunk failing need not be the carry's fault)."""
    return any(o.get("time_axis") is not None and o["shape"][o["time_axis"]] >= 2 for o in chunk["outputs"].values())


def _per_frame(errors, want):
    """The worst error at each step of the output's time axis ([] where it has none)."""
    axis, shape = want.get("time_axis"), want["shape"]
    if axis is None or not shape[axis]:
        return []
    inner = _size(shape[axis + 1:])
    steps = shape[axis]
    per_frame = [0.0] * steps
    for i, e in enumerate(errors):
        t = (i // inner) % steps
        per_frame[t] = max(per_frame[t], e)
    return per_frame


def _built_by():
    """", built by TensorRT X" from build.log's version line, where build.sh left one."""
    try:
        with open(_path("build.log"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if "TensorRT version:" in line:
                    return ", built by TensorRT " + line.split("TensorRT version:")[1].strip()[:40]
    except (OSError, Refused):
        pass
    return ""


def main(argv):
    try:
        if argv[:1] == ["--carry"]:  # between two trtexec runs: cases.json's values and paths (check.sh checked the hashes first)
            if len(argv) != 3 or not argv[2].isdigit():
                raise Refused("usage: check.py --carry CASE K")
            carry(load_manifest(), argv[1], int(argv[2]))
            return 0
        if argv not in ([], ["--folder"]):
            raise Refused("usage: check.py [--folder | --carry CASE K]; got {}".format(" ".join(argv)))
        files = check_files()  # the files as rnnx wrote them, then what cases.json says of them
        manifest = load_manifest()
        check_folder(manifest, files)
        if argv == ["--folder"]:
            _say("check.py: the folder is as rnnx bundle wrote it ({} cases)".format(len(manifest["cases"])))
            return 0
        _say("engine {} (bundled for {}{}), against the float64 reference: max abs error within {:g} x the rounding floor at {}".format(
            manifest["engine"], manifest["target"], _built_by(), manifest["rule"]["multiple"], manifest["precision"]))
        ok = compare(manifest)
    except Refused as exc:
        _say("check.py: " + str(exc), sys.stderr)
        return 2
    except Failed as exc:
        _say("check.py: FAIL: " + str(exc), sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001  a bug here must not read as an engine that failed (1)
        _say(f"check.py: internal error, a bug in rnnx's check.py ({type(exc).__name__}: {exc}); please report it with cases.json", sys.stderr)
        return 3
    _say("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
