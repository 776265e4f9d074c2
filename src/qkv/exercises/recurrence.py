"""The exercise of attention as a recurrence: one token of the gated delta rule, from a state."""

# The articles' names: Dk and Dv for sizes.
# ruff: noqa: N806

import torch
from torch import Tensor

from qkv.exercises.exercise import Case, Exercise, Mistake, normal
from qkv.recurrent import gated_delta_rule

# --- recurrence/delta-step ---------------------------------------------------------------------------------


def step_cases(gen: torch.Generator) -> list[Case]:
    rows = [  # (label, batch, Dk, Dv, g, beta, dtype); g and beta: None draws
        ("small", (), 3, 3, None, None, torch.float64),
        ("Dk != Dv", (), 4, 2, None, None, torch.float64),
        ("no decay, g = 0", (), 3, 3, 0.0, None, torch.float64),
        ("beta = 1", (), 3, 2, None, 1.0, torch.float64),
        ("beta = 0 writes nothing", (), 2, 3, None, 0.0, torch.float64),
        ("heads", (3,), 4, 4, None, None, torch.float64),
        ("batch and heads", (2, 3), 5, 3, None, None, torch.float64),
        ("float32", (2, 2), 4, 4, None, None, torch.float32),
    ]
    cases = []
    for label, batch, Dk, Dv, g, beta, dtype in rows:
        k = torch.nn.functional.normalize(
            normal(gen, *batch, Dk, dtype=torch.float64), dim=-1
        ).to(dtype)  # |k| = 1, as the models make it
        drawn_g = -torch.rand(batch, generator=gen, dtype=torch.float64)
        drawn_beta = torch.rand(batch, generator=gen, dtype=torch.float64)
        args = {
            "state": normal(gen, *batch, Dk, Dv, dtype=dtype),
            "q": normal(gen, *batch, Dk, dtype=dtype),
            "k": k,
            "v": normal(gen, *batch, Dv, dtype=dtype),
            "g": (drawn_g if g is None else torch.full(batch, g)).to(dtype),
            "beta": (
                drawn_beta if beta is None else torch.full(batch, beta)
            ).to(dtype),
        }
        cases.append(Case(label, args))
    return cases


def delta_step(state, q, k, v, g, beta) -> tuple[Tensor, Tensor]:
    """One token of `qkv.gated_delta_rule`, q taken as already scaled: `(o, S_t)`."""
    *batch, Dk, Dv = state.shape
    heads = state[..., 0, 0].numel()
    out, new_state = gated_delta_rule(
        q.reshape(1, heads, 1, Dk),
        k.reshape(1, heads, 1, Dk),
        v.reshape(1, heads, 1, Dv),
        g.reshape(1, heads, 1),
        beta.reshape(1, heads, 1),
        initial_state=state.reshape(1, heads, Dk, Dv),
        scale=1.0,
        output_final_state=True,
    )
    return out.reshape(*batch, Dv), new_state.reshape(state.shape)


def stepped(
    state,
    q,
    k,
    v,
    g,
    beta,
    write="error",
    recall_from="decayed",
    read="after",
    decay="exp",
    rate="beta",
    keep="decayed",
    sides="",  # "recall", "read" or "both": which of the two uses S, not S^T
) -> tuple[Tensor, Tensor]:
    """The step as readers write it, with the knobs their mistakes turn."""
    factor = {
        "exp": g.exp(),
        "g": g,
        "none": torch.ones_like(g),
        "exp(-g)": (-g).exp(),
        "after the write": torch.ones_like(g),
    }[decay]
    factor = factor[..., None, None]
    decayed = factor * state  # S' = exp(g) S
    held = decayed if recall_from == "decayed" else state
    recalled = _times(held, k, sides not in ("recall", "both"))  # S'^T k
    written = v if write == "value" else v - recalled
    rates = {
        "beta": beta,
        "none": torch.ones_like(beta),
        "sigmoid": beta.sigmoid(),
    }
    if rate == "value only":  # beta v - S'^T k
        error = beta[..., None] * v - recalled
    else:
        error = rates[rate][..., None] * written  # (..., Dv)
    kept = decayed if keep == "decayed" else state
    if write == "error k^T":  # (..., Dv, Dk): adds only where Dk = Dv
        new = kept + error[..., :, None] * k[..., None, :]
    else:
        new = kept + k[..., :, None] * error[..., None, :]  # + k error^T
    if decay == "after the write":  # (S + beta k (v - S^T k)^T) exp(g)
        new = g.exp()[..., None, None] * new
    readable = new if read == "after" else decayed
    return _times(readable, q, sides not in ("read", "both")), new


