"""The preview waveform on its own (app/ui/preview_views.py): the selected part stays inside the audio the
preview holds, whatever the mouse does with its edges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication

from app.services.search.preview import Preview
from app.ui.preview_views import PreviewWaveform

SR = 8000


def excerpt_preview(offset_s: float, seconds: float) -> Preview:
    """The preview of a long file: `seconds` of audio from `offset_s` into it."""
    audio = (np.random.default_rng(0).standard_normal(round(seconds * SR)) * 0.1).astype(np.float32)
    return Preview(Path("/library/ambience.wav"), audio, SR, offset_s, offset_s + seconds + 300.0,
                   np.zeros((4, 5), np.float32), 0.1, SR / 2)


def drag(wave: PreviewWaveform, start: QPoint, end: QPoint) -> None:
    """A real left-button drag on the plot's viewport (moves that carry the button, as pyqtgraph needs)."""
    viewport, left, none = wave.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    wave.scene()._moveEventIsAllowed = lambda: True  # pyqtgraph drops moves closer than 1/60 s: keep them all

    def send(kind: QEvent.Type, at: QPoint, button: Qt.MouseButton, buttons: Qt.MouseButton) -> None:
        QApplication.sendEvent(viewport, QMouseEvent(kind, QPointF(at), QPointF(viewport.mapToGlobal(at)), button,
                                                     buttons, none))

    send(QEvent.Type.MouseButtonPress, start, left, left)
    for f in np.linspace(0, 1, 8)[1:]:
        send(QEvent.Type.MouseMove, QPoint(round(start.x() + f * (end.x() - start.x())), start.y()),
             Qt.MouseButton.NoButton, left)
    send(QEvent.Type.MouseButtonRelease, end, left, Qt.MouseButton.NoButton)


def at(wave: PreviewWaveform, seconds: float) -> QPoint:
    """The plot's pixel at `seconds`, halfway up."""
    return wave.mapFromScene(wave.getPlotItem().getViewBox().mapViewToScene(QPointF(seconds, 0.0)))


def shown_with_part(qtbot) -> PreviewWaveform:  # noqa: ANN001 (qtbot)
    """A waveform on show with 10 s of a long file from 600 s previewed, and 602-604 s selected."""
    wave = PreviewWaveform()
    qtbot.addWidget(wave)
    wave.resize(800, 200)
    wave.show()
    wave.set_preview(excerpt_preview(600.0, 10.0))
    wave.set_selection(602.0, 604.0)
    return wave


def test_a_selection_edge_dragged_off_the_plot_stops_at_the_previews_ends(qtbot) -> None:
    """An edge dragged past the widget used to leave the part starting before the preview's audio (596 s of a
    preview from 600 s): Play then sliced the audio with a negative index and played nothing. The whole part
    dragged against an end keeps its length (each edge clamped alone would shrink it to nothing)."""
    wave = shown_with_part(qtbot)
    edge = at(wave, 602.0)
    drag(wave, edge, QPoint(-300, edge.y()))  # the left edge, dragged far off the plot's left side
    a, b = wave.selected()
    assert a == 600.0 and b == 604.0
    drag(wave, at(wave, 604.0), QPoint(2000, edge.y()))  # the right edge, off the right side
    assert wave.selected() == (600.0, 610.0)
    wave.set_selection(602.0, 604.0)
    drag(wave, at(wave, 603.0), QPoint(2000, edge.y()))  # the whole part, off the right side: its length kept
    assert wave.selected() == (608.0, 610.0)
    drag(wave, at(wave, 609.0), QPoint(-300, edge.y()))  # and off the left side
    assert wave.selected() == (600.0, 602.0)
    wave.clear_preview()
    wave.set_preview(excerpt_preview(0.0, 2.0))  # another sound: the bounds are its own
    wave.set_selection(-1.0, 5.0)
    assert wave.selected() == (0.0, 2.0)


def test_the_play_head_is_drawn_over_the_part_and_the_parts_edges_are_never_red(qtbot) -> None:
    """Play starts at the part's first edge: the (red) play head sat under that edge, which turned red itself
    when hovered, so the play head could not be seen until the sound moved it."""
    wave = PreviewWaveform()
    qtbot.addWidget(wave)
    assert wave.playhead.zValue() > wave.selection.zValue()
    red = wave.playhead.pen.color()
    assert all(line.hoverPen.color() != red and line.pen.color() != red for line in wave.selection.lines)


def test_a_double_click_inside_the_part_zooms_to_it_and_elsewhere_shows_the_whole_sound(qtbot) -> None:
    """The wheel zooms about the pointer and can leave the part out of view (UX trial): a double-click on the part
    brings it back, filling the view with a tenth to spare on each side."""
    from types import SimpleNamespace

    wave = shown_with_part(qtbot)
    viewbox = wave.getPlotItem().getViewBox()

    def double_click(seconds: float) -> None:
        scene = viewbox.mapViewToScene(QPointF(seconds, 0.0))
        wave._scene_clicked(SimpleNamespace(button=lambda: Qt.MouseButton.LeftButton, scenePos=lambda: scene,
                                            double=lambda: True))

    double_click(603.0)
    assert viewbox.viewRange()[0] == [pytest.approx(601.8), pytest.approx(604.2)]
    double_click(601.9)  # in view, outside the part
    assert viewbox.viewRange()[0] == [pytest.approx(600.0), pytest.approx(610.0)]
