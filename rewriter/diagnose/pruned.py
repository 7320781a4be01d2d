"""The search's "pruned by evidence" lines, one per candidate: what report.md, report.json, the
notes and search.log list.

Each line reads ``<candidate names>: <why>`` (``as-is+regional, as-is+dynamic: the harness's model
does not run the program's own compile ...``). Several steps of the proposal may prune the same
candidate for reasons of their own (the stand-in for a compile the harness does not run, then the
variants of that compile), and a line may be appended twice, which would show one candidate in two
lines, or one line twice. :func:`merge` keeps each line once and gathers the lines that name a
candidate already named into the first line that names it, every reason said.
"""

from __future__ import annotations

#: What joins a further reason onto the line of a candidate already named.
ALSO = "; also "


def _names(line: str) -> list[str]:
    """The candidate names a line starts with: the comma-separated names before its first ``": "``
    where each is one word (``as-is+regional``), else that whole head as one name (``per-block,
    the rule's proposal``); none for a line without ``": "``."""
    head, sep, _ = line.partition(": ")
    if not sep:
        return []
    names = [n.strip() for n in head.split(",")]
    return names if all(n and " " not in n for n in names) else [head]


def merge(lines: list[str]) -> list[str]:
    """``lines`` with each line kept once, and each line that names a candidate an earlier line
    names appended to that line (``<first line>; also <names>: <why>``, or ``; also: <why>`` where
    it names the same candidates); order of first appearance kept."""
    out: list[list[str]] = []  # each entry: its lines, first one first
    named: list[set[str]] = []
    seen: set[str] = set()
    for line in lines:
        if line in seen:
            continue
        seen.add(line)
        names = set(_names(line))
        at = next((i for i, have in enumerate(named) if names & have), None)
        if at is None:
            out.append([line])
            named.append(names)
        else:
            out[at].append(line)
            named[at] |= names
    return [_joined(entry) for entry in out]


def _joined(entry: list[str]) -> str:
    first, rest = entry[0], entry[1:]
    head = first.partition(": ")[0]
    parts = [first]
    for line in rest:
        mine, _, why = line.partition(": ")
        parts.append(f"{ALSO.rstrip()}: {why}" if mine == head else f"{ALSO}{line}")
    return "".join(parts)
