"""The README's ROS 2 recipes, typed as a user types them, through the real `ros2` command line:
`ros2 launch` starts the simulated suite, `ros2 node list` / `ros2 topic` see its nodes, joint
states and the learner's status, `ros2 param set` switches the controller's model at runtime and
Ctrl-C (SIGINT) stops everything. Every command inherits this pytest run's ROS_DOMAIN_ID (root
conftest.py), so parallel runs do not hear each other.

The launch files are found in the installed delan_bringup package, as on an apt ROS 2 machine;
the commands run in a temporary folder, where the bags and checkpoints they write land.
robot.launch.py runs beside the sim standing in for ros2_control's effort controller."""

import os
import re
import shlex
import signal
import subprocess
import threading
import time

import psutil
import pytest
import yaml

from delan_testing.ros import stop_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, 'README.md')).read()

LAUNCH = 'ros2 launch delan_bringup sim.launch.py model:=pd record:=true'
ROBOT_LAUNCH = (
    'ros2 launch delan_bringup robot.launch.py urdf:=two_link_arm.urdf '
    'model:=pinocchio record:=false reference:=false namespace:=arm1'
)
NODE_LIST = 'ros2 node list'
HZ = 'ros2 topic hz /joint_states'
ECHO_JOINT_STATES = 'ros2 topic echo --once /joint_states'
ECHO_STATUS = 'ros2 topic echo --once /learner/status'
SET_MODEL = 'ros2 param set /torque_controller model pinocchio'
GET_MODEL = 'ros2 param get /torque_controller model'
RECIPES = [LAUNCH, NODE_LIST, HZ, ECHO_JOINT_STATES, ECHO_STATUS, SET_MODEL, GET_MODEL]

NODES = ['sim', 'reference', 'torque_controller', 'data_logger', 'learner']
JOINTS = ['shoulder', 'elbow']  # two_link_arm.urdf, the launch file's default robot
WAIT = 90.0  # generous: five nodes (one importing torch) and the CLI share two busy cores
#: a `ros2 param` call answers in a few seconds or has lost its response; one not answered by
#: then gets another try beside it (run_until): a lost response costs 5 s, and a slow try is not
#: thrown away
PARAM_ATTEMPT = 5.0
PARALLEL_TRIES = 4  # at most this many tries of one command at once
GIVE_UP = 30.0  # [s] a try still running this long is ended


class Output:
    """A child's stdout and stderr, read line by line in a thread (so the pipe never fills) and
    waited on by pattern."""

    def __init__(self, proc: subprocess.Popen):
        self.lines, self.closed = [], False
        self._cv = threading.Condition()
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            with self._cv:
                self.lines.append(line)
                self._cv.notify_all()
        with self._cv:
            self.closed = True
            self._cv.notify_all()

    @property
    def text(self) -> str:
        with self._cv:
            return ''.join(self.lines)

    def wait_for(self, pattern: str, timeout: float = WAIT) -> re.Match:
        """The first match of ``pattern``; fails the test if none comes within ``timeout``."""

        def found():
            return re.search(pattern, ''.join(self.lines), re.MULTILINE)

        with self._cv:
            self._cv.wait_for(lambda: found() or self.closed, timeout)
            match = found()
        assert match, f'no {pattern!r} in the output:\n{self.text[-3000:]}'
        return match


def start(command: str, cwd: str) -> tuple:
    proc = subprocess.Popen(
        shlex.split(command),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED='1'),
    )
    return proc, Output(proc)


