"""The Jinja2 environment for generated code, and black for that code only.

Every template renders with ``StrictUndefined`` (a missing value is an error, never an empty
string); the text is parsed before it is returned, then formatted with black. A user's own lines
are never passed through black: only whole generated files are.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import Any

import black
import jinja2

from . import __version__
from .resources import templates_dir


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The shared environment loading ``templates/`` (checkout or wheel)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_python(template: str, **values: Any) -> str:
    """Render ``template`` (a ``*.py.j2`` name) to formatted Python source.

    Raises:
        jinja2.UndefinedError: the template used a value not given.
        SyntaxError: the rendered text is not Python (a template bug; the message says which).
    """
    text = environment().get_template(template).render(stackpart_version=__version__, **values)
    try:
        ast.parse(text)
    except SyntaxError as exc:
        raise SyntaxError(f"template {template} rendered invalid Python: {exc}") from None
    return black.format_str(text, mode=black.Mode())
