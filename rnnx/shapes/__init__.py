"""Which shapes a model accepts, and what each dimension is: the facts every verb shares.

One vocabulary and one set of sizes, on rnnx's lowest floor (no file, framework or graph is
read here), so that the verbs that ask "which shapes, which roles" answer from the same facts:

- :mod:`rnnx.shapes.roles`: the roles a dynamic dimension plays (a batch, a length, other), and
  how a label's name says which;
- :mod:`rnnx.shapes.sizes`: the sizes each verb tries, as data: the TensorRT profile's default
  ranges (``rnnx build``, ``rnnx bundle``), verify's batches and lengths, the chunks a streaming
  check cuts, the ladders fuse and lower climb to find shapes the input runs.

Who reads roles from where: ``rnnx export`` writes them into its record
(:mod:`rnnx.exporters.record`); :func:`rnnx.verify.inputs.input_specs` reads a file's, from the
record, else the label's name (:func:`rnnx.shapes.roles.role_of_name`), else the graph's wiring;
``build``, ``bundle``, ``fuse`` and ``lower`` take verify's reading. tests/test_shapes_agree.py
holds that they agree on the same files.
"""
