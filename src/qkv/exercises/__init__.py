"""The site's exercises, checked on the reader's machine: `check(name, fn)` and `names()`.

    from qkv.exercises import check

    def causal_mask(L, S, alignment):
        ...

    check("masking/causal-mask", causal_mask)

`check` calls `fn` with each case's arguments, positionally and in the order of the exercise's signature, small
cases first, then the edges. It compares what `fn` returns with the package's reference (shape, then dtype,
then values: bool results exactly, floats within rtol 1e-5 and atol 1e-6 in float64, 1e-4 and 1e-5 in
float32, 1e-3 and 2e-3 in the cases with large values), stops at the first case that fails and prints one
verdict. Its first line is one of:

    masking/causal-mask: passed all 14 cases
    masking/causal-mask: not attempted yet
    masking/causal-mask: failed case 6 of 14

"Not attempted yet" means that `fn` returned None on the first case (a starter whose body is `...`); the next
two lines say to write the body. A failure goes on with `case (<label>): <arguments>` and then one of

    <fn> raised <Error>: <its message>          and the reader's own line:  at line <n> of <function>: <code>
    <fn> returned a list, not a torch.Tensor    (a numpy.ndarray, None on a later case, ...)
    <fn> returned a tensor on the device cuda:0, not on cpu where the inputs are: ...
    wrong shape: expected (3, 4), got (4, 3)
    wrong dtype: expected bool, got float32 (the values are right)
    wrong values: 6 of 15 entries differ, ...   the largest error and where, expected against got; a small
                                                boolean result is drawn as two 0/1 grids, expected and got
    right values, but <fn> changed its input q in place: ...
    right values, but <fn> built a tensor of shape (2, 6, 16), 192 entries: the size of the full (L, S)
        scores, which the exercise asks you never to hold      (the exercises that ask for tiles or
                                                                linear cost, on the cases that can tell)
    right values, but <fn> made 24 torch calls on this case and 13 on case 1: ...
                                                               (a loop, where the exercise asks for none)
    <fn> was stopped after 10 s on this case, ...

prefixed with the output's name (`lse: wrong values: ...`) for an exercise that returns several, and
`  it warned: <the first warning>` if the function warned. Last comes `hint: <the mistake>` when its cause is
certain: from the error or the warning itself (`.T` on a batched tensor, a softmax without `dim`, `view` of
a non-contiguous tensor, torch's default device elsewhere, ...), or because a known mistake (the exercise's
own, then: every value is 0, an input handed back, the result transposed) does what `fn` does on every case,
the same values or the same kind of error, and differs from the reference on two cases or more. Otherwise
comes `observed: <what is seen>`, if anything is: the right values with the axes in another order, every
value a constant times the right one, each row its own multiple, the rows' values in another order, the
values moved along an axis, which rows are right, where -inf (a masked entry) is against where it
should be. Lines are at most 78 characters; there are no colours.

Each call runs within a budget of 10 seconds a case (on the main thread, where `SIGALRM` exists), with a
line of progress every 2 seconds; its warnings are recorded, not printed or raised; an exception from `fn`,
`SystemExit` included, is reported as a verdict (KeyboardInterrupt still interrupts).

`check` returns a `Result`, truthy only when every case passed, with `.passed`, `.status`, `.cases` (how many
passed), `.total`, `.message` (the text printed) and `.hint`. It raises only for a bad call: ValueError for an
unknown name (listing the names), TypeError for a `fn` that is not callable. Cases come from a fixed seed
through their own `torch.Generator`, on the CPU whatever torch's default device; torch's global random state
and thread count are left as they were.
"""

from qkv.exercises.checker import Result, check, names

__all__ = ["Result", "check", "names"]
