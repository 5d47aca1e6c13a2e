"""The one build step pyproject.toml cannot declare: the wheel carries ``csrc/`` and ``reference/``
inside the package, as ``mpk_runtime/_data/csrc`` and ``mpk_runtime/_data/reference``, where
``mpk_runtime/resources.py`` looks first. The checkout keeps them at its root (an editable install
reads them there); MANIFEST.in puts them in the sdist."""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# csrc: the CUDA sources, and the host emulator's own C++ (csrc/emulation/*.cpp, built on the user's machine).
SHIPPED = {"csrc": ("*.cuh", "*.h", "*.cu", "*.cpp"), "reference": ("pytorch_reference.py",)}


def shipped_files() -> list[Path]:
    """Every file of csrc/ and reference/ that the package needs, relative to the root."""
    return sorted(
        p.relative_to(ROOT)
        for folder, patterns in SHIPPED.items()
        for pattern in patterns
        for p in (ROOT / folder).rglob(pattern)
    )


class BuildPyWithData(build_py):
    """build_py, then csrc/ and reference/ copied under mpk_runtime/_data in the build directory."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's own folders
            return
        for rel in shipped_files():
            dest = Path(self.build_lib, "mpk_runtime", "_data", rel)
            self.mkpath(str(dest.parent))
            self.copy_file(str(ROOT / rel), str(dest))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        extra = [str(Path(self.build_lib, "mpk_runtime", "_data", rel)) for rel in shipped_files()]
        return [*super().get_outputs(include_bytecode), *extra]


setup(cmdclass={"build_py": BuildPyWithData})
