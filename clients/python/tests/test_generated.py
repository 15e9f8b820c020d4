"""The synchronous client is what scripts/unasync.py makes of the asynchronous one."""

import subprocess
import sys
from pathlib import Path


def test_sync_client_is_generated() -> None:
    script = Path(__file__).resolve().parent.parent / "scripts" / "unasync.py"
    r = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
