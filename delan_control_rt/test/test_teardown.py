"""The compiled nodes' teardown deadline (src/teardown.c), in a small program built with cc:
a teardown stuck past its seconds ends the process with status 1, naming the node and the
stage; one that finishes in time exits as it would."""

import os
import shutil
import subprocess
import time

import pytest

SRC = os.path.join(os.path.dirname(__file__), '..', 'src')

PROGRAM = r"""
#include <unistd.h>
#include "teardown.h"
int main(int argc, char ** argv)
{
  (void)argv;
  teardown_deadline("probe_node", 1);
  teardown_stage("the context (rcl_shutdown)");
  sleep(argc > 1 ? 10 : 0);  /* stuck, or done at once */
  return 0;
}
"""


@pytest.fixture(scope='module')
def program(tmp_path_factory):
    cc = shutil.which('cc') or shutil.which('gcc')
    if cc is None:
        pytest.skip('no C compiler')
    d = tmp_path_factory.mktemp('teardown')
    (d / 'main.c').write_text(PROGRAM)
    exe = d / 'probe'
    subprocess.run(
        [
            cc,
            '-Wall',
            '-Wextra',
            '-Werror',
            '-I',
            SRC,
            str(d / 'main.c'),
            os.path.join(SRC, 'teardown.c'),
            '-o',
            str(exe),
        ],
        check=True,
    )
    return str(exe)


def test_a_stuck_teardown_ends_the_process_naming_its_stage(program):
    t0 = time.monotonic()
    res = subprocess.run([program, 'stuck'], capture_output=True, text=True, timeout=20)
    assert res.returncode == 1
    assert time.monotonic() - t0 < 5.0
    assert res.stderr == '[probe_node] teardown stuck in the context (rcl_shutdown): exiting\n'


def test_a_teardown_in_time_exits_as_it_would(program):
    res = subprocess.run([program], capture_output=True, text=True, timeout=20)
    assert res.returncode == 0 and res.stderr == ''
