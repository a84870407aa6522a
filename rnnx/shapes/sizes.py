"""The sizes each verb tries, as data (one place, so that they can be seen side by side and
tests/test_shapes_agree.py can hold that what one verb checks another can build).

A size a verb tries must be one the model accepts: these are starting points that each verb
then asks the model (or the file) about.
"""

from __future__ import annotations

from rnnx.shapes.roles import BATCH, LENGTH, OTHER

# --- the largest size any verb feeds or builds for -----------------------------------------------
# TensorRT's Dims and trtexec's shapes are int32 before 10 (and one tensor's elements are bounded
# so there), and rnnx export records no size above it: a fixed dimension, or a size given for a
# profile, above it is refused by name rather than overflowing a product of sizes.
MAX_DIMENSION = (1 << 31) - 1

# --- the TensorRT optimization profile (rnnx build, rnnx bundle) ------------------------------------
BATCH_RANGE = (1, 8, 32)  # min, opt, max
LENGTH_TIMES_EXAMPLE = 4  # a length's max, in multiples of the example's length (its opt)
LENGTH_RANGE = (1, 64, 256)  # a length's min, opt, max where no example gives one

# --- verify's cases ----------------------------------------------------------------------------------
VERIFY_BATCHES = (1, 8)  # a whole model's batches (batch 1 always among them)
VERIFY_LENGTH = 16  # a length's base size where no example gives one; verify also tries 2 x it + 3
STACK_SEQ_LENS = (1, 17, 64)  # a recurrent stack's lengths (rnnx verify --against weights)

# --- streaming: the chunks a streaming file is cut into ----------------------------------------------
STREAM_FRAMES = 19  # export's chunked check: a sequence this many chunk multiples long...
STREAM_CHUNKS = (1, 7, STREAM_FRAMES)  # ...cut into chunks of these many multiples (7 leaves a short last chunk)
STREAM_BATCHES = (1, 3)  # export's and verify --chunks' batches
VERIFY_CHUNKS = (1, 7, 32)  # verify --chunks' default chunk sizes, in multiples
BUNDLE_CHUNKS = (1, 3, 2)  # rnnx bundle's streams: each chunk this many multiples (the max corner's middle one the profile's longest)

# --- export's self-check and dimension audit: sizes around the example's ----------------------------
GROWTH = {BATCH: 2, LENGTH: 3, OTHER: 2}  # the self-check's "all larger" case (and fuse/lower's variant near its first shape)


def shrunk(size: int) -> int:
    """The self-check's "shorter" case: half the example's size (a size torch guarded loosely can
    pass at the example's and above it and still be wrong below)."""
    return max(1, size // 2)


def audit_sizes(size: int) -> tuple[int, ...]:
    """The sizes the dimension audit asks the torch model about, for a dimension the file fixes at
    ``size``: twice it (at least 2) and half of it."""
    return tuple(dict.fromkeys(s for s in (max(2, 2 * size), size // 2) if s >= 1 and s != size))


# --- fuse and lower: the ladder climbed to find shapes the input model runs --------------------------
REWRITE_FIRST = {BATCH: 3, LENGTH: 16, OTHER: 3}  # where a label with no example size starts
REWRITE_LADDER = {
    BATCH: (1, 2),
    LENGTH: (16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
    OTHER: (1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
}


def profile_range(role: str, example: int | None) -> tuple[tuple[int, int, int] | None, str]:
    """(min, opt, max) of a dynamic dimension with ``role`` in a TensorRT profile, and what
    decided them; None for an "other" dimension no example sizes."""
    if role == BATCH:
        return BATCH_RANGE, f"rnnx's batch default ({BATCH_RANGE[0]}..{BATCH_RANGE[2]}, opt {BATCH_RANGE[1]})"
    if role == LENGTH:
        if example is not None:
            found = (1, example, LENGTH_TIMES_EXAMPLE * example)
            return found, f"the example's length {example} (rnnx's length default: 1..{LENGTH_TIMES_EXAMPLE}x it, opt it)"
        return LENGTH_RANGE, (f"rnnx's length default without an example ({LENGTH_RANGE[0]}..{LENGTH_RANGE[2]}, "
                              f"opt {LENGTH_RANGE[1]})")
    if example is not None:
        return (example, example, example), f"the example's size {example} (fixed)"
    return None, "no example size"


def multiple_of(size: int, multiple: int) -> int:
    """``size`` rounded up to a whole number of ``multiple`` (a streaming file's chunk multiple)."""
    return -(-size // multiple) * multiple
