"""Each format's layout, written once as data with its pack and unpack: pure numpy, no file
I/O and no framework imports. File readers and writers (:mod:`rnnx.formats`) build on them."""
