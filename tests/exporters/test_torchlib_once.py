"""torchlib's list read once: torch's own list, the same file exported, torch's function put back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

from rnnx.exporters import torchlib_once  # noqa: E402
from rnnx.exporters.export_trace import to_onnx  # noqa: E402


def _apis():
    module = torchlib_once._apis_module()
    if module is None:
        pytest.skip("this torch names no onnxscript module for torchlib's list; the cache stands aside")
    return module


def test_the_list_is_torchs_own_read_once_and_put_back() -> None:
    module = _apis()
    original = module.get_torchlib_ops
    fresh = original()
    with torchlib_once.torchlib_listed_once():
        assert module.get_torchlib_ops is not original
        first, second = module.get_torchlib_ops(), module.get_torchlib_ops()
        with torchlib_once.torchlib_listed_once():  # nested: the same cache, not one around it
            assert module.get_torchlib_ops()[0] is first[0]
    assert module.get_torchlib_ops is original
    # torch's list, function for function; read once: the second answer holds the first's objects
    # (a fresh reading makes new ones), and is a copy torch may change without changing the cache.
    assert [(m.qualified_name, m.function, m.is_complex) for m in first] == [(m.qualified_name, m.function, m.is_complex) for m in fresh]
    assert all(a is b for a, b in zip(first, second)) and first is not second
    assert not any(a is b for a, b in zip(first, fresh))


def test_a_changed_registry_is_read_again(monkeypatch) -> None:
    calls = []

    def read():
        calls.append(1)
        return [len(calls)]

    listed = torchlib_once._once(read)
    monkeypatch.setattr(torchlib_once, "_registry_key", lambda: (1, 10))
    assert listed() == [1] and listed() == [1] and len(calls) == 1
    monkeypatch.setattr(torchlib_once, "_registry_key", lambda: (1, 11))  # a function registered since
    assert listed() == [2] and len(calls) == 2
    monkeypatch.setattr(torchlib_once, "_registry_key", lambda: None)  # a layout it cannot read: never cached
    assert listed() == [3] and listed() == [4]


def test_the_file_is_the_one_torch_writes_without_the_cache(monkeypatch) -> None:
    _apis()
    torch.manual_seed(0)
    model = torch.nn.LSTM(3, 4, batch_first=True).eval()
    program = torch.export.export(model, (torch.randn(2, 5, 3),))
    cached = to_onnx(program, 17)
    monkeypatch.setattr(torchlib_once, "torchlib_listed_once", _plain)
    monkeypatch.setattr("rnnx.exporters.export_trace.torchlib_listed_once", _plain)
    plain = to_onnx(program, 17)
    assert cached.SerializeToString() == plain.SerializeToString()


class _plain:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None
