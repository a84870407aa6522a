"""ONNX to ONNX.

- :mod:`~rnnx.graphs.find`: recurrent nodes (subgraphs included), their weights, stacks;
- :mod:`~rnnx.graphs.inspect`: what each node is and which backends accept it;
- :mod:`~rnnx.graphs.build`: a runnable stack from canonical weights;
- :mod:`~rnnx.graphs.fuse_cells` and :mod:`~rnnx.graphs.fuse_steps`: decomposed cells to
  native steps, chains of steps to one node (:mod:`~rnnx.graphs.fuse` runs both, checked);
- :mod:`~rnnx.graphs.lower`: nodes to hoisted-input Scans (projections, TensorRT's form);
- :mod:`~rnnx.graphs.index`, :mod:`~rnnx.graphs.compare`, :mod:`~rnnx.graphs.legalize`: shared pieces.
"""
