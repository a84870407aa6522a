"""PyTorch models to ONNX with native LSTM/GRU/RNN nodes: :func:`rnnx.export`.

:mod:`~rnnx.exporters.ops` holds one custom op per recurrence and its ONNX translation,
:mod:`~rnnx.exporters.modules` the stand-ins swapped in for nn modules while exporting,
:mod:`~rnnx.exporters.torch_export` the export and its self-check, and
:mod:`~rnnx.exporters.loading` what the CLI needs to find a model, weights and inputs.
"""
