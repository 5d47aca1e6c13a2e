"""The wheel: csrc/ and reference/ ship inside the package (mpk_runtime/_data), the installed
package finds them there, and a build's cache key is the same from a wheel as from the checkout."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mpk_runtime import resources
from mpk_runtime.build import cache

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / "setup.py").is_file() or resources.CSRC != ROOT / "csrc":
        pytest.skip("needs the checkout (setup.py, csrc/ at its root)")
    # Built from a copy: setuptools builds in its source tree, which other tests (and xdist workers) share.
    src = tmp_path_factory.mktemp("source")
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("mpk_runtime", "pytest_mpk", "csrc", "reference"):
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
    )
    (found,) = out.glob("pytest_mpk-*.whl")
    return found


def test_wheel_carries_csrc_and_the_references(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    # every source of csrc/ (CUDA, and the host emulator's C++) and every reference
    shipped = [p.relative_to(ROOT) for p in (ROOT / "csrc").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    shipped += [p.relative_to(ROOT) for p in (ROOT / "reference").rglob("*.py") if "__pycache__" not in p.parts]
    assert any(p.suffix == ".cpp" for p in shipped)
    missing = [str(p) for p in shipped if f"mpk_runtime/_data/{p.as_posix()}" not in names]
    assert shipped and not missing
    assert not [n for n in names if "__pycache__" in n or n.startswith(("tests/", "csrc/", "reference/"))]
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata


def test_installed_package_finds_its_data_and_keys_builds_as_the_checkout(wheel: Path, tmp_path: Path, noop_source: str) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from mpk_runtime import resources; from mpk_runtime.build import cache; "
        "print(json.dumps([str(resources.CSRC), str(resources.REFERENCE_ROOT), cache.cache_key(sys.stdin.read(), 'sm80')]))"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(site)], input=noop_source, capture_output=True, text=True, check=True)
    csrc, reference, key = json.loads(out.stdout)
    assert (csrc, reference) == (str(site / "mpk_runtime/_data/csrc"), str(site / "mpk_runtime/_data/reference"))
    assert key == cache.cache_key(noop_source, "sm80")
