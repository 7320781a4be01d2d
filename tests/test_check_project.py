"""Project-level reachability (rewriter/check/project*.py): a compile in one file, the model in another.

A project's usual layout: the model under ``models/`` (``moe_lm.py`` holds a ``ModuleList`` of the
``MoEBlock`` of ``layers.py``), ``torch.compile`` in ``train.py``. The same code in one file gives
SP101 (at the compile) and SP103 (at the block's ``.item()``); split, the hook given any one of
the files must give the findings at the same lines of the same code.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from rewriter.check.command import run_check
from rewriter.check.project import Project
from rewriter.check.project_files import CACHE_DIR, CACHE_FILE
from rewriter.check.project_reading import find_root, plan_project

LAYERS = """\
import torch
from torch import nn


class Expert(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return self.fc(x)


class MoEBlock(nn.Module):
    def __init__(self, d, n_experts):
        super().__init__()
        self.router = nn.Linear(d, n_experts)
        self.experts = nn.ModuleList([Expert(d) for _ in range(n_experts)])

    def forward(self, x):
        top = self.router(x).argmax(-1)
        n_used = int(top.max().item())
        out = torch.zeros_like(x)
        for i in range(n_used + 1):
            out = out + self.experts[i](x) * (top == i).unsqueeze(-1)
        return x + out
"""
ITEM_LINE = 22  # `n_used = int(top.max().item())` in LAYERS
ITEM_COL = 22

MOE_LM = """\
from torch import nn

from .layers import MoEBlock


class MoELM(nn.Module):
    def __init__(self, vocab, d, n_layer, n_experts):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([MoEBlock(d, n_experts) for _ in range(n_layer)])
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)
"""

TRAIN = """\
import torch

from models.moe_lm import MoELM


def main():
    model = MoELM(vocab=100, d=32, n_layer=4, n_experts=4)
    model = torch.compile(model)
    idx = torch.randint(0, 100, (2, 16))
    return model(idx).sum()
