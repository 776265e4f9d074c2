"""The one style of the site's figures, in a light and a dark variant, and the helpers that follow it.

The figures hook (docs/hooks/figures.py) draws every figure twice, once under `rc("light")` and once under
`rc("dark")`, so a figure script never names a colour: it uses the colour cycle "C0".."C9", the defaults that
follow `text.color` and `axes.edgecolor`, `rcParams["image.cmap"]` for heat maps, and the helpers below for
cells that carry text or kinds. Both variants draw on the page's own background (Material's white and slate)
and are saved transparent, so a figure is never a slab of another colour on the page.

Sizes are set for a phone: a figure at most `MAX_WIDTH_IN` wide, shrunk to a `PHONE_COLUMN_PX` column, keeps
text of `BASE_SIZE_PT` at `MIN_PHONE_TEXT_PX` or more; no text is set smaller than `BASE_SIZE_PT`
(tests/site/test_figures.py holds every figure to this).
"""

from __future__ import annotations

from cycler import cycler
from matplotlib import rcParams
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap, to_rgb, to_rgba
from matplotlib.image import AxesImage

BASE_SIZE_PT = 10.0  # every text on a figure is at least this size
MAX_WIDTH_IN = 5.5  # a figure's width; at 96 CSS px per inch, 528 px on a wide screen
PHONE_COLUMN_PX = 358  # the content column of Material on a 390 px phone
MIN_PHONE_TEXT_PX = 9.0  # the smallest text on a phone, in CSS px

# Material's fonts are the system's (theme.font: false); an SVG keeps its text as text and names the same stack.
# Matplotlib lays the text out with the first of these it has (DejaVu Sans, wider than the others), so a
# reader's font never overflows the box it was measured for.
FONTS = ["Helvetica", "Arial", "DejaVu Sans"]

# tab10, each hue moved in lightness just enough for 3:1 against white (light) and 4.5:1 against Material's
# slate (dark): "C0" is the same hue in both variants.
CYCLES = {
    "light": [
        *("#1f77b4", "#ee7000", "#2ca02c", "#d62728", "#9467bd"),
        *("#8c564b", "#e06abc", "#7f7f7f", "#95961b", "#13a1af"),
    ],
    "dark": [
        *("#258ed7", "#ff7f0e", "#2ca02c", "#e25e5e", "#a179c5"),
        *("#b37c71", "#e377c2", "#898989", "#bcbd22", "#17becf"),
    ],
}
# Material's page background and body text: white and 87% black; slate hsl(225, 15%, 14%) and its text at
# hsla(225, 15%, 90%, 0.82) over it.
PAGES = {"light": ("#ffffff", "#212121"), "dark": ("#1e2129", "#bfc1c7")}
# Text on a coloured cell: whichever of black and white reads better on it, at 4.58:1 at the least.
INKS = ("#000000", "#ffffff")

BASE = {
    "font.family": "sans-serif",
    "font.sans-serif": FONTS,
    "font.size": BASE_SIZE_PT,
    "axes.titlesize": "large",
    "axes.labelsize": "medium",
    "xtick.labelsize": "medium",
    "ytick.labelsize": "medium",
    "legend.fontsize": "medium",
    "legend.title_fontsize": "medium",
    "figure.titlesize": "large",
    "mathtext.fontset": "dejavusans",
    "figure.figsize": (MAX_WIDTH_IN, 3.6),
    "figure.constrained_layout.use": True,
    "lines.linewidth": 1.75,
    "lines.markersize": 5.0,
    "axes.linewidth": 0.8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "grid.linewidth": 0.6,
    "grid.alpha": 0.35,
    "legend.framealpha": 0.85,
    "legend.edgecolor": "none",
    "image.cmap": "viridis",
    "image.interpolation": "none",  # a grid of cells stays a small image, drawn crisp
    "savefig.transparent": True,
}


def rc(variant: str) -> dict:
    """The rcParams of one variant, "light" or "dark"."""
    page, text = PAGES[variant]
    return {
        **BASE,
        "axes.prop_cycle": cycler(color=CYCLES[variant]),
        "figure.facecolor": page,  # saved transparent; here so that helpers know what lies beneath
        "axes.facecolor": page,
        "savefig.facecolor": page,
        "text.color": text,
        "axes.labelcolor": text,
        "axes.edgecolor": text,
        "xtick.color": text,
        "ytick.color": text,
        "grid.color": text,
        "patch.edgecolor": text,
        "hatch.color": text,
    }


def _luminance(colour) -> float:
    """WCAG relative luminance of an opaque colour."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(first, second) -> float:
    """WCAG contrast ratio of two opaque colours, from 1 to 21."""
    light, dark = sorted((_luminance(first), _luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def on_page(colour, alpha: float = 1.0) -> tuple[float, float, float]:
    """A colour laid at `alpha` over the page background of the current variant, as an opaque colour."""
    red, green, blue, own = to_rgba(colour)
    weight = alpha * own
    page = to_rgb(rcParams["axes.facecolor"])
    return tuple(
        weight * c + (1 - weight) * p for c, p in zip((red, green, blue), page, strict=True)
    )


def ink_on(fill) -> str:
    """The text colour that reads better on `fill` (laid over the page, if it is translucent)."""
    opaque = on_page(fill)
    return max(INKS, key=lambda ink: contrast(ink, opaque))


def kinds_cmap(kinds: int) -> ListedColormap:
    """Colours for cells of `kinds` ordered kinds: a faint cell for kind 0, then "C0" ever stronger."""
    faint = on_page(rcParams["text.color"], 0.1)
    strengths = [(k / (kinds - 1)) ** 1.5 for k in range(1, kinds)]
    return ListedColormap([faint, *(on_page("C0", 0.3 + 0.7 * s) for s in strengths)])


def label_cells(ax: Axes, image: AxesImage, texts: list[list[str]]) -> None:
    """Write texts[i][j] at the centre of cell (i, j) of `image`, in the ink that reads on the cell."""
    values = image.get_array()
    for i, row in enumerate(texts):
        for j, text in enumerate(row):
            fill = image.cmap(image.norm(values[i, j]))
            ax.text(j, i, text, ha="center", va="center", color=ink_on(fill))
