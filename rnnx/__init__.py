"""rnnx: recurrent networks out of their frameworks and into deployment, with proven parity."""

from rnnx.api import export, from_format, groups, load, save, to_format
from rnnx.errors import ParityError, RNNXError
from rnnx.spec import RNNSpec
from rnnx.weights import RNNWeights

__version__ = "0.1.0"

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
