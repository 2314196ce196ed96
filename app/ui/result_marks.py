"""Tags and favourite marks on the Search tab's results: the Tags… dialog, the stars, the Favourite button, and
"Write tags into the files…" (asked first, then a per-file report).

Each edit runs as a job on the open library (through the tab's `run`), then hands the files' new marks to the
`SearchState`, which redraws the rows and the preview's buttons.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtWidgets import QDialog, QMessageBox, QWidget

from app.services.jobs import Job
from app.services.library.records import Hit
from app.services.library.tag_writer import REFUSED, WRITTEN, TagWrite
from app.services.search.search_jobs import favourite_job, tags_job
from app.services.search.session import SearchSession
from app.ui.search_state import SearchState
from app.ui.tag_dialog import TagDialog

# run(job on the open session, name, on_result): the tab's way to run it (nothing runs without a library)
RunOnSession = Callable[[Callable[[SearchSession], Job[Any]], str, Callable[[Any], None]], Any]


class ResultMarks(QObject):
    tags_changed = Signal(object)  # {file_id: tags} after an edit was saved
    favourites_changed = Signal(list, bool)  # file ids, marked (True) or unmarked
    message = Signal(str)  # what an edit did, for the tab's status line
    tags_written = Signal(list)  # the TagWrite of each file after "Write tags into the files…"

    def __init__(self, state: SearchState, run: RunOnSession, parent: QWidget) -> None:
        super().__init__(parent)
        self.state = state
        self.run = run
        self.dialog_parent = parent

    def edit_tags(self, dialog: TagDialog | None = None) -> None:
        """Open the tag editor for the selected results; on OK the changes run as a job, then the rows update.
        (Tests pass a prepared dialog to skip the modal loop.)"""
        chosen = self.state.selected_hits()
        if not chosen or not self.state.ready:
            return
        dialog = dialog or TagDialog([list(h.user_tags) for h in chosen], self.state.known_tags, self.dialog_parent)
        if dialog.result() != QDialog.DialogCode.Accepted and dialog.exec() != QDialog.DialogCode.Accepted:
            return
        add, remove = dialog.changes()
        if not add and not remove:
            return
        ids = [h.file_id for h in chosen]
        self.run(lambda session: tags_job(session, ids, add, remove), "tags", self._tags_saved)

    def _tags_saved(self, data: tuple[dict[int, list[str]], list[str]]) -> None:
        per_file, known = data
        self.state.set_tags(per_file, known)
        self.message.emit(f"Tags saved on {len(per_file)} sound{'s' if len(per_file) != 1 else ''}.")
        self.tags_changed.emit(per_file)

    @Slot(int)
    def toggle_star(self, row: int) -> None:
        hits = self.state.hits
        if 0 <= row < len(hits):
            self.set_favourite([hits[row]], not hits[row].favourite)

    @Slot()
    def toggle_selected(self) -> None:
        chosen = self.state.selected_hits()
        self.set_favourite(chosen, not all(h.favourite for h in chosen))

    def set_favourite(self, hits: list[Hit], on: bool) -> None:
        if not hits or not self.state.ready:
            return
        ids = [h.file_id for h in hits]
        self.run(lambda session: favourite_job(session, ids, on), "favourite", self._favourites_saved)

    def _favourites_saved(self, data: tuple[list[int], bool]) -> None:
        ids, on = data
        self.state.set_favourite(ids, on)
        self.favourites_changed.emit(sorted(set(ids)), on)

    # ------------------------------------------------------------------------------ tags into the files

    def write_into_files(self, confirm: Callable[[str], bool] | None = None) -> None:
        """Write the selected sounds' tags into their files, after asking (tests pass `confirm`); the per-file
        report is shown when the job ends."""
        chosen = [h for h in self.state.selected_hits() if h.user_tags]
        if not chosen or not self.state.ready:
            self.message.emit("None of the selected sounds has tags to write.")
            return
        n = len(chosen)
        question = (f"Write the tags of {n} sound{'s' if n != 1 else ''} into the file{'s' if n != 1 else ''}?\n\n"
                    "Keywords are added to what each file holds (WAV: INFO IKEY; FLAC/Ogg: Vorbis KEYWORDS; MP3: "
                    "ID3 TXXX:KEYWORDS). Each file is rewritten through a copy that must decode to the same "
                    "samples before it replaces the original; files that are read-only or changed since "
                    "indexing are left alone.")
        if not (confirm or self._ask)(question):
            return
        ids = [h.file_id for h in chosen]
        self.run(lambda session: session.write_tags_job(ids), "write tags", self._written)

    def _ask(self, question: str) -> bool:
        answer = QMessageBox.question(self.dialog_parent, "Write tags into the files", question)
        return answer == QMessageBox.StandardButton.Yes

    def _written(self, report: list[TagWrite]) -> None:
        written = sum(r.status == WRITTEN for r in report)
        refused = [r for r in report if r.status == REFUSED]
        summary = (f"Tags written into {written} file{'s' if written != 1 else ''}"
                   + (f", {len(refused)} refused" if refused else "")
                   + (f", {len(report) - written - len(refused)} already had them" if
                      len(report) - written - len(refused) else "") + "; indexing again reads them back.")
        self.message.emit(summary)
        self.tags_written.emit(report)
        box = QMessageBox(QMessageBox.Icon.Warning if refused else QMessageBox.Icon.Information,
                          "Write tags into the files", summary, parent=self.dialog_parent)
        box.setDetailedText("\n".join(f"{r.status}: {r.path}" + (f" — {r.reason}" if r.reason else "")
                                       for r in report))
        box.setObjectName("tag-write-report")
        box.open()  # not modal to the app: the report waits while the user goes on
