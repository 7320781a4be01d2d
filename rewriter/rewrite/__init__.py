"""The rewrite: a plan turned into a reviewable diff and, once validated, written.

One module per step, the pure ones lowest (docs/design.md, "Layers")::

    transform.py    plan -> new bytes and the diff (the action registry COMMANDS); writes nothing
    apply.py        write a diff's files atomically (all or nothing, interrupt-safe)
    summary_md.py   the Markdown summary for a pull-request comment
    gate.py         the binding of a validation report to a diff; ``--apply`` refuses a diff
                    without a passing report for its hash, tree and plan
    command.py      ``stackpart rewrite``: the command around the steps above

Nothing is re-exported here: import from the module that holds a name, so that importing the
pure transform never imports the command.
"""
