"""The compile setup already in SRC, found statically: the program as it is is the search's baseline
(DESIGN.md, "The search"; issue 17), and the report names the user's own compile calls.

Every ``.py`` file under SRC that mentions ``compile`` or ``mark_dynamic`` (a text prefilter, as
``stackpart check`` does) is parsed with LibCST and read through check's facts
(:class:`rewriter.check.facts.FileFacts`): ``torch.compile(...)`` calls, ``module.compile(...)``
calls, ``@torch.compile`` decorators, ``torch.compiler.disable``, and ``mark_dynamic``-family calls.
Symlinks are not followed (a tree that links an installed package in is not the user's code), and
a file that does not parse is left out.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_PREFILTER = re.compile(r"\bcompile\b|mark_dynamic|mark_unbacked|compiler\.disable|_dynamo\.config")
#: Files larger than this are skipped (generated code, data): the setup lives in scripts and models.
MAX_BYTES = 2_000_000


def compile_setup(src: str | Path, limit: int = 50) -> list[str]:
    """``file:line: what`` for each compile-related call or decorator under ``src``, in file order
    (at most ``limit``). ``what`` is the call's source text, shortened to 120 characters.

    Raises nothing: unreadable or unparsable files are skipped.
    """
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    from ..check.facts import FileFacts
    from ..check.rules.sp105_mark_dynamic_in_compiled import MARKS
    from ..errors import StackpartError
    from ..source import parse_module, read_file

    calls = MARKS | {"torch._dynamo.decorators.mark_unbacked", "torch.compiler.disable"}

    src = Path(src)
    out: list[str] = []
    for root, dirs, files in os.walk(src, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "_stackpart")
                         and not os.path.islink(os.path.join(root, d)))
        for name in sorted(files):
            path = Path(root) / name
            if not name.endswith(".py") or path.is_symlink():
                continue
            try:
                if path.stat().st_size > MAX_BYTES:
                    continue
                # the guarded read: a FIFO or device named *.py in SRC is refused, never read
                text = read_file(path).text
            except (OSError, StackpartError):
                continue
            if not _PREFILTER.search(text):
                continue
            try:
                # CPython's parser as the gate, LibCST in the large-stack thread (rewriter.source)
                wrapper = MetadataWrapper(parse_module(text, str(path)))
                facts = FileFacts(wrapper, frozenset({"Call"}))  # every call, in document order
                positions = wrapper.resolve(PositionProvider)
            except Exception:  # noqa: BLE001 - a file LibCST cannot read is not the setup's
                continue
            rel = path.relative_to(src).as_posix()
            module = wrapper.module
            nodes = list(facts.compile_calls) + list(facts.method_compile_calls) + [site.node for site in facts.compiled.values()]
            nodes += [d for fn in facts.disabled for d in fn.decorators]
            nodes += [n for n in facts.nodes if facts.is_call(n, calls)]
            by_line: dict[int, str] = {}
            for node in nodes:
                pos = positions.get(node)
                if pos is None:
                    continue
                code = " ".join(module.code_for_node(node).split())
                if isinstance(node, cst.Decorator) or pos.start.line not in by_line:  # "@torch.compile(...)" over its call
                    by_line[pos.start.line] = code if not isinstance(node, cst.Decorator) or code.startswith("@") else "@" + code
            out.extend((rel, line, code[:120]) for line, code in by_line.items())  # type: ignore[misc]
    out.sort()
    return [f"{f}:{line}: {code}" for f, line, code in out[:limit]]  # type: ignore[misc]

