"""Activations in the canonical spec: the string form, validation and normalisation."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from rnnx import RNNSpec, RNNXError
from rnnx.spec import ACTIVATION_PARAMETERS, DEFAULT_ACTIVATIONS, Activation

_PARAM_VALUES = st.floats(-8, 8, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def activations(draw: st.DrawFn) -> Activation:
    name = draw(st.sampled_from(sorted(ACTIVATION_PARAMETERS)))
    values = [draw(_PARAM_VALUES) for _ in ACTIVATION_PARAMETERS[name]]
    return Activation(name, *values)


@st.composite
def specs_with_activations(draw: st.DrawFn) -> RNNSpec:
    cell = draw(st.sampled_from(sorted(DEFAULT_ACTIVATIONS)))
    acts = tuple(draw(activations()) for _ in DEFAULT_ACTIVATIONS[cell]) if draw(st.booleans()) else ()
    return RNNSpec(
        cell=cell, input_size=draw(st.integers(1, 6)), hidden_size=draw(st.integers(1, 6)),
        direction=draw(st.sampled_from(["forward", "reverse", "bidirectional"])),
        activations=acts, clip=draw(st.sampled_from([0.0, 0.5, 3.5, 1e-3, 1 / 3])),
        input_forget=draw(st.booleans()) if cell == "lstm" else False,
    )


@given(specs_with_activations())
def test_string_round_trip_with_activations(spec: RNNSpec) -> None:
    assert RNNSpec.parse(str(spec)) == spec
    assert spec.uses_default_activations == (not spec.activations and not spec.clip and not spec.input_forget)


def test_the_documented_example_parses_and_prints_back() -> None:
    text = "lstm,input=8,hidden=16,act=HardSigmoid:0.2:0.5/Tanh/Tanh,clip=3.5,input_forget"
    spec = RNNSpec.parse(text)
    assert str(spec) == text
    assert spec.activations == (Activation("HardSigmoid", 0.2, 0.5), Activation("Tanh"), Activation("Tanh"))
    assert spec.clip == 3.5 and spec.input_forget and not spec.uses_default_activations


def test_names_are_matched_in_any_case_and_defaults_filled() -> None:
    assert Activation("hardsigmoid") == Activation("HardSigmoid", 0.2, 0.5)
    assert Activation("leakyrelu").alpha == 0.01 and Activation("ELU").alpha == 1.0
    assert str(Activation("HardSigmoid")) == "HardSigmoid:0.2:0.5"


def test_keras_hard_sigmoids_differ() -> None:
    keras2, keras3 = Activation("HardSigmoid", 0.2, 0.5), Activation("HardSigmoid", 1 / 6, 0.5)
    assert keras2 != keras3
    # stored at float32 precision, so a value read back from an ONNX float attribute is equal
    assert Activation("HardSigmoid", 0.20000000298023224, 0.5) == keras2
    assert RNNSpec.parse(str(RNNSpec("lstm", 2, 3, activations=(keras3, Activation("Tanh"), Activation("Tanh"))))).activations[0] == keras3


@pytest.mark.parametrize("cell", sorted(DEFAULT_ACTIVATIONS))
def test_a_list_equal_to_the_defaults_is_stored_empty(cell: str) -> None:
    spec = RNNSpec(cell, 2, 3, activations=tuple(Activation(n) for n in DEFAULT_ACTIVATIONS[cell]))
    assert spec.activations == () and spec == RNNSpec(cell, 2, 3) and spec.uses_default_activations
    assert "act=" not in str(spec)


def test_a_plain_rnn_activation_decides_its_cell_kind() -> None:
    assert RNNSpec.parse("rnn_tanh,input=2,hidden=3,act=Relu") == RNNSpec("rnn_relu", 2, 3)
    assert RNNSpec.parse("rnn_relu,input=2,hidden=3,act=Tanh") == RNNSpec("rnn_tanh", 2, 3)
    other = RNNSpec.parse("rnn_relu,input=2,hidden=3,act=Elu:0.5")
    assert (other.cell, other.activations) == ("rnn_tanh", (Activation("Elu", 0.5),))
    assert other == RNNSpec.parse("rnn_tanh,input=2,hidden=3,act=Elu:0.5")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("lstm,input=2,hidden=3,act=Tanh", "a lstm takes 3 (f, g, h"),
        ("gru,input=2,hidden=3,act=Sigmoid/Tanh/Tanh", "a gru takes 2"),
        ("rnn_tanh,input=2,hidden=3,act=Tanh/Tanh", "takes 1"),
        ("lstm,input=2,hidden=3,act=Swish/Tanh/Tanh", "expected one of Relu, Tanh"),
        ("lstm,input=2,hidden=3,act=Tanh:1/Tanh/Tanh", "Tanh: takes no alpha"),
        ("lstm,input=2,hidden=3,act=LeakyRelu:0.1:2/Tanh/Tanh", "LeakyRelu: takes no beta"),
        ("lstm,input=2,hidden=3,act=ScaledTanh/Tanh/Tanh", "ScaledTanh:ALPHA:BETA"),
        ("lstm,input=2,hidden=3,act=Affine:1/Tanh/Tanh", "Affine: expected beta"),
        ("lstm,input=2,hidden=3,act=ThresholdedRelu/Tanh/Tanh", "ThresholdedRelu: expected alpha"),
        ("lstm,input=2,hidden=3,act=HardSigmoid:x/Tanh/Tanh", "expected a number, found 'x'"),
        ("lstm,input=2,hidden=3,act=HardSigmoid:1:2:3/Tanh/Tanh", "NAME[:ALPHA[:BETA]]"),
        ("lstm,input=2,hidden=3,act=LeakyRelu:nan/Tanh/Tanh", "finite"),
        ("lstm,input=2,hidden=3,clip=-1", "clip: expected a non-negative"),
        ("lstm,input=2,hidden=3,clip=nan", "clip: expected a non-negative"),
        ("lstm,input=2,hidden=3,clip=inf", "finite"),
        ("lstm,input=2,hidden=3,clip=big", "clip expects a number"),
        ("gru,input=2,hidden=3,input_forget", "only LSTMs couple"),
    ],
)
def test_bad_activation_specs_are_refused_in_one_line(text: str, needle: str) -> None:
    with pytest.raises(RNNXError, match=None) as caught:
        RNNSpec.parse(text)
    message = str(caught.value)
    assert needle in message and "\n" not in message


def test_python_construction_is_validated_too() -> None:
    with pytest.raises(RNNXError, match="expected a tuple of Activation"):
        RNNSpec("lstm", 2, 3, activations=Activation("Tanh"))  # type: ignore[arg-type]
    with pytest.raises(RNNXError, match="input_forget: expected True or False"):
        RNNSpec("lstm", 2, 3, input_forget=1)  # type: ignore[arg-type]
    spec = RNNSpec("lstm", 2, 3, activations=("HardSigmoid", "Tanh", "Tanh"))  # type: ignore[arg-type]
    assert spec.activations[0] == Activation("HardSigmoid", 0.2, 0.5)
    assert spec.activation_functions == spec.activations
    assert RNNSpec("gru", 2, 3).activation_functions == (Activation("Sigmoid"), Activation("Tanh"))
