"""Ship templates/ and kernels/ inside the wheel as rewriter/_data/.

They live at the repository root (the design card's layout) so that a checkout and an editable
install read them in place; a built wheel has no repository root, so build_py copies them in.
``rewriter.resources`` looks in both places.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
DATA_DIRS = ("templates", "kernels")


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        for name in DATA_DIRS:
            dest = Path(self.build_lib) / "rewriter" / "_data" / name
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(
                ROOT / name, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )


setup(cmdclass={"build_py": BuildPyWithData})
