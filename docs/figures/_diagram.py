"""Drawing helpers shared by the diagrams of the figure scripts: a canvas in inches, grids of cells, arrows.

A diagram is drawn on one `Axes` that fills its figure, in data units of inches measured from the top-left
corner (y grows downwards), so that a layout reads as a page does and text keeps its size in points. Every
colour is taken from the rcParams in force when a diagram is drawn: edges and arrows follow
`axes.edgecolor` and `text.color`, fills are colour-cycle names (`"C0"`, `"C1"`, ...) drawn translucent so
that text in the default colour stays legible on them in a light and a dark scheme alike.
"""

from collections.abc import Sequence

import matplotlib
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

FILL_ALPHA = 0.45  # a filled cell: the fill colour over the page, light enough for text on it


def canvas(width: float, height: float) -> tuple[Figure, Axes]:
    """A `width` x `height` inch figure and its one axes, in inches from the top-left corner, no frame."""
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0.0, width)
    ax.set_ylim(height, 0.0)
    ax.set_aspect("equal")
    ax.set_autoscale_on(False)  # an image keeps the page's limits
    ax.set_axis_off()
    return fig, ax


def crop(fig: Figure, ax: Axes, height: float) -> None:
    """Cut the canvas of `canvas` to its top `height` inches, once a layout knows how tall it is."""
    width = fig.get_size_inches()[0]
    fig.set_size_inches(width, height)
    ax.set_ylim(height, 0.0)


def cells(
    ax: Axes,
    x: float,
    y: float,
    fills: Sequence[Sequence[str | None]],
    size: float,
) -> None:
    """A grid of square cells with its top-left corner at `(x, y)`: `fills[i][j]` colours cell `(i, j)`.

    A fill of None leaves the cell empty. Cells have edges of the axes' edge colour.
    """
    edge = matplotlib.rcParams["axes.edgecolor"]
    for i, row in enumerate(fills):
        for j, fill in enumerate(row):
            ax.add_patch(
                Rectangle(
                    (x + j * size, y + i * size),
                    size,
                    size,
                    facecolor="none" if fill is None else to_rgba(fill, FILL_ALPHA),
                    edgecolor=edge,
                    linewidth=0.6,
                )
            )


def matrix(
    ax: Axes,
    x: float,
    y: float,
    shape: tuple[int, int],
    size: float,
    fill: str | None,
    title: str,
    caption: str | None = None,
) -> None:
    """A `shape` grid of cells filled with `fill`, `title` centred above it and `caption` below it."""
    rows, cols = shape
    cells(ax, x, y, [[fill] * cols] * rows, size)
    ax.text(x + cols * size / 2, y - 0.06, title, ha="center", va="bottom")
    if caption is not None:
        ax.text(x + cols * size / 2, y + rows * size + 0.06, caption, ha="center", va="top")


def arrow(
    ax: Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    label: str | None = None,
    *,
    label_at: tuple[float, float] | None = None,
    ha: str = "left",
    va: str = "center",
) -> None:
    """An arrow from `start` to `end`, in the text colour, with `label` at `label_at` (its middle if None)."""
    color = matplotlib.rcParams["text.color"]
    ax.annotate(
        "",
        xy=end,
        xytext=start,
        arrowprops={
            "arrowstyle": "-|>",
            "color": color,
            "linewidth": 1.0,
            "shrinkA": 0,
            "shrinkB": 0,
        },
    )
    if label is not None:
        if label_at is None:
            label_at = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
        ax.text(*label_at, label, ha=ha, va=va)
