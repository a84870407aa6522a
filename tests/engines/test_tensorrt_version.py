"""One reading of a TensorRT version (rnnx.engines.tensorrt_version), and the read column that
stands for a release, as the parser rules, trtexec's flags and the installed TensorRT use it."""

from __future__ import annotations

import pytest

from rnnx.engines import jetpack, trtexec, trtexec_flags
from rnnx.engines.tensorrt import check_tensorrt_version
from rnnx.engines.tensorrt_parser import parser_for
from rnnx.engines.tensorrt_parser_rules import VERSIONS
from rnnx.engines.tensorrt_version import Bracket, TensorRTVersion, bracket, read_columns
from rnnx.errors import RNNXError


def test_a_release_is_read_as_users_tables_and_tensorrt_write_it() -> None:
    assert TensorRTVersion.parse("10.3.0") == TensorRTVersion((10, 3, 0)) and str(TensorRTVersion.parse(" 8.6 ")) == "8.6"
    for not_a_release in ("10.x", "11.x", "ten", "10", "10.", "", "10.3.0.post1"):
        assert TensorRTVersion.parse(not_a_release) is None, not_a_release
    assert TensorRTVersion.reported("9.2.0.post12.dev5") == TensorRTVersion((9, 2, 0))  # what tensorrt.__version__ may carry
    assert TensorRTVersion.reported("unknown") is None
    releases = [TensorRTVersion.parse(v) for v in ("10.13.3", "8.6", "10.3.0", "10.15", "8.6.1")]
    assert [str(v) for v in sorted(releases)] == ["8.6", "8.6.1", "10.3.0", "10.13.3", "10.15"]  # as releases, not as text
    assert TensorRTVersion.parse("10.13.3.9").major_minor == (10, 13)  # type: ignore[union-attr]


def test_the_bracket_stays_within_a_major() -> None:
    read = read_columns(["8.2", "8.6", "10.1", "10.15", "11.x"])
    assert list(read) == ["8.2", "8.6", "10.1", "10.15"]
    at = {v: bracket(TensorRTVersion.parse(v), read) for v in ("8.6.1", "8.4", "10.3", "9.0", "10.20", "8.1")}  # type: ignore[arg-type]
    assert at == {"8.6.1": Bracket("8.6", None, None), "8.4": Bracket(None, "8.2", "8.6"), "10.3": Bracket(None, "10.1", "10.15"),
                  "9.0": Bracket(None, None, None), "10.20": Bracket(None, "10.15", None), "8.1": Bracket(None, None, "8.2")}


def test_the_parser_rules_need_both_neighbours_and_trtexec_s_flags_the_one_below() -> None:
    assert parser_for("10.3.0")[0] == "10.1" and "10.15 is the one above" in parser_for("10.3.0")[1]
    assert parser_for("8.6.1") == ("8.6", "")
    with pytest.raises(RNNXError, match="or a release between two read ones of the same major, found 10.20"):
        parser_for("10.20")
    with pytest.raises(RNNXError, match="expected a TensorRT version like 8.6"):
        parser_for("ten")
    target = trtexec.resolve_target("8.4.1", None)  # JetPack 5.0.2's: no column of its own in either table
    assert (target.parser, target.flags, target.flags_above, target.opset, target.tensorrt_major_minor) == ("8.2", "8.2", "8.5", 13, "8.4")
    assert trtexec.resolve_target("10.3.0", None).flags == "10.3"
    newest = trtexec.resolve_target(None, None)  # the newest parser read, by release order (10.15 after 10.1)
    assert newest.tensorrt == "10.15"
    with pytest.raises(RNNXError, match="rnnx has not read TensorRT 11's ONNX parser"):
        trtexec.resolve_target("11.x", None)


def test_every_jetpack_resolves_or_is_left_out_by_name() -> None:
    """Each JetPack's TensorRT is read as a release; those rnnx can target resolve to columns read."""
    supported = trtexec.supported_jetpacks()
    assert supported and set(supported) <= set(jetpack.JETPACK)
    for name in supported:
        target = trtexec.resolve_target(None, name)
        assert target.flags in trtexec_flags.SOURCES and target.parser in VERSIONS
        assert TensorRTVersion.parse(target.tensorrt) is not None


def test_the_installed_tensorrt_s_major_is_read_from_its_reported_version() -> None:
    assert [check_tensorrt_version(v) for v in ("8.6.1", "9.2.0.post12.dev5", "10.13.3.9")] == [8, 9, 10]
    for unreadable in ("", "unknown", "10"):
        with pytest.raises(RNNXError, match="cannot read"):
            check_tensorrt_version(unreadable)
