"""Graph passes, ONNX to ONNX, unchecked (the checked pipelines are :mod:`rnnx.pipelines`).

- :mod:`~rnnx.graphs.inspect`: what each recurrent node is and which backends accept it;
- :mod:`~rnnx.graphs.fuse_cells` and :mod:`~rnnx.graphs.fuse_steps`: decomposed cells to
  native steps, chains of steps to one node; :mod:`~rnnx.graphs.fuse_loops`: Loops and Scans
  over one step to one node; :mod:`~rnnx.graphs.fuse_directions`: a forward node and one over
  the reversed sequence to one bidirectional node (the cells' rules: :mod:`~rnnx.graphs.cell_match`,
  :mod:`~rnnx.graphs.gru_forms`, reading weights through :mod:`~rnnx.graphs.linear_terms` and
  :mod:`~rnnx.graphs.affine`);
- :mod:`~rnnx.graphs.lower`: native nodes to hoisted-input Scans (TensorRT's form);
- :mod:`~rnnx.graphs.legalize`: repairs for other tools' defects, and opsets;
- :mod:`~rnnx.graphs.index`, :mod:`~rnnx.graphs.walk`, :mod:`~rnnx.graphs.per_step`,
  :mod:`~rnnx.graphs.time_slice` (one step of a sequence, as exporters slice it): shared pieces.

Reading and writing ONNX files, and building stacks and Scans from canonical weights, are
:mod:`rnnx.formats` (``onnx_read``, ``onnx_build``, ``onnx_scan``).
"""
