#!/usr/bin/env python3
"""check.py of an rnnx bundle: the engine's outputs, as trtexec exported them, against the golden ones.

This file is copied into every folder ``rnnx bundle`` writes, and runs on the device with the
standard library alone, from Python 3.6 on (JetPack 4.6 ships 3.6): no rnnx, numpy or torch.

    python3 check.py                 compare every case (after check.sh ran trtexec on each)
    python3 check.py --carry CASE K  write chunk K's state inputs from chunk K-1's outputs

``cases.json`` lists the cases. Each holds one or more chunks (a streaming file's chunks feed
their state outputs to the next chunk's state inputs); each chunk, its input files (raw
little-endian, as trtexec's ``--loadInputs`` reads them) and, per output, the golden values
(raw little-endian float64, from the float64 reference) and the rule: the max abs error
within ``multiple`` times the rounding floor, measured at the precision the engine is built
in. trtexec prints each value with a limited number of digits (``--exportOutput``); the half
unit of each printed value's last digit is added to what it may miss by.

Exit status: 0 every output holds, 1 one fails, 2 the folder or trtexec's files are not as
expected.
"""

import json
import math
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
_CODES = {"float32": "f", "float16": "e", "int32": "i", "int64": "q", "int8": "b", "uint8": "B", "bool": "?", "float64": "d"}


class Refused(Exception):
    """The folder or trtexec's output is not what this check reads (exit 2)."""


def _path(relative):
    return os.path.join(HERE, *relative.split("/"))


def load_manifest():
    try:
        with open(_path("cases.json")) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise Refused("expected cases.json beside check.py, found: {}".format(exc))


