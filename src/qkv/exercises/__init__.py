"""The site's exercises, checked on the reader's machine: `check(name, fn)` and `names()`.

    from qkv.exercises import check, names

    def causal_mask(L, S, alignment):
        ...

    check("masking/causal-mask", causal_mask)

`check` calls `fn` with each case's arguments in order (small cases first, then the edges), compares what it
returns with the package's reference, stops at the first case that fails and prints one verdict, whose first
line is one of:

    masking/causal-mask: passed all 14 cases
    masking/causal-mask: not attempted yet
    masking/causal-mask: failed case 6 of 14

A failure goes on with `case (<label>): <arguments>`, then what is wrong: `<fn> raised <Error>: <message>`
(and `  at line <n> of <function>: <code>`, the reader's own line), `<fn> returned a list, not a torch.Tensor`,
`wrong shape: expected (..), got (..)`, `wrong dtype: expected float64, got float32`, or `wrong values: ...`
with the largest error and where (a boolean result small enough is drawn as two 0/1 grids, expected and got).
Results of several values (`out, lse`) name the one that is wrong first (`lse: wrong values: ...`). Last comes
`hint: <the mistake>` when the answer is that of a known mistake, found by computing the mistake's output on
the same case. "Not attempted yet" means the function returned None on the first case (a starter whose
body is `...`); its second line says to write the body. Every line is at most 78 characters; no colours.

`check` returns a `Result`, truthy only when every case passed, with `.passed`, `.status`, `.cases` (how many
passed), `.total`, `.message` (the text printed) and `.hint`. It raises only for a bad call: ValueError for an
unknown name (listing the names), TypeError for a non-callable `fn`. Cases come from a fixed seed through their
own `torch.Generator`; torch's global random state is left as it was.
"""

from qkv.exercises.checker import Result, check, names

__all__ = ["Result", "check", "names"]
