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
    rate=True,
) -> tuple[Tensor, Tensor]:
    """The step as readers write it, with the knobs their mistakes turn."""
    factor = {"exp": g.exp(), "g": g, "none": torch.ones_like(g)}[decay]
    factor = factor[..., None, None]
    decayed = factor * state  # S' = exp(g) S
    held = decayed if recall_from == "decayed" else state
    recalled = (k[..., None] * held).sum(-2)  # S'^T k: (..., Dv)
    written = v - recalled if write == "error" else v
    error = beta[..., None] * written if rate else written  # (..., Dv)
    new = decayed + k[..., :, None] * error[..., None, :]  # + k error^T
    readable = new if read == "after" else decayed
    return (q[..., None] * readable).sum(-2), new


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
            lambda *args: stepped(*args, rate=False),
        ),
    ),
)
