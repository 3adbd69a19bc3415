"""The mutation harness (tests/mutation.py): the lines a mutant changed, the tests that ran them, when to refresh."""

from __future__ import annotations

import os

from mutation import (EXEC_PID, ROOT, TREE_DATA, changed_lines, copy_tree_data, differing_modules, main, restore_tree,
                      running_exec, selected_tests)


def test_changed_lines_are_the_original_lines_replaced_deleted_or_inserted_at():
    before = "a = 1\nb = a + 1\nc = b * 2\n"
    assert changed_lines(before, before) == set()
    assert changed_lines(before, "a = 1\nb = a - 1\nc = b * 2\n") == {2}
    assert changed_lines(before, "a = 1\nc = b * 2\n") == {2}
    assert changed_lines(before, "a = 1\nb = a + 1\nx = 0\nc = b * 2\n") == {3}
    assert changed_lines(before, "a = 1\nb = (a\n     + 2)\nc = b * 2\n") == {2}


def test_the_tests_that_ran_a_line_are_selected_and_an_unseen_line_asks_for_the_whole_list():
    contexts = {3: ["t.py::a"], 4: ["t.py::b", "t.py::a"], 5: ["", "t.py::c"], 6: []}
    assert selected_tests(contexts, {3}) == ["t.py::a"]
    assert selected_tests(contexts, {3, 4}) == ["t.py::a", "t.py::b"]
    assert selected_tests(contexts, {3, 7}) is None  # line 7: no test ran it in its own process
    assert selected_tests(contexts, {5}) is None  # run while the test files were imported
    assert selected_tests(contexts, {6}) is None


def test_a_session_is_refreshed_only_when_its_modules_are_the_checkouts(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for tree in (a, b):
        (tree / "pkg").mkdir(parents=True)
        (tree / "pkg" / "m.py").write_text("x = 1\n")
        (tree / "pkg" / "data.txt").write_text("not a module\n")
    assert differing_modules(a, b) == []
    (b / "pkg" / "data.txt").write_text("changed, but not a module\n")
    assert differing_modules(a, b) == []
    (b / "pkg" / "m.py").write_text("x = 2\n")
    (a / "pkg" / "only_a.py").write_text("")
    assert differing_modules(a, b) == ["pkg/only_a.py", "pkg/m.py"]


def test_a_resumed_session_starts_from_the_unmutated_tree(tmp_path):
    """A run stopped while a mutant was applied leaves it in the tree: resuming restores the pristine copy."""
    (tmp_path / "pristine" / "pkg").mkdir(parents=True)
    (tmp_path / "pristine" / "pkg" / "m.py").write_text("running = cum[:, -1]\n")
    (tmp_path / "tree" / "pkg").mkdir(parents=True)
    (tmp_path / "tree" / "pkg" / "m.py").write_text("running = cum[:, - 2]\n")
    (tmp_path / "tree" / "pkg" / "stray.py").write_text("")
    restore_tree(tmp_path)
    assert differing_modules(tmp_path / "tree", tmp_path / "pristine") == []


def test_the_tree_finds_the_committed_data_where_the_installed_package_looks(tmp_path):
    """accum probe report reads its default sweeps beside probes/cliargs.py: in the installed layout that is
    accum/probes/results, a copy of the checkout's probes/results (twice: a resumed session copies again)."""
    copy_tree_data(tmp_path)
    copy_tree_data(tmp_path)
    for in_tree, in_checkout in TREE_DATA.items():
        assert not (tmp_path / in_tree).is_symlink()
        assert sorted(p.relative_to(tmp_path / in_tree) for p in (tmp_path / in_tree).rglob("*")) == sorted(
            p.relative_to(ROOT / in_checkout) for p in (ROOT / in_checkout).rglob("*"))
    assert (tmp_path / "accum" / "probes" / "results" / "cpu" / "sweep.json").is_file()


def test_a_session_whose_exec_still_runs_is_not_started_again(tmp_path, capsys):
    """Killing the harness leaves cosmic-ray exec running: a second run on the same work folder would judge mutants on
    top of the first's, so it is refused while the recorded pid is alive (this test's own pid here)."""
    assert running_exec(tmp_path) is None
    (tmp_path / EXEC_PID).write_text(str(os.getpid()))
    assert running_exec(tmp_path) == os.getpid()
    assert main(["theory", "--work", str(tmp_path)]) == 1
    assert "still judges" in capsys.readouterr().err
    (tmp_path / EXEC_PID).write_text("999999999")  # no such process
    assert running_exec(tmp_path) is None
