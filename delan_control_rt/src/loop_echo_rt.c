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

#include "loop_cycle.h"
#include "teardown.h"
#include "loop_timing.h"

#define MAX_JOINTS 64

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) {(void)sig; g_stop = 1;}

#define CHECK(x) do {if ((x) != RCL_RET_OK) {fprintf(stderr, \
        "[loop_echo_rt] %s failed: %s\n", #x, rcl_get_error_string().str); \
        return 1;}} while (0)

static void publish_diagnostics(rcl_publisher_t * pub, const char * fqn, int64_t commands,
  loop_stats_t * stats, loop_breakdown_t * breakdown)
{
  diagnostic_msgs__msg__DiagnosticArray arr;
  diagnostic_msgs__msg__DiagnosticStatus * st = loop_diagnostics_init(&arr);
  rosidl_runtime_c__String__assign(&st->name, fqn);
  rosidl_runtime_c__String__assign(&st->hardware_id, fqn);
  rosidl_runtime_c__String__assign(&st->message, "echo: zero commands");
  loop_pairs_t pairs = {&st->values, 0};
  char count[32];
  snprintf(count, sizeof(count), "%lld", (long long)commands);
  loop_put_pair(&pairs, "commands_sent", count);
  loop_diagnostics_publish(pub, &arr, pairs.k, stats, breakdown);
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
  CHECK(loop_joint_states_init(&sub_js, &node));
  rcl_publisher_t pub_cmd = rcl_get_zero_initialized_publisher();
  rcl_publisher_t pub_diag = rcl_get_zero_initialized_publisher();
  CHECK(loop_publishers_init(&pub_cmd, &pub_diag, &node));

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
    loop_wait(&ws, wait, &breakdown, &cycle);
    /* only the newest state is answered, as by the controller */
    const int newest = ws.subscriptions[0] ? loop_take_newest(&sub_js, js, &stats, &cycle) : -1;
    if (newest >= 0) {
      const size_t n = js[newest]->name.size;
      cmd.data.size = n < capacity ? n : capacity;
      memset(cmd.data.data, 0, sizeof(double) * cmd.data.size);
      cycle.computed = loop_wall_ns();
      if (rcl_publish(&pub_cmd, &cmd, NULL) != RCL_RET_OK) {rcl_reset_error();}
      loop_command_sent(&stats, &breakdown, &cycle);
      commands++;
    }
    if (loop_mono_ns() >= next_diag) {
      publish_diagnostics(&pub_diag, fqn, commands, &stats, &breakdown);
      next_diag = loop_mono_ns() + 1000000000LL;
    }
  }
  fprintf(stderr, "[loop_echo_rt] shutting down\n");
  teardown_deadline("loop_echo_rt", TEARDOWN_TIMEOUT_S);
  teardown_stage("the entities and the node");
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
  teardown_stage("the context (rcl_shutdown)");
  if (rclc_support_fini(&support) != RCL_RET_OK) {rcl_reset_error();}
  return 0;
}
