"""tests/programs.py, which the before/after tests rely on: programs run one after the other in one
process each see what a fresh interpreter would (their own folder's modules, Dynamo's default
config, no counters of the program before)."""

from __future__ import annotations

from programs import last_json, run_programs

SCRIPT = """\
import json, sys
import torch
from torch._dynamo.utils import counters
import model
print("noise")
print(json.dumps({"value": model.VALUE, "limit": torch._dynamo.config.recompile_limit, "argv": sys.argv[1:],
                  "graphs": counters["stats"]["unique_graphs"]}))
"""

#: The same program as ``-c`` text that finds ``model`` through a relative path entry, as a user's
#: ``sys.path.insert(0, ".")`` does.
CODE = "import sys\nsys.path.insert(0, '.')\n" + SCRIPT


def test_each_program_sees_its_own_folder_and_a_fresh_dynamo(tmp_path):
    for name, value in (("a", 1), ("b", 2)):
        tree = tmp_path / name
        tree.mkdir()
        knob = "torch._dynamo.config.recompile_limit = 99\n" if name == "a" else ""
        compiled = "torch.compile(lambda x: x + 1, backend='eager')(torch.ones(2))\n" if name == "a" else ""
        (tree / "model.py").write_text(f"import torch\n{knob}{compiled}VALUE = {value}\n")
        (tree / "run.py").write_text(SCRIPT)
    results = run_programs([
        {"script": tmp_path / "a" / "run.py", "args": ["x"]},
        {"script": tmp_path / "b" / "run.py", "args": ["y"]},
        {"code": CODE, "cwd": tmp_path / "a"},
        {"code": CODE, "cwd": tmp_path / "b"},
        {"code": "raise SystemExit(3)"},
        {"code": "print(1 / 0)"},
    ])
    printed = [last_json(r) for r in results[:4]]
    default = printed[1]["limit"]
    assert default != 99
    assert printed[0] == {"value": 1, "limit": 99, "argv": ["x"], "graphs": 1}
    assert printed[1] == {"value": 2, "limit": default, "argv": ["y"], "graphs": 0}
    assert [p["value"] for p in printed[2:]] == [1, 2] and printed[3]["limit"] == default and printed[3]["graphs"] == 0
    assert results[4]["rc"] == 3
    assert results[5]["rc"] == 1 and "ZeroDivisionError" in results[5]["stderr"]


#: Compiles with a backend of its own that records each graph it is given.
OWN_BACKEND = """\
import json
import torch
from torch._dynamo.utils import counters
given = []
def own(gm, example_inputs):
    given.append(len(gm.graph.nodes))
    return gm
torch.compile(lambda x: x.sin() + 1, backend=own)(torch.ones(3))
print(json.dumps({"own_backend_graphs": len(given), "graphs": counters["stats"]["unique_graphs"]}))
"""


def test_a_forced_backend_replaces_the_programs_own_for_that_program_only():
    """``force_backend`` runs every compile of that program on the given backend (Dynamo still
    traces and counts the graph); the next program compiles with its own backend again."""
    results = run_programs([{"code": OWN_BACKEND, "force_backend": "eager"}, {"code": OWN_BACKEND}])
    assert [last_json(r) for r in results] == [{"own_backend_graphs": 0, "graphs": 1}, {"own_backend_graphs": 1, "graphs": 1}]
