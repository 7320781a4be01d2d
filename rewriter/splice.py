"""Write a transformed module back as the original bytes plus only the lines the transform changed.

LibCST's code generation does not reproduce every file it parses (LibCST 1.9.0): ``except OSError :``
prints as ``except OSError:``, ``f"{x!s  }"`` as ``f"{x!s}"``, a form feed before ``def`` on its own
line is dropped, a blank line before a whitespace-only last line is dropped, and a lone-CR file loses
its final ``\\r``. Printing the transformed tree (``module.code``) would put those changes into a
user's diff although no action asked for them. :func:`splice` keeps them out.

Design (line-level composition of two alignments; no positions are needed):

- ``O``: the original text, ``P0``: LibCST's print of the original parse, ``P1``: LibCST's print of
  the transformed tree. Each is split into lines ending in ``\\r\\n``, ``\\r`` or ``\\n`` (Python's
  newlines, so a lone-CR file has lines; a form feed is not a line break); joining the lines gives
  the text back exactly.
- ``P1 == P0``: the transform changed nothing printable: the result is ``O``.
- ``P0 == O`` (nearly every file): the result is ``P1``. Code generation is a function of the tree,
  so every node the transform left alone prints in ``P1`` exactly as in ``P0``, which *is* the
  original text; only the lines of nodes the transform made or edited differ.
- Otherwise ``O`` is aligned with ``P0`` and ``P0`` with ``P1`` (:class:`difflib.SequenceMatcher`,
  equal lines only, in order). Between two matched lines of ``O`` and ``P0``, runs of the same
  length are paired in order: LibCST changed characters inside those lines, not their number. An
  *anchor* is a ``P0`` line with an ``O`` line (equal or paired) that the transform kept (matched
  in ``P1``). Anchors are emitted as their original line.
  Between two consecutive anchors lies a gap: ``O[a:b]``, ``P0[c:d]``, ``P1[e:f]``. If every
  ``P0`` line of the gap was kept by the transform, contiguously, the gap's ``O`` lines are the
  original bytes of those printed lines (none has an ``O`` line of its own, else it would be an
  anchor: the gap is a run whose number of lines LibCST's print changed): the result is the ``P1``
  lines inserted before them, the ``O`` lines, then the ``P1`` lines inserted after them (with no
  ``P0`` line in the gap, ``O`` first: what an action inserts - decorators, imports, statements -
  precedes the code that follows it). If the transform edited a line of the gap, or inserted
  inside it, the gap is ``P1``'s lines.
- Check: when ``P0 != O`` and CPython parses ``O``, the result must parse and give the same
  ``ast.dump`` as ``P1``, else the result is ``P1`` (what LibCST alone would write). When CPython
  refuses ``O`` (``f"{x!s  }"`` on CPython 3.11: code for a newer Python), there is nothing to
  check against and the original bytes are kept.

What holds, by construction: the result is ``O`` when the transform changed nothing printable;
every original line is emitted byte for byte, in order, unless the transform edited the line it
printed as, or inserted inside a run of lines whose number LibCST's print changed (then that run
is LibCST's print); every emitted line that is not an original line is a line of ``P1`` that the
transform inserted or edited, or lies in such a run. Where CPython parses the original, the
``ast`` check makes the result the same program as LibCST's own print, whatever the alignment chose.

Measured on 20,400 real files (``benchmarks/roundtrip_corpus.py``; docs/decisions.md, "check's speed
and the splice's round trip"): 20,388 no-op round trips byte-identical, 0 differing; 5,014 compile +
mark_dynamic rewrites insertion-only and idempotent, 7 of them on files LibCST prints differently.

LibCST also refuses some files CPython accepts (``(x): int = 1``, a parenthesized annotated
target; a form feed before an indented block's first line); those never reach this module:
:meth:`rewriter.source.SourceFile.parse` refuses them with a one-line error.
"""

from __future__ import annotations

import ast
import difflib
import re
import warnings

import libcst as cst

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def split_lines(text: str) -> list[str]:
    """``text`` as lines, each keeping its ending (``\\r\\n``, ``\\r`` or ``\\n``).

    Unlike :meth:`str.splitlines`, only Python's newlines end a line (a form feed, ``\\x0b``,
    ``\\x1c``-``\\x1e``, ``\\x85``, U+2028/2029 do not). ``"".join(split_lines(t)) == t`` always.
    """
    return _LINE.findall(text)