def _times(state: Tensor, x: Tensor, transposed: bool) -> Tensor:
    """state^T x (..., Dv); untransposed, state x (..., Dk), as Dk = Dv allows."""
    if transposed:
        return (x[..., :, None] * state).sum(-2)
    return (state * x[..., None, :]).sum(-1)


DELTA_STEP = Exercise(
    name="recurrence/delta-step",
    signature="fn(state, q, k, v, g, beta)",
    outputs=("o", "state"),
    reference=delta_step,
    cases=step_cases,
    mistakes=(
        Mistake(
            "that writes the value, as linear attention does: the delta rule writes "
            "the error, v - S'^T k, what the decayed state lacks for k",
            lambda *args: stepped(*args, write="value"),
        ),
        Mistake(
            "the recall uses the state before the decay: decay first, S' = exp(g) S, "
            "then the error v - S'^T k against S'",
            lambda *args: stepped(*args, recall_from="old"),
        ),
        Mistake(
            "the query reads the state before this token's write: write first, then "
            "o = S_t^T q",
            lambda *args: stepped(*args, read="before"),
        ),
        Mistake(
            "g is the log of the decay: multiply the state by exp(g), not by g",
            lambda *args: stepped(*args, decay="g"),
        ),
        Mistake(
            "the state is not decayed: multiply it by exp(g) before the write, "
            "S' = exp(g) S",
            lambda *args: stepped(*args, decay="none"),
        ),
        Mistake(
            "the error is written whole: scale it by the learning rate beta, "
            "S' + k (beta (v - S'^T k))^T",
            lambda *args: stepped(*args, rate="none"),
        ),
        Mistake(
            "the write adds to the state before the decay: S_t = S' + beta k (v - "
            "S'^T k)^T, with S' = exp(g) S in both places",
            lambda *args: stepped(*args, keep="old"),
        ),
        Mistake(
            "the state is decayed after the write, which shrinks this token's pair "
            "too: decay first, S' = exp(g) S, then write",
            lambda *args: stepped(*args, decay="after the write"),
        ),
        Mistake(
            "g <= 0 is the log of the decay: multiply by exp(g), not exp(-g), "
            "which grows the state",
            lambda *args: stepped(*args, decay="exp(-g)"),
        ),
        *(
            Mistake(
                "the state is (Dk, Dv): recall S'^T k and read S_t^T q, sums over "
                "Dk (k @ S for one head); S k sums over the values' axis",
                lambda *args, sides=sides: stepped(*args, sides=sides),
            )
            for sides in ("recall", "read", "both")
        ),
        Mistake(
            "the write is e k^T: it must be k e^T, (Dk, Dv), the key as a column "
            "(k[..., :, None]) and the error as a row",
            lambda *args: stepped(*args, write="error k^T"),
        ),
        Mistake(
            "beta scales the whole error, beta (v - S'^T k), not the value alone",
            lambda *args: stepped(*args, rate="value only"),
        ),
        Mistake(
            "beta is the learning rate already, in [0, 1]: use it as it is, "
            "without a sigmoid",
            lambda *args: stepped(*args, rate="sigmoid"),
        ),
        Mistake(
            "q is already scaled: o = S_t^T q, with no 1/sqrt(Dk)",
            lambda state, q, k, v, g, beta: stepped(
                state, q / q.size(-1) ** 0.5, k, v, g, beta
            ),
        ),
    ),
)
