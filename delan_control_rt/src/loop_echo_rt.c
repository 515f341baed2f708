/* loop_echo_rt: the floor under torque_controller_rt's latency, for the benchmarks.
 *
 * torque_controller_rt's loop without the controller: an rcl wait set on joint_states (the same
 * QoS), every queued state taken, the newest answered at once with zeros, one per joint of the
 * state, on effort_controller/commands (the same QoS), SCHED_FIFO under realtime_priority as
 * the controller. No mapping, gate, reference, model or law. It times itself as the controller
 * does (loop_timing.h: latency from DDS source stamps, missed cycles, the breakdown) and reports
 * the same keys on /diagnostics once a second, so the controller's figures minus these are what
 * the controller adds to the DDS round trip. Zero torque lets an arm fall: not for a real one.
 * Run by bench/bench_rt_breakdown.py. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <rcl/rcl.h>
#include <rcl/arguments.h>
#include <rcl/error_handling.h>
#include <rcl_yaml_param_parser/parser.h>
#include <rclc/rclc.h>
#include <rosidl_runtime_c/string_functions.h>
#include <rosidl_runtime_c/primitives_sequence_functions.h>
#include <sensor_msgs/msg/joint_state.h>
#include <std_msgs/msg/float64_multi_array.h>
#include <diagnostic_msgs/msg/diagnostic_array.h>
#include <diagnostic_msgs/msg/diagnostic_status.h>
#include <diagnostic_msgs/msg/key_value.h>

#include "loop_timing.h"

#define MAX_JOINTS 64

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) {(void)sig; g_stop = 1;}

#define CHECK(x) do {if ((x) != RCL_RET_OK) {fprintf(stderr, \
        "[loop_echo_rt] %s failed: %s\n", #x, rcl_get_error_string().str); \
        return 1;}} while (0)

/* the diagnostics' key-value pairs being filled: the next one is data[k] */
typedef struct
{
  diagnostic_msgs__msg__KeyValue__Sequence * seq;
  size_t k;
} pairs_t;

static void put_pair(void * ctx, const char * key, const char * value)
{
  pairs_t * p = ctx;
  if (p->k >= p->seq->size) {return;}
  rosidl_runtime_c__String__assign(&p->seq->data[p->k].key, key);
  rosidl_runtime_c__String__assign(&p->seq->data[p->k].value, value);
  p->k++;
}

static void publish_diagnostics(rcl_publisher_t * pub, const char * fqn, int64_t commands,
  loop_stats_t * stats, loop_breakdown_t * breakdown)
{
  diagnostic_msgs__msg__DiagnosticArray arr;
  diagnostic_msgs__msg__DiagnosticArray__init(&arr);
  diagnostic_msgs__msg__DiagnosticStatus__Sequence__init(&arr.status, 1);
  diagnostic_msgs__msg__DiagnosticStatus * st = &arr.status.data[0];
  const int64_t now = loop_wall_ns();
  arr.header.stamp.sec = (int32_t)(now / 1000000000LL);
  arr.header.stamp.nanosec = (uint32_t)(now % 1000000000LL);
  st->level = diagnostic_msgs__msg__DiagnosticStatus__OK;
  rosidl_runtime_c__String__assign(&st->name, fqn);
  rosidl_runtime_c__String__assign(&st->hardware_id, fqn);
  rosidl_runtime_c__String__assign(&st->message, "echo: zero commands");
  diagnostic_msgs__msg__KeyValue__Sequence__init(&st->values, 96);
  pairs_t pairs = {&st->values, 0};
  char count[32];
  snprintf(count, sizeof(count), "%lld", (long long)commands);
  put_pair(&pairs, "commands_sent", count);
  loop_report(stats, breakdown, put_pair, &pairs);
  const size_t capacity = st->values.size;
  st->values.size = pairs.k;
  if (rcl_publish(pub, &arr, NULL) != RCL_RET_OK) {rcl_reset_error();}
  st->values.size = capacity;
  diagnostic_msgs__msg__DiagnosticArray__fini(&arr);
}

