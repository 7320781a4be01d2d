"""Run the user's programs of a before/after comparison in one process, one after the other.

A test that runs the user's script before ``rewrite --apply`` and again after it would start two
interpreters, each importing torch and Dynamo (about 3 s of CPU each). :func:`run_programs` runs
them in one child process instead, each as ``python SCRIPT ARGS`` runs it (``runpy.run_path`` as
``__main__``, the script's folder first on ``sys.path``, its folder as the working directory), and
between two programs undoes what one could leave for the next:

* the modules the program imported from outside the Python installation (its folder's, a test's
  library on ``PYTHONPATH``) are dropped from ``sys.modules``: the rewritten ``model.py`` and a
  library the rewritten tree patches are imported afresh, not the first program's modules;
* ``torch._dynamo.reset()`` (compiled code and guards), Dynamo's ``counters`` cleared (the
  programs print them), and ``torch._dynamo.config`` restored (a rewritten model sets
  ``allow_unspec_int_on_nn_module`` or ``recompile_limit`` process-wide);
* ``torch.compile`` and the ``torch.compiler`` stance put back (a program may force a backend);
* the import system's finders for the program's folders dropped (one made for ``"."`` keeps the
  folder it was made in).

So what each program prints is what it prints alone; the child is still apart from pytest's
process (a plan's patches of library classes never reach it). The programs run in the order
given: pass the original tree first (a pristine copy made before the rewrite), as a user runs
the program before and after.

Run as a script, this file is that child: ``python programs.py JOBS`` with ``JOBS`` a JSON list
of ``{"script": path, "args": [...]}`` or ``{"code": text, "args": [...], "cwd": dir}`` (either
with ``"force_backend": name`` to run every ``torch.compile`` of that program on that backend);
it prints one JSON line, a list of ``{"rc", "stdout", "stderr"}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_programs(jobs: list[dict[str, Any]], env: dict[str, str] | None = None, timeout: float = 300) -> list[dict[str, Any]]:
    """Run ``jobs`` (module docstring) in one child process; per job ``rc`` (0, or the exit code
    or 1 for an exception, with its traceback in ``stderr``), ``stdout`` and ``stderr``. A job
    after a failed one still runs. AssertionError when the child itself fails."""
    env = dict(os.environ if env is None else env)
    env.setdefault("OMP_NUM_THREADS", "1")
    jobs = [{**j, "args": [str(a) for a in j.get("args", [])]} for j in jobs]
    for j in jobs:
        if "script" in j:
            j["script"] = str(j["script"])
        if "cwd" in j:
            j["cwd"] = str(j["cwd"])
    proc = subprocess.run([sys.executable, __file__, json.dumps(jobs)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)
    assert proc.returncode == 0, f"the programs' process failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def last_json(result: dict[str, Any], what: str = "the program") -> Any:
    """The JSON a program printed last, once it exited 0 (AssertionError with its stderr otherwise)."""
    assert result["rc"] == 0, f"{what} failed (rc {result['rc']}):\n{result['stderr'][-3000:]}"
    return json.loads(result["stdout"].strip().splitlines()[-1])


def before_after(pristine: Path, src: Path, script: str, out: Path, timeout: float = 300,
                 force_backend: str | None = None) -> tuple[dict, dict]:
    """The user's ``script`` run from ``pristine`` (the tree before the rewrite) then from ``src``
    (after it), as ``python SCRIPT OUT/before.pt`` and ``python SCRIPT OUT/after.pt`` in the
    tree's folder, one thread, no PYTHONPATH: the JSON each prints last (its counters).
    ``force_backend``: every ``torch.compile`` of both runs on this backend
    (``torch.compiler.set_stance(force_backend=...)``): Dynamo still traces and counts the graphs,
    without Inductor's CPU codegen where the rewrite writes a compile with no backend."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH="")
    forced = {"force_backend": force_backend} if force_backend else {}
    results = run_programs([{"script": pristine / script, "args": [out / "before.pt"], **forced},
                            {"script": src / script, "args": [out / "after.pt"], **forced}], env=env, timeout=timeout)
    return last_json(results[0], f"{script} before the rewrite"), last_json(results[1], f"{script} after the rewrite")


#: Where the interpreter's own and installed modules live (torch, transformers, the standard
#: library): imported once for every program; anything else a program imports is its own.
_INSTALLED = tuple({Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})


def _run_one(job: dict[str, Any]) -> dict[str, Any]:
    import contextlib
    import io
    import runpy
    import traceback

    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    script = job.get("script")
    where = Path(job.get("cwd") or (Path(script).parent if script else os.getcwd())).resolve()
    saved = (os.getcwd(), list(sys.path), list(sys.argv), set(sys.modules), torch.compile,
             torch._dynamo.config.save_config())
    out, err, rc = io.StringIO(), io.StringIO(), 0
    os.chdir(where)
    sys.argv = [script or "-c", *job["args"]]
    sys.path.insert(0, str(where) if script else "")
    if job.get("force_backend"):  # put back to the default stance after the program, below
        torch.compiler.set_stance("default", force_backend=job["force_backend"])
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if script:
                runpy.run_path(script, run_name="__main__")
            else:
                exec(compile(job["code"], "<program>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # the program's own failure: its result, not the child's
        rc = 1
        err.write(traceback.format_exc())
    finally:
        cwd, path, argv, modules, compile_, config = saved
        os.chdir(cwd)
        sys.path[:], sys.argv[:] = path, argv
        for name in set(sys.modules) - modules:
            module = sys.modules[name]
            files = [getattr(module, "__file__", None) or "", *(getattr(module, "__path__", None) or [])]
            if any(f and not any(Path(f).resolve().is_relative_to(p) for p in _INSTALLED) for f in files):
                del sys.modules[name]
        # a finder made for a relative entry ("", ".") holds the folder it was made in: the next
        # program, in another folder, would import this one's modules through it
        for entry in list(sys.path_importer_cache):
            if not os.path.isabs(entry) or not any(Path(entry).resolve().is_relative_to(p) for p in _INSTALLED):
                del sys.path_importer_cache[entry]
        torch.compile = compile_
        torch.compiler.set_stance("default")
        torch._dynamo.reset()
        counters.clear()
        torch._dynamo.config.load_config(config)
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}


if __name__ == "__main__":
    del sys.path[0]  # this file's folder (tests/): each program gets its own folder instead, as `python SCRIPT` does
    results = [_run_one(job) for job in json.loads(sys.argv[1])]
    print(json.dumps(results))
