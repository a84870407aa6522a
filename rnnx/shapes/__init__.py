"""Which shapes a model accepts, and what each dimension is: one room for every verb.

Every verb that varies a shape asks what each dynamic dimension is (a batch, a length, other)
and which sizes to try. The answers are here, so that a fix reaches every verb:

- :mod:`rnnx.shapes.roles`: the role vocabulary, and how a label's name says which;
- :mod:`rnnx.shapes.sizes`: the sizes each verb tries, side by side, as data: the TensorRT
  profile's defaults, verify's batches and lengths, export's self-check growth and the dimension
  audit's probes, the streaming chunks, fuse and lower's ladders, the chunk multiple;
- :mod:`rnnx.shapes.wiring`: which graph input axis reaches a recurrence's batch or time axis;
- :mod:`rnnx.shapes.file_dims`: the one reading of an ONNX file's inputs: dims, roles (the
  export record, else the name, else the wiring) and where each was read, the recorded
  example, derived dimensions (``(seq - 3)//2 + 1``), and the feed a probe runs the file with;
- :mod:`rnnx.shapes.cases`: the sizes of verify's cases;
- :mod:`rnnx.shapes.profiles`: the TensorRT profile (``rnnx build``, ``rnnx bundle``), its
  lengths' min and max asked of the file through a probe the engines give
  (:mod:`rnnx.engines.shape_probe`: ONNX Runtime and ONNX's reference evaluator);
- :mod:`rnnx.shapes.rewrite_plan`: the shapes fuse and lower check a rewrite at.

The package sits above graphs and formats (it reads files and traces graphs) and below the
engines, which hand it a probe. The torch side (which dimensions the torch model leaves free,
asked at export, and again by ``verify --against`` model code through :mod:`rnnx.verify.model_dims`)
is :mod:`rnnx.exporters.audit`, with these roles and sizes.
tests/test_shapes_agree.py holds that the verbs agree on the same files.
"""
