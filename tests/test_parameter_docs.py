"""docs/parameters.md is what the nodes declare: regenerated from the code and compared, and
every parameter of every node is on it."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_parameter_page_is_up_to_date():
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'scripts', 'parameter_docs.py'), '--check'],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
