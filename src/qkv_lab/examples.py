"""The articles' hand-made examples: inputs and weights set by hand, so that attention does what a reader can
check by eye. Each article includes its example's source and asserts its numbers; the figure beside it draws
the same example, so the two cannot drift apart.
"""

import torch
from torch import Tensor

from qkv.multihead import MultiHeadAttention


# --8<-- [start:cat-sat]
def cat_sat() -> tuple[list[str], Tensor, Tensor, Tensor]:
    """The sentence "the cat sat on the mat", with embeddings and projections
    chosen by hand, not learned.

    Returns:
        The tokens, their embeddings `x (N, 5)`, and the projections
        `w_q (5, 3)`, `w_k (5, 3)`.
    """
    # one-hot features: animate, action, object, determiner, preposition
    vocab = {
        "the": [0, 0, 0, 1, 0],
        "cat": [1, 0, 0, 0, 0],
        "sat": [0, 1, 0, 0, 0],
        "on": [0, 0, 0, 0, 1],
        "mat": [0, 0, 1, 0, 0],
    }
    tokens = ["the", "cat", "sat", "on", "the", "mat"]
    # (N, d_model) = (6, 5)
    x = torch.tensor([vocab[t] for t in tokens], dtype=torch.float32)

    w_k = torch.zeros(5, 3)  # keys advertise: animate, action, object
    w_k[0, 0] = w_k[1, 1] = w_k[2, 2] = 1.0
    w_q = torch.zeros(5, 3)  # queries ask for:
    w_q[1, 0] = 4.0  # action -> an animate subject
    w_q[0, 1] = w_q[2, 1] = 4.0  # nouns -> the action
    w_q[4, 2] = 4.0  # preposition -> an object
    w_q[3, 0] = w_q[3, 2] = 4.0  # determiner -> a noun of either kind
    return tokens, x, w_q, w_k
    # --8<-- [end:cat-sat]


# --8<-- [start:position-heads]
def position_heads(n_tokens: int = 6) -> tuple[MultiHeadAttention, Tensor]:
    """Four heads set by hand: the previous token (wrapping around), the token
    itself, the next, the first.

    Returns:
        The module, `E = 4 * n_tokens` wide with heads of `n_tokens` features,
        and its input `x (1, N, E)`: token `p` is the one-hot vector of position
        `p`.
    """
    n, heads = n_tokens, 4
    mha = MultiHeadAttention(n * heads, heads, bias=False)
    x = torch.eye(n, n * heads)[None]  # (1, N, E)
    with torch.no_grad():
        mha.q_proj.weight.zero_()
        mha.k_proj.weight.zero_()
        for h in range(heads):
            # key of token p: e_p
            mha.k_proj.weight[h * n : (h + 1) * n, :n] = torch.eye(n)
        # query of token p: 12 e_(p + shift)
        for h, shift in enumerate((-1, 0, 1)):
            mha.q_proj.weight[h * n : (h + 1) * n, :n] = 12 * torch.eye(n).roll(
                shift, dims=0
            )
        # head 3: every query asks for position 0
        mha.q_proj.weight[3 * n, :n] = 12
    return mha, x
    # --8<-- [end:position-heads]
