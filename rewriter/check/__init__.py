"""``stackpart check``: plan drift and static suggestions that need no profile.

The pipeline, one module per step::

    runner.py           which files (prefilter: only files that can match a selected rule are
                        parsed), parallel workers for big trees, plan drift
    project_reading.py  which project a run reads for the files given, and which files not given
                        are checked for the findings a given file causes
    project.py          the project index: names resolved across files, the functions each
                        compile reaches (a ``FileView`` per checked file)
    project_files.py    the ``.py`` files under a project root and their cached summaries
    file_summary.py     one file read with ``ast``: what it defines, imports and compiles
    engine.py           one file: parse, build the facts, run the rules in one batched LibCST
                        pass, drop suppressed findings, apply safe fixes
    facts.py            what the rules share: torch names resolved through LibCST's
                        QualifiedNameProvider, which functions are compiled and how, repeated
                        blocks
    rule.py             the rule base class (code, message, VALID/INVALID examples, optional
                        safe fix)
    rules/              one module per rule (SP1xx)
    measured.py         what diagnose's search measured of the program's own compile (SP101
                        kept as a note)
    output.py           text, JSON, GitHub annotations, SARIF 2.1.0
    docs.py             docs/rules/<code>.md generated from each rule's examples
    command.py          ``check_command``: what the CLI calls
"""
