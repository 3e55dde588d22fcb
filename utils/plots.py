"""One way to write a report plot: a 256-colour palette PNG (a third of matplotlib's RGBA size: the plots are
committed beside the data and the tree travels to the GPU machine), written to a temp file, then renamed."""
import io
from pathlib import Path

from hase.utils import paths


def save_png(fig, path: Path, dpi: int = 110) -> None:
    """Save the matplotlib figure `fig` at `path` as a palette PNG and close it."""
    import matplotlib.pyplot as plt
    from PIL import Image
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    out = io.BytesIO()
    Image.open(io.BytesIO(buf.getvalue())).convert("RGB").quantize(256).save(out, format="png", optimize=True)
    paths.atomic_write_bytes(Path(path), out.getvalue())
