/* One cycle of a loop that answers the newest joint state (torque_controller_rt, loop_echo_rt),
 * on an rcl wait set: the joint_states subscription and the publishers of commands and
 * diagnostics, the timed wait, every queued state taken, the answering command recorded
 * (loop_timing.h's statistics and breakdown), and the diagnostics' key-value pairs with the
 * loop's keys, published. */
#ifndef DELAN_CONTROL_RT__LOOP_CYCLE_H_
#define DELAN_CONTROL_RT__LOOP_CYCLE_H_

#include <stddef.h>
#include <stdint.h>

#include <rcl/rcl.h>
#include <sensor_msgs/msg/joint_state.h>
#include <diagnostic_msgs/msg/diagnostic_array.h>
#include <diagnostic_msgs/msg/key_value.h>

#include "loop_timing.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the subscription to joint_states (sensor data QoS, depth 10) */
rcl_ret_t loop_joint_states_init(rcl_subscription_t * sub, rcl_node_t * node);

/* the publishers of the commands (effort_controller/commands) and of the diagnostics
 * (/diagnostics), default QoS; the first failure is returned */
rcl_ret_t loop_publishers_init(rcl_publisher_t * commands, rcl_publisher_t * diagnostics,
  rcl_node_t * node);

/* the longest single wait [ns]: SIGINT and SIGTERM only set the loop's stop flag, which
 * rcl_wait does not see, so an idle node stops at most this late */
#define LOOP_MAX_WAIT_NS 100000000LL

/* rcl_wait on ws for up to timeout_ns (<= 0: no wait; at most LOOP_MAX_WAIT_NS), its instants
 * in cycle (wait_begin, wake, the thread's CPU time at wake) and its idle time in b; an error
 * other than a timeout is reset. The wait's return. */
rcl_ret_t loop_wait(rcl_wait_set_t * ws, int64_t timeout_ns, loop_breakdown_t * b,
  loop_cycle_t * cycle);

/* Every state queued on sub taken, into js[0] and js[1] in turn; only the newest is answered.
 * When any was taken: their count and the oldest's stamp in s, the newest's source stamp and
 * cycle->taken in cycle, and the index in js of the newest is returned; -1 when none was. */
int loop_take_newest(rcl_subscription_t * sub, sensor_msgs__msg__JointState * js[2],
  loop_stats_t * s, loop_cycle_t * cycle);

/* the command answering cycle's state was just published (after cycle->computed): its
 * latency in s, its breakdown in b */
void loop_command_sent(loop_stats_t * s, loop_breakdown_t * b, loop_cycle_t * cycle);

/* the diagnostics' key-value pairs being filled: the next one is data[k] */
typedef struct
{
  diagnostic_msgs__msg__KeyValue__Sequence * seq;
  size_t k;
} loop_pairs_t;

/* a pair (loop_put) with its value as it is (of any length: the histograms); none past the
 * sequence's size */
void loop_put_pair(void * ctx, const char * key, const char * value);

/* A diagnostics array of one status, stamped now (CLOCK_REALTIME), level OK, with capacity
 * for 96 key-value pairs; the status is returned. */
diagnostic_msgs__msg__DiagnosticStatus * loop_diagnostics_init(
  diagnostic_msgs__msg__DiagnosticArray * arr);

/* The loop's keys (loop_report, which starts the next period) after the first k pairs of
 * arr's status, arr published on pub and finalised. */
void loop_diagnostics_publish(rcl_publisher_t * pub, diagnostic_msgs__msg__DiagnosticArray * arr,
  size_t k, loop_stats_t * s, loop_breakdown_t * b);

#ifdef __cplusplus
}
#endif
#endif
