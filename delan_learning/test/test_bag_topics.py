"""Extra topics in the logger's bags: ``topics`` entries, message types the rosbags typestore does
not ship (this suite's, read from their installed .msg files), topics added to an open bag."""

import pytest
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import JointState

from delan_learning.bags import (
    BagError,
    SplitBagWriter,
    TopicSpec,
    iter_bag_messages,
    normalize_msgtype,
    parse_topic_entry,
    qos_profile,
    type_definition,
)
from delan_msgs.msg import ControllerState


@pytest.mark.parametrize(
    'entry,expected',
    [
        ('/torque_controller/controller_state', ('/torque_controller/controller_state', None)),
        (
            ' learner/dynamics_estimate : delan_msgs/DynamicsEstimate ',
            ('learner/dynamics_estimate', 'delan_msgs/msg/DynamicsEstimate'),
        ),
        ('x:sensor_msgs/msg/JointState', ('x', 'sensor_msgs/msg/JointState')),
    ],
)
def test_topic_entries(entry, expected):
    assert parse_topic_entry(entry) == expected


@pytest.mark.parametrize('entry', ['', ':std_msgs/String', 'x:String', 'x:a/srv/B', 'x:a/b/c/d'])
def test_malformed_topic_entries_are_refused(entry):
    with pytest.raises(ValueError):
        parse_topic_entry(entry)


def test_suite_types_get_their_definition_and_the_hash_ros_computes():
    text, rihs01 = type_definition('delan_msgs/msg/ControllerState')
    assert 'trajectory_msgs/JointTrajectoryPoint reference' in text
    assert 'MSG: trajectory_msgs/JointTrajectoryPoint' in text  # its dependencies too
    # what rosidl generated for the installed package (type_description_interfaces)
    import json

    from delan_learning.bags import installed_interface_file

    described = installed_interface_file('delan_msgs/ControllerState').with_suffix('.json')
    hashes = json.loads(described.read_text())['type_hashes']
    assert rihs01 == next(
        h['hash_string'] for h in hashes if h['type_name'] == 'delan_msgs/msg/ControllerState'
    )
    with pytest.raises(BagError, match='no share/delan_msgs/msg/NoSuchType.msg'):
        type_definition(normalize_msgtype('delan_msgs/NoSuchType'))


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_a_topic_added_to_an_open_bag_is_in_it_and_in_the_next_split(tmp_path, storage):
    bags = SplitBagWriter(
        tmp_path,
        [TopicSpec('/joint_states', 'sensor_msgs/msg/JointState', (qos_profile(),))],
        storage=storage,
        max_bag_duration_s=1.0,
    )
    bags.open()
    bags.write('/joint_states', 1, serialize_message(JointState(name=['a'])))
    bags.add_topic(TopicSpec('/cs', 'delan_msgs/msg/ControllerState', (qos_profile(),)))
    with pytest.raises(ValueError):
        bags.add_topic(TopicSpec('/cs', 'delan_msgs/msg/ControllerState'))
    bags.write('/cs', 2, serialize_message(ControllerState(model='pd', model_version=1)))
    bags.write('/cs', 2_000_000_000, serialize_message(ControllerState(model_version=2)))
    bags.close()
    assert len(bags.paths) == 2
    got = [
        (topic, deserialize_message(data, ControllerState).model_version)
        for topic, _, _, data in iter_bag_messages(tmp_path)
        if topic == '/cs'
    ]
    assert got == [('/cs', 1), ('/cs', 2)]