int main(int argc, char ** argv)
{
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  rcl_allocator_t alloc = rcl_get_default_allocator();
  rcl_arguments_t args = rcl_get_zero_initialized_arguments();
  CHECK(rcl_parse_arguments(argc, (const char * const *)argv, alloc, &args));
  rcl_params_t * params = NULL;
  CHECK(rcl_arguments_get_param_overrides(&args, &params));
  loop_realtime(loop_priority_of(params), "loop_echo_rt");
  rclc_support_t support;
  CHECK(rclc_support_init(&support, argc, (const char * const *)argv, &alloc));
  rcl_node_t node = rcl_get_zero_initialized_node();
  CHECK(rclc_node_init_default(&node, "loop_echo_rt", "", &support));
  const char * fqn = rcl_node_get_fully_qualified_name(&node);

  rcl_subscription_t sub_js = rcl_get_zero_initialized_subscription();
  rmw_qos_profile_t js_qos = rmw_qos_profile_sensor_data;
  js_qos.depth = 10;
  CHECK(rclc_subscription_init(&sub_js, &node,
    ROSIDL_GET_MSG_TYPE_SUPPORT(sensor_msgs, msg, JointState), "joint_states", &js_qos));
  rcl_publisher_t pub_cmd = rcl_get_zero_initialized_publisher();
  CHECK(rclc_publisher_init_default(&pub_cmd, &node,
    ROSIDL_GET_MSG_TYPE_SUPPORT(std_msgs, msg, Float64MultiArray), "effort_controller/commands"));
  rcl_publisher_t pub_diag = rcl_get_zero_initialized_publisher();
  CHECK(rclc_publisher_init_default(&pub_diag, &node,
    ROSIDL_GET_MSG_TYPE_SUPPORT(diagnostic_msgs, msg, DiagnosticArray), "/diagnostics"));

  std_msgs__msg__Float64MultiArray cmd;
  std_msgs__msg__Float64MultiArray__init(&cmd);
  rosidl_runtime_c__double__Sequence__init(&cmd.data, MAX_JOINTS);
  const size_t capacity = cmd.data.size;
  sensor_msgs__msg__JointState * js[2] = {sensor_msgs__msg__JointState__create(),
    sensor_msgs__msg__JointState__create()};
  rcl_wait_set_t ws = rcl_get_zero_initialized_wait_set();
  CHECK(rcl_wait_set_init(&ws, 1, 0, 0, 0, 0, 0, &support.context, alloc));
  static loop_stats_t stats;
  static loop_breakdown_t breakdown;
  int64_t commands = 0;
  fprintf(stderr, "[loop_echo_rt] answering joint_states with zeros\n");

  int64_t next_diag = loop_mono_ns() + 1000000000LL;
  while (!g_stop && rcl_context_is_valid(&support.context)) {
    int64_t wait = next_diag - loop_mono_ns();
    if (rcl_wait_set_clear(&ws) != RCL_RET_OK) {rcl_reset_error();}
    if (rcl_wait_set_add_subscription(&ws, &sub_js, NULL) != RCL_RET_OK) {rcl_reset_error();}
    loop_cycle_t cycle;
    cycle.wait_begin = loop_wall_ns();
    rcl_ret_t rc = rcl_wait(&ws, wait > 0 ? wait : 0);
    cycle.wake = loop_wall_ns();
    const int64_t cpu_at_wake = loop_thread_cpu_ns();
    loop_breakdown_idle(&breakdown, cycle.wake - cycle.wait_begin);
    if (rc != RCL_RET_OK && rc != RCL_RET_TIMEOUT) {rcl_reset_error();}
    if (ws.subscriptions[0]) {
      /* everything queued; only the newest is answered, as by the controller */
      int count = 0, newest = -1, slot = 0;
      int64_t first_ns = 0;
      rmw_message_info_t info, newest_info = rmw_get_zero_initialized_message_info();
      while (rcl_take(&sub_js, js[slot], &info, NULL) == RCL_RET_OK) {
        if (!count) {first_ns = info.source_timestamp;}
        count++;
        newest = slot;
        newest_info = info;
        slot ^= 1;
      }
      rcl_reset_error();
      if (count) {
        cycle.taken = loop_wall_ns();
        loop_stats_received(&stats, first_ns, count);
        const size_t n = js[newest]->name.size;
        cmd.data.size = n < capacity ? n : capacity;
        memset(cmd.data.data, 0, sizeof(double) * cmd.data.size);
        cycle.computed = loop_wall_ns();
        if (rcl_publish(&pub_cmd, &cmd, NULL) != RCL_RET_OK) {rcl_reset_error();}
        cycle.published = loop_wall_ns();
        cycle.cpu_ns = loop_thread_cpu_ns() - cpu_at_wake;
        cycle.source = newest_info.source_timestamp;
        commands++;
        loop_stats_command(&stats, cycle.source, cycle.published);
        loop_breakdown_cycle(&breakdown, &cycle);
      }
    }
    if (loop_mono_ns() >= next_diag) {
      publish_diagnostics(&pub_diag, fqn, commands, &stats, &breakdown);
      next_diag = loop_mono_ns() + 1000000000LL;
    }
  }
  fprintf(stderr, "[loop_echo_rt] shutting down\n");
  if (rcl_wait_set_fini(&ws) != RCL_RET_OK) {rcl_reset_error();}
  sensor_msgs__msg__JointState__destroy(js[0]);
  sensor_msgs__msg__JointState__destroy(js[1]);
  cmd.data.size = capacity;
  std_msgs__msg__Float64MultiArray__fini(&cmd);
  if (rcl_publisher_fini(&pub_cmd, &node) != RCL_RET_OK) {rcl_reset_error();}
  if (rcl_publisher_fini(&pub_diag, &node) != RCL_RET_OK) {rcl_reset_error();}
  if (rcl_subscription_fini(&sub_js, &node) != RCL_RET_OK) {rcl_reset_error();}
  if (rcl_node_fini(&node) != RCL_RET_OK) {rcl_reset_error();}
  rcl_yaml_node_struct_fini(params);
  if (rcl_arguments_fini(&args) != RCL_RET_OK) {rcl_reset_error();}
  if (rclc_support_fini(&support) != RCL_RET_OK) {rcl_reset_error();}
  return 0;
}
