"""check's reduced files find what the whole file finds; a file reached through links is checked
under its own name; the search's tie rules never hand a tie to a candidate that does not pay back."""

from __future__ import annotations

import pytest

from rewriter.check.engine import check_text
from rewriter.check.rules import ALL_RULES
from rewriter.check.runner import check_files

MARK = "torch._dynamo.mark_dynamic(x, 1, min=1, max=4096)"


def _key(findings):
    return [(f.code, f.line, f.col, f.end_line, f.end_col) for f in findings]


@pytest.mark.parametrize("text", [
    # a data assignment sharing its line with a kept statement: the line went with it
    f"import torch\n\nA = 1; {MARK}\n",
    f"import torch\n\n{MARK}; A = 1\n",
    f"import torch\n\nA = [1,\n     2]; {MARK}\n",
    f"import torch\n\nA = 1; B = 2; {MARK}; C = 3; D = 4\nE = 5\n",
    # an own-line suppression for the dropped line came to cover the next kept one
    f"import torch\n\n# stackpart: ignore\nA = 1\n{MARK}\n",
    f"import torch\n\n# stackpart: ignore\n# stackpart: ignore\nA = 1\n{MARK}\n",
    f"import torch\n\n# stackpart: ignore[SP106]\ndef unused():\n    pass\n{MARK}\n",
    # a string's last line starting with '#' is the kept statement's, not a comment
    f'import torch\n\ns = """\n# stackpart: ignore"""\nA = 1\n{MARK}\n',
], ids=["data-then-kept", "kept-then-data", "multiline-data-then-kept", "chain", "pragma-above-data",
        "two-pragmas-above-data", "pragma-above-def", "string-line-like-a-comment"])
def test_reduced_check_finds_what_the_whole_file_check_finds(tmp_path, text):
    path = tmp_path / "m.py"
    path.write_text(text)
    whole = check_text(text, str(path), ALL_RULES)
    [reduced] = check_files([str(path)], ALL_RULES, jobs=1)
    assert whole.findings, "the case must have a finding"
    assert _key(reduced.findings) == _key(whole.findings)


def test_a_chain_of_links_says_each_link_is_checked_as_the_file_itself(tmp_path):
    from rewriter.check.runner import discover

    (tmp_path / "real.py").write_text("import torch\n")
    (tmp_path / "a.py").symlink_to("b.py")
    (tmp_path / "b.py").symlink_to("real.py")
    skipped: list[str] = []
    assert discover([str(tmp_path), str(tmp_path / "a.py")], skipped) == [str(tmp_path / "real.py")]
    # b.py was 'checked as .../a.py', a name itself skipped; a.py named twice is said once
    assert skipped == [f"{tmp_path}/a.py: skipped: a symlink to b.py, checked as {tmp_path}/real.py",
                       f"{tmp_path}/b.py: skipped: a symlink to real.py, checked as {tmp_path}/real.py"]


def test_a_file_reached_through_a_linked_directory_is_checked_under_its_own_name(tmp_path):
    from rewriter.check.runner import discover

    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "real.py").write_text("import torch\n")
    (tmp_path / "elink").symlink_to("e")
    real = str(tmp_path.resolve() / "e" / "real.py")
    found = discover([str(tmp_path.resolve() / "elink"), str(tmp_path.resolve() / "e")], [])
    assert found == [real]  # was elink/real.py, the first spelling, though the file's own name was named


def test_a_candidate_that_does_not_pay_back_wins_no_tie():
    """One process per plan: b's noisy rounds tie it with a (the interval contains 1), b compiles
    for less but its net is negative. It was chosen by the tie and then replaced by as-is, which
    nothing tied with: a KeyError building a's status (and as-is chosen over a's 5 s net)."""
    from rewriter.diagnose.decide import decide

    def row(step, comp=0.0):
        return {"step_ms": step, "compile_s_per_start": comp, "problems": []}

    rows = {"as-is": row(20.0), "a": row(10.0, 5.0), "b": row(19.9, 1.0)}
    samples = [{"as-is": [0.02] * 10, "a": [0.01] * 10, "b": [0.001, 0.039, 0.005, 0.03, 0.01] * 2}]
    c = decide(rows, ["a", "b", "as-is"], samples, 1000, 1, True)
    assert c.chosen == "a", c.status
    assert c.status["b"].startswith("does not pay back"), c.status
    assert "tied" not in c.text, c.text


def test_a_loser_with_a_larger_net_than_the_tie_winner_is_not_said_to_have_less():
    """b ties the best (a) by its wide interval and wins on compile; d, 5% slower than a and not
    tied, nets more than b: its status said 'net 90 s < 49 s of 'b''."""
    from rewriter.diagnose.decide import decide

    def row(step, comp=0.0):
        return {"step_ms": step, "compile_s_per_start": comp, "problems": []}

    rows = {"as-is": row(20.0), "a": row(10.0, 5.0), "b": row(15.0, 1.0), "d": row(10.5, 5.0)}
    samples = [{"as-is": [0.02] * 10, "a": [0.01] * 10, "b": [0.001, 0.039, 0.005, 0.03, 0.01] * 2, "d": [0.0105] * 10}]
    c = decide(rows, ["a", "b", "d", "as-is"], samples, 10_000, 1, True)
    assert c.chosen == "b", c.status
    assert " < " not in c.status["d"] and "not within the noise of 'a'" in c.status["d"], c.status
