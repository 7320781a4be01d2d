"""``--shape name=int,...`` on diagnose: a bad value is one usage-error line naming the option, the
value and what was expected, exit 2, before anything runs or is written (README, "Commands")."""

from __future__ import annotations

import pytest

from rewriter.cli import main
from rewriter.shapes import parse_shape

HARNESS = '''\
import torch


def build_model():
    return torch.nn.Linear(4, 4)


def make_inputs(batch=2, seq=3):
    return (torch.randn(batch, seq, 4),)
'''

BAD = {
    "no_size": ("batch=8,seq", "'seq' has no '=size'"),
    "not_an_int": ("batch=x", "batch: 'x' is not a decimal integer"),
    "no_name": ("=3", "'=3' has no name before '='"),
    "duplicate": ("batch=2,batch=4", "'batch' is given twice (2, then 4)"),
    "superscript_digit": ("batch=²", "batch: '²' is not a decimal integer"),  # str.isdigit() took it, int() raised
    "negative": ("batch=-1", "batch: -1 is not a size from 0 to 2**63-1"),
    "too_large": (f"batch={2**63}", f"batch: {2**63} is not a size from 0 to 2**63-1"),
    "underscore": ("batch=1_0", "batch: '1_0' is not a decimal integer"),
    "empty_item": ("batch=2,,seq=3", "an empty item between commas"),
    "empty": ("", "no name=int pair"),
    "not_an_identifier": ("1x=2", "'1x' is not a Python identifier"),
    "colon": ("batch:2", "'batch:2' has no '=size'"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_shape_is_one_usage_line_exit_2_and_writes_nothing(tmp_path, capsys, monkeypatch, name):
    value, says = BAD[name]
    src = tmp_path / "src"
    src.mkdir()
    (src / "harness.py").write_text(HARNESS)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code = main(["diagnose", "--harness", "harness.py", "src", "--device", "cpu", "--no-search",
                 "--shape", "batch=2", "--shape", value])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: Invalid value for '--shape': {value!r}: {says}"), err
    assert err.endswith("; expected name=int,... (e.g. batch=8,seq=512) (see 'stackpart diagnose --help')\n"), err
    assert len(err.splitlines()) == 1
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_good_shapes_parse_to_sizes():
    assert parse_shape("batch=8,seq=512") == {"batch": 8, "seq": 512}
    assert parse_shape(" batch = 8 , seq=0 ") == {"batch": 8, "seq": 0}
    assert parse_shape(f"n={2**63 - 1}") == {"n": 2**63 - 1}


def test_the_distributed_reader_refuses_the_same_values():
    """diagnose --nproc reads --shape through the same parser (a StackpartError there, exit 2)."""
    from rewriter.diagnose.runner import parse_shape as runner_parse
    from rewriter.errors import StackpartError

    with pytest.raises(StackpartError, match=r"--shape 'batch=2,batch=4': 'batch' is given twice"):
        runner_parse("batch=2,batch=4")
    assert runner_parse({"batch": 2}) == {"batch": 2}