def run_until(command: str, cwd: str, ok, timeout: float = WAIT, attempt: float = 30.0) -> str:
    """Run ``command`` again until its output satisfies ``ok``; returns that output. A new ros2
    process discovers the graph asynchronously, so a first try may not see a node or topic yet,
    as a user retyping the command sometimes sees: a try that ends without the output is
    followed by the next at once.

    A try still running after ``attempt`` seconds gets another beside it, as a user would open a
    second terminal, and whichever answers first counts: DDS now and then loses a service
    response, and `ros2 param` then waits for it forever; but on two busy cores a try may also
    just be slow (it imports, discovers the graph, then asks), and killing it there threw its
    progress away and started again from nothing. At most ``PARALLEL_TRIES`` run at once; a try
    is ended after ``GIVE_UP`` seconds, and all of them once one has answered."""
    deadline = time.monotonic() + timeout
    tries: list = []  # (process, started), oldest first
    last = 'no try ended'

    def start_try():
        proc = subprocess.Popen(
            shlex.split(command),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        tries.append((proc, time.monotonic()))

    def end(proc):  # what it printed is left unread: a child of it may hold the pipes open
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()

    try:
        start_try()
        while True:
            for entry in list(tries):
                proc, started = entry
                if proc.poll() is None:
                    continue
                tries.remove(entry)
                stdout, stderr = proc.communicate()
                if proc.returncode == 0 and ok(stdout):
                    return stdout
                last = f'exit {proc.returncode} after {time.monotonic() - started:.1f} s:\n'
                last += stdout + stderr
            now = time.monotonic()
            if now > deadline:
                stuck = [f'{now - started:.0f} s' for _, started in tries]
                pytest.fail(
                    f'`{command}` never gave the expected output; tries still running: {stuck}; '
                    f'last try that ended: {last}'
                )
            if tries and now - tries[0][1] > GIVE_UP:
                proc, started = tries.pop(0)
                end(proc)
                last = f'ended after {now - started:.1f} s without an answer'
            if not tries or (now - tries[-1][1] > attempt and len(tries) < PARALLEL_TRIES):
                if tries:
                    print(f'`{command}`: no answer after {attempt:g} s; another try beside it')
                start_try()
            time.sleep(0.05)
    finally:
        for proc, _ in tries:
            end(proc)


def first_message(echo_output: str) -> dict:
    """The message `ros2 topic echo --once` printed. Each record it prints ends with ---; under
    load a notice of messages lost before it ("A message was lost!!!") may come first."""
    records = [r for r in echo_output.split('---\n') if not r.startswith('A message was lost')]
    return yaml.safe_load(records[0])


def commands_on(topic: str, out, count: int = 20) -> list:
    """More than ``count`` commands (``Float64MultiArray`` data) heard on ``topic`` from a node of
    this test; ``out`` (the launch's output) goes into the failure message."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import Float64MultiArray

    from delan_testing.ros import ros_context, spin_until

    commands = []
    with ros_context() as ctx:
        node = rclpy.create_node('command_listener', context=ctx)
        node.create_subscription(
            Float64MultiArray, topic, lambda m: commands.append(list(m.data)), 10
        )
        ex = SingleThreadedExecutor(context=ctx)
        ex.add_node(node)
        assert spin_until(ex, lambda: len(commands) > count, WAIT), out.text[-3000:]
        ex.remove_node(node)
        node.destroy_node()
    return commands


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp('user')
    yield str(d)
    # the CLI commands started a ros2 daemon for this domain; a user's would stay, ours may not
    subprocess.run(['ros2', 'daemon', 'stop'], cwd=d, capture_output=True, timeout=WAIT)


@pytest.fixture(scope='module')
def suite(workdir):
    # A non-interactive shell starts its background jobs with SIGINT ignored, and children
    # inherit that; the launch must get Ctrl-C as it does in a terminal.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    proc, out = start(LAUNCH, workdir)
    yield proc, out
    # after a failed test: the launch stops its nodes on SIGTERM; any it left are killed
    nodes = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
    stop_process(proc)
    for node in psutil.wait_procs(nodes, timeout=WAIT)[1]:
        node.kill()


def test_readme_shows_these_recipes():
    missing = [c for c in RECIPES if c not in README]
    assert not missing


def test_ros2_launch_starts_every_node(suite, workdir):
    _, out = suite
    for node in NODES:
        out.wait_for(rf'\[{node}-\d+\]: process started')
    run_until(NODE_LIST, workdir, lambda s: {f'/{n}' for n in NODES} <= set(s.split()))


def test_joint_states_flow(suite, workdir):
    msg = first_message(run_until(ECHO_JOINT_STATES, workdir, lambda s: 'name:' in s))
    assert msg['name'] == JOINTS
    assert len(msg['position']) == len(msg['velocity']) == len(msg['effort']) == len(JOINTS)

    hz, out = start(HZ, workdir)
    try:
        rate = float(out.wait_for(r'average rate: ([0-9.]+)').group(1))
        assert rate > 0
        hz.send_signal(signal.SIGINT)
        hz.wait(timeout=WAIT)
    finally:
        stop_process(hz)


def test_learner_status_is_published(suite, workdir):
    status = first_message(run_until(ECHO_STATUS, workdir, lambda s: 'joint_names:' in s))
    assert status['joint_names'] == JOINTS
    assert status['message']
    assert status['samples_seen'] >= 0


def test_param_set_switches_the_controller_model_and_get_reads_it_back(suite, workdir):
    _, out = suite
    out.wait_for(r'\[torque_controller\]: controlling .* with model=pd')
    set_out = run_until(
        SET_MODEL, workdir, lambda s: 'Set parameter successful' in s, attempt=PARAM_ATTEMPT
    )
    assert 'Set parameter successful' in set_out
    out.wait_for(r'\[torque_controller\]: switched model pd -> pinocchio')
    got = run_until(GET_MODEL, workdir, lambda s: 'String value is' in s, attempt=PARAM_ATTEMPT)
    assert got.strip() == 'String value is: pinocchio'


def test_ctrl_c_stops_every_node_cleanly(suite):
    proc, out = suite
    for node in NODES:
        out.wait_for(rf'\[{node}-\d+\]: process started')
    nodes = psutil.Process(proc.pid).children(recursive=True)
    assert len(nodes) >= len(NODES)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=WAIT) == 0, out.text[-3000:]
    for node in NODES:
        out.wait_for(rf'\[{node}-\d+\]: process has finished cleanly')
    assert 'process has died' not in out.text
    _, alive = psutil.wait_procs(nodes, timeout=WAIT)
    assert not alive


@pytest.mark.parametrize(
    'argument,message',
    [
        (
            'record:=maybe',
            'Argument "record" provided value "maybe" is not valid. Valid options are: '
            "['true', 'false']",
        ),
        (
            'model:=fast',
            'model:=fast is not a model kind; valid: '
            "['pd', 'pinocchio', 'identified', 'delan', 'delan_residual']",
        ),
        ('controller:=fast', 'controller:=fast is not a model kind'),
        ('urdf:=no_such_arm.urdf', "URDF 'no_such_arm.urdf' not found"),
    ],
)
def test_bad_launch_argument_is_a_clear_error(workdir, argument, message):
    r = subprocess.run(
        shlex.split(f'ros2 launch delan_bringup sim.launch.py {argument}'),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert message in out
    assert 'process started' not in out


def test_robot_launch_commands_the_effort_controller_and_stops_on_ctrl_c(workdir):
    """The README's real-arm launch: the torque controller reads the effort controller's joints,
    commands flow to it, and Ctrl-C stops every node cleanly."""
    from delan_testing.ros import node_process

    # ros2_control's part, played by the sim under the effort controller's name; all in a
    # namespace of their own, apart from the sim.launch.py suite of the tests above
    robot = node_process(
        'delan_control',
        'sim',
        [
            '-r',
            '__node:=effort_controller',
            '-r',
            '__ns:=/arm1',
            '-p',
            'urdf_path:=two_link_arm.urdf',
            '-p',
            'publish_clock:=false',
            '-p',
            'lockstep:=false',
        ],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    launch, out = start(ROBOT_LAUNCH, workdir)
    try:
        out.wait_for(r'\[arm1\.torque_controller\]: controlling .* with model=pinocchio')
        commands = commands_on('/arm1/effort_controller/commands', out)
        assert all(len(c) == len(JOINTS) for c in commands)
        out.wait_for(r'\[arm1\.learner\]: robot from')  # up (a slow import is not a hang)
        nodes = psutil.Process(launch.pid).children(recursive=True)
        launch.send_signal(signal.SIGINT)
        assert launch.wait(timeout=WAIT) == 0, out.text[-3000:]
        for name in ('torque_controller', 'learner'):
            out.wait_for(rf'\[{name}-\d+\]: process has finished cleanly')
        assert 'process has died' not in out.text
        assert not psutil.wait_procs(nodes, timeout=WAIT)[1]
    finally:
        # after a failure: what the launch leaves behind is killed
        left = psutil.Process(launch.pid).children(recursive=True) if launch.poll() is None else []
        stop_process(launch)
        for node in psutil.wait_procs(left, timeout=WAIT)[1]:
            node.kill()
        stop_process(robot)


def test_sim_launch_with_the_compiled_controller(workdir):
    """``controller_impl:=rt``: the launch starts delan_control_rt's torque_controller_rt in the
    Python controller's place (same node name), it commands the sim, and Ctrl-C stops it."""
    exe = os.path.join(
        ROOT, 'install', 'delan_control_rt', 'lib', 'delan_control_rt', 'torque_controller_rt'
    )
    if not os.path.exists(exe):
        pytest.skip(f'delan_control_rt is not built ({exe} missing; make setup builds it)')
    launch, out = start(
        'ros2 launch delan_bringup sim.launch.py controller_impl:=rt record:=false namespace:=rt1',
        workdir,
    )
    try:
        out.wait_for(r'\[torque_controller_rt-\d+\]: process started')
        out.wait_for(r'controlling 2 joints with model=pd law=computed_torque')
        commands = commands_on('/rt1/effort_controller/commands', out)
        assert all(len(c) == len(JOINTS) for c in commands)
        assert any(abs(x) > 1e-6 for c in commands for x in c)  # gravity is held
        assert not re.search(r'\[torque_controller-\d+\]: process started', out.text)
        launch.send_signal(signal.SIGINT)
        assert launch.wait(timeout=WAIT) == 0, out.text[-3000:]
        out.wait_for(r'\[torque_controller_rt-\d+\]: process has finished cleanly')
    finally:
        left = psutil.Process(launch.pid).children(recursive=True) if launch.poll() is None else []
        stop_process(launch)
        for node in psutil.wait_procs(left, timeout=WAIT)[1]:
            node.kill()
