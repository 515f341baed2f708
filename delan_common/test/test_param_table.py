"""The ROS-free parameter table: constraints text, validation messages, the shared checks."""

import math

import pytest

from delan_common.param_table import (
    Param,
    ParamContext,
    Values,
    all_of,
    at_most,
    finite,
    non_empty,
    per_joint,
    per_joint_in,
    robot_table,
    vector,
)

CTX = ParamContext(n_joints=3)


def test_constraints_text():
    assert Param('a', 1.0, 'x', min=0.0, max=1e6).constraints() == '[0, 1e+06]'
    assert Param('a', 1, 'x', min=0, max=2**31 - 1).constraints() == '[0, 2147483647]'
    assert Param('a', 1e-4, 'x', min=1e-4).constraints() == '[0.0001, ]'
    assert Param('a', 1.0, 'x', max=2.5).constraints() == '[, 2.5]'
    assert Param('a', 'b', 'x', choices=('b', 'c')).constraints() == 'one of: b, c'
    assert Param('a', '', 'x', choices=('', 'r')).constraints() == 'one of: , r'
    assert Param('a', [], 'x', items=float).constraints() == 'array of float; [] = none'
    assert Param('a', 'b', 'x').constraints() == ''


def test_type_names():
    assert Param('a', True, 'x').type_name == 'bool'
    assert Param('a', 3, 'x').type_name == 'integer'
    assert Param('a', 3.0, 'x').type_name == 'double'
    assert Param('a', 's', 'x').type_name == 'string'
    assert Param('a', [math.nan], 'x').type_name == 'double array'
    assert Param('a', [], 'x', items=str).type_name == 'string array'
    assert Param('a', [], 'x', items=float).type_name == 'double array'


def test_description_names_the_joint_count():
    assert Param('a', [0.0], '1 or {n} values').describe(CTX) == '1 or 3 values'
    assert Param('a', [0.0], 'no count').describe(CTX) == 'no count'


def test_validate_messages():
    p = Param('speed', 1.0, 'x', min=0.05, max=4.0)
    assert p.validate(1.0, CTX) is None
    assert p.validate(0.0, CTX) == 'speed=0.0 is below its minimum 0.05'
    assert p.validate(5.0, CTX) == 'speed=5.0 is above its maximum 4.0'
    seed = Param('seed', 0, 'x', min=0, max=2**31 - 1)
    assert seed.validate(-1, CTX) == 'seed=-1 is below its minimum 0'
    kind = Param('trajectory', 'hold', 'x', choices=('hold', 'excitation'))
    assert (
        kind.validate('spiral', CTX) == "trajectory='spiral' is not one of ['hold', 'excitation']"
    )
    # a bool is no number: no range applies to it
    assert Param('flag', True, 'x', min=2).validate(True, CTX) is None
    names = Param('joints', [], 'x', items=str)
    assert names.validate(['a', 'b'], CTX) is None
    assert names.validate([1, 2], CTX) == 'joints=[1, 2] is not an array of str'
    limits = Param('effort_limits', [], 'x', items=float)
    assert limits.validate([1, 2.5], CTX) is None  # integers are numbers too
    assert limits.validate([True], CTX) == 'effort_limits=[True] is not an array of float'


def test_range_before_check_and_the_check_sees_the_name():
    seen = []

    def check(value, ctx):
        seen.append(ctx.name)
        return f'{ctx.name} is odd' if value % 2 else None

    p = Param('k', 2, 'x', min=0, max=10, check=check)
    assert p.validate(11, CTX) == 'k=11 is above its maximum 10'
    assert seen == []
    assert p.validate(3, CTX) == 'k is odd'
    assert p.validate(4, CTX) is None
    assert seen == ['k', 'k']


def test_finite_and_non_empty():
    p = Param('rate', 1.0, 'x', min=0.0, max=10.0, check=finite)
    assert p.validate(math.nan, CTX) == 'rate must be finite, got nan'
    assert p.validate(1.0, CTX) is None
    d = Param('bag_dir', 'bags', 'x', check=non_empty)
    assert d.validate('', CTX) == 'bag_dir must not be empty'


