"""QoS profiles shared by publishers and subscribers of the suite, so both ends always match."""
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

#: Latched: the last message is kept for late joiners (model versions, the reference in force).
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
