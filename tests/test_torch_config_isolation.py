"""The ``torch._dynamo.config`` and ``torch._inductor.config`` knobs a program under test sets at
import are put back after its test (tests/conftest.py's ``torch_config_restored``): the workers run
many files in one process (``-n 2 --dist loadfile``, docs/guide.md "Running the tests"), and a
later test's diagnosis reports and counts under the knobs it finds (report.md's "The program's
torch._dynamo.config", :mod:`rewriter.diagnose.dynamo_settings`).

The tests run in file order: the first sets the knobs as a program's module does, the second
reads them back.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

PROGRAM = '''import torch
import torch._dynamo
import torch._inductor.config

torch._dynamo.config.suppress_errors = True
torch._dynamo.config.cache_size_limit = 64
torch._dynamo.config.capture_scalar_outputs = len("computed") > 0
torch._inductor.config.max_autotune = True
'''

DYNAMO_KNOBS = ("suppress_errors", "recompile_limit", "capture_scalar_outputs")

#: The knobs' values before the first test's program set them (``module -> knob -> value``).
BEFORE: dict[str, dict[str, object]] = {}


def _import_program(folder: Path) -> None:
    (folder / "knobs_program.py").write_text(PROGRAM)
    spec = importlib.util.spec_from_file_location("knobs_program", folder / "knobs_program.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_a_program_sets_dynamo_and_inductor_knobs_at_import(tmp_path):
    import torch._dynamo.config as dynamo
    import torch._inductor.config as inductor

    BEFORE["dynamo"] = {k: getattr(dynamo, k) for k in DYNAMO_KNOBS}
    BEFORE["inductor"] = {"max_autotune": inductor.max_autotune}
    _import_program(tmp_path)
    assert (dynamo.suppress_errors, dynamo.recompile_limit, dynamo.capture_scalar_outputs, inductor.max_autotune) == (
        True, 64, True, True)


def test_the_next_test_finds_the_knobs_as_they_were():
    import torch._dynamo.config as dynamo
    import torch._inductor.config as inductor

    assert BEFORE, "runs after test_a_program_sets_dynamo_and_inductor_knobs_at_import (file order)"
    assert {k: getattr(dynamo, k) for k in DYNAMO_KNOBS} == BEFORE["dynamo"]
    assert {"max_autotune": inductor.max_autotune} == BEFORE["inductor"]


FIRST_IMPORT = '''import importlib.util
from pathlib import Path


def test_sets(tmp_path):
    import torch  # torch itself, not yet its config modules

    (tmp_path / "knobs_program.py").write_text(PROGRAM)
    spec = importlib.util.spec_from_file_location("knobs_program", tmp_path / "knobs_program.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_reads():
    import torch._inductor.config as inductor

    from rewriter.diagnose.dynamo_settings import read

    assert read() == [] and not inductor.max_autotune, (read(), inductor.max_autotune)
'''


def test_knobs_set_by_the_program_that_first_imports_the_config_are_put_back_to_torchs_defaults(tmp_path):
    """Where the program's test is the first in the process to import the config modules, there
    was nothing to save: its knobs go back to torch's defaults (no knob away from them after it,
    :func:`rewriter.diagnose.dynamo_settings.read`). A pytest of its own, in a fresh process."""
    tests = Path(__file__).resolve().parent
    shutil.copy(tests / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_first.py").write_text(f"PROGRAM = {PROGRAM!r}\n\n{FIRST_IMPORT}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHDYNAMO_", "TORCHINDUCTOR_", "PYTEST_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(tests.parent), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:randomly", str(tmp_path / "test_first.py")],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
