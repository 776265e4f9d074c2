"""The exercises, in the order the site is read."""

from qkv.exercises.exercise import Exercise
from qkv.exercises.fast import (
    CACHE_STEP,
    LINEAR_ATTENTION,
    MERGE_PARTIALS,
    ONLINE_SOFTMAX,
)
from qkv.exercises.formula import (
    ADDITIVE_SCORES,
    ATTENTION,
    CAUSAL_MASK,
    PADDING_MASK,
    STABLE_SOFTMAX,
)
from qkv.exercises.layers import LAYER_NORM, MERGE_HEADS, ROPE, SPLIT_HEADS
from qkv.exercises.long_context import STREAMING_WINDOW
from qkv.exercises.recurrence import DELTA_STEP
from qkv.exercises.sampling import TOP_P
from qkv.exercises.serving import GATHER_PAGES
from qkv.exercises.sparse_attention import INDEXER_SCORES

EXERCISES: tuple[Exercise, ...] = (
    ATTENTION,
    STABLE_SOFTMAX,
    CAUSAL_MASK,
    PADDING_MASK,
    ADDITIVE_SCORES,
    SPLIT_HEADS,
    MERGE_HEADS,
    ROPE,
    LAYER_NORM,
    CACHE_STEP,
    TOP_P,
    GATHER_PAGES,
    ONLINE_SOFTMAX,
    LINEAR_ATTENTION,
    DELTA_STEP,
    INDEXER_SCORES,
    STREAMING_WINDOW,
    MERGE_PARTIALS,
)
