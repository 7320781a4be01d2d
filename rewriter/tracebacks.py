"""Where in the user's code an exception comes from, and its first full line: what every error
raised inside the harness reports, in diagnose's rungs and in the engine's
child processes alike.
"""

from __future__ import annotations

import re
from pathlib import Path

from .definition import relpath


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during (``__cause__``/``__context__``)."""
    out: list[BaseException] = []
    while exc is not None and exc not in out and len(out) < 8:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return out


#: ``File "<path>", line <n>`` in a message: the "from user code:" section Dynamo appends to its
#: errors (torch 2.13 torch/_dynamo/exc.py, ``augment_exc_message``).
_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')


def user_site(exc: BaseException, src: Path) -> tuple[str | None, int | None, str | None]:
    """Where in the user's code (under ``src``) an exception comes from: ``(path, line, note)``.

    In order: the last frame under SRC of the user stack Dynamo attaches to its errors
    (``real_stack``, torch/_dynamo/exc.py: where torch points while tracing, when the Python
    traceback holds only torch's frames); the last ``File "...", line N`` under SRC in the
    message (the "from user code:" section); the last frame under SRC of the traceback (the
    user's own ``raise``); else the function Dynamo was compiling when it raised (a guard or
    constraint error, e.g. ConstraintViolationError, points at no line: the ``code`` object in
    the frames of torch/_dynamo/convert_frame.py), with ``note`` naming it. ``(None, None, None)``
    when nothing under SRC is involved. Chained exceptions are searched too.
    """
    import traceback
    import types

    root = src.resolve()
    chain = _chain(exc)
    for e in chain:
        for frame in reversed(list(getattr(e, "real_stack", None) or [])):
            rel = relpath(root, frame.filename)
            if rel is not None:
                return rel, frame.lineno, None
    for e in chain:
        for name, line in reversed(_FILE_LINE.findall(str(e))):
            rel = relpath(root, name)
            if rel is not None:
                return rel, int(line), None
    for e in chain:
        for frame in reversed(traceback.extract_tb(e.__traceback__)):
            rel = relpath(root, frame.filename)
            if rel is not None:
                return rel, frame.lineno, None
    for e in chain:
        tb = e.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_locals.get("code")
            if isinstance(code, types.CodeType):
                rel = relpath(root, code.co_filename)
                if rel is not None:
                    qual = getattr(code, "co_qualname", code.co_name)
                    return rel, code.co_firstlineno, f"in {qual}, which Dynamo was compiling"
            tb = tb.tb_next
    return None, None, None


#: A first line longer than this is cut (Inductor's unknown-option error lists every option it knows:
#: 20,000 characters on one line), with how much was left out.
HEADLINE_LIMIT = 600


def headline(exc: BaseException) -> str:
    """``Type: <the message's first full line>``, one line, cut only past :data:`HEADLINE_LIMIT`.

    torch's errors often open with a heading and state the cause on a following line; that line
    is added after `` -- ``: ConstraintViolationError's "Constraints violated (...)! For more
    information, run with TORCH_LOGS=..." is followed by "- You marked ... as dynamic but your code
    specialized it to be a constant (1)..." and Dynamo's graph-break errors by "Explanation: ..."
    (torch 2.13, symbolic_shapes.py and exc.py; measured).
    """
    lines = [line.strip() for line in str(exc).splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return type(exc).__name__
    first = lines[0]
    for line in lines[1:4]:
        if line.startswith("- ") or line.startswith("Explanation:"):
            first += " -- " + line.removeprefix("- ").removeprefix("Explanation:").strip()
            break
    if len(first) > HEADLINE_LIMIT:
        first = f"{first[:HEADLINE_LIMIT]} ... ({len(first) - HEADLINE_LIMIT:,} more characters)"
    return f"{type(exc).__name__}: {first}"