def read_raw(relative, dtype):
    """A raw little-endian file as a flat list of Python numbers."""
    code = _CODES[dtype]
    with open(_path(relative), "rb") as f:
        data = f.read()
    size = struct.calcsize("<" + code)
    if len(data) % size:
        raise Refused("{}: {} bytes is not a whole number of {} values".format(relative, len(data), dtype))
    return list(struct.unpack("<{}{}".format(len(data) // size, code), data))


def write_raw(relative, values, dtype):
    path = _path(relative)
    if not os.path.isdir(os.path.dirname(path)):
        os.makedirs(os.path.dirname(path))
    code = _CODES[dtype]
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<{}{}".format(len(values), code), *values))
    os.replace(path + ".tmp", path)


def _quantum(text):
    """Half a unit in the last digit printed: how far the text may lie from the value it stands for."""
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 0.5 * 10.0 ** (int(exponent or 0) - decimals)


def read_export(relative):
    """trtexec's --exportOutput file: {name: (dimensions, [values], [quanta])}. trtexec prints
    non-finite values as inf / -inf / nan, which JSON does not hold: they are read as such."""
    try:
        with open(_path(relative)) as f:
            text = f.read()
    except OSError as exc:
        raise Refused("expected trtexec's output {}, found: {}; did check.sh run trtexec on this case?".format(relative, exc))
    for word in ("-inf", "inf", "-nan", "nan"):
        text = text.replace(" " + word + ",", ' "' + word + '",').replace(" " + word + " ]", ' "' + word + '" ]')
    try:
        items = json.loads(text, parse_float=lambda s: (float(s), _quantum(s)), parse_int=lambda s: (float(s), 0.5))
    except ValueError as exc:
        raise Refused("{}: expected trtexec's --exportOutput JSON, found text it cannot read ({})".format(relative, exc))
    out = {}
    for item in items:
        values = [(float(v), 0.0) if isinstance(v, str) else v for v in item["values"]]
        dims = [int(d) for d in str(item["dimensions"]).split("x") if d]
        out[item["name"]] = (dims, [v[0] for v in values], [v[1] for v in values])
    return out


def carry(manifest, case_name, k):
    """Chunk k's state inputs, from chunk k-1's exported outputs, in the inputs' dtypes."""
    case = next((c for c in manifest["cases"] if c["name"] == case_name), None)
    if case is None or not 0 < k < len(case["chunks"]):
        raise Refused("--carry {} {}: expected a streaming case and a chunk after its first".format(case_name, k))
    before = read_export(case["chunks"][k - 1]["export"])
    for state_in, state_out in case["carry"].items():
        spec = case["chunks"][k]["inputs"][state_in]
        values = before[state_out][1]
        if spec["dtype"] in ("float32", "float16", "float64"):
            write_raw(spec["file"], values, spec["dtype"])
        else:
            write_raw(spec["file"], [int(v) for v in values], spec["dtype"])


def compare(manifest):
    """One line per case, chunk and output; True when every output holds."""
    ok = True
    multiple = manifest["rule"]["multiple"]
    for case in manifest["cases"]:
        for k, chunk in enumerate(case["chunks"]):
            got = read_export(chunk["export"])
            label = case["name"] + ("" if len(case["chunks"]) == 1 else " chunk {}".format(k))
            for name, want in chunk["outputs"].items():
                line, passed = _compare_one(label, name, got.get(name), want, multiple)
                ok = ok and passed
                print(line)
                if not passed:
                    cause = _cause(case, k, name, got.get(name), want, multiple)
                    if cause:
                        print("    likely cause: " + cause)
    return ok


def _errors(found, want):
    """Per element: |engine - golden| less what the printed digits may miss by (never below 0);
    NaN where the engine's value is not finite and the golden one is."""
    golden = read_raw(want["golden"], "float64")
    _, values, quanta = found
    out = []
    for g, v, q in zip(golden, values, quanta):
        if math.isnan(v) or math.isinf(v):
            out.append(0.0 if (v == g or (math.isnan(v) and math.isnan(g))) else float("nan"))
        else:
            out.append(max(abs(v - g) - q, 0.0))
    return out


def _compare_one(label, name, found, want, multiple):
    if found is None:
        return "{:<22} {:<20} FAIL: the engine returned no output {!r}".format(label, name, name), False
    dims = found[0]
    if dims != want["shape"]:
        return "{:<22} {:<20} FAIL: shape {} where the golden output is {}".format(label, name, "x".join(map(str, dims)),
                                                                                 "x".join(map(str, want["shape"]))), False
    errors = _errors(found, want)
    bad = any(math.isnan(e) for e in errors)
    worst = max(errors) if errors and not bad else (float("nan") if bad else 0.0)
    allowed = multiple * want["floor"]
    passed = not bad and worst <= allowed
    ratio = worst / want["floor"] if want["floor"] and not bad else float("nan")
    return ("{:<22} {:<20} max abs {:.3e}  {:>9} x floor {:.2e}  {}".format(
        label, name, worst, "{:.3g}".format(ratio), want["floor"], "ok" if passed else "FAIL (allowed {:g} x floor)".format(multiple)), passed)


def _cause(case, k, name, found, want, multiple):
    """What the outputs alone can tell: the first chunk held and a later one did not (the states
    carried between chunks); the first frame holds and later frames drift (the recurrence's own
    path: its recurrent weights or a gate order); the first frame is already off (the path
    into the recurrence)."""
    if found is None or found[0] != want["shape"]:
        return ""
    if k > 0:
        first = case["chunks"][0]
        held = all(_compare_one("", n, read_export(first["export"]).get(n), w, multiple)[1] for n, w in first["outputs"].items())
        if held:
            return ("the first chunk holds and chunk {} does not: the states carried between chunks (is each state output fed to its "
                    "input, in this order: {})".format(k, ", ".join("{} -> {}".format(o, i) for i, o in case["carry"].items())))
    axis = want.get("time_axis")
    if axis is None or len(want["shape"]) <= axis or want["shape"][axis] < 3:
        return ""
    errors = _errors(found, want)
    shape = want["shape"]
    inner = 1
    for d in shape[axis + 1:]:
        inner *= d
    steps = shape[axis]
    per_frame = [0.0] * steps
    for i, e in enumerate(errors):
        t = (i // inner) % steps
        per_frame[t] = max(per_frame[t], e if not math.isnan(e) else float("inf"))
    allowed = multiple * want["floor"]
    if per_frame[0] <= allowed < max(per_frame):
        later = next(t for t, e in enumerate(per_frame) if e > allowed)
        return ("frame 0 holds and frame {} does not: the error enters through the recurrence's state path (its recurrent weights, "
                "or a gate order), not its input".format(later))
    if per_frame[0] > allowed:
        return "frame 0 is already off: the path into the recurrence (its input weights or biases, or the layers before it) differs"
    return ""


def _built_by():
    """", built by TensorRT X" from build.log's version line, where build.sh left one."""
    try:
        with open(_path("build.log")) as f:
            for line in f:
                if "TensorRT version:" in line:
                    return ", built by TensorRT " + line.split("TensorRT version:")[1].strip()
    except OSError:
        pass
    return ""


def main(argv):
    try:
        manifest = load_manifest()
        if argv[:1] == ["--carry"]:
            if len(argv) != 3 or not argv[2].isdigit():
                raise Refused("usage: check.py --carry CASE K")
            carry(manifest, argv[1], int(argv[2]))
            return 0
        if argv:
            raise Refused("usage: check.py [--carry CASE K]; got {}".format(" ".join(argv)))
        print("engine {} (bundled for {}{}), against the float64 reference: max abs error within {:g} x the rounding floor at {}".format(
            manifest["engine"], manifest["target"], _built_by(), manifest["rule"]["multiple"], manifest["precision"]))
        ok = compare(manifest)
    except Refused as exc:
        print("check.py: " + str(exc), file=sys.stderr)
        return 2
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
