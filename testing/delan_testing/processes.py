"""Start the workspace's installed nodes as real processes (demo, tests, benchmarks)."""

from __future__ import annotations

import os
import subprocess
from typing import List, Optional


def node_process(
    package: str,
    executable: str,
    ros_args: Optional[List[str]] = None,
    env: Optional[dict] = None,
    **popen_kwargs,
) -> subprocess.Popen:
    """Start an installed console script of this workspace as a real process."""
    prefix = os.environ.get('COLCON_PREFIX_PATH', '').split(os.pathsep)[0] or 'install'
    exe = os.path.join(prefix, package, 'lib', package, executable)
    if not os.path.exists(exe):
        raise FileNotFoundError(f'{exe} not installed; run make setup')
    cmd = [exe]
    if ros_args:
        cmd += ['--ros-args'] + list(ros_args)
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault('PYTHONUNBUFFERED', '1')
    return subprocess.Popen(cmd, env=full_env, **popen_kwargs)
