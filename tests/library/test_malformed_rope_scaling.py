"""qkv.rope_frequencies fed malformed rules: a clear error naming the parameter, never NaN frequencies.

A factor of NaN used to pass the `factor < 1` check (every comparison with NaN is False) and give NaN
frequencies; a beta of 0 or a low_freq_factor of 0 divided by zero inside the rule.
"""

from __future__ import annotations

import math

import pytest

from qkv.rope_scaling import rope_frequencies

YARN = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16}
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 2.0,
    "original_max_position_embeddings": 16,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
}
DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16}

CASES = {  # case -> (arguments, error, what the message must say)
    "an odd head_dim": ({"head_dim": 5}, ValueError, r"head_dim must be even"),
    "head_dim 0": ({"head_dim": 0}, ValueError, r"head_dim must be positive"),
    "head_dim a float": ({"head_dim": 4.0}, TypeError, r"head_dim must be an int"),
    "base 1": ({"base": 1}, ValueError, r"base must be a finite number above 1"),
    "base inf": ({"base": math.inf}, ValueError, r"base must be a finite number above 1"),
    "base NaN": ({"base": math.nan}, ValueError, r"base must be a finite number above 1"),
    "base a str": ({"base": "1e4"}, TypeError, r"base must be a number"),
    "scaling a list": ({"scaling": [("rope_type", "linear")]}, TypeError, r"scaling must be a dict or None"),
    "no rope_type": ({"scaling": {"factor": 2.0}}, ValueError, r'scaling\["rope_type"\] must be one of'),
    "the old key type": ({"scaling": {"type": "linear", "factor": 2.0}}, ValueError, r'"type" is its old name'),
    "rope_type an int": ({"scaling": {"rope_type": 1}}, ValueError, r'scaling\["rope_type"\] must be one of'),
    "a parameter the rule does not read": ({"scaling": {"rope_type": "linear", "factor": 2.0, "beta_fast": 3}}, ValueError, r"does not read: \['beta_fast'\]"),
    "no factor": ({"scaling": {"rope_type": "linear"}}, ValueError, r"needs \['factor'\]"),
    "factor below 1": ({"scaling": {"rope_type": "linear", "factor": 0.5}}, ValueError, r'scaling\["factor"\] must be at least 1'),
    "factor a str": ({"scaling": {"rope_type": "linear", "factor": "2"}}, TypeError, r'scaling\["factor"\] must be a number'),
    "factor NaN": ({"scaling": {"rope_type": "linear", "factor": math.nan}}, ValueError, r'scaling\["factor"\] must be a finite number above 0'),
    "factor inf": ({"scaling": {"rope_type": "ntk", "factor": math.inf}}, ValueError, r'scaling\["factor"\] must be a finite number'),
    "original length 0": ({"scaling": DYNAMIC | {"original_max_position_embeddings": 0}}, ValueError, r'scaling\["original_max_position_embeddings"\] must be positive'),
    "original length a float": ({"scaling": DYNAMIC | {"original_max_position_embeddings": 16.0}}, TypeError, r'scaling\["original_max_position_embeddings"\] must be an int'),
    "ntk with head_dim 2": ({"head_dim": 2, "scaling": {"rope_type": "ntk", "factor": 2.0}}, ValueError, r"head_dim must be at least 4 for rope_type 'ntk'"),
    "dynamic with head_dim 2": ({"head_dim": 2, "scaling": DYNAMIC}, ValueError, r"head_dim must be at least 4 for rope_type 'dynamic'"),
    "llama3 low above high": ({"scaling": LLAMA3 | {"low_freq_factor": 4.0, "high_freq_factor": 1.0}}, ValueError, r'scaling\["low_freq_factor"\] must be below'),
    "llama3 low 0": ({"scaling": LLAMA3 | {"low_freq_factor": 0.0}}, ValueError, r'scaling\["low_freq_factor"\] must be a finite number above 0'),
    "llama3 high NaN": ({"scaling": LLAMA3 | {"high_freq_factor": math.nan}}, ValueError, r'scaling\["high_freq_factor"\] must be a finite number'),
    "yarn truncate a str": ({"scaling": YARN | {"truncate": "yes"}}, TypeError, r'scaling\["truncate"\] must be a bool'),
    "yarn beta_fast 0": ({"scaling": YARN | {"beta_fast": 0.0}}, ValueError, r'scaling\["beta_fast"\] must be a finite number above 0'),
    "yarn beta_fast NaN": ({"scaling": YARN | {"beta_fast": math.nan}}, ValueError, r'scaling\["beta_fast"\] must be a finite number'),
    "yarn beta_slow below 0": ({"scaling": YARN | {"beta_slow": -1.0}}, ValueError, r'scaling\["beta_slow"\] must be a finite number above 0'),
    "yarn attention_factor NaN": ({"scaling": YARN | {"attention_factor": math.nan}}, ValueError, r'scaling\["attention_factor"\] must be a finite number'),
    "yarn attention_factor 0": ({"scaling": YARN | {"attention_factor": 0.0}}, ValueError, r'scaling\["attention_factor"\] must be a finite number above 0'),
    "yarn betas swapped": ({"scaling": YARN | {"beta_fast": 1.0, "beta_slow": 32.0}}, ValueError, r'scaling\["beta_fast"\] must be at least scaling\["beta_slow"\] .*got 1\.0 and 32\.0'),
    "yarn mscale inf": ({"scaling": YARN | {"mscale": math.inf, "mscale_all_dim": 1.0}}, ValueError, r'scaling\["mscale"\] must be a finite number'),
    "seq_len 0": ({"scaling": DYNAMIC, "seq_len": 0}, ValueError, r"seq_len must be positive"),
    "seq_len a float": ({"seq_len": 3.0}, TypeError, r"seq_len must be an int"),
}  # fmt: skip


@pytest.mark.parametrize(("arguments", "error", "match"), CASES.values(), ids=CASES.keys())
def test_rope_frequencies_refuses_malformed_rules_by_name(arguments, error, match):
    call = {"head_dim": 8} | arguments
    with pytest.raises(error, match=match):
        rope_frequencies(call.pop("head_dim"), **call)
