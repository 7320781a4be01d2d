"""What ``diagnose`` and ``validate`` (and their ``--nproc`` forms) say when torch is missing.

stackpart's install does not carry torch (``check`` and ``rewrite``, the pre-commit hooks, never
import it, and an install must never replace the torch a user already has); the commands that
run the model need it, from the ``torch`` extra or any torch build the user installed.
"""

from __future__ import annotations

from .errors import StackpartError

#: How to get torch, named in the error.
INSTALL_HINT = "install it: pip install 'stackpart[torch]', or the torch build you use, 2.6 or later"


def require_torch(command: str) -> None:
    """Import torch, or raise a one-line :class:`StackpartError` naming ``command`` and the extra.

    A torch that is installed but fails to import (a missing CUDA library) is reported with
    its own error, so the message is not mistaken for a missing install.
    """
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise StackpartError(
            f"stackpart {command} needs torch, which cannot be imported here ({exc})", hint=INSTALL_HINT
        ) from exc