"""
COMPILE_LINE = 8


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def proj(tmp_path, monkeypatch):
    root = tmp_path / "proj"
    _write(root, {"pyproject.toml": "[project]\nname = 'p'\n", "models/__init__.py": "",
                  "models/layers.py": LAYERS, "models/moe_lm.py": MOE_LM, "train.py": TRAIN})
    monkeypatch.chdir(root)
    return root


def _found(paths, **kw):
    outcome, _ = run_check(paths, use_config=False, jobs=1, **kw)
    assert not outcome.errors, outcome.errors
    return {(f.path, f.line, f.code) for f in outcome.findings}, outcome


def test_same_code_in_one_file_gives_sp101_and_sp103(tmp_path, monkeypatch):
    body = LAYERS + "\n\n" + MOE_LM.replace("from .layers import MoEBlock\n", "").replace("from torch import nn\n", "")
    body += "\n\n" + TRAIN.replace("from models.moe_lm import MoELM\n", "").replace("import torch\n", "")
    (tmp_path / "one.py").write_text(body)
    monkeypatch.chdir(tmp_path)
    found, _ = _found(["one.py"], project=False)
    assert ("one.py", ITEM_LINE, "SP103") in found
    assert "SP101" in {code for _, _, code in found}


@pytest.mark.parametrize("given", [["models/layers.py"], ["train.py"], ["models/moe_lm.py"],
                                   ["train.py", "models/moe_lm.py", "models/layers.py"]])
def test_split_layout_reports_at_the_models_lines(proj, given):
    found, _ = _found(given)
    assert ("models/layers.py", ITEM_LINE, "SP103") in found
    if given != ["models/layers.py"]:  # SP101 follows from train.py's compile and moe_lm.py's list
        assert ("train.py", COMPILE_LINE, "SP101") in found


def test_the_finding_says_where_the_compile_is(proj):
    outcome, _ = run_check(["models/layers.py"], use_config=False, jobs=1)
    [finding] = outcome.findings
    assert (finding.line, finding.col) == (ITEM_LINE, ITEM_COL)
    assert "reached from the torch.compile at train.py:8" in finding.message


def test_without_the_project_a_split_layout_has_no_finding(proj):
    found, _ = _found(["models/layers.py"], project=False)
    assert found == set()
    found, _ = _found(["train.py"], project=False)
    assert found == set()


def test_config_turns_the_project_off(proj):
    (proj / "pyproject.toml").write_text("[project]\nname = 'p'\n[tool.stackpart]\nproject = false\n")
    outcome, _ = run_check(["models/layers.py"], jobs=1)
    assert outcome.findings == []


def test_only_findings_a_given_file_causes_are_reported(proj):
    # another script compiles its own function with a graph break: not caused by layers.py
    _write(proj, {"other.py": "import torch\n\n@torch.compile\ndef f(x):\n    return x / x.sum().item()\n"})
    found, outcome = _found(["models/layers.py"])
    assert found == {("models/layers.py", ITEM_LINE, "SP103")}
    found, _ = _found(["other.py"])
    assert found == {("other.py", 5, "SP103")}
    assert outcome.project["extra"] >= 1


def test_absolute_import_alias_and_reexport_through_init(proj):
    _write(proj, {
        "models/__init__.py": "from .moe_lm import MoELM\n",
        "train.py": "import torch\nimport models as M\n\nm = M.MoELM(100, 32, 4, 4)\nm.compile()\n",
    })
    found, _ = _found(["models/layers.py"])
    assert ("models/layers.py", ITEM_LINE, "SP103") in found
    found, _ = _found(["train.py"])
    assert ("train.py", 5, "SP101") in found


@pytest.mark.parametrize("init", [True, False])
@pytest.mark.parametrize(("imports", "cls"), [("from moe_lm import MoELM", "MoELM"), ("import moe_lm", "moe_lm.MoELM")])
def test_a_flat_import_of_a_sibling_file_resolves_next_to_the_importer(proj, init, imports, cls):
    """``from moe_lm import MoELM`` in ``models/serve.py``, run as a script from ``models/``
    (its folder is on sys.path): no project module ``moe_lm``, so the sibling file is meant."""
    _write(proj, {"models/serve.py": f"import torch\n{imports}\n\nmodel = torch.compile({cls}(100, 32, 4, 4))\n",
                  "models/moe_lm.py": MOE_LM.replace("from .layers import", "from layers import"),
                  "train.py": "print('no compile here')\n"})
    if not init:
        (proj / "models" / "__init__.py").unlink()
    found, outcome = _found(["models/moe_lm.py", "models/serve.py"])
    assert found == {("models/serve.py", 4, "SP101"), ("models/layers.py", ITEM_LINE, "SP103")}
    [sp103] = [f for f in outcome.findings if f.code == "SP103"]
    assert "reached from the torch.compile at models/serve.py:4" in sp103.message


def test_a_project_module_of_the_name_wins_over_the_sibling(proj):
    """Where the root holds ``moe_lm.py`` itself, ``from moe_lm import MoELM`` is that module."""
    _write(proj, {"models/serve.py": "import torch\nfrom moe_lm import MoELM\n\nmodel = torch.compile(MoELM())\n",
                  "moe_lm.py": "from torch import nn\n\n\nclass MoELM(nn.Module):\n    def forward(self, x):\n"
                               "        return x\n",
                  "train.py": "print('no compile here')\n"})
    found, _ = _found(["models/serve.py", "models/moe_lm.py"])
    assert found == set()


def test_regional_loop_reaches_the_block_and_is_no_sp101(proj):
    _write(proj, {"train.py": "import torch\nfrom models.moe_lm import MoELM\n\nmodel = MoELM(100, 32, 4, 4)\n"
                              "for block in model.blocks:\n    block.compile()\n"})
    found, _ = _found(["train.py", "models/layers.py"])
    assert found == {("models/layers.py", ITEM_LINE, "SP103")}


def test_a_disabled_block_forward_is_not_reached(proj):
    text = LAYERS.replace("    def forward(self, x):\n        top", "    @torch.compiler.disable\n    def forward(self, x):\n        top")
    _write(proj, {"models/layers.py": text})
    found, _ = _found(["models/layers.py"])
    assert found == set()


@pytest.mark.parametrize("call", ["torch.compile(model, disable=True)", "model.compile(disable=True)",
                                  "torch.compile(disable=True)(model)"])
def test_a_compile_turned_off_in_another_file_reaches_nothing(proj, call):
    """``disable=True`` compiles nothing (what ``own_call: {disable: true}`` writes): no SP101 at the
    call, no SP103 in the model it no longer compiles, as in one file."""
    line = f"model = {call}" if call.startswith("torch") else call
    _write(proj, {"train.py": TRAIN.replace("model = torch.compile(model)", line)})
    found, _ = _found(["train.py", "models/layers.py"])
    assert found == set()


def test_a_forward_decorated_with_a_compile_turned_off_reaches_nothing(proj):
    text = MOE_LM.replace("    def forward(self, idx):", "    @torch.compile(disable=True)\n    def forward(self, idx):")
    _write(proj, {"models/moe_lm.py": "import torch\n" + text, "train.py": "from models.moe_lm import MoELM\n"})
    found, _ = _found(["models/moe_lm.py", "models/layers.py"])
    assert found == set()


def test_fullgraph_from_another_file_reaches_the_fullgraph_rules(proj):
    _write(proj, {
        "train.py": TRAIN.replace("torch.compile(model)", "torch.compile(model, fullgraph=True)"),
        "models/layers.py": LAYERS.replace("        n_used = int(top.max().item())\n",
                                           "        n_used = 3\n        if x.sum().item() > 0:\n            x = -x\n"),
    })
    found, outcome = _found(["models/layers.py"])
    # SP110: with fullgraph=True a branch on .item() is an error at the first call (its own tests run torch)
    assert ("models/layers.py", ITEM_LINE + 1, "SP110") in found, outcome.findings  # the `if`
    assert "fullgraph" not in (proj / "models/layers.py").read_text()


def test_cache_is_written_reused_and_refreshed(proj):
    _, first = _found(["models/layers.py"])
    cache = proj / CACHE_DIR / CACHE_FILE
    assert cache.is_file() and (proj / CACHE_DIR / ".gitignore").read_text().strip().endswith("*")
    assert first.project["project_parsed"] >= 2
    _, warm = _found(["models/layers.py"])
    assert warm.project["project_parsed"] == 0
    # an edit of the model file (its size changes) is read again; the others come from the cache
    (proj / "models/moe_lm.py").write_text(MOE_LM.replace("MoEBlock(d, n_experts) for", "Expert(d) for"))
    found, edited = _found(["models/layers.py"])
    assert edited.project["project_parsed"] == 1
    assert found == set()  # the blocks are Experts now: MoEBlock.forward is no longer reached


def test_a_corrupt_cache_is_ignored(proj):
    (proj / CACHE_DIR).mkdir()
    (proj / CACHE_DIR / CACHE_FILE).write_text("{not json")
    found, outcome = _found(["models/layers.py"])
    assert ("models/layers.py", ITEM_LINE, "SP103") in found
    assert json.loads((proj / CACHE_DIR / CACHE_FILE).read_text())["version"] >= 1


def test_root_is_the_nearest_pyproject_or_git(tmp_path):
    _write(tmp_path, {"a/pyproject.toml": "", "a/b/c/x.py": "", "d/e/y.py": ""})
    assert find_root(str(tmp_path / "a/b/c/x.py")) == str(tmp_path / "a")
    (tmp_path / "a/b/.git").mkdir()
    assert find_root(str(tmp_path / "a/b/c/x.py")) == str(tmp_path / "a/b")
    if find_root(str(tmp_path / "d/e/y.py")) is None:  # tmp_path may itself be inside a checkout
        plan = plan_project([str(tmp_path / "d/e/y.py")])
        assert plan.fallback_root == str(tmp_path / "d/e")  # the file's own folder, said in the summary
        assert set(plan.views) == {str(tmp_path / "d/e/y.py")}


def test_files_with_no_root_above_them_reach_each_other_through_their_common_folder(tmp_path, monkeypatch, capsys):
    """No pyproject.toml or .git above: the cross-file finding is there (it was silently missing),
    the summary names the root taken, and no cache is written into a folder that is no project."""
    from rewriter.check.command import check_command

    if find_root(str(tmp_path / "x.py")) is not None:
        pytest.skip("tmp_path lies inside a checkout")
    _write(tmp_path, {"models/__init__.py": "", "models/layers.py": LAYERS, "models/moe_lm.py": MOE_LM, "train.py": TRAIN})
    monkeypatch.chdir(tmp_path)
    outcome, _ = run_check(["train.py", "models/layers.py"], use_config=False, jobs=1)
    assert outcome.project["fallback_root"] == str(tmp_path)
    assert ("SP103", "models/layers.py") in {(f.code, f.path) for f in outcome.findings}
    assert ("SP101", "train.py") in {(f.code, f.path) for f in outcome.findings}
    assert not (tmp_path / CACHE_DIR).exists()
    # given alone, train.py's folder holds the model: the finding it causes is reported too
    alone, _ = run_check(["train.py"], use_config=False, jobs=1)
    assert ("SP103", "models/layers.py") in {(f.code, f.path) for f in alone.findings}
    assert check_command(["train.py", "models/layers.py"], jobs=1) == 1
    assert "root .: no pyproject.toml or .git above the files" in capsys.readouterr().err


def test_hidden_and_site_packages_folders_are_not_project_files(proj):
    _write(proj, {".venv/lib/site-packages/torchy/m.py": "import torch\ntorch.compile(f)\n",
                  "build/site-packages/x.py": "", "models/__pycache__/z.py": ""})
    files = set(Project(str(proj), use_cache=False).files)
    assert files == {"models/__init__.py", "models/layers.py", "models/moe_lm.py", "train.py"}


def test_fix_never_writes_a_file_that_was_not_given(proj):
    before = (proj / "models/layers.py").read_bytes()
    outcome, _ = run_check(["train.py"], use_config=False, jobs=1, fix=True)
    assert (proj / "models/layers.py").read_bytes() == before
    assert any(f.path == "models/layers.py" for f in outcome.findings)


def test_the_pool_path_gives_the_same_findings(proj):
    # PARALLEL_MIN files given: the views travel to worker processes
    for i in range(30):
        _write(proj, {f"scripts/s{i}.py": "import torch\nx = torch.compile\n"})
    given = ["models/layers.py", *[f"scripts/s{i}.py" for i in range(30)]]
    outcome, _ = run_check(given, use_config=False, jobs=2)
    assert {(f.path, f.line, f.code) for f in outcome.findings} == {("models/layers.py", ITEM_LINE, "SP103")}


def test_block_example_really_breaks_the_graph_when_the_model_is_compiled():
    """SP103's block example: Dynamo inlines the block's forward into the model's graph, so the
    `.item()` there breaks the model's graph (torch, eager backend)."""
    import torch

    from rewriter.check.rules.sp103_graph_break_call import GraphBreakCall

    [example] = [e for e in GraphBreakCall.INVALID if "self.blocks" in e.code]
    namespace: dict = {}
    exec(compile(example.code.replace("model = torch.compile(Model())", ""), "example.py", "exec"), namespace)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(namespace["Model"]())(torch.ones(4))
    assert explained.graph_break_count >= 1
    assert any("item" in str(r.reason).lower() or "item" in str(r.user_stack).lower() for r in explained.break_reasons)


