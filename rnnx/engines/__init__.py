"""Runners with one interface: named numpy inputs in, named numpy outputs out.

Each has ``device`` and ``precision`` and is called as ``runner({"X": ..., "h0": ...})``:
:class:`~rnnx.engines.onnxruntime.OnnxRuntimeRunner`, :class:`~rnnx.engines.torch.TorchRunner`,
:class:`~rnnx.engines.cudnn.CudnnRunner`, :class:`~rnnx.engines.tensorrt.TensorRTRunner` and
:class:`~rnnx.engines.reference.ReferenceRunner`. Backend imports stay inside each module.
"""
