"""docs/rules/<code>.md are generated from the rules' own examples and must be up to date."""

from __future__ import annotations

from rewriter.check import docs
from rewriter.check.rules import ALL_RULES


def test_rule_pages_are_up_to_date():
    stale = [name for name, text in docs.pages().items() if not (docs.DOCS / name).exists()
             or (docs.DOCS / name).read_text(encoding="utf-8") != text]
    assert stale == [], f"run `python -m rewriter.check.docs` to regenerate {stale}"


def test_each_page_shows_every_example_and_the_real_message():
    for rule in ALL_RULES:
        page = docs.rule_page(rule)
        for example in [*rule.VALID, *rule.INVALID]:
            assert example.code.rstrip("\n") in page
        for example in rule.INVALID:
            if example.fixed is not None:
                assert example.fixed.rstrip("\n") in page
        assert f"`example.py:{rule.INVALID[0].line}:" in page
