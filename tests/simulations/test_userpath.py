"""Where a user's module resolves (``simulations.userpath``): first on the path while it is imported, appended once in
a worker."""

import sys

from accum.simulations.userpath import folders_first_on_path, resolve_user_modules_from


def test_folders_are_first_while_importing_then_gone(monkeypatch):
    monkeypatch.setattr(sys, "path", ["first", "second"])
    with folders_first_on_path(("mine", "second")):
        assert sys.path == ["mine", "first", "second"]  # one already there stays where it is
    assert sys.path == ["first", "second"]


def test_a_workers_folders_are_appended_once(monkeypatch):
    monkeypatch.setattr(sys, "path", ["first", "second"])
    resolve_user_modules_from(("second", "third", "third"))
    resolve_user_modules_from(("third",))
    assert sys.path == ["first", "second", "third"]