def test_a_cache_of_another_shape_is_read_afresh(proj):
    _found(["models/layers.py"])
    cache = proj / CACHE_DIR / CACHE_FILE
    data = json.loads(cache.read_text())
    for entry in data["files"].values():
        if entry[3] is not None:
            entry[3]["classes"] = {"MoELM": 3}  # not a class summary
    data["files"]["train.py"] = "garbage"
    cache.write_text(json.dumps(data))
    found, _ = _found(["models/layers.py"])
    assert ("models/layers.py", ITEM_LINE, "SP103") in found


@pytest.mark.parametrize("corrupt", [
    lambda e: e[3]["classes"]["MoELM"].update(repeated=[["self.blocks", 7]]),  # a block that is not a name
    lambda e: e[3]["classes"]["MoELM"].update(children=[]),
    lambda e: e[3].update(imports={"MoEBlock": None}),
])
def test_a_cache_entry_corrupt_deep_inside_is_read_again_alone(proj, corrupt):
    """The cache is checked all the way down where it is read: only the corrupt entry is parsed
    again (the project is not re-planned without the cache), and the findings are the same."""
    _found(["models/layers.py"])
    cache = proj / CACHE_DIR / CACHE_FILE
    data = json.loads(cache.read_text())
    corrupt(data["files"]["models/moe_lm.py"])
    cache.write_text(json.dumps(data))
    found, outcome = _found(["models/layers.py"])
    assert ("models/layers.py", ITEM_LINE, "SP103") in found
    assert outcome.project["project_parsed"] == 1  # moe_lm.py alone
    assert json.loads(cache.read_text())["files"]["models/moe_lm.py"] != data["files"]["models/moe_lm.py"]  # rewritten


