"""Suite-wide pytest set-up: every pytest run talks DDS on its own ROS domain over loopback, so
parallel runs (developers, CI) never hear each other's nodes."""

import os
import random
import sys

#: test-only helpers (``delan_testing``) live outside the installed packages
TESTING = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'testing')
if TESTING not in sys.path:
    sys.path.insert(0, TESTING)
    os.environ['PYTHONPATH'] = os.pathsep.join(
        p for p in (TESTING, os.environ.get('PYTHONPATH')) if p
    )

if 'ROS_DOMAIN_ID' not in os.environ or os.environ.get('DELAN_TEST_RANDOM_DOMAIN', '1') == '1':
    os.environ['ROS_DOMAIN_ID'] = str(random.SystemRandom().randint(1, 100))
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
