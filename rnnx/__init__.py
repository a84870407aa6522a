"""rnnx: recurrent networks out of their frameworks and into deployment, with proven parity."""

from rnnx.api import export, from_format, groups, load, save, to_format
from rnnx.errors import ParityError, RNNXError
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights

from rnnx._version import __version__

__all__ = [
    "ParityError",
    "RNNSpec",
    "RNNWeights",
    "RNNXError",
    "__version__",
    "export",
    "from_format",
    "groups",
    "load",
    "save",
    "to_format",
]