def test_a_cache_file_nested_too_deep_for_json_is_ignored(proj):
    (proj / CACHE_DIR).mkdir()
    (proj / CACHE_DIR / CACHE_FILE).write_text("[" * 100_000)
    found, _ = _found(["models/layers.py"])
    assert ("models/layers.py", ITEM_LINE, "SP103") in found


def test_an_error_in_the_project_read_is_raised_not_retried_without_the_cache(proj, monkeypatch):
    """Only a cache file's own faults are recovered from (by the cache reader): a bug in the
    reach surfaces instead of re-planning the whole project without the cache."""
    calls = []

    def broken(self):
        calls.append(self.use_cache)
        raise KeyError("a bug")

    monkeypatch.setattr(Project, "reach", broken)
    with pytest.raises(KeyError, match="a bug"):
        run_check(["models/layers.py"], use_config=False, jobs=1)
    assert calls == [True]


@pytest.mark.parametrize("project", [True, False])
def test_each_given_file_is_read_once(proj, monkeypatch, project):
    """The project read, the prefilter and the check share one read of each file given (they
    read it up to four times: the project's entry and summary, the prefilter, the check)."""
    import rewriter.source
    from rewriter.check import runner

    reads: list[str] = []
    real = rewriter.source.read_bytes

    def counting(path, *args, **kw):
        reads.append(os.path.relpath(os.path.abspath(path), proj).replace(os.sep, "/"))
        return real(path, *args, **kw)

    monkeypatch.setattr(rewriter.source, "read_bytes", counting)
    monkeypatch.setattr(runner, "read_bytes", counting)
    given = ["models/layers.py", "train.py"]
    for _ in range(2):  # a cold cache, then a warm one
        reads.clear()
        found, _ = _found(given, project=project)
        if project:  # the same findings
            assert {("models/layers.py", ITEM_LINE, "SP103"), ("train.py", COMPILE_LINE, "SP101")} <= found, found
        assert [reads.count(p) for p in given] == [1, 1], reads


