"""Which model libraries a measurement child may find imported by its server
(rewriter/engine/preload.py): the ones its trees import, none of them shadowed by a tree's own copy."""

from __future__ import annotations

import pytest

from rewriter.engine import preload

pytest.importorskip("transformers")
pytest.importorskip("diffusers")


@pytest.fixture(autouse=True)
def _fresh_scan():
    preload._imports.cache_clear()
    yield
    preload._imports.cache_clear()


def test_a_tree_that_imports_a_library_gets_it_and_one_that_does_not_gets_nothing(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for t in (a, b, c):
        (t / "pkg").mkdir(parents=True)
    (a / "harness.py").write_text("import torch\nfrom pkg.model import build\n")
    (a / "pkg" / "model.py").write_text("def build():\n    from transformers import GPT2Model\n")
    (b / "harness.py").write_text("import torch\n# import transformers would be a comment\nx = 'import diffusers'\n")
    (c / "pkg" / "unet.py").write_text("from diffusers.models import UNet2DModel\nimport transformers.models\n")
    assert preload.libraries_for([a]) == ("transformers",)
    assert preload.libraries_for([b]) == ()
    assert preload.libraries_for([c]) == ("diffusers", "transformers")
    d = tmp_path / "d"
    d.mkdir()
    (d / "harness.py").write_text("import diffusers\n")  # diffusers' modeling_utils imports transformers
    assert preload.libraries_for([d]) == ("diffusers", "transformers")
    assert preload.libraries_for([a, b]) == ("transformers",)  # validate's two trees: what either imports
    assert preload.libraries_for([None, ""]) == ()


@pytest.mark.parametrize("copy", ["transformers/__init__.py", "transformers.py", "transformers/x.txt"])
def test_a_tree_with_its_own_copy_of_the_library_never_gets_the_installed_one(tmp_path, copy):
    tree = tmp_path / "src"
    (tree / copy).parent.mkdir(parents=True, exist_ok=True)
    (tree / copy).write_text("MARK = 'the tree'\n")
    (tree / "harness.py").write_text("import transformers\nimport diffusers\n")
    # diffusers is not preloaded either: its modeling_utils would import the installed transformers
    assert preload.libraries_for([tree]) == ()
    other = tmp_path / "other"
    other.mkdir()
    (other / "harness.py").write_text("import transformers\n")
    assert preload.libraries_for([other, tree]) == ()  # one tree's copy is on the child's path too


def test_a_library_that_is_not_installed_is_never_asked_for(tmp_path, monkeypatch):
    import importlib.util

    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "harness.py").write_text("import transformers\n")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "transformers" else real(n, *a))
    assert preload.libraries_for([tree]) == ()


def test_a_tree_past_the_scan_limit_preloads_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(preload, "MAX_FILES", 3)
    tree = tmp_path / "src"
    tree.mkdir()
    for i in range(5):
        (tree / f"m{i}.py").write_text("x = 1\n")
    (tree / "z.py").write_text("import transformers\n")
    assert preload.libraries_for([tree]) == ()


@pytest.mark.parametrize("line", ['os.environ["HF_HUB_OFFLINE"] = "1"', "os.environ.setdefault('HF_HOME', '/x')",
                                  "os.environ.update(TRANSFORMERS_VERBOSITY='error')", "os.putenv('A', 'b')"])
def test_a_tree_that_sets_the_environment_in_its_code_gets_nothing_preloaded(tmp_path, line):
    # the library reads some variables when imported (huggingface_hub's HF_HUB_OFFLINE): a preloaded
    # one would have read them before the tree's code set them
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "harness.py").write_text(f"import os\n{line}\nimport transformers\n")
    assert preload.libraries_for([tree]) == ()
    (tree / "harness.py").write_text("import os\nif os.environ['X'] == '1':\n    pass\nimport transformers\n")
    preload._imports.cache_clear()
    assert preload.libraries_for([tree]) == ("transformers",)  # reading it is fine
