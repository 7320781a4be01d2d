"""Loading a harness: a syntax error in it (or in a module it imports) is one `path:line:col` line."""

from __future__ import annotations

import pytest

from rewriter.errors import StackpartError
from rewriter.harness import load_harness
from rewriter.plan import Harness

GOOD_HARNESS = "from model import Net\n\ndef build_model():\n    return Net()\n\ndef make_inputs():\n    return ()\n"


@pytest.mark.parametrize(
    "files, where",
    [
        ({"harness.py": "import torch\n\ndef build_model(:\n    pass\n"}, "harness.py:3:17"),
        ({"harness.py": GOOD_HARNESS, "model.py": "import torch\nclass Net(torch.nn.Module:\n    pass\n"}, "model.py:2:26"),
    ],
)
def test_syntax_error_names_file_line_and_col(tmp_path, files, where):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(StackpartError) as info:
        load_harness(Harness(file="harness.py", device="cpu"), tmp_path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(where + ": ") and "syntax error: invalid syntax" in text, text  # relative to SRC


@pytest.mark.parametrize("file", ["../harness.py", "/abs/harness.py", "harness.txt", "sub/../../h.py"])
def test_harness_file_outside_src_or_not_python_is_a_plan_error(tmp_path, file):
    from rewriter.plan import load_plan

    (tmp_path / "plan.yaml").write_text(f"version: 1\nharness:\n  file: {file}\nactions: []\n")
    with pytest.raises(StackpartError) as info:
        load_plan(tmp_path / "plan.yaml")
    assert str(info.value).startswith(f"{tmp_path / 'plan.yaml'}:3:3: harness.file: expected a .py file relative to SRC")


def test_diagnose_harness_flag_not_python_names_the_flag(tmp_path, capsys):
    from rewriter.cli import main

    (tmp_path / "harness.txt").write_text(GOOD_HARNESS)
    assert main(["diagnose", "--harness", "harness.txt", str(tmp_path), "-o", str(tmp_path / "plan.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --harness: expected a .py file relative to SRC") and "Traceback" not in err, err
    assert not (tmp_path / "plan.yaml").exists()


def _load(tmp_path, body: str):
    (tmp_path / "harness.py").write_text(body)
    return load_harness(Harness(file="harness.py", device="cpu"), tmp_path)


def test_build_model_constructs_under_the_requested_device(tmp_path):
    from rewriter.harness import build_model

    h = _load(tmp_path, (
        "import torch\n\nSEEN = []\n\n\n"
        "def build_model():\n    SEEN.append(torch.empty(0).device.type)\n    return torch.nn.Identity()\n\n\n"
        "def make_inputs(batch=1):\n    return (torch.zeros(batch),)\n"
    ))
    model, fallback = build_model(h, construct_on="meta")
    assert fallback is None and isinstance(model, __import__("torch").nn.Identity)
    assert h.build_model.__globals__["SEEN"] == ["meta"]
    build_model(h)  # default: on the host, as the harness does alone
    assert h.build_model.__globals__["SEEN"] == ["meta", "cpu"]


def test_build_model_falls_back_to_the_host_when_the_constructor_needs_it(tmp_path):
    from rewriter.harness import build_model

    h = _load(tmp_path, (
        "import torch\n\n\n"
        "def build_model():\n    torch.zeros(3).numpy()  # host-only\n    return torch.nn.Linear(2, 2)\n\n\n"
        "def make_inputs(batch=1):\n    return (torch.zeros(batch, 2),)\n"
    ))
    import torch

    torch.manual_seed(0)
    model, fallback = build_model(h, construct_on="meta")
    torch.manual_seed(0)
    alone, _ = build_model(h)
    assert model.weight.device.type == "cpu"
    assert torch.equal(model.weight, alone.weight)  # the same weights as a host build alone
    assert fallback.startswith("TypeError: can't convert meta device type tensor to numpy")


def test_build_model_host_error_still_names_the_harness_line(tmp_path):
    from rewriter.harness import build_model

    h = _load(tmp_path, "def build_model():\n    raise RuntimeError('no weights')\n\n\ndef make_inputs():\n    pass\n")
    with pytest.raises(StackpartError) as exc:
        build_model(h, construct_on="meta")
    assert "harness.model: build_model() raised RuntimeError: no weights" in str(exc.value)
    assert "harness.py:2" in str(exc.value)


def test_a_tree_edited_between_two_runs_in_one_process_is_imported_again(tmp_path):
    """diagnose, then rewrite --apply, then diagnose again in one process: the second run must
    import the rewritten file, not the module cached by the first (sys.modules)."""
    import importlib
    import os

    from rewriter.harness import on_sys_path

    src = tmp_path / "src"
    src.mkdir()
    mod = src / "stackpart_edited_mod.py"
    mod.write_text("VALUE = 1\n")
    with on_sys_path(src):
        assert importlib.import_module("stackpart_edited_mod").VALUE == 1
    with on_sys_path(src):  # unchanged: the cached module is kept (same object)
        first = importlib.import_module("stackpart_edited_mod")
        assert first.VALUE == 1
    mod.write_text("VALUE = 22\n")
    st = mod.stat()
    os.utime(mod, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))  # a later mtime, as an edit has
    with on_sys_path(src):
        again = importlib.import_module("stackpart_edited_mod")
        assert again.VALUE == 22 and again is not first


def test_a_shape_repeated_once_the_defaults_apply_is_an_error(tmp_path):
    """`--shape batch=2,seq=16 --shape batch=2` with `make_inputs(batch, seq=16)` is one shape
    twice: the recompiles rung would count 0 recompiles across "2 shapes" and call them stable."""
    (tmp_path / "harness.py").write_text(
        "import torch\n\ndef build_model():\n    return torch.nn.Linear(4, 4)\n\n"
        "def make_inputs(batch, seq=16):\n    return (torch.randn(batch, seq, 4),)\n"
    )
    spec = Harness(file="harness.py", shapes=[{"batch": 2, "seq": 16}, {"batch": 2}])
    with pytest.raises(StackpartError, match=r"harness.shapes\[1\] is the same shape as harness.shapes\[0\] once make_inputs\(\)'s defaults apply \(batch=2, seq=16\)"):
        load_harness(spec, tmp_path)
    load_harness(Harness(file="harness.py", shapes=[{"batch": 2, "seq": 16}, {"batch": 2, "seq": 24}]), tmp_path)


@pytest.mark.parametrize("raises, named, not_named", [
    ("make_inputs", "harness.inputs: make_inputs(batch=2) raised ValueError: no data", "build_model()"),
    ("build_model", "harness.model: build_model() raised ValueError: no data", "make_inputs("),
])
def test_diagnose_names_the_one_callable_that_raised_at_its_line(tmp_path, capsys, raises, named, not_named):
    """A newcomer's report: the setup's error named 'make_inputs(batch=2) / build_model()' when one
    raised, and put the harness's path without its line first."""
    from rewriter.cli import main

    src = tmp_path / "src"
    src.mkdir()
    body = {"build_model": "    return torch.nn.Linear(4, 4)\n", "make_inputs": "    return (torch.randn(batch, 4),)\n"}
    body[raises] = "    raise ValueError('no data')\n"
    (src / "harness.py").write_text("import torch\n\n\ndef build_model():\n" + body["build_model"]
                                    + "\n\ndef make_inputs(batch=2):\n" + body["make_inputs"])
    line = 5 if raises == "build_model" else 9
    code = main(["diagnose", "--harness", "harness.py", str(src), "--shape", "batch=2", "-o", str(tmp_path / "plan.yaml"),
                 "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    # relative to SRC, as every other error names a file, and said once (not again at the end)
    assert code == 2 and err.startswith(f"error: harness.py:{line}: diagnose stopped at rung setup: {named}"), err
    assert err.count("harness.py") == 1 and str(tmp_path) not in err.split("; partial results")[0], err
    assert not_named not in err, err
    assert not (tmp_path / "plan.yaml").exists()


def test_an_input_that_fails_only_in_the_search_names_the_users_file_not_the_temp_copy(tmp_path, capsys):
    """A newcomer's report: make_inputs raising on the second shape only reached the search, whose
    error pointed at its deleted temporary copy of SRC (/tmp/stackpart-search-*/original/harness.py).
    Setup now runs every shape (the test below), so this input raises only in the search's copy."""
    from rewriter.cli import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text("import torch\n\n\ndef build_model():\n    return torch.nn.Linear(4, 4)\n\n\n"
                                    "def make_inputs(batch=2):\n    if batch == 3 and 'stackpart-search' in __file__:\n"
                                    "        raise ValueError('no data')\n    return (torch.randn(batch, 4),)\n")
    code = main(["diagnose", "--harness", "harness.py", str(src), "--shape", "batch=2", "--shape", "batch=3",
                 "-o", str(tmp_path / "plan.yaml"), "--device", "cpu", "-v"])
    lines = capsys.readouterr().err.strip().splitlines()
    err = lines[-1]
    # the search's progress line says the program as it is failed (not its compile figures), at SRC's path
    assert ("search: as-is: failed: harness: harness.py:10: harness.inputs: make_inputs(batch=3) raised ValueError: "
            "no data") in lines, lines
    # relative to SRC as diagnose's other errors, the place said once (no "harness.py: " before it)
    assert code == 2 and err == (
        "error: the search could not measure the program as it is: the original model (eager reference) failed: "
        "harness: harness.py:10: harness.inputs: make_inputs(batch=3) raised ValueError: no data"), err
    assert "stackpart-search" not in err and "/original/" not in err, err


SECOND_SHAPE_HARNESS = """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        if x.shape[0] == 3:{forward}
        return self.fc(x)


def build_model():
    return Net()


def make_inputs(batch=2):
    if batch == 3:{inputs}
    return (torch.randn(batch, 4),)
"""


@pytest.mark.parametrize("raises, named", [
    ("make_inputs", "harness.inputs: make_inputs(batch=3) raised ValueError: no data"),
    ("forward", "harness build_model() model forward at {'batch': 3}: raised ValueError: no data"),
])
def test_a_harness_that_raises_only_at_the_second_shape_stops_at_setup_before_the_rungs_and_the_search(
        tmp_path, capsys, monkeypatch, raises, named):
    """A newcomer's report: make_inputs (or the model) raising only at the second shape let the whole
    ladder run (the compile rungs, the first to run that shape, record their errors and go on) and the
    search fail on it. Setup runs one eager step at every shape: it stops there, as a harness raising at
    the first shape does (the test above): exit 2, one line naming the shape and harness.py:line, no
    rung run, no plan written, and the search never started."""
    from rewriter.cli import main
    from rewriter.diagnose import search

    started = []

    def no_search(*args, **kwargs):
        started.append(1)
        raise StackpartError("the search started")

    monkeypatch.setattr(search, "run_search", no_search)
    src = tmp_path / "src"
    src.mkdir()
    planted = "\n            raise ValueError('no data')" if raises == "forward" else "\n        raise ValueError('no data')"
    text = SECOND_SHAPE_HARNESS.format(forward=planted if raises == "forward" else " pass",
                                       inputs=planted if raises == "make_inputs" else " pass")
    (src / "harness.py").write_text(text)
    line = [i for i, row in enumerate(text.splitlines(), 1) if "raise ValueError" in row][0]
    out = tmp_path / "out"
    code = main(["diagnose", "--harness", "harness.py", str(src), "--shape", "batch=2", "--shape", "batch=3",
                 "-o", str(out / "plan.yaml"), "--device", "cpu", "--backend", "eager", "-v"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    # where the first shape's failures point, relative to SRC (make_inputs and the model's forward
    # alike), once: at the start of the line, not again before "; partial results"
    where = f"harness.py:{line}"
    assert err[-1].startswith(f"error: {where}: diagnose stopped at rung setup: {named}; partial results in "), err[-1]
    assert not any(row.startswith("diagnose: rung ") for row in err), "no rung ran"
    assert started == [], "the search never starts"
    assert not (out / "plan.yaml").exists()
    import json

    report = json.loads((out / "stackpart-diagnose" / "report.json").read_text())
    assert report["rungs"] == [] and report["complete"] is False
    assert report["error"].startswith(f"diagnose stopped at rung setup: {named}"), report["error"]


@pytest.mark.parametrize("body, mode, said", [
    ("return None", "inference", "returned NoneType with no tensors (expected tensors)"),
    ("return self.fc(x).detach()", "training", "training mode: no output requires grad"),
])
def test_a_forward_that_returns_no_tensors_only_at_the_second_shape_names_that_shape(tmp_path, capsys, body, mode, said):
    """check_shapes named the shape for a forward that raised or hung, but a forward returning no
    tensors (or, training, none requiring grad) at the second shape only was told as
    ``build_model() model forward: returned NoneType ...``, as if the first shape were at fault."""
    from rewriter.cli import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(SECOND_SHAPE_HARNESS.format(forward="\n            " + body, inputs=" pass"))
    code = main(["diagnose", "--harness", "harness.py", str(src), "--shape", "batch=2", "--shape", "batch=3",
                 "--mode", mode, "-o", str(tmp_path / "plan.yaml"), "--device", "cpu", "--no-search"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert f"diagnose stopped at rung setup: harness build_model() model forward at {{'batch': 3}}: {said}" in err[-1], err[-1]
    assert not (tmp_path / "plan.yaml").exists()


def test_a_harness_that_calls_sys_exit_is_one_line_exit_2(tmp_path, capsys):
    """sys.exit() in the user's code (here argparse's parse_args reading stackpart's own argv in
    build_model, as a training script's does) went through the guard, which caught Exception only:
    diagnose exited with the program's code and no line saying why. It is a harness failure now."""
    from rewriter.cli import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(
        "import sys\nimport torch\n\n\ndef build_model():\n    sys.exit(3)\n\n\n"
        "def make_inputs(batch=2):\n    return (torch.randn(batch, 4),)\n")
    code = main(["diagnose", "--harness", "harness.py", str(src), "-o", str(tmp_path / "plan.yaml"), "--device", "cpu",
                 "--no-search"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert "diagnose stopped at rung setup: harness build_model(): called sys.exit(3)" in err[-1], err[-1]
    assert "harness.py:6" in err[-1], err[-1]


def test_sigterm_while_the_users_code_runs_still_exits_143(tmp_path):
    """The guard's sys.exit() catch leaves the CLI's SIGTERM (its handler raises SystemExit(143)
    wherever the signal lands, user code included) as it was: an exit, not a harness failure."""
    import signal
    import types

    from rewriter.cli import _terminated
    from rewriter.diagnose.session import HarnessFailure, Session

    fake = types.SimpleNamespace(timeout_s=0, rung="setup", src=tmp_path)
    with pytest.raises(SystemExit) as exc:
        with Session.guard(fake, "build_model()"):
            _terminated(signal.SIGTERM, None)
    assert exc.value.code == 143
    with pytest.raises(HarnessFailure, match=r"called sys.exit\(143\)"):
        with Session.guard(fake, "build_model()"):
            raise SystemExit(143)  # the user's own, whatever its code


def test_a_loaded_harness_is_importable_by_its_module_name_and_a_failed_one_is_not(tmp_path):
    """Dynamo imports the module of a function it inlines: a harness function a library module calls
    (a replaced library function) raised ModuleNotFoundError under explain and every whole-model
    compile (tests/test_mask_eager.py). A harness whose import raises leaves no half module behind."""
    import sys

    (tmp_path / "harness.py").write_text("def build_model():\n    return None\n\ndef make_inputs():\n    return ()\n")
    loaded = load_harness(Harness(file="harness.py", device="cpu"), tmp_path)
    name = loaded.build_model.__module__
    assert sys.modules[name].build_model is loaded.build_model
    # the same name in every process for one file (a child unpickles the harness's objects by it)
    import hashlib
    assert name == "_stackpart_harness_" + hashlib.sha1(str((tmp_path / "harness.py").resolve()).encode()).hexdigest()[:16]
    (tmp_path / "bad.py").write_text("raise RuntimeError('no')\n")
    before = set(sys.modules)
    with pytest.raises(StackpartError):
        load_harness(Harness(file="bad.py", device="cpu"), tmp_path)
    assert not {n for n in set(sys.modules) - before if n.startswith("_stackpart_harness_")}
    # argparse at import under stackpart's argv, or sys.exit: no Exception, no module left either
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(2)\n")
    with pytest.raises(SystemExit):
        load_harness(Harness(file="exits.py", device="cpu"), tmp_path)
    assert not {n for n in set(sys.modules) - before if n.startswith("_stackpart_harness_")}