def test_a_file_under_a_hidden_folder_of_the_root_is_checked_alone(proj):
    _write(proj, {".venv/lib/m.py": "import torch\n\n@torch.compile\ndef f(x):\n    return x / x.sum().item()\n"})
    found, outcome = _found([".venv/lib/m.py"])
    assert found == {(".venv/lib/m.py", 5, "SP103")}
    assert not outcome.project.get("project_files") and not (proj / CACHE_DIR).exists()


@pytest.mark.slow
def test_precommit_hook_given_only_the_model_or_only_train_py(tmp_path):
    """The issue's layout in a git repository with the stackpart-check hook (its id, types and
    serial setting from .pre-commit-hooks.yaml; `language: system` running this checkout, as in
    test_check_precommit.py): pre-commit passes only the staged files, and each commit is
    blocked by the findings at the model's lines."""
    import shutil
    import subprocess
    import sys

    import yaml

    pre_commit = Path(sys.executable).parent / "pre-commit"
    if shutil.which("git") is None or not pre_commit.exists():
        pytest.skip("git or pre-commit not installed")
    root = Path(__file__).resolve().parents[1]
    repo = tmp_path / "repo"
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "pc-home"), PYTHONPATH=str(root),
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com")

    def git(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=repo, env=env, text=True, capture_output=True, check=check)

    repo.mkdir()
    git("init", "-q", "-b", "main")
    hooks = yaml.safe_load((root / ".pre-commit-hooks.yaml").read_text())
    hook = dict(next(h for h in hooks if h["id"] == "stackpart-check"))
    hook["entry"] = hook["entry"].replace("stackpart", f"{sys.executable} -m rewriter.cli", 1)
    hook["language"] = "system"
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump({"repos": [{"repo": "local", "hooks": [hook]}]}))
    subprocess.run([str(pre_commit), "install"], cwd=repo, env=env, check=True, capture_output=True)
    _write(repo, {"models/__init__.py": "", "models/layers.py": LAYERS, "models/moe_lm.py": MOE_LM,
                  "train.py": TRAIN.replace("torch.compile(model)", "model")})
    git("add", ".")
    first = git("commit", "-m", "the model, nothing compiled yet", check=False)
    assert first.returncode == 0, first.stdout + first.stderr

    _write(repo, {"train.py": TRAIN})  # only train.py changes: it compiles the model
    git("add", "train.py")
    blocked = git("commit", "-m", "compile", check=False)
    out = blocked.stdout + blocked.stderr
    assert blocked.returncode != 0
    assert "train.py:8:13: SP101" in out and f"models/layers.py:{ITEM_LINE}:{ITEM_COL}: SP103" in out, out
    git("commit", "-m", "compile", "--no-verify")

    _write(repo, {"models/layers.py": LAYERS + "\n# tuned\n"})  # only the model file changes
    git("add", "models/layers.py")
    blocked = git("commit", "-m", "tune", check=False)
    out = blocked.stdout + blocked.stderr
    assert blocked.returncode != 0, out
    assert f"models/layers.py:{ITEM_LINE}:{ITEM_COL}: SP103" in out and "train.py:8" in out
    assert (repo / CACHE_DIR / ".gitignore").exists() and "stackpart_cache" not in git("status", "--porcelain").stdout


