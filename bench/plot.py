"""Bar charts for benchmark results, drawn with pyqtgraph offscreen (no matplotlib needed)."""

from __future__ import annotations

import math
import os
from pathlib import Path


def bar_chart(path: Path, labels: list[str], values: list[float], title: str, unit: str,
              log: bool = True) -> Path:
    """Horizontal bars (one per label), log10 axis by default; writes a PNG and returns its path."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import pyqtgraph as pg
    import pyqtgraph.exporters
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])  # noqa: F841 - pyqtgraph needs one
    pg.setConfigOptions(background="w", foreground="k", antialias=True)
    plot = pg.PlotWidget(title=title)
    plot.resize(900, 60 + 28 * len(labels))
    ys = list(range(len(labels)))
    shown = [math.log10(max(v, 1e-9)) if log else v for v in values]
    x0 = min(0.0, min(shown) - 0.2) if log else 0.0  # bars start left of the smallest log value
    plot.addItem(pg.BarGraphItem(x0=x0, y=ys, height=0.7, width=[s - x0 for s in shown], brush="#4a90d9"))
    plot.setXRange(x0, max(shown) + 0.6 * (max(shown) - x0), padding=0)  # room for the value labels
    for y, label, v, s in zip(ys, labels, values, shown, strict=True):
        text = pg.TextItem(f"{label}: {v:.4g}", anchor=(0, 0.5), color="k")  # beside its bar: always readable
        text.setPos(s, y)
        plot.addItem(text)
    plot.hideAxis("left")
    plot.setLabel("bottom", f"log10({unit})" if log else unit)
    plot.getPlotItem().invertY(True)
    path.parent.mkdir(parents=True, exist_ok=True)
    exporter = pg.exporters.ImageExporter(plot.getPlotItem())
    exporter.parameters()["width"] = 900
    exporter.export(str(path))
    return path
