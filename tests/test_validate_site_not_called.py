"""validate on a plan whose compile site the harness's steps never call: the report says so, with
the site's ``file:line`` and the plan's line, as an error (exit 2: validate measured nothing of the
plan), not as a failure of the plan. A plan whose compile the steps call is judged as before."""

from __future__ import annotations

from rewriter.cli import main
from tiny_programs import NET_HARNESS, NET_MODEL

#: tiny_programs' two-block model with a method no step calls (``Block.unused``, model.py:13).
MODEL = NET_MODEL.replace("        return torch.relu(self.fc(x))\n",
                          "        return torch.relu(self.fc(x))\n\n    def unused(self, x):\n        return x * 2\n")

PLAN = """\
version: 1
harness:
  file: harness.py
  shapes:
    - {{batch: 2}}
actions:
  - action: compile
    target: {target}
    options: {{backend: eager}}
"""


def _validate(tmp_path, capsys, monkeypatch, target):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.py").write_text(MODEL)
    (src / "harness.py").write_text(NET_HARNESS)
    (tmp_path / "plan.yaml").write_text(PLAN.format(target=target))
    code = main(["validate", "--plan", str(tmp_path / "plan.yaml"), str(src), "--timeout", "120",
                 "--backend", "eager", "--out", str(tmp_path / "out")])
    return code, " ".join(capsys.readouterr().err.split())


def test_a_compile_the_steps_never_call_is_said_with_its_site(tmp_path, capsys, monkeypatch):
    code, err = _validate(tmp_path, capsys, monkeypatch, "model.py::Block.unused")
    assert code == 2, err
    assert (f"error: {tmp_path / 'plan.yaml'}:7: the plan's compile of model.py::Block.unused (model.py:13) was never "
            "called during the harness's steps") in err, err
    assert "validate: ERROR" in err and "validate: FAIL" not in err, err
    assert "silent fallback to eager" not in err, err


def test_a_compile_the_steps_call_is_judged_as_before(tmp_path, capsys, monkeypatch):
    code, err = _validate(tmp_path, capsys, monkeypatch, "model.py::Block")
    assert "never called" not in err, err
    assert code in (0, 1) and "validate: ERROR" not in err, err
