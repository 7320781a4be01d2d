"""diagnose writes no plan that ``stackpart rewrite`` refuses: each candidate is rewritten with SRC
read as the rewrite reads it (a compile of a class the program compiles whole itself, in a file the
harness does not run, is refused there), a refused one is out (failed, and pruned with the
refusal's message), and the plan written is checked again; where nothing is left, the plan changes
nothing and diagnose exits 0. SRC is walked once per diagnose.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

MODEL = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        return self.l(x).relu()
"""

#: The program's own whole-model compile, in a helper nothing in SRC calls (a library entry point):
#: diagnose reads it as compiling nothing, the rewrite refuses a compile of Net beside it.
TRAIN = """\
import torch
from model import Net


def make_compiled():
    model = torch.compile(Net())
    return model
"""

HARNESS = """\
import torch
from model import Net


def build_model():
    return Net()


def make_inputs(batch=2):
    return {"x": torch.randn(batch, 4)}
"""


def _src(tmp_path: Path, train: bool = True) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(MODEL)
    (src / "harness.py").write_text(HARNESS)
    if train:
        (src / "train.py").write_text(TRAIN)
    return src


def _diagnose(tmp_path: Path, src: Path, only: set[str] | None = None):  # noqa: ANN202
    from rich.console import Console

    from rewriter.diagnose.runner import diagnose, harness_from_flags
    from rewriter.terminal import Feed

    spec, _ = harness_from_flags("harness.py", src, model=None, inputs=None, shapes=[{"batch": 2}, {"batch": 3}],
                                 mode=None, dtype=None, device="cpu")
    return diagnose(spec, src, tmp_path / "plan.yaml", backend="eager", only=only, budget_s=600.0,
                    report_dir=tmp_path / "report", console=Feed(Console(file=io.StringIO())))


@pytest.mark.usefixtures("one_thread")
def test_a_candidate_the_rewrite_refuses_is_pruned_and_the_plan_changes_nothing(tmp_path, monkeypatch):
    from rewriter.plan import load_plan
    from rewriter.rewrite import program_compiles
    from rewriter.rewrite.transform import plan_rewrite

    walks = []
    compile_texts = program_compiles._compile_texts
    monkeypatch.setattr(program_compiles, "_compile_texts", lambda src: walks.append(src) or compile_texts(src))
    src = _src(tmp_path)
    outcome = _diagnose(tmp_path, src, only={"search"})
    assert outcome.plan.actions == [], outcome.plan.actions
    found = outcome.search
    assert found.choice.chosen == "as-is", found.choice.text
    refused = [p for p in found.pruned if "stackpart rewrite refuses its plan" in p]
    assert refused and all("the program compiles an instance of it whole itself, at train.py:6" in p for p in refused), found.pruned
    assert any(p.startswith("whole: ") for p in refused), refused
    log = (tmp_path / "report" / "search.log").read_text()
    assert "pruned whole: stackpart rewrite refuses its plan" in log, log
    assert any("search: pruned whole: stackpart rewrite refuses its plan" in n for n in outcome.notes), outcome.notes
    assert not any("left out as failed" in n and "whole" in n for n in outcome.notes), outcome.notes  # said once
    loaded = load_plan(tmp_path / "plan.yaml")
    assert loaded.plan.actions == [] and not plan_rewrite(loaded, src).changes
    assert len(walks) == 1, walks  # SRC walked once per diagnose, for every candidate


@pytest.mark.usefixtures("one_thread")
def test_the_rules_proposal_the_rewrite_refuses_is_not_written(tmp_path):
    """Without the search (the rules' proposal, unmeasured) the plan changes nothing, and its note
    says the rewrite refuses the proposal."""
    outcome = _diagnose(tmp_path, _src(tmp_path), only={"granularity"})
    assert outcome.plan.actions == []
    assert any("stackpart rewrite refuses the rules' proposal" in n and "train.py:6" in n for n in outcome.notes), outcome.notes


@pytest.mark.usefixtures("one_thread")
def test_a_chosen_plan_refused_as_written_falls_to_the_next_candidate(tmp_path, monkeypatch):
    """The plan written is rewritten once more with SRC read (a stand-in's plan is written as an
    edit of the program's call): where that is refused, the chosen candidate is out as a failed one
    is, pruned with why, and the same rule picks among the rest; the plan and its validation report
    are the next candidate's."""
    from rewriter.diagnose import search
    from rewriter.errors import StackpartError

    seen: list[str] = []
    rewrite = search.candidate_rewrite

    def refuse_the_first_choice_as_written(c, src, *reading):  # noqa: ANN001, ANN002, ANN202
        seen.append(c.name)
        if seen.count(c.name) == 2 and seen.count("rule") == 2 and c.name == "rule":
            raise StackpartError("planted: the rewrite refuses the plan as written")
        return rewrite(c, src, *reading)

    monkeypatch.setattr(search, "candidate_rewrite", refuse_the_first_choice_as_written)
    outcome = _diagnose(tmp_path, _src(tmp_path, train=False), only={"search"})
    found = outcome.search
    assert seen.count("rule") == 2, seen
    assert found.choice.chosen not in ("rule", "as-is"), found.choice.text
    assert found.choice.status["rule"].startswith("failed: the plan does not rewrite: planted"), found.choice.status
    assert "rule: stackpart rewrite refuses its plan: planted" in found.pruned[-1], found.pruned
    assert "pruned rule: stackpart rewrite refuses its plan: planted" in (tmp_path / "report" / "search.log").read_text()
    assert outcome.plan.actions and (tmp_path / "plan.yaml").exists()
    assert any("validation report" in k for k in outcome.paths), outcome.paths


#: A model of repeated blocks, and the program's whole-model compile of it in a helper nothing in SRC
#: calls: ``Net.__init__`` builds the ``Block``s, so the rewrite refuses a compile of ``Block`` too.
BLOCKS = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        return self.l(x).relu()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
"""


@pytest.mark.usefixtures("one_thread")
def test_a_per_block_candidate_a_whole_compile_encloses_is_pruned_with_why(tmp_path):
    """The per-block candidate compiles ``Block``, which ``Net`` (compiled whole by the program, in
    train.py) builds: the rewrite refuses its plan, so the search prunes it with the refusal's
    reason, as it prunes 'whole' (a compile of ``Net`` itself), and no plan written compiles a block."""
    src = _src(tmp_path)
    (src / "model.py").write_text(BLOCKS)
    outcome = _diagnose(tmp_path, src, only={"search"})
    found = outcome.search
    enclosed = [p for p in found.pruned if "stackpart rewrite refuses its plan" in p and "Net encloses Block" in p]
    assert enclosed, found.pruned
    assert all("at train.py:6: torch.compile(Net()), and Net encloses Block: Net.__init__ builds Block at model.py:17"
               in p for p in enclosed), enclosed
    assert found.choice.status[enclosed[0].split(":", 1)[0]].startswith("failed: the plan does not rewrite"), found.choice.status
    assert not any(a.action == "compile" and "Block" in a.target for a in outcome.plan.actions), outcome.plan.actions
