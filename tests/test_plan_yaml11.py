"""Plain scalars that PyYAML (YAML 1.1) and YAML 1.2 read differently are refused at their line:
``dim: 1:30`` is 90 to PyYAML (base 60) and the string '1:30' to YAML 1.2; ``010`` is 8 or 10;
``0b11``, ``1_000``, signed hex and ``yes/no/on/off`` are numbers and booleans only in YAML 1.1.
What both read alike stays: decimal integers, ``true``/``false``, ``0x10`` (16 in both), floats."""

from __future__ import annotations

import pytest

from rewriter.cli import main
from rewriter.errors import StackpartError
from rewriter.plan import parse_plan, yaml12_value

MARK = "version: 1\nactions:\n  - action: mark_dynamic\n    target: m.py::f\n    arg: x\n"
SHAPES = "version: 1\nharness:\n  file: h.py\n  shapes:\n    - {batch: %s}\nactions: []\n"

REFUSED = {
    "base_60": (MARK + "    dim: 1:30\n",
                "plan.yaml:6:10: actions[0].dim: '1:30' is read by YAML 1.1 (PyYAML) as 90 (base 60) but by YAML 1.2 "
                "as the string '1:30'; write 90 for the number, or quote it for the string"),
    "octal": (SHAPES % "010",
              "plan.yaml:5:15: harness.shapes[0].batch: '010' is read by YAML 1.1 (PyYAML) as 8 (octal) but by "
              "YAML 1.2 as 10; write 8 or 10 for the number, or quote it for the string"),
    "binary": (MARK + "    dim: 0b11\n",
               "plan.yaml:6:10: actions[0].dim: '0b11' is read by YAML 1.1 (PyYAML) as 3 (binary) but by YAML 1.2 "
               "as the string '0b11'; write 3 for the number, or quote it for the string"),
    "underscores": ("version: 1\namortization: {runs: 1_000_000}\nactions: []\n",
                    "plan.yaml:2:22: amortization.runs: '1_000_000' is read by YAML 1.1 (PyYAML) as 1000000 ('_' "
                    "dropped) but by YAML 1.2 as the string '1_000_000'; write 1000000 for the number, or quote it "
                    "for the string"),
    "signed_hex": (MARK + "    dim: 0\n    min: +0x10\n",
                   "plan.yaml:7:10: actions[0].min: '+0x10' is read by YAML 1.1 (PyYAML) as 16 (hex) but by YAML 1.2 "
                   "as the string '+0x10'; write 16 for the number, or quote it for the string"),
    "base_60_float": ("version: 1\nactions:\n  - action: bucket\n    target: m.py::f\n    arg: x\n    dim: 1\n"
                      "    buckets: [8]\n    pad_value: 1:30.5\n",
                      "plan.yaml:8:16: actions[0].pad_value: '1:30.5' is read by YAML 1.1 (PyYAML) as 90.5 (base 60) "
                      "but by YAML 1.2 as the string '1:30.5'; write 90.5 for the number, or quote it for the string"),
    "yes": ("version: 1\nactions:\n  - action: compile\n    target: m.py::f\n    options: {fullgraph: yes}\n",
            "plan.yaml:5:26: actions[0].options.fullgraph: 'yes' is read by YAML 1.1 (PyYAML) as true but by YAML "
            "1.2 as the string 'yes'; write true for the boolean, or quote it for the string"),
    "off_for_a_string": ("version: 1\nharness: {file: h.py, device: off}\nactions: []\n",
                         "plan.yaml:2:31: harness.device: 'off' is read by YAML 1.1 (PyYAML) as false but by YAML 1.2 "
                         "as the string 'off'; write false for the boolean, or quote it for the string"),
    "key": (SHAPES.replace("{batch: %s}", "{On: 8}"),
            "plan.yaml:5:8: harness.shapes[0] key: 'On' is read by YAML 1.1 (PyYAML) as true but by YAML 1.2 as the "
            "string 'On'; write true for the boolean, or quote it for the string"),
    "explicit_tag": (MARK + "    dim: !!int 010\n",  # YAML 1.2 reads !!int 010 as 10 too
                     "plan.yaml:6:10: actions[0].dim: '010' is read by YAML 1.1 (PyYAML) as 8 (octal) but by YAML "
                     "1.2 as 10; write 8 or 10 for the number, or quote it for the string"),
    "merge_key": ("version: 1\nactions:\n  - <<: {action: compile, target: m.py::f}\n    target: m.py::g\n",
                  "plan.yaml:3:5: '<<' is YAML 1.1's merge key: PyYAML merges the fields it names into this mapping, "
                  "YAML 1.2 reads a field named '<<'; stackpart refuses what the two read differently "
                  "(write the fields out in full)"),
    "merge_key_nested": ("version: 1\nactions:\n  - action: compile\n    target: m.py::f\n"
                         "    options:\n      <<: [{fullgraph: true}]\n",
                         "plan.yaml:6:7: '<<' is YAML 1.1's merge key: PyYAML merges the fields it names into this "
                         "mapping, YAML 1.2 reads a field named '<<'; stackpart refuses what the two read differently "
                         "(write the fields out in full)"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_yaml_1_1_literal_is_refused_at_its_line(name):
    text, line = REFUSED[name]
    with pytest.raises(StackpartError) as info:
        parse_plan(text, "plan.yaml")
    assert str(info.value) == line


@pytest.mark.parametrize("value, read", [("8", 8), ("0", 0), ("+5", 5), ("0x10", 16), ("00", 0)])
def test_what_both_versions_read_alike_is_kept(value, read):
    assert parse_plan(SHAPES % value).plan.harness.shapes == [{"batch": read}]


def test_true_false_floats_and_quoted_strings_are_kept():
    plan = parse_plan("version: 1\nactions:\n  - action: compile\n    target: m.py::f\n"
                      "    options: {fullgraph: true, dynamic: False}\n    why: '1:30, yes'\n"
                      "  - action: bucket\n    target: m.py::g\n    arg: x\n    dim: 1\n    buckets: [8]\n"
                      "    pad_value: -0.5\n").plan
    assert plan.actions[0].options.fullgraph is True and plan.actions[0].options.dynamic is False
    assert plan.actions[0].why == "1:30, yes" and plan.actions[1].pad_value == -0.5


def test_an_exponent_keeps_its_own_hint():
    """``1e-3`` is a string to PyYAML and a number to YAML 1.2: a number field already refuses it
    with what to write (plan.number_hint), unchanged."""
    text = ("version: 1\nactions:\n  - action: bucket\n    target: m.py::f\n    arg: x\n    dim: 1\n"
            "    buckets: [8]\n    pad_value: 1e-3\n")
    with pytest.raises(StackpartError, match=r"PyYAML reads 1e-3 as a string, not a number; write 0.001"):
        parse_plan(text)


@pytest.mark.parametrize("text, value", [("true", True), ("FALSE", False), ("yes", "yes"), ("1:30", "1:30"),
                                          ("010", 10), ("0o10", 8), ("0x1f", 31), ("1_000", "1_000"),
                                          ("1e3", 1000.0), (".5", 0.5), ("-.inf", float("-inf")), ("0b11", "0b11")])
def test_yaml12_core_schema(text, value):
    assert yaml12_value(text) == value and type(yaml12_value(text)) is type(value)


def test_rewrite_exits_2_with_the_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "plan.yaml").write_text(REFUSED["base_60"][0])
    monkeypatch.chdir(tmp_path)
    before = sorted((p, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file())
    assert main(["rewrite", "--plan", "plan.yaml", "src", "--apply", "--no-validate"]) == 2
    assert capsys.readouterr().err == f"error: {REFUSED['base_60'][1]}\n"
    assert sorted((p, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file()) == before


def test_a_signed_number_without_a_leading_digit_gets_what_to_write():
    """``-.5`` is a float to YAML 1.2 and a string to PyYAML (its float pattern takes a sign only
    before a digit): the number field says what to write, as ``1e-3`` does."""
    text = ("version: 1\nactions:\n  - action: bucket\n    target: m.py::f\n    arg: x\n    dim: 1\n"
            "    buckets: [8]\n    pad_value: -.5\n")
    with pytest.raises(StackpartError, match=r"PyYAML reads -\.5 as a string, not a number; write -0\.5"):
        parse_plan(text)