def _matched(a: list[str], b: list[str]) -> dict[int, int]:
    """Index in ``a`` -> index in ``b`` of equal lines, increasing on both sides.

    The common prefix and suffix are matched directly (the usual edit is a few lines in a long
    file); :class:`difflib.SequenceMatcher` aligns what lies between.
    """
    n, m = len(a), len(b)
    lo = 0
    while lo < n and lo < m and a[lo] == b[lo]:
        lo += 1
    hi = 0
    while hi < n - lo and hi < m - lo and a[n - 1 - hi] == b[m - 1 - hi]:
        hi += 1
    out = {i: i for i in range(lo)}
    matcher = difflib.SequenceMatcher(None, a[lo : n - hi], b[lo : m - hi], autojunk=True)
    for i, j, size in matcher.get_matching_blocks():
        for t in range(size):
            out[lo + i + t] = lo + j + t
    for t in range(hi):
        out[n - hi + t] = m - hi + t
    return out


def _paired(printed: list[str], original: list[str]) -> dict[int, int]:
    """Index in ``printed`` -> index in ``original`` of the line it was printed from.

    Equal lines are matched (:func:`_matched`); between two matches, a run of printed lines and
    a run of original lines of the same length are paired in order (LibCST's print changed
    characters inside those lines, not how many there are: ``except OSError :``, a form feed).
    Runs of different lengths (a line the print dropped) stay unpaired.
    """
    out = _matched(printed, original)
    pairs = sorted(out.items()) + [(len(printed), len(original))]
    prev_j, prev_i = -1, -1
    for j, i in pairs:
        if j - prev_j == i - prev_i > 1:
            for t in range(1, j - prev_j):
                out[prev_j + t] = prev_i + t
        prev_j, prev_i = j, i
    return out


def splice_text(original: str, printed_old: str, printed_new: str) -> str:
    """The original text with the edit ``printed_old`` -> ``printed_new`` applied line by line.

    Args:
        original: the file's text as read (``O`` in the module docstring).
        printed_old: LibCST's print of the original parse (``P0``).
        printed_new: LibCST's print of the transformed tree (``P1``).

    Returns:
        The new text: ``original`` when the two prints are equal, ``printed_new`` when
        ``printed_old == original``, else the composition described in the module docstring
        (without its ``ast`` check; :func:`splice` adds that).
    """
    if printed_new == printed_old:
        return original
    if printed_old == original:
        return printed_new
    o, p0, p1 = split_lines(original), split_lines(printed_old), split_lines(printed_new)
    p0_to_o = _paired(p0, o)
    p0_to_p1 = _matched(p0, p1)
    anchors = [(p0_to_o[j], j, p0_to_p1[j]) for j in range(len(p0)) if j in p0_to_o and j in p0_to_p1]
    anchors.append((len(o), len(p0), len(p1)))  # sentinel: the gap after the last anchor
    out: list[str] = []
    prev_i, prev_j, prev_k = -1, -1, -1
    for i, j, k in anchors:
        gap_o, gap_new = o[prev_i + 1 : i], p1[prev_k + 1 : k]
        kept = [p0_to_p1.get(jj) for jj in range(prev_j + 1, j)]
        if not kept:
            out += gap_o + gap_new
        elif None not in kept and kept == list(range(kept[0], kept[0] + len(kept))):
            out += p1[prev_k + 1 : kept[0]] + gap_o + p1[kept[-1] + 1 : k]
        else:
            out += gap_new
        if j < len(p0):
            out.append(o[i])
        prev_i, prev_j, prev_k = i, j, k
    return "".join(out)


def _dump(text: str) -> str | None:
    """``ast.dump`` of ``text``, or None when CPython does not parse it (warnings silenced)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.dump(ast.parse(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def splice(original_text: str, original: cst.Module, new: cst.Module) -> str:
    """The text to write for ``new``: ``original_text`` except the lines the transform changed.

    Args:
        original_text: the file's text as read (BOM removed, as it was given to LibCST).
        original: ``cst.parse_module(original_text)``, before any transform.
        new: the transformed tree.

    Returns:
        ``original_text`` when ``new`` prints as ``original`` does; otherwise the spliced text
        (module docstring). When LibCST's print of ``original`` differs from ``original_text`` and
        CPython parses ``original_text``, the spliced text is checked to parse to the same
        ``ast.dump`` as ``new.code``; if it does not, ``new.code`` is returned.

    Raises:
        Nothing of its own; LibCST's code generation errors propagate.
    """
    if new is original:
        return original_text
    printed_old, printed_new = original.code, new.code
    text = splice_text(original_text, printed_old, printed_new)
    if printed_old == original_text or printed_new == printed_old or _dump(original_text) is None:
        return text
    return text if _dump(text) == _dump(printed_new) else printed_new
