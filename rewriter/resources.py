"""Locate the data directories ``templates/`` and ``kernels/`` in a checkout or an installed wheel.

From a checkout (``pip install -e .`` or running from the source tree) they sit next to the
``rewriter`` package; a wheel carries them as ``rewriter/_data/<name>`` (see ``setup.py``).
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the directory ``templates`` or ``kernels``.

    Raises:
        FileNotFoundError: when neither the checkout nor the wheel layout holds it (a broken
            install); the message names both places looked at.
    """
    candidates = (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name)
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"stackpart data directory {name!r} not found; looked in "
        + ", ".join(str(c) for c in candidates)
    )


def templates_dir() -> Path:
    """The Jinja2 templates for generated code (``*.py.j2``)."""
    return data_dir("templates")


def kernels_dir() -> Path:
    """The catalog of hand-written Triton kernels (one ``<name>.py`` per kernel)."""
    return data_dir("kernels")
