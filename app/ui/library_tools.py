"""The Search tab's library tools: Find duplicates (duplicates_dialog.py) and Suggest names (names_dialog.py),
each found on a worker thread of the tab, shown in a dialog, and what the user accepts done on one too; the index
follows whatever changed on disk."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt

from app.services.jobs import Job
from app.services.library.records import Hit
from app.ui.duplicates_dialog import DuplicatesDialog
from app.ui.names_dialog import NamesDialog


class LibraryTools:
    """The tools' dialogs (the last of each kind shown) and the jobs behind them, on `tab`'s session."""

    def __init__(self, tab: Any) -> None:  # noqa: ANN401 - the SearchTab (which imports this module)
        self.tab = tab
        self.duplicates_dialog: DuplicatesDialog | None = None
        self.names_dialog: NamesDialog | None = None

    def find_duplicates(self, hit: Hit | None = None) -> None:
        """The library's duplicates (or `hit`'s), found on a worker thread, then shown in a dialog whose trashed
        files the index forgets."""
        session = self.tab.session
        if session is None:
            self.tab.status("Open a library first: duplicates are found among its indexed sounds.")
            return
        what = f"duplicates of {hit.name}" if hit is not None else "duplicates in the library"
        self.tab.status(f"Finding {what}…")

        def show(groups: list) -> None:
            self.tab.status(f"{len(groups)} group{'' if len(groups) == 1 else 's'} of {what}" if groups
                            else f"No {what} found.")
            dialog = DuplicatesDialog(groups, session.file_path, f"Duplicates — {what}", self.tab)
            dialog.trashed.connect(self._trashed)
            dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            self.duplicates_dialog = dialog
            dialog.show()

        self.tab._run(session, lambda: session.duplicates_job(hit.path if hit is not None else None),
                      "duplicates", show, on_error=self.tab.error)

    def suggest_names(self, hits: list[Hit]) -> None:
        """UCS-style names for these sounds, in a dialog whose accepted names rename the files (or go into their
        descriptions); the index follows."""
        if self.tab.session is None or not hits:
            return
        try:  # in a set of locations: the one that holds them (each catalog renames its own files)
            session, ids = self.tab.session.one_location([h.file_id for h in hits])
        except ValueError as e:
            self.tab.error(f"Suggest names: {e}")
            return

        def show(suggestions: list) -> None:
            if not suggestions:
                self.tab.status("None of the selected sounds is indexed yet: names come from the sounds they "
                                "sound like.")
                return
            dialog = NamesDialog(suggestions, session.renames_to_undo() > 0, self.tab)
            dialog.rename.connect(lambda batch: self._file_job(dialog, session, lambda: session.rename_job(batch),
                                                               "renamed"))
            dialog.undo.connect(lambda: self._file_job(dialog, session, session.undo_renames_job, "renamed back"))
            dialog.describe.connect(lambda texts: self._file_job(dialog, session, lambda: session.describe_job(texts),
                                                                 "described"))
            dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            self.names_dialog = dialog
            dialog.show()

        self.tab._run(self.tab.session, lambda: _call_job(lambda: session.suggest_names(ids)), "suggest names",
                      show, on_error=self.tab.error)

    def _file_job(self, dialog: NamesDialog, owner: Any, job: Callable[[], Job[Any]],  # noqa: ANN401 - a session
                  done: str) -> None:
        """Rename or describe files (in `owner`, the session holding them), then say what happened in the dialog
        and index again."""
        session = self.tab.session

        def finished(report: Any) -> None:  # noqa: ANN401 - a RenameReport or TagWrite list
            ok, failed = file_job_counts(report)
            text = f"{ok} file{'' if ok == 1 else 's'} {done}" + (f"; {len(failed)} not: {failed[0]}" if failed
                                                                  else "") + ". Updating the index…"
            dialog.done_with(text, session is not None and owner.renames_to_undo() > 0)
            self.tab.status(text)
            self.tab.start_indexing()

        self.tab._run(session, job, "files", finished,
                      on_error=lambda e: (dialog.done_with(e, True), self.tab.error(e)))

    def _trashed(self, paths: list[str]) -> None:
        self.tab.status(f"Moved {len(paths)} file{'' if len(paths) == 1 else 's'} to the trash; updating the index")
        self.tab.start_indexing()


def _call_job(work: Callable[[], Any]) -> Job[Any]:
    """A job of one step: `work()` on the worker thread (a generator runs only when the worker steps it)."""
    yield {"message": ""}
    return work()


def file_job_counts(report: Any) -> tuple[int, list[str]]:  # noqa: ANN401 - a RenameReport or [TagWrite]
    """(files done, why each other one was not) of a rename or description job."""
    if isinstance(report, list):  # tag writes
        done = ("written", "unchanged")
        return sum(r.status in done for r in report), [f"{r.path}: {r.reason}" for r in report if r.status not in done]
    return len(report.done), [f"{r.old}: {why}" for r, why in report.failed]
