"""The package type-checks under mypy --strict, as its py.typed promises."""

import importlib.util
import subprocess
import sys
from pathlib import Path

from .conftest import require


def test_mypy_strict(tmp_path: Path) -> None:
    require(importlib.util.find_spec("mypy") is not None, "mypy is missing (apt-get install mypy; scripts/test-setup.sh does it)")
    src = Path(__file__).resolve().parent.parent / "src" / "sandgate"
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path), str(src)],
        capture_output=True, text=True, cwd=src.parent,
    )
    assert r.returncode == 0, r.stdout + r.stderr
