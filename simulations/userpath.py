"""Where a user's ``module:Class`` resolves: the current folder first on the import path while ``userfamily.load_class``
imports it (as ``python -c`` has it), and in a worker of the job runner (``simulations.runner``: a local process
pool or a Dask worker, whose import path does not hold that folder) the parent's folders, which every job carries.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterable, Iterator


def user_module_folders() -> tuple[str, ...]:
    """The folders a ``module:Class`` name resolves from besides the installed packages: the current folder."""
    return (os.getcwd(),)


@contextlib.contextmanager
def folders_first_on_path(folders: Iterable[str]) -> Iterator[None]:
    """``folders`` first on ``sys.path`` while the block runs (those already on it stay where they are)."""
    added = [folder for folder in folders if folder not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for folder in added:
            if folder in sys.path:
                sys.path.remove(folder)


def resolve_user_modules_from(folders: Iterable[str]) -> None:
    """In a worker of the job runner: append each of the parent's ``user_module_folders`` not already on ``sys.path``,
    for the worker's life (a worker's jobs may run in threads, so nothing is taken off again).  Appended, not
    prepended: a file in the user's folder never shadows a module the engine imports later in the worker."""
    sys.path.extend(folder for folder in folders if folder not in sys.path)