def test_compiled_function_and_bound_forward_from_another_file(proj):
    _write(proj, {
        "utils.py": "def step(x):\n    print(x.shape)\n    return x * 2\n",
        "train.py": "import torch\nfrom utils import step\nfrom models.moe_lm import MoELM\n\n"
                    "fast = torch.compile(step)\nmodel = MoELM(100, 32, 4, 4)\nmodel.forward = torch.compile(model.forward)\n",
    })
    found, _ = _found(["utils.py"])
    assert found == {("utils.py", 2, "SP103")}
    found, _ = _found(["train.py"])
    assert {("models/layers.py", ITEM_LINE, "SP103"), ("utils.py", 2, "SP103"), ("train.py", 7, "SP101")} <= found


def test_subclass_with_a_compiled_forward_reaches_the_inherited_blocks(proj):
    _write(proj, {"train.py": "import torch\nfrom models.moe_lm import MoELM\n\n\nclass Tuned(MoELM):\n"
                              "    @torch.compile\n    def forward(self, idx):\n        return super().forward(idx)\n"})
    found, _ = _found(["models/layers.py"])
    assert found == {("models/layers.py", ITEM_LINE, "SP103")}


def test_compile_of_self_forward_in_init_reaches_the_blocks(proj):
    _write(proj, {"models/moe_lm.py": MOE_LM.replace(
        "        self.head = nn.Linear(d, vocab)\n",
        "        self.head = nn.Linear(d, vocab)\n        self.forward = torch.compile(self.forward)\n").replace(
        "from torch import nn\n", "import torch\nfrom torch import nn\n"), "train.py": ""})
    found, _ = _found(["models/layers.py"])
    assert found == {("models/layers.py", ITEM_LINE, "SP103")}


