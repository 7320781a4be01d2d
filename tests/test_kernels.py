"""The kernel catalog and the generated custom ops, run under the Triton interpreter on CPU.

``TRITON_INTERPRET=1`` must be in the environment before triton is first imported (triton makes
its own ``@jit`` helpers at import), and setting it inside this shared pytest process would leak
into other test modules, so each group runs in one child pytest process with the variable set:

* ``kernels_interp/catalog_checks.py``: every catalog kernel against the torch op it replaces
  (float32 and float16, odd sizes, a zero-size dim, non-contiguous inputs, forward and backward);
* ``kernels_interp/op_checks.py``: the custom ops as ``stackpart rewrite --unsafe`` renders them:
  ``torch.library.opcheck``, ``torch.compile(fullgraph=True, backend="aot_eager")`` on two sizes
  with dynamic shapes, the generated test files, and the end-to-end top-k sampling model.

``op_checks.py`` runs twice: with the interpreter (the ops are ``custom_op`` + ``register_fake``
and run the Triton kernels) and without it (on this torch the ops are ``triton_op``; on CPU they
take the reference path), so both registrations are traced by Dynamo and checked by opcheck.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _child(path: Path, interpret: bool, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    env["STACKPART_KERNEL_CHECKS"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:logging",
         "-W", "ignore::DeprecationWarning", str(path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )


def _assert_passed(proc: subprocess.CompletedProcess) -> None:
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0, proc.stdout[-8000:] + "\n" + proc.stderr[-3000:]
    assert " passed" in summary and "skipped" not in summary, proc.stdout[-3000:]


def test_catalog_kernels_match_torch_under_the_interpreter():
    _assert_passed(_child(HERE / "kernels_interp" / "catalog_checks.py", interpret=True))


@pytest.mark.slow
@pytest.mark.parametrize("interpret", [True, False], ids=["custom_op+interpreter", "triton_op+reference"])
def test_generated_ops_opcheck_compile_and_end_to_end(interpret):
    _assert_passed(_child(HERE / "kernels_interp" / "op_checks.py", interpret=interpret))
