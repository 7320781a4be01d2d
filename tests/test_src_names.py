"""The files of SRC that may define what a called name names (:mod:`rewriter.src_names`), read from
the qualified names LibCST's ``QualifiedNameProvider`` gives each call's callee in a real parse:
the rule the rewrite's readings of a helper's callers, of an ``__init__``'s constructions and of a
whole-model compile's class share."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, QualifiedNameProvider

from rewriter.src_names import definition_files, module_files, module_stem

SOURCE = """\
import m
import m as M
import pkg.blocks
from m import f as g
from . import h
from .. import k
from .sub import j as J


def top():
    return 1


class C:
    def f(self):
        return self.f(), top(), g(), M.f(), pkg.blocks.Block(), h(), k(), J(), m()
"""


def _callees(rel: str) -> dict[str, list[tuple[list[str], str] | None]]:
    """``{callee as written: [definition_files of each of its qualified names]}`` of every call in
    :data:`SOURCE`, read as file ``rel``."""
    out: dict[str, list[tuple[list[str], str] | None]] = {}

    class Calls(cst.CSTVisitor):
        METADATA_DEPENDENCIES = (QualifiedNameProvider,)

        def visit_Call(self, node: cst.Call) -> None:
            names = self.get_metadata(QualifiedNameProvider, node.func, set())
            out[cst.Module([]).code_for_node(node.func)] = [definition_files(q, rel) for q in names]

    MetadataWrapper(cst.parse_module(SOURCE)).visit(Calls())
    return out


def test_an_aliased_import_names_the_function_of_its_module_beside_the_file_and_at_the_root():
    calls = _callees("app/train.py")
    assert calls["g"] == [(["app/m.py", "app/m/__init__.py", "m.py", "m/__init__.py"], "f")]
    assert calls["M.f"] == calls["g"]
    assert calls["pkg.blocks.Block"] == [(["app/pkg/blocks.py", "app/pkg/blocks/__init__.py", "pkg/blocks.py",
                                          "pkg/blocks/__init__.py"], "Block")]


def test_a_file_at_the_root_looks_for_a_flat_import_there_once():
    assert _callees("train.py")["g"] == [(["m.py", "m/__init__.py"], "f")]


def test_a_relative_import_names_its_package_from_the_files_folder():
    calls = _callees("pkg/sub/train.py")
    assert calls["h"] == [(["pkg/sub/__init__.py"], "h")]
    assert calls["k"] == [(["pkg/__init__.py"], "k")]
    assert calls["J"] == [(["pkg/sub/sub.py", "pkg/sub/sub/__init__.py"], "j")]


def test_a_relative_import_that_climbs_above_src_has_no_file():
    assert _callees("train.py")["k"] == [([], "k")]


def test_a_top_level_function_is_its_own_files_and_a_method_through_self_is_none():
    calls = _callees("train.py")
    assert calls["top"] == [(["train.py"], "top")]
    assert calls["self.f"] == [None]  # C.f.<locals>.self.f: not the top-level f of any file


def test_a_module_called_itself_names_no_definition():
    assert _callees("train.py")["m"] == [None]


@pytest.mark.parametrize("rel, stem", [("pkg/blocks.py", "blocks"), ("pkg/__init__.py", "pkg"), ("model.py", "model")])
def test_the_stem_is_the_name_an_importer_writes(rel, stem):
    assert module_stem(rel) == stem


def test_module_files_of_the_package_itself():
    assert module_files(".", "pkg/train.py") == ["pkg/__init__.py"]
    assert module_files("..blocks", "pkg/sub/train.py") == ["pkg/blocks.py", "pkg/blocks/__init__.py"]
