"""RoPE beyond its training length: the frequencies that stretch a model's context, in Hugging Face's format.

A model trained with RoPE on sequences of `original_max_position_embeddings` tokens has only seen angles
`position * freq` below that length times each frequency. Each rule below changes the frequencies (and, for
YaRN, the size of the scores) so that longer sequences turn each pair of channels through angles it knows:

- `"linear"`, position interpolation (Chen et al., 2023): every frequency divided by `factor`, as if the
  positions were squeezed into the trained range.
- `"ntk"`, NTK-aware scaling: the base raised to `base * factor**(D / (D - 2))`, which leaves the fastest pair
  as it is and slows the slowest by about `factor` (Peng et al., 2024, section 3.1, after a 2023 post by
  bloc97).
- `"dynamic"`, dynamic NTK: the same with a factor that grows with the sequence, `factor * seq_len /
  original - (factor - 1)`, and no change at all up to the original length.
- `"yarn"` (Peng et al., 2024): each pair by its wavelength: pairs that turn many times within the original
  length keep their frequency, pairs that turn less than once are interpolated, a linear ramp between; and the
  attention temperature `attention_factor = 0.1 ln(factor) + 1`, by which the rotated queries and keys are
  multiplied.
- `"llama3"` (Llama 3.1's rule, Grattafiori et al., 2024): the same three bands, cut by wavelength at
  `original / high_freq_factor` and `original / low_freq_factor`, with a smooth blend between.

`scaling` is a dict in the format of a `transformers` config's `rope_parameters` (`rope_scaling` before
version 5), e.g. `{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}`; the
results equal `transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS` for the same parameters ("ntk" has no
entry there: it is "dynamic" at one fixed length).
"""

import math

import torch
from torch import Tensor

from qkv._checks import check_number, check_sizes

# The parameters that divide, are logarithms or scale the rotation somewhere: they must be above 0 (the
# others finite).
POSITIVE = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "beta_fast",
    "beta_slow",
    "attention_factor",
)
# The parameters each rule reads: required, then optional with their defaults.
RULES: dict[str, tuple[tuple[str, ...], dict[str, object]]] = {
    "default": ((), {}),
    "linear": (("factor",), {}),
    "ntk": (("factor",), {}),
    "dynamic": (("factor", "original_max_position_embeddings"), {}),
    "yarn": (
        ("factor", "original_max_position_embeddings"),
        {
            "attention_factor": None,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": None,
            "mscale_all_dim": None,
            "truncate": True,
        },
    ),
    "llama3": (
        (
            "factor",
            "original_max_position_embeddings",
            "low_freq_factor",
            "high_freq_factor",
        ),
        {},
    ),
}


def rope_frequencies(
    head_dim: int,
    *,
    base: float = 10000.0,
    scaling: dict | None = None,
    seq_len: int | None = None,
) -> tuple[Tensor, float]:
    """The angular frequency of each pair of channels under a scaling rule, and the attention factor.

    Args:
        head_dim: D, the channels of a head (even).
        base: RoPE's base (`rope_theta`): unscaled, pair i turns at `base**(-2i/D)`.
        scaling: None (plain RoPE), or a dict with `"rope_type"` (one of `RULES`) and that rule's parameters
            (see the module docstring): `"factor"` (at least 1), `"original_max_position_embeddings"`, and
            for `"llama3"` `"low_freq_factor"` < `"high_freq_factor"`; YaRN's optional `"attention_factor"`,
            `"beta_fast"`, `"beta_slow"`, `"mscale"`, `"mscale_all_dim"`, `"truncate"`.
        seq_len: the sequence length for `"dynamic"` (None or shorter than the original: the original);
            ignored by the other rules.

    Returns:
        `(inv_freq, attention_factor)`: float64 `(D/2,)`, and the number by which the cosines and sines (so
        the rotated queries and keys) are multiplied: 1 except for YaRN.

    Raises:
        TypeError: a size, a factor or a flag of the wrong type; `scaling` not a dict.
        ValueError: an odd D (or below 4 for "ntk" and "dynamic"), a base not a finite number above 1, an
            unknown `rope_type` or parameter, a missing parameter, a parameter that is not finite (or for a
            factor, a beta or YaRN's attention factor, not above 0), a factor below 1,
            `low_freq_factor >= high_freq_factor`, YaRN's `beta_fast < beta_slow`.
    """
    check_sizes(head_dim=head_dim)
    if head_dim % 2:
        raise ValueError(
            f"head_dim must be even (channels turn in pairs), got {head_dim}"
        )
    check_number("base", base, above=1.0)
    rule, params = _parse(scaling, head_dim)
    if seq_len is not None:
        check_sizes(seq_len=seq_len)
    # (D/2,): 2i/D
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    plain = base**-exponents
    if rule == "default":
        return plain, 1.0
    factor = params["factor"]
    if rule == "linear":
        return plain / factor, 1.0
    if rule == "ntk":
        return _stretched_base(base, factor, head_dim) ** -exponents, 1.0
    original = params["original_max_position_embeddings"]
    if rule == "dynamic":
        length = max(seq_len or original, original)
        # 1 at the original length
        growth = factor * length / original - (factor - 1)
        return _stretched_base(base, growth, head_dim) ** -exponents, 1.0
    if rule == "yarn":
        return _yarn(plain, base, head_dim, original, params)
    return _llama3(plain, original, params)


