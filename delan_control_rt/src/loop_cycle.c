/* See loop_cycle.h. */
#include "loop_cycle.h"

#include <rcl/error_handling.h>
#include <rclc/rclc.h>
#include <rosidl_runtime_c/string_functions.h>
#include <diagnostic_msgs/msg/diagnostic_status.h>
#include <std_msgs/msg/float64_multi_array.h>

rcl_ret_t loop_joint_states_init(rcl_subscription_t * sub, rcl_node_t * node)
{
  rmw_qos_profile_t qos = rmw_qos_profile_sensor_data;
  qos.depth = 10;
  return rclc_subscription_init(sub, node,
    ROSIDL_GET_MSG_TYPE_SUPPORT(sensor_msgs, msg, JointState), "joint_states", &qos);
}

rcl_ret_t loop_publishers_init(rcl_publisher_t * commands, rcl_publisher_t * diagnostics,
  rcl_node_t * node)
{
  const rcl_ret_t rc = rclc_publisher_init_default(commands, node,
    ROSIDL_GET_MSG_TYPE_SUPPORT(std_msgs, msg, Float64MultiArray), "effort_controller/commands");
  if (rc != RCL_RET_OK) {return rc;}
  return rclc_publisher_init_default(diagnostics, node,
    ROSIDL_GET_MSG_TYPE_SUPPORT(diagnostic_msgs, msg, DiagnosticArray), "/diagnostics");
}

rcl_ret_t loop_wait(rcl_wait_set_t * ws, int64_t timeout_ns, loop_breakdown_t * b,
  loop_cycle_t * cycle)
{
  cycle->wait_begin = loop_wall_ns();
  if (timeout_ns > LOOP_MAX_WAIT_NS) {timeout_ns = LOOP_MAX_WAIT_NS;}
  const rcl_ret_t rc = rcl_wait(ws, timeout_ns > 0 ? timeout_ns : 0);
  cycle->wake = loop_wall_ns();
  cycle->cpu_wake = loop_thread_cpu_ns();
  loop_breakdown_idle(b, cycle->wake - cycle->wait_begin);
  if (rc != RCL_RET_OK && rc != RCL_RET_TIMEOUT) {rcl_reset_error();}
  return rc;
}

int loop_take_newest(rcl_subscription_t * sub, sensor_msgs__msg__JointState * js[2],
  loop_stats_t * s, loop_cycle_t * cycle)
{
  int count = 0, newest = -1, slot = 0;
  int64_t first_ns = 0;
  rmw_message_info_t info, newest_info = rmw_get_zero_initialized_message_info();
  while (rcl_take(sub, js[slot], &info, NULL) == RCL_RET_OK) {
    if (!count) {first_ns = info.source_timestamp;}
    count++;
    newest = slot;
    newest_info = info;
    slot ^= 1;
  }
  rcl_reset_error();
  if (!count) {return -1;}
  cycle->taken = loop_wall_ns();
  cycle->source = newest_info.source_timestamp;
  loop_stats_received(s, first_ns, count);
  return newest;
}

void loop_command_sent(loop_stats_t * s, loop_breakdown_t * b, loop_cycle_t * cycle)
{
  cycle->published = loop_wall_ns();
  cycle->cpu_ns = loop_thread_cpu_ns() - cycle->cpu_wake;
  loop_stats_command(s, cycle->source, cycle->published);
  loop_breakdown_cycle(b, cycle);
}

void loop_put_pair(void * ctx, const char * key, const char * value)
{
  loop_pairs_t * p = ctx;
  if (p->k >= p->seq->size) {return;}
  rosidl_runtime_c__String__assign(&p->seq->data[p->k].key, key);
  rosidl_runtime_c__String__assign(&p->seq->data[p->k].value, value);
  p->k++;
}

diagnostic_msgs__msg__DiagnosticStatus * loop_diagnostics_init(
  diagnostic_msgs__msg__DiagnosticArray * arr)
{
  diagnostic_msgs__msg__DiagnosticArray__init(arr);
  diagnostic_msgs__msg__DiagnosticStatus__Sequence__init(&arr->status, 1);
  diagnostic_msgs__msg__DiagnosticStatus * st = &arr->status.data[0];
  const int64_t now = loop_wall_ns();
  arr->header.stamp.sec = (int32_t)(now / 1000000000LL);
  arr->header.stamp.nanosec = (uint32_t)(now % 1000000000LL);
  st->level = diagnostic_msgs__msg__DiagnosticStatus__OK;
  diagnostic_msgs__msg__KeyValue__Sequence__init(&st->values, 96);
  return st;
}

void loop_diagnostics_publish(rcl_publisher_t * pub, diagnostic_msgs__msg__DiagnosticArray * arr,
  size_t k, loop_stats_t * s, loop_breakdown_t * b)
{
  diagnostic_msgs__msg__DiagnosticStatus * st = &arr->status.data[0];
  loop_pairs_t pairs = {&st->values, k};
  loop_report(s, b, loop_put_pair, &pairs);
  const size_t capacity = st->values.size;
  st->values.size = pairs.k;
  if (rcl_publish(pub, arr, NULL) != RCL_RET_OK) {rcl_reset_error();}
  st->values.size = capacity;
  diagnostic_msgs__msg__DiagnosticArray__fini(arr);
}
