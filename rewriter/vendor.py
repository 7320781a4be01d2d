"""Where generated code goes in the user's tree, and how a rewritten file imports it.

Generated code lives in one vendored package, ``_stackpart/``, so the rewritten model needs no
stackpart at run time and every generated line is in the reviewed diff. Its place follows the
file that uses it:

* a file inside a package (its directory has ``__init__.py``): ``<top package>/_stackpart/``,
  imported relatively (``from .._stackpart.bucketing import pad_to_bucket``), so the tree keeps
  working wherever the package is installed;
* a loose script: ``<script dir>/_stackpart/``, imported absolutely (``from _stackpart...``),
  since Python puts a script's own directory first on ``sys.path``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

VENDOR_PACKAGE = "_stackpart"


@dataclass(frozen=True)
class VendorSite:
    """Where one file's generated code lives.

    Attributes:
        dir: the vendored package's directory, relative to SRC (POSIX).
        relative: the relative-import level from the using file (0 = absolute import).
        namespace: a custom-op namespace unique to this tree (``stackpart_<top package>``), so
            two vendored trees can register their ops in one process.
    """

    dir: str
    relative: int
    namespace: str

    def module(self, name: str) -> str:
        """The module path to import ``name`` from (without the leading dots)."""
        return f"{VENDOR_PACKAGE}.{name}"


def vendor_site(src: Path, relpath: str) -> VendorSite:
    """The vendored package serving ``relpath`` (a file relative to ``src``)."""
    parts = PurePosixPath(relpath).parent.parts
    depth = len(parts)
    # Walk up while the directory is a package: the topmost package directory within SRC.
    top = depth
    while top > 0 and (src / Path(*parts[:top]) / "__init__.py").is_file():
        top -= 1
    if top == 0 and (src / "__init__.py").is_file():
        # SRC itself is the top package.
        site_dir, level, label = PurePosixPath(VENDOR_PACKAGE), depth + 1, src.resolve().name
    elif top < depth:
        pkg_parts = parts[: top + 1]
        site_dir = PurePosixPath(*pkg_parts, VENDOR_PACKAGE)
        level = depth - len(pkg_parts) + 1
        label = pkg_parts[-1]
    else:
        site_dir = PurePosixPath(*parts, VENDOR_PACKAGE)
        level, label = 0, (parts[-1] if parts else src.resolve().name)
    namespace = "stackpart_" + re.sub(r"\W", "_", label).strip("_").lower()
    return VendorSite(dir=str(site_dir), relative=level, namespace=namespace)
