"""diagnose's search rewrites each candidate's plan to measure it; the plan it chooses is rewritten
once: the decision's check that ``stackpart rewrite`` takes it and the writer's diff (bound by the
validation report) reuse that rewrite where the plan is the same (its actions' ``why:`` aside)."""

from __future__ import annotations

import collections
import json

import yaml

from rewriter.cli import main
from tiny_programs import NET_HARNESS, NET_MODEL


def _key(plan) -> str:
    data = plan.model_dump(mode="json")
    for action in data.get("actions", []):
        action.pop("why", None)
    return json.dumps(data, sort_keys=True)


def test_the_chosen_plan_is_rewritten_once(tmp_path, monkeypatch, capsys):
    import rewriter.rewrite.transform as transform
    from rewriter.plan import load_plan

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(NET_MODEL)
    (src / "harness.py").write_text(NET_HARNESS)
    calls: collections.Counter[str] = collections.Counter()
    real = transform.plan_rewrite

    def counted(loaded, *args, **kwargs):
        calls[_key(loaded.plan)] += 1
        return real(loaded, *args, **kwargs)

    monkeypatch.setattr(transform, "plan_rewrite", counted)
    out = tmp_path / "plan.yaml"
    code = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(out), "--backend", "eager", "--timeout", "120"])
    assert code == 0, capsys.readouterr().err
    written = load_plan(out).plan
    assert [a.action for a in written.actions] == ["compile"] * len(written.actions) and written.actions, yaml.safe_load(out.read_text())
    assert calls[_key(written)] == 1, calls
    # the validation report binds the diff of the plan as written
    report = json.loads((tmp_path / ".stackpart" / "validation" / "validation.json").read_text())
    assert report["diff_sha256"] == real(load_plan(out), src, unsafe=True).digest()


def test_a_rewrite_whose_generated_files_name_the_plan_is_not_reused_under_another_name():
    """A site's generated ``_stackpart/library.py`` names the plan it was written from
    (templates/library.py.j2): the search's rewrite of ``candidate whole`` is not the bytes
    ``stackpart rewrite --plan plan.yaml`` writes, so diagnose's writer rewrites the plan under its
    own name, or the validation report binds a diff ``rewrite --apply`` then calls stale. A rewrite
    of source files only is reused under any name."""
    from rewriter.diagnose.search import SearchOutcome, _rewrite_key, kept_rewrite
    from rewriter.plan import parse_plan
    from rewriter.rewrite.transform import FileChange, RewriteResult

    plan = parse_plan("version: 1\nactions: []\n", "candidate whole").plan
    reading = object()
    library = RewriteResult(changes=[FileChange("_stackpart/library.py", None, b"x")])
    out = SearchOutcome(candidates=[])
    out.rewrites.append((reading, _rewrite_key(plan), library))
    assert kept_rewrite(out, plan, reading) is library
    assert kept_rewrite(out, plan, reading, renamed=True) is None
    source_only = RewriteResult(changes=[FileChange("model.py", b"a", b"b")])
    out.rewrites[0] = (reading, _rewrite_key(plan), source_only)
    assert kept_rewrite(out, plan, reading, renamed=True) is source_only
    assert kept_rewrite(out, plan, object(), renamed=True) is None  # another reading of SRC
