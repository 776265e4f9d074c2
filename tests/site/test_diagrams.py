"""The diagrams of docs/figures: drawn from the package, in the colours of the rcParams they are drawn under."""

from __future__ import annotations

from types import ModuleType

import matplotlib
import pytest
from cycler import cycler
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.patches import Rectangle
from matplotlib.text import Annotation, Text

import qkv
from tests.site.build import ROOT, load_step

DIAGRAMS = {
    "queries-keys-values": "qkv-attention-flow",
    "multi-head-attention": "multi-head-attention-split-merge",
    "flash-attention": "flash-attention-loop",
    "masking": "masking-causal-alignment",
}
# A scheme no figure would hard-code: each diagram must take every colour from it.
SCHEME = {
    "text.color": "#123456",
    "axes.edgecolor": "#654321",
    "axes.prop_cycle": cycler(color=[f"#0{i}0{i}0{i}" for i in range(10)]),
    "image.cmap": "magma",
}


def _script(slug: str) -> ModuleType:
    return load_step("figures")._load_script(ROOT / "docs" / "figures" / f"{slug}.py")


def _draw(slug: str) -> Figure:
    with matplotlib.rc_context(SCHEME):
        return _script(slug).FIGURES[DIAGRAMS[slug]]()


def _texts(figure: Figure) -> list[str]:
    return [text.get_text() for text in figure.findobj(Text) if text.get_text()]


@pytest.mark.parametrize("slug", DIAGRAMS)
def test_diagram_takes_its_colours_from_the_rcparams(slug: str) -> None:
    figure = _draw(slug)
    cycle = {to_hex(color) for color in SCHEME["axes.prop_cycle"].by_key()["color"]}
    texts = [text for text in figure.findobj(Text) if text.get_text()]
    assert texts
    assert {to_hex(text.get_color()) for text in texts} == {SCHEME["text.color"]}
    cells = [patch for patch in figure.findobj(Rectangle) if patch.axes is not None]
    assert cells
    for cell in cells:
        assert to_hex(cell.get_edgecolor()) == SCHEME["axes.edgecolor"]
        face = cell.get_facecolor()
        assert face[3] == 0.0 or to_hex(face) in cycle, face
    for note in figure.findobj(Annotation):
        assert to_hex(note.arrow_patch.get_edgecolor()) == SCHEME["text.color"]
    for image in figure.findobj(AxesImage):
        assert image.get_cmap().name == SCHEME["image.cmap"]


@pytest.mark.parametrize("slug", DIAGRAMS)
def test_diagram_fits_a_phone_column(slug: str) -> None:
    width, height = _draw(slug).get_size_inches()
    assert width <= 5.5
    assert height <= 6.5


def test_attention_flow_shows_the_shapes_of_the_posts_block() -> None:
    texts = _texts(_draw("queries-keys-values"))
    # X (N, d_model), Q and K (N, d_k), V and the output (N, d_v), scores and weights (N, N)
    for shape in ("(6, 16)", "(6, 8)", "(6, 12)", "(6, 6)"):
        assert any(text.startswith(shape) for text in texts), shape


def test_split_and_merge_are_the_calls_of_the_module() -> None:
    assert _script("multi-head-attention")._head_steps() == [
        (".unflatten(-1, (4, 4))", (2, 5, 4, 4)),
        (".transpose(-3, -2)", (2, 4, 5, 4)),
        ("scaled_dot_product_attention(q, k, v)", (2, 4, 5, 4)),
        (".transpose(-3, -2)", (2, 5, 4, 4)),
        (".flatten(-2)", (2, 5, 16)),
    ]


def test_kernel_loop_visits_the_tiles_the_mask_keeps_in_order() -> None:
    script = _script("flash-attention")
    n, block_m, block_n = script.LOOP_N, script.BLOCK_M, script.BLOCK_N
    # queries 256-383 with a window of 192: the window's far edge, one full tile, the diagonal
    assert script._visits(256, 192) == [
        (64, "partial"),
        (128, "partial"),
        (192, "full"),
        (256, "partial"),
        (320, "partial"),
    ]
    for window in script.LOOP_MASKS.values():
        keep = (
            qkv.causal_mask(n) if window is None else qkv.sliding_window_mask(n, window)
        )  # (L, S), True = may attend
        for first_row in range(0, n, block_m):
            visits = script._visits(first_row, window)
            assert [tile for tile, _ in visits] == sorted({tile for tile, _ in visits})
            kinds = dict(visits)
            for first_col in range(0, n, block_n):
                tile = keep[first_row : first_row + block_m, first_col : first_col + block_n]
                expected = "full" if tile.all() else "partial" if tile.any() else None
                assert kinds.get(first_col) == expected, (window, first_row, first_col)


def test_alignment_grids_are_the_masks_of_the_post() -> None:
    script = _script("masking")
    figure = _draw("masking")
    top = 0.95  # the top of the grids, below the key positions; cell digits are centred in their cells
    cells = sorted(
        (
            text.get_position()[0] > 2.75,
            text.get_position()[1],
            text.get_position()[0],
            text.get_text(),
        )
        for text in figure.findobj(Text)
        if text.get_text() in {"0", "1"}
        and text.get_horizontalalignment() == "center"
        and text.get_position()[1] > top
    )
    digits = [int(text) for *_, text in cells]
    width = script.ALIGNED_S
    rows = [digits[i : i + width] for i in range(0, len(digits), width)]
    top_left = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]]
    bottom_right = [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert rows == top_left + bottom_right
