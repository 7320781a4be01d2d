"""What a newcomer met in round 10 (`stackpart check` as the pre-commit hook, `rewrite` from the
README), each a test that failed before its fix.

* A ``pyproject.toml`` that is not what ``[tool.stackpart]`` reading expected crashed ``check``
  with a traceback (exit 1, read as "findings" by pre-commit): ``tool = 3``, ``[tool]
  stackpart = 1``, bytes that are not UTF-8. A rule code in ``select``/``ignore`` that no rule has
  was refused without naming pyproject.toml.
* ``check --format sarif`` wrote a finding's path as its ``uri`` unencoded (``with space é.py``,
  ``100%.py``), which is no URI reference as SARIF 2.1.0 requires (GitHub code scanning places
  results by it), and an absolute path as a path relative to ``%SRCROOT%``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from rewriter.cli import main

MODEL = "import torch\n\n\n@torch.compile\ndef f(x):\n    return x.item()\n"


@pytest.mark.parametrize(
    "pyproject, says",
    [
        (b"tool = 3\n", "pyproject.toml: `tool` must be a table"),
        (b"[tool]\nstackpart = 1\n", "pyproject.toml: [tool.stackpart] must be a table"),
        (b'[project]\nname = "caf\xe9"\n', "pyproject.toml:2: not valid TOML: not UTF-8 text"),
        (b'[tool.stackpart]\nignore = ["SP1O9"]\n',
         "pyproject.toml: [tool.stackpart] ignore: unknown rule code 'SP1O9'"),
        (b'[tool.stackpart]\nselect = ["XX"]\n', "pyproject.toml: [tool.stackpart] select: unknown rule code 'XX'"),
    ],
    ids=["tool-not-a-table", "stackpart-not-a-table", "not-utf8", "unknown-ignore", "unknown-select"],
)
def test_a_bad_pyproject_is_one_error_line_exit_2(tmp_path, monkeypatch, capsys, pyproject, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_bytes(pyproject)
    (tmp_path / "m.py").write_text(MODEL)
    assert main(["check", "m.py"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and says in lines[0], lines[0]


#: What a URI reference may hold (RFC 3986: unreserved, reserved, and %XX escapes).
URI_CHARS = re.compile(r"^(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-F]{2})*$")


@pytest.mark.parametrize("name", ["with space \u00e9.py", "100%.py", "c:colon.py", "plain.py"])
def test_sarif_uris_are_uri_references(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(MODEL)
    out = tmp_path / "check.sarif"
    assert main(["check", "--no-project", "--format", "sarif", "-o", str(out), name, str(tmp_path / name)]) == 1
    locations = [r["locations"][0]["physicalLocation"]["artifactLocation"]
                 for r in json.loads(out.read_text())["runs"][0]["results"]]
    relative, absolute = sorted(locations, key=lambda loc: "uriBaseId" in loc, reverse=True)
    for loc in locations:
        assert URI_CHARS.match(loc["uri"]), loc
    assert relative["uriBaseId"] == "%SRCROOT%" and not urlsplit(relative["uri"]).scheme
    assert unquote(relative["uri"]) == name
    assert "uriBaseId" not in absolute and absolute["uri"].startswith("file:///")
    assert Path(unquote(urlsplit(absolute["uri"]).path)) == tmp_path / name