def test_cli_flag_turns_the_project_off(proj, capsys):
    from rewriter.cli import main

    assert main(["check", "-j", "1", "models/layers.py"]) == 1
    assert f"models/layers.py:{ITEM_LINE}:{ITEM_COL}: SP103" in capsys.readouterr().out
    assert main(["check", "-j", "1", "--no-project", "models/layers.py"]) == 0


def test_a_class_defined_and_compiled_in_one_function_is_not_the_imported_one(proj):
    """``torch.compile(Inner())`` inside the function that defines ``class Inner`` reaches that
    class (SP103 in train.py), not a project class of the same name the file imports."""
    _write(proj, {
        "utils.py": "from torch import nn\n\n\nclass Inner(nn.Module):\n    def forward(self, x):\n"
                    "        return x.item()\n",
        "train.py": "import torch\nfrom torch import nn\nfrom utils import Inner\n\n\ndef make():\n"
                    "    class Inner(nn.Module):\n        def forward(self, x):\n            return x.tolist()\n"
                    "    return torch.compile(Inner())\n",
    })
    found, _ = _found(["train.py"])
    assert found == {("train.py", 9, "SP103")}
    found, _ = _found(["utils.py"])
    assert found == set()


def test_in_a_script_folder_the_sibling_wins_over_a_module_of_the_name_elsewhere(proj):
    """``old_src/train.py`` doing ``from model import Net`` beside ``old_src/model.py`` was resolved to
    ``src/model.py`` (a ``src/`` layout module of that name): a script's folder is sys.path[0]."""
    _write(proj, {"old_src/train.py": "import torch\nfrom model import Net\n\nmodel = torch.compile(Net())\n",
                  "old_src/model.py": "from torch import nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n"
                                      "        return x\n",
                  "src/model.py": "from torch import nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n"
                                  "        if x.sum().item() > 0:\n            x = -x\n        return x\n",
                  "train.py": "print('no compile here')\n"})
    found, _ = _found(["old_src/train.py", "src/model.py"])
    assert ("src/model.py", 6, "SP103") not in found, found  # src/model.py is not what old_src/train.py compiles


DICT_NET = """\
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return x + self.fc(x)


class Net(nn.Module):
    def __init__(self, d=8, n=3):
        super().__init__()
        self.blocks = nn.ModuleDict({f"b{i}": Block(d) for i in range(n)})

    def forward(self, x):
        for blk in self.blocks.values():
            x = blk(x)
        return x
"""


@pytest.mark.parametrize("compile_line", ["cmodel = torch.compile(model)\n", "model.compile()\n"])
def test_blocks_in_a_module_dict_of_a_dict_comprehension_repeat_a_block(tmp_path, monkeypatch, compile_line):
    """`nn.ModuleDict({f"b{i}": Block(d) for i in range(n)})` gave no SP101 where the ModuleList
    form did; the suggested loop walks the ModuleDict's values (its iteration yields its keys)."""
    _write(tmp_path, {"pyproject.toml": "[project]\nname = 'p'\n", "model.py": DICT_NET,
                      "serve.py": f"import torch\nfrom model import Net\n\nmodel = Net().eval()\n{compile_line}"})
    monkeypatch.chdir(tmp_path)
    for paths in (["serve.py"], ["serve.py", "model.py"]):
        found, outcome = _found(paths)
        assert {(p, c) for p, _, c in found} == {("serve.py", "SP101")}, found
        [f] = outcome.findings
        assert "self.blocks is an nn.ModuleDict of Block" in f.message
        assert "`for block in model.blocks.values(): block.compile()`" in f.message, f.message
    one = DICT_NET + "\n\nmodel = torch.compile(Net())\n"
    (tmp_path / "one.py").write_text("import torch\n" + one)
    found, outcome = _found(["one.py"], project=False)
    assert {c for _, _, c in found} == {"SP101"} and "model.blocks.values()" in outcome.findings[0].message
    # the regional loop the rewrite writes reaches the blocks: no SP101 for it
    (tmp_path / "serve.py").write_text("import torch\nfrom model import Net\n\nmodel = Net().eval()\n"
                                       "for block in model.blocks.values():\n    block.compile()\n")
    assert _found(["serve.py", "model.py"])[0] == set()


