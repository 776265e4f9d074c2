"""The exercise of serving: read one sequence's keys out of a paged pool through its block table."""

# The articles' names: H and D for sizes.
# ruff: noqa: N806

import torch
from torch import Tensor

from qkv.exercises.exercise import Case, Exercise, Mistake, normal
from qkv.paged import gather_pages

# --- serving/gather-pages ----------------------------------------------------------------------------------


def gather_cases(gen: torch.Generator) -> list[Case]:
    rows = [  # (label, pages in the pool, H_kv, page size, D, pages in the table, length, dtype)
        ("one page, full", 4, 1, 4, 3, 1, 4, torch.float64),
        ("two pages, the last part full", 5, 1, 4, 3, 2, 6, torch.float64),
        ("pages out of order", 8, 1, 2, 2, 4, 7, torch.float64),
        ("two heads", 6, 2, 4, 3, 3, 10, torch.float64),
        ("page size 1", 6, 2, 1, 2, 5, 5, torch.float64),
        ("one token", 3, 2, 4, 2, 1, 1, torch.float64),
        ("float32", 10, 4, 8, 4, 6, 41, torch.float32),
    ]
    cases = []
    for label, P, H, page_size, D, n, length, dtype in rows:
        # (n,): any pages of the pool, in any order
        table = torch.randperm(P, generator=gen)[:n]
        pages = normal(gen, P, H, page_size, D, dtype=dtype)
        cases.append(
            Case(
                label, {"pages": pages, "block_table": table, "length": length}
            )
        )
    return cases


def gathered(
    pages, block_table, length, order="table", heads_first=True, cut=True
) -> Tensor:
    """The lookup as readers write it, with the knobs their mistakes turn."""
    n = len(block_table)
    if order == "pool":
        chosen = pages[:n]  # the pool's first pages
    elif order == "sorted":
        # the table's pages, in the pool's order
        chosen = pages[block_table.sort().values]
    else:
        chosen = pages[block_table]  # (n, H, page_size, D)
    if not heads_first:
        # heads and pages mixed
        tokens = chosen.reshape(pages.size(1), -1, pages.size(-1))
    elif order == "slots first":
        # (H, page_size * n, D), interleaved
        tokens = chosen.permute(1, 2, 0, 3).flatten(1, 2)
    else:
        tokens = chosen.transpose(0, 1).flatten(1, 2)  # (H, n * page_size, D)
    return tokens[:, :length] if cut else tokens


GATHER_PAGES = Exercise(
    name="serving/gather-pages",
    signature="fn(pages, block_table, length)",
    outputs=("keys",),
    reference=gather_pages,
    cases=gather_cases,
    mistakes=(
        Mistake(
            "these are the pool's first pages: read the pages the block table names, "
            "in its order (pages[block_table])",
            lambda pages, block_table, length: gathered(
                pages, block_table, length, order="pool"
            ),
        ),
        Mistake(
            "the tokens are interleaved: token t is in page t // page_size, slot "
            "t % page_size, so all the slots of a page come before the next page's",
            lambda pages, block_table, length: gathered(
                pages, block_table, length, order="slots first"
            ),
        ),
        Mistake(
            "the heads and the pages are mixed: move the head axis first "
            "(transpose(0, 1)) before flattening pages and slots",
            lambda pages, block_table, length: gathered(
                pages, block_table, length, heads_first=False
            ),
        ),
        Mistake(
            "the pages are in the pool's order: read them in the block table's order, "
            "pages[block_table]",
            lambda pages, block_table, length: gathered(
                pages, block_table, length, order="sorted"
            ),
        ),
        Mistake(
            "the empty slots of the last page were kept: cut the tokens at length",
            lambda pages, block_table, length: gathered(
                pages, block_table, length, cut=False
            ),
        ),
    ),
)