def _stretched_base(base: float, factor: float, head_dim: int) -> float:
    """NTK-aware: the base that slows the slowest pair by about `factor` and keeps the fastest."""
    return base * factor ** (head_dim / (head_dim - 2))


def _yarn(
    plain: Tensor, base: float, head_dim: int, original: int, params: dict
) -> tuple[Tensor, float]:
    """YaRN's frequencies, blended per pair between kept and interpolated, and its attention factor."""
    factor = params["factor"]

    def pair_turning(turns: float) -> float:
        """The (fractional) pair index whose frequency makes `turns` full turns over `original` positions."""
        return (
            head_dim
            * math.log(original / (turns * 2 * math.pi))
            / (2 * math.log(base))
        )

    low, high = (
        pair_turning(params["beta_fast"]),
        pair_turning(params["beta_slow"]),
    )
    if params["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # a ramp of zero width would divide by zero
    pairs = torch.arange(head_dim // 2, dtype=torch.float64)
    # 0: keep the pair, 1: interpolate it
    interpolated = ((pairs - low) / (high - low)).clamp(0, 1)
    inv_freq = plain * (1 - interpolated) + plain / factor * interpolated

    attention_factor = params["attention_factor"]
    if attention_factor is None:
        mscale, mscale_all_dim = params["mscale"], params["mscale_all_dim"]
        if mscale and mscale_all_dim:
            attention_factor = _temperature(factor, mscale) / _temperature(
                factor, mscale_all_dim
            )
        else:
            attention_factor = _temperature(factor, 1.0)
    return inv_freq, float(attention_factor)


def _temperature(factor: float, mscale: float) -> float:
    """YaRN's `0.1 * mscale * ln(factor) + 1`, and 1 for a factor of at most 1."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _llama3(plain: Tensor, original: int, params: dict) -> tuple[Tensor, float]:
    """Llama 3.1's frequencies: short wavelengths kept, long ones divided by `factor`, a blend between."""
    factor, low, high = (
        params["factor"],
        params["low_freq_factor"],
        params["high_freq_factor"],
    )
    # (D/2,): positions per full turn of each pair
    wavelength = 2 * math.pi / plain
    kept = plain  # wavelength below original / high
    interpolated = plain / factor  # wavelength above original / low
    # 1 at original / high, 0 at original / low
    blend = (original / wavelength - low) / (high - low)
    between = (1 - blend) * interpolated + blend * kept
    inv_freq = torch.where(wavelength > original / low, interpolated, between)
    return torch.where(wavelength < original / high, kept, inv_freq), 1.0


def _parse(scaling: object, head_dim: int) -> tuple[str, dict]:
    """`scaling`'s rule and its parameters with the defaults filled in, checked."""
    if scaling is None:
        return "default", {}
    if not isinstance(scaling, dict):
        raise TypeError(
            f"scaling must be a dict or None, got {type(scaling).__name__}"
        )
    rule = scaling.get("rope_type")
    if rule not in RULES:
        raise ValueError(
            f'scaling["rope_type"] must be one of {tuple(RULES)}, got {rule!r}'
            + (
                ' (the key is "rope_type"; "type" is its old name)'
                if "type" in scaling
                else ""
            )
        )
    required, optional = RULES[rule]
    unknown = set(scaling) - {"rope_type", *required, *optional}
    if unknown:
        raise ValueError(
            f"scaling has parameters that rope_type {rule!r} does not read: {sorted(unknown)}; "
            f"it reads {sorted([*required, *optional])}"
        )
    missing = [name for name in required if scaling.get(name) is None]
    if missing:
        raise ValueError(
            f"scaling with rope_type {rule!r} needs {missing}, got {scaling}"
        )
    params = optional | {
        name: value for name, value in scaling.items() if value is not None
    }
    for name, value in params.items():
        if name == "truncate":
            if not isinstance(value, bool):
                raise TypeError(
                    f'scaling["truncate"] must be a bool, got {value!r}'
                )
        elif name == "original_max_position_embeddings":
            check_sizes(**{f'scaling["{name}"]': value})
        elif name in POSITIVE and value is not None:
            check_number(f'scaling["{name}"]', value, above=0.0)
        elif name != "rope_type" and value is not None:
            check_number(f'scaling["{name}"]', value)
    if "factor" in params and params["factor"] < 1:
        raise ValueError(
            f'scaling["factor"] must be at least 1 (a stretch), got {params["factor"]}'
        )
    if rule in ("ntk", "dynamic") and head_dim < 4:
        raise ValueError(
            f"head_dim must be at least 4 for rope_type {rule!r} (its base grows by factor**(D / (D - 2))), "
            f"got {head_dim}"
        )
    if (
        rule == "llama3"
        and not params["low_freq_factor"] < params["high_freq_factor"]
    ):
        raise ValueError(
            'scaling["low_freq_factor"] must be below scaling["high_freq_factor"], got '
            f"{params['low_freq_factor']} and {params['high_freq_factor']}"
        )
    if rule == "yarn" and params["beta_fast"] < params["beta_slow"]:
        raise ValueError(  # swapped, the ramp would interpolate the fast pairs
            'scaling["beta_fast"] must be at least scaling["beta_slow"] (turns of the pairs '
            f"kept vs interpolated), got {params['beta_fast']} and {params['beta_slow']}"
        )
    return rule, params