def test_a_transformers_model_gets_no_container_path_the_source_does_not_say(tmp_path, monkeypatch):
    """SP101 suggested `for block in model.layers` for LlamaForCausalLM, whose layers are
    `model.model.layers` (gpt2: `model.transformer.h`): the path is not in the source."""
    src = ("import torch\nfrom transformers import LlamaConfig, LlamaForCausalLM\n\n"
           "model = LlamaForCausalLM(LlamaConfig(hidden_size=32))\n{}")
    for i, line in enumerate(("model.forward = torch.compile(model.forward)\n", "model.compile()\n")):
        (tmp_path / f"m{i}.py").write_text(src.format(line))
    monkeypatch.chdir(tmp_path)
    found, outcome = _found(["m0.py", "m1.py"], project=False)
    assert {(p, c) for p, _, c in found} == {("m0.py", "SP101"), ("m1.py", "SP101")}, found
    for f in outcome.findings:
        assert "`for block in <the repeated blocks>: block.compile()`" in f.message, f.message
        assert "model.layers" not in f.message


HEADS_NET = """\
import torch.nn as nn


class Head(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.fc = nn.Linear(d, n)

    def forward(self, x):
        print(x.sum().item())
        return self.fc(x)


class MultiTask(nn.Module):
    def __init__(self, d, n_classes, tasks):
        super().__init__()
        self.heads = nn.ModuleDict({t: Head(d, n_classes[t]) for t in tasks})
        self.aux = nn.ModuleList([nn.Linear(d, d) for _ in range(2)])

    def forward(self, x):
        return {t: head(x) for t, head in self.heads.items()}
"""


def test_per_task_heads_are_no_stack_of_blocks_but_are_still_reached(tmp_path, monkeypatch):
    """A ModuleDict of one head per task (`{t: Head(d, n_classes[t]) for t in tasks}`) and a
    ModuleList of plain Linear layers are no repeated blocks: a whole compile of the model is no
    SP101, from the model's own file or another one. The heads are still code the compile traces:
    the `.item()` in Head.forward is SP103."""
    _write(tmp_path, {"pyproject.toml": "[project]\nname = 'p'\n", "model.py": HEADS_NET,
                      "serve.py": "import torch\nfrom model import MultiTask\n\n"
                                  "model = torch.compile(MultiTask(8, {'a': 2}, ['a']))\n"})
    monkeypatch.chdir(tmp_path)
    found, _ = _found(["serve.py", "model.py"])
    assert {c for _, _, c in found} == {"SP103"}, found
    (tmp_path / "one.py").write_text("import torch\n" + HEADS_NET + "\n\nmodel = torch.compile(MultiTask(8, {'a': 2}, ['a']))\n")
    found, _ = _found(["one.py"], project=False)
    assert {c for _, _, c in found} == {"SP103"}, found


def test_the_compile_needle_finds_calls_and_decorators_not_longer_words():
    """The lines the project index reads for compiles (a file with none is not summarized for them):
    ``compile`` as a word followed by ``(``, the line's end or a comment."""
    from rewriter.check.file_summary import compile_lines

    data = (b"import torch\n"                      # 1
            b"m = torch.compile(model)\n"           # 2: a call
            b"@torch.compile\n"                     # 3: a decorator, the line's end
            b"def f(x): return recompile(x)\n"      # 4: a longer word
            b"model.compile()  # regional\n"        # 5: a method call
            b"@torch.compile  # whole\n"            # 6: a decorator with a comment
            b"s = 'precompile(' + mycompile()\n"    # 7: longer words only
            b"compile (fn)")                        # 8: the file's last line, a space before (
    assert compile_lines(data) == [2, 3, 5, 6, 8]
