"""``rewriter.definition``: where a class or function is defined, relative to SRC, for a module
imported the way the harness is (under a private name, not in ``sys.modules``)."""

from __future__ import annotations

import importlib.util

from rewriter.definition import defined_at, relpath

MODULE = '''class Outer:
    def go(self):
        return 1

    class Inner:
        def go(self):
            return 2


def helper():
    return 3
'''


def _import_privately(path):
    spec = importlib.util.spec_from_file_location("_private_module_not_in_sys_modules", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_classes_and_functions_of_a_module_not_in_sys_modules_are_placed_relative_to_src(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "blocks.py").write_text(MODULE)
    module = _import_privately(src / "pkg" / "blocks.py")
    assert defined_at(module.Outer, src) == ("pkg/blocks.py", 1)
    assert defined_at(module.Outer.Inner, src) == ("pkg/blocks.py", 5)
    assert defined_at(module.helper, src) == ("pkg/blocks.py", 10)
    # outside SRC: the file as found
    assert defined_at(module.Outer, tmp_path / "elsewhere") == (str(src / "pkg" / "blocks.py"), 1)


def test_relpath_is_none_outside_src_and_posix_inside(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert relpath(tmp_path, tmp_path / "a" / "b" / "m.py") == "a/b/m.py"
    assert relpath(tmp_path / "a", tmp_path / "c.py") is None