def test_per_joint_in_range_with_derived_default():
    p = Param('kp', [math.nan], 'x', check=per_joint_in(0.0, 1e6))
    assert p.validate([math.nan], CTX) is None  # [nan] = derive it
    assert p.validate([5.0], CTX) is None
    assert p.validate([1.0, 2.0, 3.0], CTX) is None
    assert p.validate([1.0, 2.0], CTX) == 'kp needs 1 or 3 values, got 2'
    assert p.validate([math.nan, 1.0, 1.0], CTX) == (
        'kp values must be finite and in [0.0, 1000000.0]'
    )
    assert p.validate([-1.0], CTX) == 'kp values must be finite and in [0.0, 1000000.0]'
    assert p.validate([math.inf], CTX) == 'kp values must be finite and in [0.0, 1000000.0]'


def test_per_joint_signs_and_vectors():
    scale = Param('mass_scale', [1.0], 'x', check=per_joint(positive=True))
    assert scale.validate([1.0, 2.0, 3.0], CTX) is None
    assert scale.validate([1.0, 0.0, 1.0], CTX) == 'mass_scale must be > 0, got [1.0, 0.0, 1.0]'
    assert scale.validate([1.0, 1.0], CTX) == 'mass_scale needs 1 or 3 values, got 2'
    assert scale.validate([math.nan], CTX) == 'mass_scale must be finite, got [nan]'
    spring = Param('spring_stiffness', [0.0], 'x', check=per_joint(nonnegative=True))
    assert spring.validate([-1.0], CTX) == 'spring_stiffness must be >= 0, got [-1.0]'
    q0 = Param('initial_position', [math.nan], 'x', check=per_joint(nan_default=True))
    assert q0.validate([math.nan], CTX) is None
    assert q0.validate([0.0, 0.0], CTX) == 'initial_position needs 1 or 3 values, got 2'
    offset = Param('payload_offset', [0.0, 0.0, 0.0], 'x', check=vector(3))
    assert offset.validate([0.0, 0.1, 0.2], CTX) is None
    assert offset.validate([0.0], CTX) == 'payload_offset needs 3 values, got 1'
    assert offset.validate([0.0, 0.0, math.inf], CTX) == (
        'payload_offset must be finite, got [0.0, 0.0, inf]'
    )


def test_cross_parameter_check_reads_the_current_values():
    values = {'physics_rate': 1000.0}
    ctx = ParamContext(2, values)
    p = Param('publish_rate', 500.0, 'x', min=1.0, max=20000.0, check=at_most('physics_rate'))
    assert p.validate(1000.0, ctx) is None
    assert p.validate(2000.0, ctx) == 'publish_rate=2000.0 exceeds physics_rate=1000.0'
    values['physics_rate'] = 4000.0  # the view is read when the check runs
    assert p.validate(2000.0, ctx) is None


def test_all_of_returns_the_first_error():
    def never(value, ctx):
        return f'{ctx.name} never'

    p = Param('rtf', 1.0, 'x', check=all_of(finite, never))
    assert p.validate(math.nan, CTX) == 'rtf must be finite, got nan'
    assert p.validate(1.0, CTX) == 'rtf never'


def test_values_read_as_attributes():
    v = Values(speed=1.0)
    assert v.speed == 1.0 and v['speed'] == 1.0
    with pytest.raises(AttributeError):
        v.missing


def test_robot_table_is_read_only_and_takes_its_texts():
    table = robot_table('arm.urdf', path_help='where', description_help='what')
    assert [p.name for p in table] == [
        'urdf_path',
        'robot_description',
        'joints',
        'locked_joint_positions',
        'effort_limits',
        'velocity_limits',
        'robot_description_timeout',
    ]
    assert all(p.read_only for p in table)
    assert (table[0].default, table[0].description, table[1].description) == (
        'arm.urdf',
        'where',
        'what',
    )
