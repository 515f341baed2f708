"""The data logger's recording pipeline without ROS (``bags.recorder.BagRecorder``,
``bags.checks.MessageChecker``): bounded queue, counted drops, drain on close, splits by size,
write errors, malformed input."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import List

import pytest
from rosbags.rosbag2 import Reader
from test_bag_io import T0, cmd_cdr, js_cdr

from delan_learning.bags import (
    COMMAND_TYPE,
    JOINT_STATE_TYPE,
    TopicSpec,
    list_bags,
    qos_profile,
)
from delan_learning.bags import recorder as recorder_module
from delan_learning.bags.checks import MessageChecker
from delan_learning.bags.recorder import BagRecorder
from delan_testing.logs import Log

JS = TopicSpec('/joint_states', JOINT_STATE_TYPE, (qos_profile(),))
CMD = TopicSpec('/effort_controller/commands', COMMAND_TYPE, (qos_profile(),))


def recorder(tmp_path, log, topics=(JS,), **kwargs) -> BagRecorder:
    kwargs.setdefault('queue_size', 100)
    kwargs.setdefault('flush_period_s', 0.05)
    rec = BagRecorder(tmp_path / 'bags', log, **kwargs)
    for spec in topics:
        rec.add_topic(spec)
    return rec


def state(i: int) -> bytes:
    return js_cdr(T0 + i, ['j1', 'j2'], [float(i), 0.0], [0.0, 0.0], [1.0, 2.0])


def bag_messages(path: Path) -> List[tuple]:
    with Reader(path) as reader:
        return [(c.topic, t) for c, t, _ in reader.messages()]


def wait_written(rec: BagRecorder, n: int) -> None:
    deadline = time.monotonic() + 10.0
    while sum(rec.stats()['written'].values()) < n:
        assert time.monotonic() < deadline, rec.stats()
        time.sleep(0.005)


def all_messages(tmp_path) -> List[tuple]:
    return [m for bag in list_bags(tmp_path / 'bags') for m in bag_messages(bag)]


def test_a_full_queue_drops_and_counts_and_close_writes_what_was_queued(tmp_path):
    log = Log()
    rec = recorder(tmp_path, log, queue_size=3)
    # the writer is not running yet: the queue fills up and the callback never waits
    taken = [rec.offer(0, T0 + i, state(i)) for i in range(5)]
    assert taken == [True, True, True, False, False]
    s = rec.stats()
    assert s['received'] == {'/joint_states': 5} and s['dropped'] == 2
    assert len(log.of('error')) == 1  # throttled: one line for the burst
    assert (
        'writer queue full (3): dropped a message on /joint_states (1 so far)'
        in log.of('error')[0]
    )
    level, message, values = rec.status()
    assert (level, message) == ('error', 'write errors: messages lost')  # no writer yet
    rec.start()
    level, message, values = rec.status()
    assert (level, message, values['dropped']) == ('warn', 'queue overflow: messages dropped', 2)
    rec.close()
    assert rec.stats()['written'] == {'/joint_states': 3}
    assert [t for _, t in all_messages(tmp_path)] == [T0, T0 + 1, T0 + 2]
    assert log.of('info')[-1].startswith('closed: 3 messages in ')
    assert 'dropped 2, lost 0 (+0 in DDS), malformed 0' in log.of('info')[-1]


def test_close_drains_the_queue_of_a_slow_writer(tmp_path):
    log = Log()
    rec = recorder(tmp_path, log, queue_size=1000)
    rec.start()
    real_write = rec.bags.write

    def slow_write(*args):
        time.sleep(0.002)
        real_write(*args)

    rec.bags.write = slow_write
    for i in range(200):
        assert rec.offer(0, T0 + i, state(i))
    assert rec.stats()['written'].get('/joint_states', 0) < 200  # still queued
    rec.close()
    rec.close()  # idempotent
    assert rec.stats()['written'] == {'/joint_states': 200} and not rec.alive
    (bag,) = list_bags(tmp_path / 'bags')
    assert (bag / 'metadata.yaml').is_file()  # a complete bag
    assert len(bag_messages(bag)) == 200
    assert len(log.of('info')) == 2  # recording ..., closed: ... (once)


def test_bags_split_by_size_and_a_new_limit_applies_from_the_next_message(tmp_path):
    rec = recorder(tmp_path, Log())
    rec.start()
    size = len(state(0))
    for i in range(10):
        rec.offer(0, T0 + i, state(i))
    wait_written(rec, 10)
    assert len(rec.bags.paths) == 1  # unlimited
    rec.max_bag_size_mb = 4.5 * (size + 50) * 1e-6  # about four messages a split
    for i in range(10, 30):
        rec.offer(0, T0 + i, state(i))
    rec.close()
    bags = list_bags(tmp_path / 'bags')
    counts = [len(bag_messages(b)) for b in bags]
    assert len(bags) == len(rec.bags.paths) == 1 + 5 and counts[1:] == [4] * 5
    assert counts[0] == 10 + 0  # the limit came after the first split was full of its 10
    assert sorted(t for _, t in all_messages(tmp_path)) == [T0 + i for i in range(30)]


def test_a_topic_added_while_recording_reaches_the_bag(tmp_path):
    rec = recorder(tmp_path, Log())
    rec.start()
    rec.offer(0, T0, state(0))
    index = rec.add_topic(CMD)
    rec.offer(index, T0 + 1, cmd_cdr([1.0, 2.0]))
    rec.close()
    assert all_messages(tmp_path) == [
        ('/joint_states', T0),
        ('/effort_controller/commands', T0 + 1),
    ]


def test_a_write_error_loses_messages_for_a_while_counted_then_recording_resumes(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(recorder_module, 'RETRY_S', 0.2)
    log = Log()
    rec = recorder(tmp_path, log)
    rec.start()
    real_write = rec.bags.write
    failures = [1]

    def failing_write(*args):
        if failures[0]:
            failures[0] -= 1
            raise OSError('disk full')
        real_write(*args)

    rec.bags.write = failing_write
    rec.offer(0, T0, state(0))  # fails
    rec.offer(0, T0 + 1, state(1))  # lost while waiting to retry
    time.sleep(0.4)
    rec.offer(0, T0 + 2, state(2))  # a new split
    rec.close()
    s = rec.stats()
    assert (s['write_errors'], s['lost'], s['written']) == (1, 2, {'/joint_states': 1})
    assert rec.status()[:2] == ('error', 'write errors: messages lost')
    assert any('writing bag' in m and 'disk full' in m for m in log.of('error'))
    assert [t for _, t in all_messages(tmp_path)] == [T0 + 2]


def test_malformed_messages_are_recorded_anyway_and_counted_by_reason(tmp_path):
    log = Log()
    rec = recorder(tmp_path, log, topics=(JS, CMD))
    rec.start()
    rec.offer(0, T0, js_cdr(T0, ['j1', 'j2'], [0.0]))  # one position for two names
    rec.offer(0, T0 + 1, js_cdr(T0, ['j1', 'j1'], [0.0, 0.0]))
    rec.offer(1, T0 + 2, cmd_cdr([float('nan'), 0.0]))
    rec.offer(1, T0 + 3, b'\x00\x01\x00\x00')
    rec.offer(0, T0 + 4, state(4))
    wait_written(rec, 5)
    assert rec.status()[:2] == ('warn', 'recording; malformed input seen')
    rec.close()
    malformed = rec.stats()['malformed']
    assert malformed == {
        'length_mismatch': 1,
        'duplicate_names': 1,
        'non_finite': 1,
        'undecodable': 1,
    }
    assert len(all_messages(tmp_path)) == 5
    assert any(
        'malformed message on /joint_states recorded anyway' in m for m in log.of('warning')
    )


def test_lost_in_the_middleware_is_counted_and_warned_about(tmp_path):
    log = Log()
    rec = recorder(tmp_path, log)
    rec.start()
    rec.lost_before('/joint_states', 3)
    rec.lost_before('/joint_states', 2)
    assert rec.stats()['dds_lost'] == 5
    assert rec.status()[:2] == ('warn', 'middleware reports lost messages')
    assert len([m for m in log.of('error') if 'middleware reports' in m]) == 1  # throttled
    rec.close()


def test_start_raises_when_the_bag_directory_cannot_be_written(tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('')
    rec = BagRecorder(blocker / 'bags', Log(), queue_size=10, flush_period_s=1.0)
    rec.add_topic(JS)
    with pytest.raises(OSError):
        rec.start()


def test_the_checker_passes_good_messages_and_other_types():
    check = MessageChecker().problem
    assert check(JOINT_STATE_TYPE, state(0)) is None
    assert check(COMMAND_TYPE, cmd_cdr([1.0])) is None
    assert check('std_msgs/msg/String', b'anything') is None
    assert check(JOINT_STATE_TYPE, js_cdr(T0, [], []))[0] == 'empty'
    assert check(COMMAND_TYPE, cmd_cdr([]))[0] == 'empty'


def test_offer_is_safe_from_many_threads(tmp_path):
    rec = recorder(tmp_path, Log(), queue_size=10_000)
    rec.start()
    threads = [
        threading.Thread(target=lambda: [rec.offer(0, T0, state(0)) for _ in range(200)])
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    assert rec.stats()['received'] == {'/joint_states': 800}
    assert rec.stats()['written'] == {'/joint_states': 800}
