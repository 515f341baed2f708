/* torque_controller_rt: the per-cycle path of delan_control's torque_controller, compiled.
 *
 * One command per newest joint state: map by name, gate the stamp, the reference at the state's
 * stamp (reference_trajectory; the first position held without one), the law with the model
 * (pd | pinocchio | identified | delan | delan_residual: the rigid-body model of an exported
 * file, the DeLaN of a learner's weights file, or their sum), the PD fall-back when the
 * model's torque is not finite, the effort limits, the command in the receiver's joint order
 * (command_joints, or the joints parameter of effort_controller_name, asked for once; no
 * commands until known). When joint states (re)start, or the arm jumps between two states (a
 * sim reset), a reference left behind is rejoined smoothly, or dropped when it is farther than
 * resume_tolerance; a new reference begins where the arm is and joins its course the same
 * way, or is dropped when its first point lies farther than resume_tolerance from the arm. A
 * watchdog sends zero torque once when joint states stop for watchdog_timeout. The loop times
 * itself as delan_control.loop_stats does (DDS source stamps), each command broken down into
 * DDS + wake-up, take, compute and publish (loop_timing.h), and reports on /diagnostics.
 *
 * rclc sets up support, node and entities; the loop is a plain rcl wait set, so that it takes
 * every queued state with its message info and answers only the newest. Parameters come from
 * the command line and parameter files (--ros-args -p / --params-file), matched to this node's
 * name as rclpy matches them (wildcard keys); the node serves them (param_server.h), and the
 * model, law, gains and timings can be set while it runs, between two cycles, as on the Python
 * node. See docs/realtime.md. */
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rcl/rcl.h>
#include <rcl/arguments.h>
#include <rcl/error_handling.h>
#include <rcl_yaml_param_parser/parser.h>
#include <rclc/rclc.h>
#include <rosidl_runtime_c/string_functions.h>
#include <rosidl_runtime_c/primitives_sequence_functions.h>
#include <sensor_msgs/msg/joint_state.h>
#include <std_msgs/msg/float64_multi_array.h>
#include <trajectory_msgs/msg/joint_trajectory.h>
#include <diagnostic_msgs/msg/diagnostic_array.h>
#include <diagnostic_msgs/msg/diagnostic_status.h>
#include <diagnostic_msgs/msg/key_value.h>
#include <delan_msgs/msg/model_update.h>
#include <rcl_interfaces/msg/parameter_type.h>
#include <rcl_interfaces/msg/parameter_value.h>
#include <rcl_interfaces/srv/get_parameters.h>

#include "control_law.h"
#include "delan_model.h"
#include "loop_cycle.h"
#include "teardown.h"
#include "loop_timing.h"
#include "param_server.h"
#include "reference.h"
#include "rigid_body.h"

#define MAX_JOINTS 64
#define MAX_STAMP_JUMP_S 1.0
/* a stall that moved the arm and the reference apart by less than this (position, velocity,
 * acceleration) needs no rejoin (reference_tracking.REJOIN_NEGLIGIBLE) */
#define REJOIN_NEGLIGIBLE_Q 1e-3
#define REJOIN_NEGLIGIBLE_QD 0.05
#define REJOIN_NEGLIGIBLE_QDD 0.2
/* a position step beyond JUMP_FACTOR x the velocity limit x the time step + JUMP_MARGIN is a
 * jump of the arm (a sim reset, a re-homed driver), handled as a restart of the joint states;
 * joints without a velocity limit count UNLIMITED_VELOCITY (continuity.JumpDetector) */
#define JUMP_FACTOR 2.0
#define JUMP_MARGIN 0.1
#define UNLIMITED_VELOCITY 10.0
/* and, for states at most WITNESS_DT apart, a step off the trapezoid of the two measured
 * velocities by more than WITNESS_MARGIN + WITNESS_SLACK x that trapezoid (continuity.WITNESS_*) */
#define WITNESS_DT 0.05
#define WITNESS_MARGIN 0.05
#define WITNESS_SLACK 0.5
/* command order (command_order.ReceiverOrderQuery): asked of the receiving controller's
 * joints parameter when command_joints is not given; no commands until it is known */
#define ORDER_POLL_S 0.1
#define ORDER_RETRY_S 1.0
/* the reasons a joint state is rejected for (delan_common.joint_state), the last one for any
 * other; each reason is logged at most every LOG_PERIOD_S, as is the PD fall-back */
static const char * const REJECT_REASONS[] = {"empty", "duplicate_names", "missing_joints",
  "length_mismatch", "no_velocity", "non_finite", "bad_stamp", "stamp_jump", "stamp_backwards",
  "other"};
#define N_REJECT_REASONS ((int)(sizeof(REJECT_REASONS) / sizeof(REJECT_REASONS[0])))
#define LOG_PERIOD_S 2.0
/* the gains' upper bound (params.torque_controller: per_joint_in(0, 1e6)) */
#define MAX_GAIN 1e6
enum {ORDER_KNOWN = 0, ORDER_PENDING, ORDER_REFUSED};

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) {(void)sig; g_stop = 1;}

static double mono_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* ------------------------------------------------------------------ parameters */
/* rclpy's node-name match of a parameter file key: '**' any characters, '*' any but '/';
 * a '**' between two slashes also matches zero namespaces (the key for any namespace matches
 * '/name', as in rcl) */
static int glob_match(const char * p, const char * s)
{
  if (!*p) {return !*s;}
  if (p[0] == '/' && p[1] == '*' && p[2] == '*' && p[3] == '/' && glob_match(p + 3, s)) {
    return 1;
  }
  if (p[0] == '*' && p[1] == '*') {
    for (const char * t = s; ; t++) {
      if (glob_match(p + 2, t)) {return 1;}
      if (!*t) {return 0;}
    }
  }
  if (*p == '*') {
    for (const char * t = s; ; t++) {
      if (glob_match(p + 1, t)) {return 1;}
      if (!*t || *t == '/') {return 0;}
    }
  }
  return *p == *s && glob_match(p + 1, s + 1);
}

/* Parameters: a table of the node's (param_server.h), served to `ros2 param` and parameter
 * clients. A parameter is declared when configure() first reads it, with its value from the
 * command line and parameter files (or the default), as rclpy declares one; those of
 * RUNTIME_PARAMETERS can be set while the node runs (apply_parameters), the others are
 * read-only. */
typedef rcl_interfaces__msg__ParameterValue value_t;

static const char * const RUNTIME_PARAMETERS[] = {"law", "kp", "kd", "ct_kp", "ct_kd",
  "effort_limit_scale", "watchdog_timeout", "switch_blend_time", "resume_tolerance",
  "resume_time", "model", "delan_checkpoint", "delan_weights", "rigid_body_file",
  "identified_rigid_body_file"};

typedef struct
{
  rcl_params_t * all;  /* the command line's and parameter files' values */
  const char * fqn;
  param_server * table;
  /* a set being validated: read before the table */
  const rcl_interfaces__msg__Parameter * changes;
  size_t n_changes;
} params_t;

/* the command line's or a parameter file's value of name for this node: the last matching
 * entry wins, as in rclpy */
static rcl_variant_t * override_of(const params_t * P, const char * name)
{
  rcl_variant_t * found = NULL;
  if (!P->all) {return NULL;}
  for (size_t i = 0; i < P->all->num_nodes; i++) {
    const char * key = P->all->node_names[i];
    char full[512];
    snprintf(full, sizeof(full), "%s%s", key[0] == '/' ? "" : "/", key);
    if (!glob_match(full, P->fqn)) {continue;}
    rcl_node_params_t * np = &P->all->params[i];
    for (size_t j = 0; j < np->num_params; j++) {
      if (strcmp(np->parameter_names[j], name) == 0) {found = &np->parameter_values[j];}
    }
  }
  return found;
}

/* the value of name: a change being validated, else the table's; NULL when not declared */
static const value_t * lookup(const params_t * P, const char * name)
{
  for (size_t i = 0; i < P->n_changes; i++) {
    if (strcmp(P->changes[i].name.data, name) == 0) {return &P->changes[i].value;}
  }
  return param_get(P->table, name);
}

/* declares name with v (then finalised); its table value, NULL when out of memory */
static const value_t * declare(const params_t * P, const char * name, value_t * v)
{
  int writable = 0;
  for (size_t i = 0; i < sizeof(RUNTIME_PARAMETERS) / sizeof(RUNTIME_PARAMETERS[0]); i++) {
    writable |= strcmp(RUNTIME_PARAMETERS[i], name) == 0;
  }
  param_declare(P->table, name, v, !writable);
  rcl_interfaces__msg__ParameterValue__fini(v);
  return param_get(P->table, name);
}

/* a value of type, zero or empty */
static value_t empty_value(uint8_t type)
{
  value_t v;
  rcl_interfaces__msg__ParameterValue__init(&v);
  v.type = type;
  return v;
}

static double param_double(const params_t * P, const char * name, double dflt)
{
  const value_t * v = lookup(P, name);
  if (!v) {
    rcl_variant_t * o = override_of(P, name);
    value_t d = empty_value(rcl_interfaces__msg__ParameterType__PARAMETER_DOUBLE);
    d.double_value = o && o->double_value ? *o->double_value :
      o && o->integer_value ? (double)*o->integer_value : dflt;
    v = declare(P, name, &d);
  }
  return v && v->type == rcl_interfaces__msg__ParameterType__PARAMETER_DOUBLE ?
         v->double_value : dflt;
}

static const char * param_string(const params_t * P, const char * name, const char * dflt)
{
  const value_t * v = lookup(P, name);
  if (!v) {
    rcl_variant_t * o = override_of(P, name);
    value_t d = empty_value(rcl_interfaces__msg__ParameterType__PARAMETER_STRING);
    rosidl_runtime_c__String__assign(&d.string_value, o && o->string_value ? o->string_value :
      dflt);
    v = declare(P, name, &d);
  }
  return v && v->type == rcl_interfaces__msg__ParameterType__PARAMETER_STRING ?
         v->string_value.data : dflt;
}

/* a string array into out (at most max of them); how many it has, 0 when absent */
static size_t param_strings(const params_t * P, const char * name, const char ** out,
  size_t max)
{
  const value_t * v = lookup(P, name);
  if (!v) {
    rcl_variant_t * o = override_of(P, name);
    value_t d = empty_value(rcl_interfaces__msg__ParameterType__PARAMETER_STRING_ARRAY);
    size_t n = o && o->string_array_value ? o->string_array_value->size : 0;
    if (rosidl_runtime_c__String__Sequence__init(&d.string_array_value, n)) {
      for (size_t i = 0; i < n; i++) {
        rosidl_runtime_c__String__assign(&d.string_array_value.data[i],
          o->string_array_value->data[i]);
      }
    }
    v = declare(P, name, &d);
  }
  if (!v || v->type != rcl_interfaces__msg__ParameterType__PARAMETER_STRING_ARRAY) {return 0;}
  const rosidl_runtime_c__String__Sequence * a = &v->string_array_value;
  for (size_t i = 0; i < a->size && i < max; i++) {out[i] = a->data[i].data;}
  return a->size;
}

/* an override's numbers (a double, doubles, integers) as a double array */
static value_t double_array_of(const rcl_variant_t * o)
{
  value_t d = empty_value(rcl_interfaces__msg__ParameterType__PARAMETER_DOUBLE_ARRAY);
  size_t n = !o ? 0 : o->double_value ? 1 : o->double_array_value ? o->double_array_value->size :
    o->integer_array_value ? o->integer_array_value->size : 0;
  if (!rosidl_runtime_c__double__Sequence__init(&d.double_array_value, n)) {return d;}
  for (size_t i = 0; i < n; i++) {
    d.double_array_value.data[i] = o->double_value ? *o->double_value :
      o->double_array_value ? o->double_array_value->values[i] :
      (double)o->integer_array_value->values[i];
  }
  return d;
}

/* double array of 1 (broadcast) or n values into out; -1 when absent or empty, 1 on a bad
 * length */
static int param_per_joint(const params_t * P, const char * name, int n, double * out)
{
  const value_t * v = lookup(P, name);
  if (!v) {
    value_t d = double_array_of(override_of(P, name));
    v = declare(P, name, &d);
  }
  if (!v || v->type != rcl_interfaces__msg__ParameterType__PARAMETER_DOUBLE_ARRAY) {return 1;}
  const size_t size = v->double_array_value.size;
  if (size == 0) {return -1;}
  if (size != 1 && size != (size_t)n) {return 1;}
  for (int i = 0; i < n; i++) {out[i] = v->double_array_value.data[size == 1 ? 0 : i];}
  return 0;
}

/* ------------------------------------------------------------------ controller */
/* what a parameter set may change while the node runs (apply_parameters) */
typedef struct
{
  control_law_t law;
  double kp[MAX_JOINTS], kd[MAX_JOINTS], ct_kp[MAX_JOINTS], ct_kd[MAX_JOINTS];
  double effort_scale, watchdog_timeout, blend_time, resume_tolerance, resume_time;
} runtime_t;

typedef struct
{
  int n;
  const char * joints[MAX_JOINTS];
  int cmd_index[MAX_JOINTS];        /* command slot i takes model joint cmd_index[i] */
  int order_state;                  /* ORDER_*: commands go out only when known */
  int order_warn;                   /* known, but the model order as a fall-back */
  double order_deadline, order_sent, order_timeout;
  char receiver[256], order_message[1024];
  const params_t * params;
  runtime_t rt;
  double effort_limits[MAX_JOINTS], limits[MAX_JOINTS];  /* limits: effort_limits x scale */
  unsigned char continuous[MAX_JOINTS];
  law_gains_t gains;                /* of rt */
  char model_kind[32];
  int follow_learner;               /* learned, without a file of its own: learner/model_update */
  char latest_update[4096];         /* the learner's latest checkpoint ('' none yet) */
  int residual;                     /* delan_residual: each DeLaN is added to rb */
  rigid_body * rb;                  /* pinocchio, identified, delan_residual */
  model_t model, old_model;         /* old: faded out over blend_time after a switch; their
                                     * DeLaNs are owned here, rb and old_rb too */
  rigid_body * old_rb;              /* the rigid-body model before a switch, until faded out */
  /* the URDF's rigid-body model whose mass matrix the URDF-feedback laws feed back through,
   * whatever the model (NULL until such a law is set), and the rigid_body_file it was read from */
  rigid_body * feedback;
  char feedback_path[4096];
  int blending;                     /* an old model is faded out; blend_start NAN: from the
                                       next state's stamp */
  double blend_start;
  double velocity_limits[MAX_JOINTS];
  /* reference: the trajectory, the offset that rejoins it after a stall, and the deviation
   * "arm minus reference" of the last command on it (none: have_deviation 0); pending: one
   * arrived, taken up at the next joint state (reference_adopt); target_qdd: the last target's
   * acceleration, where a take-up or a rejoin starts the target's (no feed-forward step) */
  reference_t * ref, * rejoin, * pending;
  double deviation[2 * MAX_JOINTS];
  int have_deviation;
  double target_qdd[MAX_JOINTS];
  double q_ref[MAX_JOINTS], qd_ref[MAX_JOINTS], qdd_ref[MAX_JOINTS];
  double off_q[MAX_JOINTS], off_qd[MAX_JOINTS], off_qdd[MAX_JOINTS];
  /* state */
  double hold[MAX_JOINTS], q[MAX_JOINTS], qd[MAX_JOINTS];
  double tau[MAX_JOINTS], tau_old[MAX_JOINTS], work[4 * MAX_JOINTS];
  int msg_index[MAX_JOINTS];
  int stale, have_stamp, have_candidate;
  double last_stamp, candidate, last_state_time;
  /* the previous state's position, velocity and stamp, for jump detection (have_last_q 0:
   * none) */
  double last_q[MAX_JOINTS], last_qd[MAX_JOINTS], last_q_t;
  int have_last_q;
  /* counters (diagnostics) */
  int64_t commands_sent, fallbacks, watchdog_trips, rejected, model_loads;
  int64_t updates_refused;          /* learner versions refused (adopt_model), as the Python
                                     * node's updates_refused */
  int64_t references, references_rejected, references_rejoined, references_dropped;
  char last_reject[160];
  /* rejected joint states by reason (REJECT_REASONS) and when each was last logged; when the
   * model's torque was last found non-finite and logged (0: never) */
  int64_t rejected_by[N_REJECT_REASONS];
  double reject_logged[N_REJECT_REASONS], fallback_logged;
  loop_stats_t stats;
  loop_breakdown_t breakdown;
} controller_t;

/* delan_common.ros.rejections.RejectionCounter: counted by reason, each reason logged at most
 * every LOG_PERIOD_S (a flood of one reason neither floods the log nor hides another) */
static int reject(controller_t * c, const char * reason, const char * detail)
{
  int k = 0;
  while (k < N_REJECT_REASONS - 1 && strcmp(REJECT_REASONS[k], reason) != 0) {k++;}
  c->rejected++;
  c->rejected_by[k]++;
  const double now = mono_s();
  if (c->rejected_by[k] == 1 || now - c->reject_logged[k] >= LOG_PERIOD_S) {
    c->reject_logged[k] = now;
    fprintf(stderr, "[torque_controller_rt] rejected joint state (%s, %lld so far): %s\n",
      reason, (long long)c->rejected_by[k], detail);
  }
  snprintf(c->last_reject, sizeof(c->last_reject), "%s", reason);
  return 0;
}

/* delan_common.joint_state.StampGate: backwards or > 1 s ahead is rejected unless it
 * continues a rejected candidate (a restarted clock costs one message) */
static int stamp_continues(int have, double ref, double t)
{
  return have && t - ref >= 0.0 && t - ref <= MAX_STAMP_JUMP_S;
}

static const char * stamp_check(controller_t * c, double t)
{
  if (!isfinite(t)) {return "bad_stamp";}
  if (!c->have_stamp || stamp_continues(1, c->last_stamp, t) ||
    stamp_continues(c->have_candidate, c->candidate, t))
  {
    c->last_stamp = t;
    c->have_stamp = 1;
    c->have_candidate = 0;
    return NULL;
  }
  c->candidate = t;
  c->have_candidate = 1;
  return t - c->last_stamp > MAX_STAMP_JUMP_S ? "stamp_jump" : "stamp_backwards";
}

/* delan_common.joint_state.JointStateMapper: names, lengths, finiteness */
static int map_state(controller_t * c, const sensor_msgs__msg__JointState * m)
{
  const size_t nm = m->name.size;
  char detail[128];
  if (nm == 0) {return reject(c, "empty", "joint state has no names");}
  for (size_t a = 0; a < nm; a++) {
    for (size_t b = a + 1; b < nm; b++) {
      if (strcmp(m->name.data[a].data, m->name.data[b].data) == 0) {
        return reject(c, "duplicate_names", m->name.data[a].data);
      }
    }
  }
  for (int i = 0; i < c->n; i++) {
    c->msg_index[i] = -1;
    for (size_t a = 0; a < nm; a++) {
      if (strcmp(m->name.data[a].data, c->joints[i]) == 0) {c->msg_index[i] = (int)a;}
    }
    if (c->msg_index[i] < 0) {return reject(c, "missing_joints", c->joints[i]);}
  }
  snprintf(detail, sizeof(detail), "%zu names, %zu positions, %zu velocities, %zu efforts", nm,
    m->position.size, m->velocity.size, m->effort.size);
  if (m->position.size != nm) {return reject(c, "length_mismatch", detail);}
  if (m->velocity.size == 0) {return reject(c, "no_velocity", detail);}
  if (m->velocity.size != nm || (m->effort.size != 0 && m->effort.size != nm)) {
    return reject(c, "length_mismatch", detail);
  }
  for (int i = 0; i < c->n; i++) {
    int k = c->msg_index[i];
    c->q[i] = m->position.data[k];
    c->qd[i] = m->velocity.data[k];
    if (!isfinite(c->q[i]) || !isfinite(c->qd[i]) ||
      (m->effort.size && !isfinite(m->effort.data[k])))
    {
      return reject(c, "non_finite", "NaN or Inf in joint state");
    }
  }
  return 1;
}

/* a position difference of joint i: modulo 2 pi for a continuous joint */
static double joint_apart(const controller_t * c, int i, double d)
{
  return c->continuous[i] ? wrap_angle(d) : d;
}

/* reference_tracking.ReferenceTracker.resume: what the stall added to the deviation "arm
 * minus reference" is brought back in over resume_time and the target's acceleration goes on
 * from the last target's (no torque step), or the reference is dropped when the arm is more
 * than resume_tolerance from it (the arm is elsewhere). */
static void reference_on_resume(controller_t * c, double t, const char * cause)
{
  if (!c->ref) {return;}
  const int n = c->n;
  double grown[2 * MAX_JOINTS], error = 0.0;
  /* a rejoin under way goes on from where it is at t, with what the gap added */
  double off[3 * MAX_JOINTS] = {0.0}, grown_qdd[MAX_JOINTS];
  int negligible = 1;
  reference_sample(c->ref, t, c->q_ref, c->qd_ref, c->qdd_ref);
  if (c->rejoin) {reference_sample(c->rejoin, t, off, off + n, off + 2 * n);}
  for (int i = 0; i < n; i++) {
    grown[i] = c->q[i] - c->q_ref[i] - off[i];
    grown[n + i] = c->qd[i] - c->qd_ref[i] - off[n + i];
    if (c->have_deviation) {
      grown[i] -= c->deviation[i];
      grown[n + i] -= c->deviation[n + i];
    }
    grown[i] = joint_apart(c, i, grown[i]);
    grown_qdd[i] = c->target_qdd[i] - c->qdd_ref[i] - off[2 * n + i];
    negligible &= fabs(grown[i]) <= REJOIN_NEGLIGIBLE_Q &&
      fabs(grown[n + i]) <= REJOIN_NEGLIGIBLE_QD && fabs(grown_qdd[i]) <= REJOIN_NEGLIGIBLE_QDD;
    if (fabs(grown[i]) > error) {error = fabs(grown[i]);}
  }
  if (negligible) {return;}
  reference_free(c->rejoin);
  c->rejoin = NULL;
  if (error <= c->rt.resume_tolerance) {
    for (int i = 0; i < n; i++) {
      off[i] += grown[i];
      off[n + i] += grown[n + i];
      off[2 * n + i] += grown_qdd[i];
    }
    c->rejoin = reference_rejoin(n, t, off, off + n, off + 2 * n, c->velocity_limits,
        c->rt.resume_time, 0.25);
    if (c->rejoin) {
      c->references_rejoined++;
      fprintf(stderr, "[torque_controller_rt] rejoining the reference (%s left it %.3f "
        "farther from the arm) over %.2f s\n", cause, error, reference_end_time(c->rejoin) - t);
      return;
    }
  }
  reference_free(c->ref);
  c->ref = NULL;
  c->references_dropped++;
  fprintf(stderr, "[torque_controller_rt] reference dropped: %.3f farther from the arm after "
    "%s (resume_tolerance %g); holding the current position until a new reference "
    "arrives\n", error, cause, c->rt.resume_tolerance);
}

/* q_ref, qd_ref, qdd_ref of this cycle: the reference (and the rejoin offset) at t, or the
 * held position at rest */
static void reference_now(controller_t * c, double t)
{
  const int n = c->n;
  if (!c->ref) {
    memcpy(c->q_ref, c->hold, sizeof(double) * n);
    memset(c->qd_ref, 0, sizeof(double) * n);
    memset(c->qdd_ref, 0, sizeof(double) * n);
    memset(c->target_qdd, 0, sizeof(double) * n);
    return;
  }
  reference_sample(c->ref, t, c->q_ref, c->qd_ref, c->qdd_ref);
  if (c->rejoin) {
    reference_sample(c->rejoin, t, c->off_q, c->off_qd, c->off_qdd);
    for (int i = 0; i < n; i++) {
      c->q_ref[i] += c->off_q[i];
      c->qd_ref[i] += c->off_qd[i];
      c->qdd_ref[i] += c->off_qdd[i];
    }
    if (t >= reference_end_time(c->rejoin)) {
      reference_free(c->rejoin);
      c->rejoin = NULL;
    }
  }
  for (int i = 0; i < n; i++) {
    c->deviation[i] = c->q[i] - c->q_ref[i];
    c->deviation[n + i] = c->qd[i] - c->qd_ref[i];
  }
  memcpy(c->target_qdd, c->qdd_ref, sizeof(double) * n);
  c->have_deviation = 1;
}

/* reference_tracking.ReferenceTracker.adopt: the reference that arrived since the last state
 * is taken up. One that continues the current reference (the same course at t: a splice)
 * replaces it, nothing else changes; any other begins where the arm is, with the last
 * target's acceleration, and joins its course over resume_time (no torque step), or is
 * dropped and the arm held where it is when its first point lies farther than
 * resume_tolerance from the arm. */
static void reference_adopt(controller_t * c, double t)
{
  const int n = c->n;
  double now[3 * MAX_JOINTS], old[3 * MAX_JOINTS], off[3 * MAX_JOINTS];
  double distance = 0.0, error = 0.0;
  reference_t * ref = c->pending;
  c->pending = NULL;
  reference_sample(ref, t, now, now + n, now + 2 * n);
  if (c->ref) {
    int splice = 1;
    reference_sample(c->ref, t, old, old + n, old + 2 * n);
    for (int i = 0; i < n; i++) {
      splice &= fabs(joint_apart(c, i, old[i] - now[i])) <= REJOIN_NEGLIGIBLE_Q &&
        fabs(old[n + i] - now[n + i]) <= REJOIN_NEGLIGIBLE_QD;
    }
    if (splice) {
      reference_free(c->ref);
      c->ref = ref;
      return;
    }
  }
  int negligible = 1;
  for (int i = 0; i < n; i++) {
    const double first = fabs(joint_apart(c, i, c->q[i] - ref->q[i]));
    if (first > distance) {distance = first;}
    off[i] = joint_apart(c, i, c->q[i] - now[i]);
    off[n + i] = c->qd[i] - now[n + i];
    off[2 * n + i] = c->target_qdd[i] - now[2 * n + i];
    negligible &= fabs(off[i]) <= REJOIN_NEGLIGIBLE_Q && fabs(off[n + i]) <= REJOIN_NEGLIGIBLE_QD &&
      fabs(off[2 * n + i]) <= REJOIN_NEGLIGIBLE_QDD;
    if (fabs(off[i]) > error) {error = fabs(off[i]);}
  }
  reference_free(c->rejoin);
  reference_free(c->ref);
  c->rejoin = NULL;
  c->ref = ref;
  c->have_deviation = 0;
  if (distance <= c->rt.resume_tolerance) {
    if (negligible) {return;}
    c->rejoin = reference_rejoin(n, t, off, off + n, off + 2 * n, c->velocity_limits,
        c->rt.resume_time, 0.25);
    if (c->rejoin) {
      fprintf(stderr, "[torque_controller_rt] new reference taken up from the arm, %.3f from "
        "its course, joined over %.2f s\n", error, reference_end_time(c->rejoin) - t);
      return;
    }
  }
  reference_free(c->ref);
  c->ref = NULL;
  memcpy(c->hold, c->q, sizeof(double) * n);
  c->references_dropped++;
  fprintf(stderr, "[torque_controller_rt] new reference dropped: its first point is %.3f from "
    "the arm (resume_tolerance %g); holding the current position until a nearer reference "
    "arrives\n", distance, c->rt.resume_tolerance);
}

/* continuity.JumpDetector.check: the largest joint step when the state at t is a jump of the
 * arm from the previous one, else -1; remembers this state. */
static double jump_check(controller_t * c, double t)
{
  const int had = c->have_last_q;
  const double dt = had && t > c->last_q_t ? t - c->last_q_t : 0.0;
  double largest = -1.0, step_max = 0.0;
  const int witness = had && dt <= WITNESS_DT;
  for (int i = 0; i < c->n; i++) {
    const double moved = joint_apart(c, i, c->q[i] - c->last_q[i]);
    const double step = fabs(moved);
    double v = c->velocity_limits[i];
    if (!(isfinite(v) && v > 0)) {v = UNLIMITED_VELOCITY;}
    if (had && step > JUMP_FACTOR * v * dt + JUMP_MARGIN) {largest = 0.0;}
    if (witness) {
      const double measured = 0.5 * (c->qd[i] + c->last_qd[i]) * dt;
      if (fabs(moved - measured) > WITNESS_MARGIN + WITNESS_SLACK * fabs(measured)) {
        largest = 0.0;
      }
    }
    if (step > step_max) {step_max = step;}
    c->last_q[i] = c->q[i];
    c->last_qd[i] = c->qd[i];
  }
  c->last_q_t = t;
  c->have_last_q = 1;
  return largest < 0.0 ? -1.0 : step_max;
}

/* the model faded out after a switch, once the blend is over */
static void drop_old_model(controller_t * c)
{
  delan_model_free(c->old_model.delan);
  rigid_body_free(c->old_rb);
  c->old_model = (model_t){NULL, NULL};
  c->old_rb = NULL;
  c->blending = 0;
}

/* One cycle (torque_controller._control): 1 when tau holds a command. */
static int control(controller_t * c, const sensor_msgs__msg__JointState * m, double now)
{
  if (!map_state(c, m)) {return 0;}
  double t = m->header.stamp.sec + 1e-9 * m->header.stamp.nanosec;
  if (t == 0.0) {t = loop_wall_ns() * 1e-9;}
  const char * bad = stamp_check(c, t);
  if (bad) {return reject(c, bad, "header stamp");}
  /* no command before the receiver's joint order is known, nor when it was refused; nor is
   * such a state one the watchdog, the hold position or the jump detector takes (the hold is
   * where the arm is when commanding begins), as on the Python node */
  if (c->order_state != ORDER_KNOWN) {return 0;}
  c->last_state_time = now;
  const int resumed = c->stale;
  if (resumed) {
    c->stale = 0;
    c->have_last_q = 0;          /* after a stall the next state is judged as a restart */
  }
  const double jump = jump_check(c, t);
  if (resumed || jump >= 0.0) {
    memcpy(c->hold, c->q, sizeof(double) * c->n);
    reference_on_resume(c, t, resumed ? "the stall" : "a jump of the arm");
    if (resumed) {
      fprintf(stderr, "[torque_controller_rt] joint states fresh: commanding\n");
    } else {
      fprintf(stderr, "[torque_controller_rt] the arm jumped %.3f between two joint states (a "
        "reset, a re-homed driver): taken as a restart\n", jump);
    }
  }
  if (c->pending) {reference_adopt(c, t);}
  reference_now(c, t);
  const int64_t fallbacks = c->fallbacks;
  if (control_torque(&c->model, c->rt.law, c->feedback, &c->gains, c->q, c->qd, c->q_ref,
    c->qd_ref, c->qdd_ref, c->tau, c->work))
  {
    c->fallbacks++;
  }
  if (c->blending) {
    if (isnan(c->blend_start)) {c->blend_start = t;}  /* timed by the states' stamps */
    double w = c->rt.blend_time > 0 ? (t - c->blend_start) / c->rt.blend_time : 1.0;
    if (w >= 0.0 && w < 1.0) {
      c->fallbacks += control_torque(&c->old_model, c->rt.law, c->feedback, &c->gains, c->q,
        c->qd, c->q_ref, c->qd_ref, c->qdd_ref, c->tau_old, c->work);
      for (int i = 0; i < c->n; i++) {c->tau[i] = w * c->tau[i] + (1.0 - w) * c->tau_old[i];}
    } else {
      drop_old_model(c);
    }
  }
  if (c->fallbacks > fallbacks && (c->fallback_logged == 0.0 ||
    now - c->fallback_logged >= LOG_PERIOD_S))
  {
    c->fallback_logged = now;
    fprintf(stderr, "[torque_controller_rt] ERROR: model %s returned non-finite torque: PD "
      "fallback (%lld so far)\n", c->model_kind, (long long)c->fallbacks);
  }
  clamp_torque(c->n, c->tau, c->limits);
  return 1;
}

/* 0 with the reason when a model's joints (count and names(i)) are not the controller's */
static int same_joints(const controller_t * c, const char * path, int n,
  const char * (*name)(const void *, int), const void * model, char * err, size_t err_len)
{
  if (n != c->n) {
    snprintf(err, err_len, "%s has %d joints, the controller %d", path, n, c->n);
    return 0;
  }
  for (int i = 0; i < n; i++) {
    if (strcmp(name(model, i), c->joints[i]) != 0) {
      snprintf(err, err_len, "%s: joint %d is %s, not %s", path, i, name(model, i),
        c->joints[i]);
      return 0;
    }
  }
  return 1;
}

static const char * delan_name(const void * m, int i) {return delan_model_joint_name(m, i);}
static const char * rb_name(const void * m, int i) {return rigid_body_joint_name(m, i);}

/* the DeLaN weights at path, on the controller's joints, for model kind (delan or
 * delan_residual: the file's role must be the same, as the same networks are a fraction of the
 * torque as a residual's and the whole of it as a model's); NULL with the reason */
static delan_model * load_delan(const controller_t * c, const char * kind, const char * path,
  char * err, size_t err_len)
{
  delan_model * m = delan_model_load(path, err, err_len);
  if (m && strcmp(delan_model_kind(m), kind) != 0) {
    snprintf(err, err_len, "%s holds the weights of a %s model, not of %.100s", path,
      delan_model_kind(m), kind);
    delan_model_free(m);
    m = NULL;
  }
  if (m && !same_joints(c, path, delan_model_dof(m), delan_name, m, err, err_len)) {
    delan_model_free(m);
    m = NULL;
  }
  return m;
}

/* a learner version: switched to bumplessly; 0 when refused (logged, counted) */
static int adopt_model(controller_t * c, const char * path)
{
  char err[4600];
  delan_model * m = load_delan(c, c->model_kind, path, err, sizeof(err));
  if (!m) {
    c->updates_refused++;
    fprintf(stderr, "[torque_controller_rt] model refused: %s\n", err);
    return 0;
  }
  drop_old_model(c);
  c->old_model = c->model;
  c->model = (model_t){c->residual ? c->rb : NULL, m};
  c->blending = 1;
  c->blend_start = NAN;
  c->model_loads++;
  fprintf(stderr, "[torque_controller_rt] DeLaN%s v%lld from %s\n", c->residual ? " residual" :
    "", (long long)delan_model_version(m), path);
  return 1;
}

/* torque_controller._on_reference: a JointTrajectory with every controlled joint (any order,
 * others ignored) and positions on every point; stamped 0: from now. Taken up at the next
 * joint state (reference_adopt); a bad one is counted and the current reference kept. */
static void on_reference(controller_t * c, const trajectory_msgs__msg__JointTrajectory * m)
{
  const int n = c->n;
  const size_t names = m->joint_names.size, points = m->points.size;
  int idx[MAX_JOINTS];
  char err[160] = "";
  double * buf = NULL;
  for (int i = 0; i < n && !*err; i++) {
    idx[i] = -1;
    for (size_t a = 0; a < names; a++) {
      if (strcmp(m->joint_names.data[a].data, c->joints[i]) == 0) {idx[i] = (int)a;}
    }
    if (idx[i] < 0) {snprintf(err, sizeof(err), "reference lacks joint %s", c->joints[i]);}
  }
  if (!*err && points == 0) {snprintf(err, sizeof(err), "reference has no points");}
  /* one pass: every point carries the fields of the first (ragged rows are refused, as the
   * Python node refuses them), each with one value per joint name */
  static const char * const field[3] = {"positions", "velocities", "accelerations"};
  int has[3] = {0, 0, 0};
  for (size_t k = 0; k < points && !*err; k++) {
    const trajectory_msgs__msg__JointTrajectoryPoint * p = &m->points.data[k];
    const size_t len[3] = {p->positions.size, p->velocities.size, p->accelerations.size};
    for (int f = 0; f < 3 && !*err; f++) {
      if (k == 0) {has[f] = len[f] != 0;}
      if (len[f] && len[f] != names) {
        snprintf(err, sizeof(err), "%s of some points has the wrong length", field[f]);
      } else if ((len[f] != 0) != has[f]) {
        snprintf(err, sizeof(err), "some points lack a field that others have");
      }
    }
  }
  if (!*err && !has[0]) {snprintf(err, sizeof(err), "reference points have no positions");}
  const int has_qd = has[1], has_qdd = has[2];
  if (!*err) {
    buf = malloc(sizeof(double) * points * (1 + 3 * (size_t)n));
    if (!buf) {snprintf(err, sizeof(err), "out of memory");}
  }
  reference_t * ref = NULL;
  if (!*err) {
    double * t = buf, * q = buf + points, * qd = q + points * n, * qdd = qd + points * n;
    double t0 = m->header.stamp.sec + 1e-9 * m->header.stamp.nanosec;
    if (t0 == 0.0) {t0 = loop_wall_ns() * 1e-9;}
    for (size_t k = 0; k < points; k++) {
      const trajectory_msgs__msg__JointTrajectoryPoint * p = &m->points.data[k];
      t[k] = t0 + p->time_from_start.sec + 1e-9 * p->time_from_start.nanosec;
      for (int i = 0; i < n; i++) {
        q[k * n + i] = p->positions.data[idx[i]];
        qd[k * n + i] = has_qd ? p->velocities.data[idx[i]] : 0.0;
        qdd[k * n + i] = has_qdd ? p->accelerations.data[idx[i]] : 0.0;
      }
    }
    ref = reference_create(n, (int)points, t, q, has_qd ? qd : NULL, has_qdd ? qdd : NULL, err,
        sizeof(err));
  }
  free(buf);
  if (!ref) {
    c->references_rejected++;
    fprintf(stderr, "[torque_controller_rt] reference rejected (%lld so far): %s\n",
      (long long)c->references_rejected, err);
    return;
  }
  reference_free(c->pending);
  c->pending = ref;
  c->references++;
}

/* ------------------------------------------------------------------ messages */
static void publish_command(rcl_publisher_t * pub, std_msgs__msg__Float64MultiArray * cmd,
  const controller_t * c, const double * tau)
{
  for (int i = 0; i < c->n; i++) {cmd->data.data[i] = tau ? tau[c->cmd_index[i]] : 0.0;}
  rcl_ret_t rc = rcl_publish(pub, cmd, NULL);
  if (rc != RCL_RET_OK) {
    fprintf(stderr, "[torque_controller_rt] publish failed: %s\n", rcl_get_error_string().str);
    rcl_reset_error();
  }
}

static void kv(diagnostic_msgs__msg__KeyValue__Sequence * seq, size_t * k, const char * key,
  const char * fmt, ...)
{
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  loop_pairs_t p = {seq, *k};
  loop_put_pair(&p, key, buf);
  *k = p.k;
}

static void publish_diagnostics(rcl_publisher_t * pub, controller_t * c, const char * fqn,
  const char * hw)
{
  diagnostic_msgs__msg__DiagnosticArray arr;
  diagnostic_msgs__msg__DiagnosticStatus * st = loop_diagnostics_init(&arr);
  /* the command order first (ERROR refused, WARN waiting or fallen back), then staleness */
  char message[1100] = "ok";
  if (c->order_state == ORDER_REFUSED) {
    st->level = diagnostic_msgs__msg__DiagnosticStatus__ERROR;
    snprintf(message, sizeof(message), "%s", c->order_message);
  } else if (c->order_state == ORDER_PENDING) {
    st->level = diagnostic_msgs__msg__DiagnosticStatus__WARN;
    snprintf(message, sizeof(message), "waiting for the joint order of %s", c->receiver);
  } else if (c->order_warn) {
    st->level = diagnostic_msgs__msg__DiagnosticStatus__WARN;
    snprintf(message, sizeof(message), "%s", c->order_message);
  }
  if (c->order_state == ORDER_KNOWN && c->stale && c->commands_sent) {
    st->level = diagnostic_msgs__msg__DiagnosticStatus__WARN;
    snprintf(message, sizeof(message), "joint states stale: not commanding");
  }
  rosidl_runtime_c__String__assign(&st->name, fqn);
  rosidl_runtime_c__String__assign(&st->hardware_id, hw);
  rosidl_runtime_c__String__assign(&st->message, message);
  size_t k = 0;
  kv(&st->values, &k, "model", "%s", c->model_kind);
  kv(&st->values, &k, "model_version", "%lld",
    (long long)(c->model.delan ? delan_model_version(c->model.delan) : 0));
  kv(&st->values, &k, "law", "%s", control_law_name(c->rt.law));
  kv(&st->values, &k, "commands_sent", "%lld", (long long)c->commands_sent);
  kv(&st->values, &k, "fallbacks", "%lld", (long long)c->fallbacks);
  kv(&st->values, &k, "watchdog_trips", "%lld", (long long)c->watchdog_trips);
  kv(&st->values, &k, "rejected_joint_states", "%lld", (long long)c->rejected);
  kv(&st->values, &k, "last_rejection", "%s", c->last_reject);
  kv(&st->values, &k, "model_loads", "%lld", (long long)c->model_loads);
  kv(&st->values, &k, "updates_refused", "%lld", (long long)c->updates_refused);
  kv(&st->values, &k, "holding", "%s", c->ref ? "false" : "true");
  kv(&st->values, &k, "references_received", "%lld", (long long)c->references);
  kv(&st->values, &k, "rejected_references", "%lld", (long long)c->references_rejected);
  kv(&st->values, &k, "references_rejoined", "%lld", (long long)c->references_rejoined);
  kv(&st->values, &k, "references_dropped", "%lld", (long long)c->references_dropped);
  kv(&st->values, &k, "command_order", "%s%s", c->order_state == ORDER_PENDING ? "pending" :
    c->order_state == ORDER_REFUSED ? "refused: " : c->order_warn ? "model order (fallback)" :
    "", c->order_state == ORDER_KNOWN && !c->order_warn ? c->receiver :
    c->order_state == ORDER_REFUSED ? c->receiver : "");
  /* the loop's timing and its breakdown (loop_timing.h), and the next period begins */
  loop_diagnostics_publish(pub, &arr, k, &c->stats, &c->breakdown);
}

/* ------------------------------------------------------------------ set-up */
static int die(const char * msg)
{
  fprintf(stderr, "[torque_controller_rt] %s\n", msg);
  return 1;
}

/* a call whose failure changes nothing here (clean-up, wait-set refills) */
#define SOFT(x) do {if ((x) != RCL_RET_OK) {rcl_reset_error();}} while (0)

#define CHECK(x) do {if ((x) != RCL_RET_OK) {fprintf(stderr, \
        "[torque_controller_rt] %s failed: %s\n", #x, rcl_get_error_string().str); \
        return 1;}} while (0)

/* name as a Python string in a Python list being written to buf ("['a', 'b'" so far) */
static void list_add(char * buf, size_t size, const char * name)
{
  size_t len = strlen(buf);
  if (len < size) {snprintf(buf + len, size - len, "%s'%s'", len > 1 ? ", " : "", name);}
}

/* names as a Python list: ['a', 'b'] */
static void list_of(char * buf, size_t size, const char * const * names, size_t n)
{
  snprintf(buf, size, "[");
  for (size_t i = 0; i < n; i++) {list_add(buf, size, names[i]);}
  size_t len = strlen(buf);
  if (len < size) {snprintf(buf + len, size - len, "]");}
}

/* cmd_index from a joint order (CommandOrder): 0 with the reason when the names are not the
 * model's joints, each once, in the words of delan_common.command_order.order_mismatch:
 * "joints [...] are not the model joints [...]: repeated [...], missing [...], extra [...]" */
static int order_from_names(controller_t * c, const char * const * order, size_t n_order,
  char * err, size_t err_len)
{
  char repeated[300] = "[", missing[300] = "[", extra[300] = "[";
  int bad = 0;
  for (size_t i = 0; i < n_order; i++) {
    size_t before = 0;  /* earlier occurrences: listed at the second one, once */
    for (size_t k = 0; k < i; k++) {before += strcmp(order[i], order[k]) == 0;}
    if (before == 1) {list_add(repeated, sizeof(repeated), order[i]); bad |= 1;}
    int known = 0;
    for (int j = 0; j < c->n; j++) {known |= strcmp(order[i], c->joints[j]) == 0;}
    if (!known && before == 0) {list_add(extra, sizeof(extra), order[i]); bad |= 4;}
  }
  for (int j = 0; j < c->n; j++) {
    int found = 0;
    for (size_t i = 0; i < n_order; i++) {found |= strcmp(order[i], c->joints[j]) == 0;}
    if (!found) {list_add(missing, sizeof(missing), c->joints[j]); bad |= 2;}
  }
  if (bad) {
    char given[400], model[400];
    list_of(given, sizeof(given), order, n_order);
    list_of(model, sizeof(model), c->joints, (size_t)c->n);
    int len = snprintf(err, err_len, "joints %s are not the model joints %s: ", given, model);
    const char * part[3] = {"repeated", "missing", "extra"};
    const char * list[3] = {repeated, missing, extra};
    for (int k = 0, first = 1; k < 3; k++) {
      if (!(bad & (1 << k)) || len < 0 || (size_t)len >= err_len) {continue;}
      len += snprintf(err + len, err_len - (size_t)len, "%s%s %s]", first ? "" : ", ", part[k],
        list[k]);
      first = 0;
    }
    return 0;
  }
  for (size_t i = 0; i < n_order; i++) {
    for (int j = 0; j < c->n; j++) {
      if (strcmp(order[i], c->joints[j]) == 0) {c->cmd_index[i] = j;}
    }
  }
  return 1;
}

static void order_decided(controller_t * c, int state, int warn, const char * message)
{
  c->order_state = state;
  c->order_warn = warn;
  snprintf(c->order_message, sizeof(c->order_message), "%s", message);
  fprintf(stderr, "[torque_controller_rt] %s%s\n", state == ORDER_REFUSED ? "ERROR: " :
    warn ? "WARNING: " : "", message);
}

/* the model order as the fall-back, with the warning of ReceiverOrderQuery._fallback */
static void order_fallback(controller_t * c, const char * why)
{
  for (int i = 0; i < c->n; i++) {c->cmd_index[i] = i;}
  char msg[1024];
  snprintf(msg, sizeof(msg), "%.600s: commanding in the model joint order, which drives the "
    "wrong motors if the receiving controller orders its joints otherwise; set command_joints "
    "or effort_controller_name", why);
  order_decided(c, ORDER_KNOWN, 1, msg);
}

/* The receiver's answer to GetParameters(['joints']). */
static void order_answer(controller_t * c, const rcl_interfaces__srv__GetParameters_Response * r)
{
  char msg[1024], err[900];
  const rcl_interfaces__msg__ParameterValue * v = r->values.size ? &r->values.data[0] : NULL;
  if (!v || v->type != rcl_interfaces__msg__ParameterType__PARAMETER_STRING_ARRAY) {
    snprintf(msg, sizeof(msg), "%s has no joints parameter naming joints", c->receiver);
    order_fallback(c, msg);
    return;
  }
  size_t n = v->string_array_value.size;
  if (n == 0) {
    /* the suite's sim reads [] as the URDF's main chain, in model order */
    for (int i = 0; i < c->n; i++) {c->cmd_index[i] = i;}
    snprintf(msg, sizeof(msg), "commanding in the joint order of %s (its empty joints: the "
      "main chain): the model order", c->receiver);
    order_decided(c, ORDER_KNOWN, 0, msg);
    return;
  }
  const char * names[MAX_JOINTS];
  if (n > MAX_JOINTS) {
    snprintf(err, sizeof(err), "%zu joints, the model has %d", n, c->n);
  } else {
    for (size_t i = 0; i < n; i++) {names[i] = v->string_array_value.data[i].data;}
  }
  if (n > MAX_JOINTS || !order_from_names(c, names, n, err, sizeof(err))) {
    snprintf(msg, sizeof(msg), "refusing to command: %.100s takes commands for %.850s",
      c->receiver, err);
    order_decided(c, ORDER_REFUSED, 0, msg);
    return;
  }
  int model_order = 1;
  for (int i = 0; i < c->n; i++) {model_order &= c->cmd_index[i] == i;}
  size_t len = (size_t)snprintf(msg, sizeof(msg), "commanding in the joint order of %s: [",
    c->receiver);
  for (size_t i = 0; i < n && len < sizeof(msg); i++) {
    len += (size_t)snprintf(msg + len, sizeof(msg) - len, "%s%s", i ? ", " : "", names[i]);
  }
  if (len < sizeof(msg)) {
    snprintf(msg + len, sizeof(msg) - len, "] (%s)", model_order ? "the model order" :
      "reordered from the model order");
  }
  order_decided(c, ORDER_KNOWN, 0, msg);
}

/* ------------------------------------------------------------------ configuration */
/* name's 1 or n finite values in [0, hi] into out; 0 with the reason */
static int param_nonnegative(const params_t * P, const char * name, int n, double hi,
  double * out, char * err, size_t err_len)
{
  if (param_per_joint(P, name, n, out) != 0) {
    snprintf(err, err_len, "%s needs 1 or %d values (no URDF here to derive it from: the "
      "launch files fill it in)", name, n);
    return 0;
  }
  for (int i = 0; i < n; i++) {
    if (!isfinite(out[i]) || out[i] < 0 || out[i] > hi) {
      if (isinf(hi)) {
        snprintf(err, err_len, "%s values must be finite and >= 0", name);
      } else {
        snprintf(err, err_len, "%s values must be finite and in [0, %g]", name, hi);
      }
      return 0;
    }
  }
  return 1;
}

/* The settings a parameter set may change (RUNTIME_PARAMETERS but the model's) into rt, in
 * the Python node's ranges; 0 with the reason. */
static int read_runtime(runtime_t * rt, int n, const params_t * P, char * err, size_t err_len)
{
  const char * per_joint[4] = {"kp", "kd", "ct_kp", "ct_kd"};
  double * dst[4] = {rt->kp, rt->kd, rt->ct_kp, rt->ct_kd};
  for (int k = 0; k < 4; k++) {
    if (!param_nonnegative(P, per_joint[k], n, MAX_GAIN, dst[k], err, err_len)) {return 0;}
  }
  const char * law = param_string(P, "law", "computed_torque");
  const int parsed = control_law_parse(law);
  if (parsed < 0) {
    snprintf(err, err_len, "law=%.100s is not one of computed_torque, feedforward_pd, "
      "computed_torque_urdf_feedback, feedforward_urdf_pd", law);
    return 0;
  }
  rt->law = (control_law_t)parsed;
  rt->effort_scale = param_double(P, "effort_limit_scale", 1.0);
  rt->watchdog_timeout = param_double(P, "watchdog_timeout", 0.1);
  rt->blend_time = param_double(P, "switch_blend_time", 0.2);
  rt->resume_tolerance = param_double(P, "resume_tolerance", 1.0);
  rt->resume_time = param_double(P, "resume_time", 1.0);
  const struct {const char * name; double value, lo, hi;} ranges[5] = {
    {"effort_limit_scale", rt->effort_scale, 0.01, 1.0},
    {"watchdog_timeout", rt->watchdog_timeout, 0.001, 10.0},
    {"switch_blend_time", rt->blend_time, 0.0, 5.0},
    {"resume_tolerance", rt->resume_tolerance, 0.0, 1e3},
    {"resume_time", rt->resume_time, 0.0, 60.0}};
  for (int k = 0; k < 5; k++) {
    if (!(ranges[k].value >= ranges[k].lo && ranges[k].value <= ranges[k].hi)) {
      snprintf(err, err_len, "%s must be in [%g, %g]", ranges[k].name, ranges[k].lo,
        ranges[k].hi);
      return 0;
    }
  }
  return 1;
}

/* rt in force: the effort limits scaled (the gains point into rt) */
static void apply_runtime(controller_t * c, const runtime_t * rt)
{
  c->rt = *rt;
  for (int i = 0; i < c->n; i++) {c->limits[i] = c->effort_limits[i] * rt->effort_scale;}
}

/* the parameter naming the rigid-body model file of kind: the URDF's (pinocchio,
 * delan_residual) and the identified one are apart, so that a switch between them is one set */
static const char * rigid_body_parameter(const char * kind)
{
  return strcmp(kind, "identified") == 0 ? "identified_rigid_body_file" : "rigid_body_file";
}

/* The rigid-body model at path for model kind: the controller's joints, made from the URDF
 * (pinocchio, delan_residual) or from identified parameters (identified), its continuous
 * joints those of continuous_joints; NULL with the reason, which names what (the setting that
 * asks for the file: "model=pinocchio", "law=feedforward_urdf_pd"). */
static rigid_body * load_rigid_body(const controller_t * c, const char * kind, const char * what,
  const char * path, char * err, size_t err_len)
{
  if (!*path) {
    snprintf(err, err_len, "%s needs %s (no URDF here: the launch files export it, "
      "delan_control.rt_params)", what, rigid_body_parameter(kind));
    return NULL;
  }
  char why[4600];
  rigid_body * rb = rigid_body_load(path, why, sizeof(why));
  if (rb && !same_joints(c, path, rigid_body_dof(rb), rb_name, rb, why, sizeof(why))) {
    rigid_body_free(rb);
    rb = NULL;
  }
  if (!rb) {
    snprintf(err, err_len, "%s: %.440s", what, why);
    return NULL;
  }
  const int identified = !strcmp(kind, "identified");
  if (rigid_body_source(rb) != (identified ? RIGID_BODY_IDENTIFIED : RIGID_BODY_URDF)) {
    snprintf(err, err_len, "%s: %.300s holds %s parameters", what, path,
      identified ? "the URDF's, not identified" : "identified, not the URDF's");
    rigid_body_free(rb);
    return NULL;
  }
  for (int i = 0; i < c->n; i++) {
    if (rigid_body_continuous(rb, i) != c->continuous[i]) {
      snprintf(err, err_len, "%s: joint %s is %scontinuous in %.300s, %sin "
        "continuous_joints", what, c->joints[i], c->continuous[i] ? "not " : "", path,
        c->continuous[i] ? "" : "not ");
      rigid_body_free(rb);
      return NULL;
    }
  }
  return rb;
}

static int learned_kind(const char * kind)
{
  return !strcmp(kind, "delan") || !strcmp(kind, "delan_residual");
}

static int rigid_kind(const char * kind)
{
  return !strcmp(kind, "pinocchio") || !strcmp(kind, "identified") ||
         !strcmp(kind, "delan_residual");
}

/* The model P names (model; rigid_body_file, identified_rigid_body_file for identified;
 * delan_weights, else delan_checkpoint's .cw, else the learner's latest version) into *m, and
 * its rigid-body part into *rb (NULL when the kind has none; a residual's versions are added to
 * it). A learned model without any of those files is PD until the learner publishes at
 * start-up (initial), and refused at a switch, as by the Python node. 0 with the reason. */
static int load_models(const controller_t * c, const params_t * P, int initial, model_t * m,
  rigid_body ** rb, char * err, size_t err_len)
{
  const char * kind = param_string(P, "model", "pd");
  const char * weights = param_string(P, "delan_weights", "");
  const char * ckpt = param_string(P, "delan_checkpoint", "");
  const char * urdf_file = param_string(P, "rigid_body_file", "");
  const char * identified_file = param_string(P, "identified_rigid_body_file", "");
  const char * rb_path = strcmp(kind, "identified") == 0 ? identified_file : urdf_file;
  *m = (model_t){NULL, NULL};
  *rb = NULL;
  if (!learned_kind(kind) && !rigid_kind(kind) && strcmp(kind, "pd") != 0) {
    snprintf(err, err_len, "model=%.100s is not one of pd, pinocchio, identified, delan, "
      "delan_residual", kind);
    return 0;
  }
  char what[128];
  snprintf(what, sizeof(what), "model=%.100s", kind);
  if (rigid_kind(kind) && !(*rb = load_rigid_body(c, kind, what, rb_path, err, err_len))) {
    return 0;
  }
  if (!learned_kind(kind)) {
    *m = (model_t){*rb, NULL};
    return 1;
  }
  char path[4200] = "";
  const char * file = *weights ? weights : *ckpt ? ckpt : c->latest_update;
  if (*file) {snprintf(path, sizeof(path), "%s%s", file, *weights ? "" : ".cw");}
  delan_model * d = NULL;
  if (*path) {
    char why[4600];
    if (!(d = load_delan(c, kind, path, why, sizeof(why)))) {
      snprintf(err, err_len, "model=%s: %.440s", kind, why);
    }
  } else if (!initial) {
    snprintf(err, err_len, "model=%s needs a checkpoint (delan_checkpoint, delan_weights or a "
      "model update from the learner)", kind);
  }
  if (!d && (*path || !initial)) {
    rigid_body_free(*rb);
    *rb = NULL;
    return 0;
  }
  *m = (model_t){d ? *rb : NULL, d};
  return 1;
}

/* The URDF's rigid-body model into *fb when law is a URDF-feedback law and rigid_body_file
 * names a file other than the one loaded (or none is loaded yet); NULL there otherwise. Without
 * rigid_body_file such a law is refused unless the model is pd (a plain PD, as on the Python
 * node, feeds nothing back through a model); every set runs this, so one that would leave a
 * model without the mass matrix is refused whole. 0 with the reason. */
static int load_feedback(const controller_t * c, const params_t * P, control_law_t law,
  rigid_body ** fb, char * err, size_t err_len)
{
  *fb = NULL;
  if (!control_law_urdf_feedback(law)) {return 1;}
  const char * path = param_string(P, "rigid_body_file", "");
  const char * kind = param_string(P, "model", "pd");
  if (!*path && !strcmp(kind, "pd")) {return 1;}
  if (c->feedback && !strcmp(path, c->feedback_path)) {return 1;}
  char what[160];
  snprintf(what, sizeof(what), "law=%s with model=%.100s", control_law_name(law), kind);
  return (*fb = load_rigid_body(c, "pinocchio", what, path, err, err_len)) != NULL;
}

/* fb (load_feedback's, when it loaded one) in force, read from rigid_body_file */
static void switch_feedback(controller_t * c, const params_t * P, rigid_body * fb)
{
  if (!fb) {return;}
  rigid_body_free(c->feedback);
  c->feedback = fb;
  snprintf(c->feedback_path, sizeof(c->feedback_path), "%s",
    param_string(P, "rigid_body_file", ""));
}

/* Makes the model P names, loaded as m with rigid-body part rb, the active one; the one before
 * fades out over the blend time from the next state (at once without blend). */
static void switch_models(controller_t * c, const params_t * P, model_t m, rigid_body * rb,
  int blend)
{
  const char * kind = param_string(P, "model", "pd");
  drop_old_model(c);
  c->old_model = c->model;
  c->old_rb = c->rb;
  c->model = m;
  c->rb = rb;
  snprintf(c->model_kind, sizeof(c->model_kind), "%s", kind);
  c->residual = !strcmp(kind, "delan_residual");
  c->follow_learner = learned_kind(kind) && !*param_string(P, "delan_weights", "") &&
    !*param_string(P, "delan_checkpoint", "");
  c->blending = 1;
  c->blend_start = NAN;
  if (!blend) {drop_old_model(c);}
  if (c->model.delan) {
    c->model_loads++;
    fprintf(stderr, "[torque_controller_rt] DeLaN%s v%lld\n", c->residual ? " residual" : "",
      (long long)delan_model_version(c->model.delan));
  } else if (c->follow_learner) {
    fprintf(stderr, "[torque_controller_rt] model=%s: PD until the learner publishes a "
      "version (its checkpoint's .cw file)\n", kind);
  }
}

/* whether changes call for the model to be loaded again: the model itself, or a file of the
 * (new) kind, as the Python node reloads */
static int model_touched(const params_t * P, const rcl_interfaces__msg__Parameter * changes,
  size_t n)
{
  const char * kind = param_string(P, "model", "pd");
  for (size_t i = 0; i < n; i++) {
    const char * name = changes[i].name.data;
    if (!strcmp(name, "model") ||
      (learned_kind(kind) && (!strcmp(name, "delan_checkpoint") ||
      !strcmp(name, "delan_weights"))) ||
      (rigid_kind(kind) && !strcmp(name, rigid_body_parameter(kind))))
    {
      return 1;
    }
  }
  return 0;
}

/* A parameter set (param_server's on_set, between two cycles): checked on a copy of the
 * settings and, when it touches the model, by loading the new one; applied only when all of it
 * holds, so a refused set changes nothing. */
static int apply_parameters(void * owner, const rcl_interfaces__msg__Parameter * changes,
  size_t n, char * reason, size_t len)
{
  controller_t * c = owner;
  params_t P = *c->params;
  P.changes = changes;
  P.n_changes = n;
  runtime_t rt;
  if (!read_runtime(&rt, c->n, &P, reason, len)) {return 0;}
  const int reload = model_touched(&P, changes, n);
  model_t m;
  rigid_body * rb, * fb;
  if (!load_feedback(c, &P, rt.law, &fb, reason, len)) {return 0;}
  if (reload && !load_models(c, &P, 0, &m, &rb, reason, len)) {
    rigid_body_free(fb);
    return 0;
  }
  apply_runtime(c, &rt);
  switch_feedback(c, &P, fb);
  if (reload) {
    char previous[32];
    snprintf(previous, sizeof(previous), "%s", c->model_kind);
    switch_models(c, &P, m, rb, 1);
    fprintf(stderr, "[torque_controller_rt] switched model %s -> %s (bumpless, %.2f s "
      "blend)\n", previous, c->model_kind, c->rt.blend_time);
  }
  for (size_t i = 0; i < n; i++) {
    fprintf(stderr, "[torque_controller_rt] parameter %s set\n", changes[i].name.data);
  }
  return 1;
}

static int configure(controller_t * c, const params_t * P, char * err, size_t err_len)
{
  size_t n = param_strings(P, "joint_names", c->joints, MAX_JOINTS);
  if (n == 0 || n > MAX_JOINTS) {
    snprintf(err, err_len, "joint_names (the model's joints in order) must name 1 to %d joints",
      MAX_JOINTS);
    return 0;
  }
  c->n = (int)n;
  c->params = P;
  if (!param_nonnegative(P, "effort_limits", c->n, INFINITY, c->effort_limits, err, err_len)) {
    return 0;
  }
  const char * cont[MAX_JOINTS];
  size_t n_cont = param_strings(P, "continuous_joints", cont, MAX_JOINTS);
  for (int i = 0; i < c->n; i++) {
    for (size_t j = 0; j < n_cont && j < MAX_JOINTS; j++) {
      c->continuous[i] |= strcmp(cont[j], c->joints[i]) == 0;
    }
  }
  runtime_t rt;
  if (!read_runtime(&rt, c->n, P, err, err_len)) {return 0;}
  apply_runtime(c, &rt);
  c->gains = (law_gains_t){c->n, c->rt.ct_kp, c->rt.ct_kd, c->rt.kp, c->rt.kd, c->continuous};
  /* absent: 1 rad/s (m/s) per joint for the rejoin's pace, as for a URDF without limits */
  for (int i = 0; i < c->n; i++) {c->velocity_limits[i] = 1.0;}
  if (param_per_joint(P, "velocity_limits", c->n, c->velocity_limits) > 0) {
    snprintf(err, err_len, "velocity_limits needs 1 or %d values", c->n);
    return 0;
  }
  const char * order[MAX_JOINTS];
  size_t n_order = param_strings(P, "command_joints", order, MAX_JOINTS);
  for (int i = 0; i < c->n; i++) {c->cmd_index[i] = i;}
  const char * receiver = param_string(P, "effort_controller_name", "effort_controller");
  c->order_timeout = param_double(P, "effort_controller_timeout", 5.0);
  if (!*receiver || *receiver == '~') {
    snprintf(err, err_len, "effort_controller_name='%.200s' must name the receiving controller "
      "node", receiver);
    return 0;
  }
  if (n_order) {
    char why[480];
    if (n_order > MAX_JOINTS || !order_from_names(c, order, n_order, why, sizeof(why))) {
      snprintf(err, err_len, "command_joints: %s", n_order > MAX_JOINTS ? "too many" : why);
      return 0;
    }
    c->order_state = ORDER_KNOWN;
    snprintf(c->receiver, sizeof(c->receiver), "command_joints");
  } else {
    /* asked of the receiver in the loop (ReceiverOrderQuery); no commands until known */
    snprintf(c->receiver, sizeof(c->receiver), "%s", receiver);
    if (!(c->order_timeout >= 0.1 && c->order_timeout <= 600.0)) {
      snprintf(err, err_len, "effort_controller_timeout must be in [0.1, 600]");
      return 0;
    }
    c->order_state = ORDER_PENDING;
    c->order_deadline = mono_s() + c->order_timeout;
  }
  model_t m;
  rigid_body * rb, * fb;
  if (!load_models(c, P, 1, &m, &rb, err, err_len)) {return 0;}
  switch_models(c, P, m, rb, 0);
  if (!load_feedback(c, P, c->rt.law, &fb, err, err_len)) {return 0;}
  switch_feedback(c, P, fb);
  return 1;
}

int main(int argc, char ** argv)
{
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  rcl_allocator_t alloc = rcl_get_default_allocator();
  rclc_support_t support;
  /* arguments are parsed by rcl_init; the priority is read from them first */
  rcl_arguments_t args = rcl_get_zero_initialized_arguments();
  CHECK(rcl_parse_arguments(argc, (const char * const *)argv, alloc, &args));
  rcl_params_t * early = NULL;
  CHECK(rcl_arguments_get_param_overrides(&args, &early));
  param_server * table = param_server_create();
  if (!table) {return die("out of memory");}
  params_t P = {early, "/torque_controller_rt", table, NULL, 0};
  /* the node's name is known once it exists; the priority is looked up for any name, and set
   * before the middleware's threads exist (they inherit it) */
  int prio = loop_priority_of(early);
  loop_realtime(prio, "torque_controller_rt");
  CHECK(rclc_support_init(&support, argc, (const char * const *)argv, &alloc));
  rcl_node_t node = rcl_get_zero_initialized_node();
  CHECK(rclc_node_init_default(&node, "torque_controller_rt", "", &support));
  P.fqn = rcl_node_get_fully_qualified_name(&node);

  static controller_t c;
  memset(&c, 0, sizeof(c));
  c.stale = 1;
  char err[512];
  if (!configure(&c, &P, err, sizeof(err))) {return die(err);}
  {
    /* effort_controller_name resolves as a node name, whether or not the order is asked of it
     * (the Python node's start-up check) */
    char service[300], * resolved = NULL;
    snprintf(service, sizeof(service), "%.250s/get_parameters",
      param_string(&P, "effort_controller_name", "effort_controller"));
    if (rcl_node_resolve_name(&node, service, alloc, true, false, &resolved) != RCL_RET_OK) {
      char why[1400];
      snprintf(why, sizeof(why), "effort_controller_name=%.250s is not a node name (%s)",
        param_string(&P, "effort_controller_name", ""), rcl_get_error_string().str);
      rcl_reset_error();
      return die(why);
    }
    alloc.deallocate(resolved, alloc.state);
  }
  const char * hw = param_string(&P, "hardware_id", P.fqn);
  value_t priority = empty_value(rcl_interfaces__msg__ParameterType__PARAMETER_INTEGER);
  priority.integer_value = prio;
  declare(&P, "realtime_priority", &priority);
  if (!param_server_start(table, &node, apply_parameters, &c)) {
    char why[1100];
    snprintf(why, sizeof(why), "parameter services: %s", rcl_get_error_string().str);
    return die(why);
  }

  rcl_subscription_t sub_js = rcl_get_zero_initialized_subscription();
  CHECK(loop_joint_states_init(&sub_js, &node));
  rcl_subscription_t sub_up = rcl_get_zero_initialized_subscription();
  rmw_qos_profile_t latched = rmw_qos_profile_default;
  latched.depth = 1;
  latched.durability = RMW_QOS_POLICY_DURABILITY_TRANSIENT_LOCAL;
  CHECK(rclc_subscription_init(&sub_up, &node,
    ROSIDL_GET_MSG_TYPE_SUPPORT(delan_msgs, msg, ModelUpdate), "learner/model_update", &latched));
  rcl_subscription_t sub_ref = rcl_get_zero_initialized_subscription();
  CHECK(rclc_subscription_init(&sub_ref, &node,
    ROSIDL_GET_MSG_TYPE_SUPPORT(trajectory_msgs, msg, JointTrajectory), "reference_trajectory",
    &latched));
  rcl_publisher_t pub_cmd = rcl_get_zero_initialized_publisher();
  rcl_publisher_t pub_diag = rcl_get_zero_initialized_publisher();
  CHECK(loop_publishers_init(&pub_cmd, &pub_diag, &node));

  std_msgs__msg__Float64MultiArray cmd;
  std_msgs__msg__Float64MultiArray__init(&cmd);
  rosidl_runtime_c__double__Sequence__init(&cmd.data, c.n);
  sensor_msgs__msg__JointState * js[2] = {sensor_msgs__msg__JointState__create(),
    sensor_msgs__msg__JointState__create()};
  delan_msgs__msg__ModelUpdate * up = delan_msgs__msg__ModelUpdate__create();
  trajectory_msgs__msg__JointTrajectory * traj = trajectory_msgs__msg__JointTrajectory__create();
  /* the receiving controller's joints parameter, when the order is asked of it */
  rcl_client_t order_client = rcl_get_zero_initialized_client();
  rcl_interfaces__srv__GetParameters_Request order_req;
  rcl_interfaces__srv__GetParameters_Response order_resp;
  rcl_interfaces__srv__GetParameters_Request__init(&order_req);
  rcl_interfaces__srv__GetParameters_Response__init(&order_resp);
  if (c.order_state == ORDER_PENDING) {
    char service[300];
    snprintf(service, sizeof(service), "%s/get_parameters", c.receiver);
    rcl_client_options_t copt = rcl_client_get_default_options();
    if (rcl_client_init(&order_client, &node,
      ROSIDL_GET_SRV_TYPE_SUPPORT(rcl_interfaces, srv, GetParameters), service, &copt) !=
      RCL_RET_OK)
    {
      char why[1400];
      snprintf(why, sizeof(why), "effort_controller_name=%s is not a node name (%s)",
        c.receiver, rcl_get_error_string().str);
      rcl_reset_error();
      return die(why);
    }
    const char * fq = rcl_client_get_service_name(&order_client);
    snprintf(c.receiver, sizeof(c.receiver), "%.*s", (int)(strlen(fq) -
      strlen("/get_parameters")), fq);
    rosidl_runtime_c__String__Sequence__init(&order_req.names, 1);
    rosidl_runtime_c__String__assign(&order_req.names.data[0], "joints");
  }
  rcl_wait_set_t ws = rcl_get_zero_initialized_wait_set();
  CHECK(rcl_wait_set_init(&ws, 3, 0, 0, 1, PARAM_SERVER_SERVICES, 0, &support.context,
    alloc));
  fprintf(stderr, "[torque_controller_rt] controlling %d joints with model=%s law=%s\n", c.n,
    c.model_kind, control_law_name(c.rt.law));

  double next_diag = mono_s() + 1.0;
  while (!g_stop && rcl_context_is_valid(&support.context)) {
    double now = mono_s();
    double wait = next_diag - now;
    if (!c.stale && c.rt.watchdog_timeout / 2.0 < wait) {wait = c.rt.watchdog_timeout / 2.0;}
    const int asking = c.order_state == ORDER_PENDING;
    if (asking) {
      /* ReceiverOrderQuery: a request once its services are there (again after
       * ORDER_RETRY_S without an answer), the model order past the deadline */
      bool available = false;
      if (rcl_service_server_is_available(&node, &order_client, &available) != RCL_RET_OK) {
        rcl_reset_error();
      }
      if (available && (c.order_sent == 0 || now - c.order_sent >= ORDER_RETRY_S)) {
        int64_t seq;
        if (rcl_send_request(&order_client, &order_req, &seq) == RCL_RET_OK) {
          c.order_sent = now;
        } else {
          rcl_reset_error();
        }
      }
      if (now >= c.order_deadline) {
        char why[400];
        snprintf(why, sizeof(why), "no joints from %s within %g s (%s)", c.receiver,
          c.order_timeout, c.order_sent ? "it did not answer" :
          "its parameter services never appeared");
        order_fallback(&c, why);
      }
      if (ORDER_POLL_S < wait) {wait = ORDER_POLL_S;}
    }
    SOFT(rcl_wait_set_clear(&ws));
    SOFT(rcl_wait_set_add_subscription(&ws, &sub_js, NULL));
    SOFT(rcl_wait_set_add_subscription(&ws, &sub_up, NULL));
    SOFT(rcl_wait_set_add_subscription(&ws, &sub_ref, NULL));
    param_server_wait_on(table, &ws);
    if (c.order_state == ORDER_PENDING) {SOFT(rcl_wait_set_add_client(&ws, &order_client, NULL));}
    /* the cycle's instants (loop_timing.h): the wait, the wake-up, the CPU time from there */
    loop_cycle_t cycle;
    loop_wait(&ws, wait > 0 ? RCL_S_TO_NS(wait) : 0, &c.breakdown, &cycle);
    if (c.order_state == ORDER_PENDING && ws.size_of_clients && ws.clients[0]) {
      rmw_request_id_t header;
      if (rcl_take_response(&order_client, &header, &order_resp) == RCL_RET_OK) {
        order_answer(&c, &order_resp);
      }
      rcl_reset_error();
    }
    /* only the newest state is answered */
    const int newest = ws.subscriptions[0] ? loop_take_newest(&sub_js, js, &c.stats, &cycle) :
      -1;
    if (newest >= 0 && control(&c, js[newest], mono_s()) && c.order_state == ORDER_KNOWN) {
      cycle.computed = loop_wall_ns();
      publish_command(&pub_cmd, &cmd, &c, c.tau);
      loop_command_sent(&c.stats, &c.breakdown, &cycle);
      c.commands_sent++;
    }
    if (ws.subscriptions[1]) {
      rmw_message_info_t info;
      while (rcl_take(&sub_up, up, &info, NULL) == RCL_RET_OK) {
        snprintf(c.latest_update, sizeof(c.latest_update), "%s", up->checkpoint_path.data);
        if (!c.follow_learner) {continue;}
        char path[4200];
        snprintf(path, sizeof(path), "%s.cw", c.latest_update);
        adopt_model(&c, path);
      }
      rcl_reset_error();
    }
    if (ws.subscriptions[2]) {
      rmw_message_info_t info;
      while (rcl_take(&sub_ref, traj, &info, NULL) == RCL_RET_OK) {on_reference(&c, traj);}
      rcl_reset_error();
    }
    param_server_answer(table, &ws);
    now = mono_s();
    /* the watchdog: states older than watchdog_timeout stop the commands, with one zero */
    if (!c.stale && c.last_state_time > 0 && now - c.last_state_time > c.rt.watchdog_timeout) {
      c.stale = 1;
      c.watchdog_trips++;
      if (c.order_state == ORDER_KNOWN) {publish_command(&pub_cmd, &cmd, &c, NULL);}
      fprintf(stderr, "[torque_controller_rt] joint states stale for > %.3f s: zero torque "
        "sent, commanding stopped\n", c.rt.watchdog_timeout);
    }
    if (now >= next_diag) {
      publish_diagnostics(&pub_diag, &c, P.fqn, hw);
      next_diag = now + 1.0;
    }
  }
  fprintf(stderr, "[torque_controller_rt] shutting down\n");
  teardown_deadline("torque_controller_rt", TEARDOWN_TIMEOUT_S);
  teardown_stage("the wait set and the parameter client");
  SOFT(rcl_wait_set_fini(&ws));
  if (rcl_client_is_valid(&order_client)) {SOFT(rcl_client_fini(&order_client, &node));}
  rcl_interfaces__srv__GetParameters_Request__fini(&order_req);
  rcl_interfaces__srv__GetParameters_Response__fini(&order_resp);
  sensor_msgs__msg__JointState__destroy(js[0]);
  sensor_msgs__msg__JointState__destroy(js[1]);
  delan_msgs__msg__ModelUpdate__destroy(up);
  trajectory_msgs__msg__JointTrajectory__destroy(traj);
  std_msgs__msg__Float64MultiArray__fini(&cmd);
  teardown_stage("the publishers, subscriptions and parameter services");
  SOFT(rcl_publisher_fini(&pub_cmd, &node));
  SOFT(rcl_publisher_fini(&pub_diag, &node));
  SOFT(rcl_subscription_fini(&sub_js, &node));
  SOFT(rcl_subscription_fini(&sub_up, &node));
  SOFT(rcl_subscription_fini(&sub_ref, &node));
  param_server_free(table, &node);
  teardown_stage("the node");
  SOFT(rcl_node_fini(&node));
  delan_model_free(c.model.delan);
  delan_model_free(c.old_model.delan);
  rigid_body_free(c.rb);
  rigid_body_free(c.old_rb);
  rigid_body_free(c.feedback);
  reference_free(c.ref);
  reference_free(c.rejoin);
  reference_free(c.pending);
  rcl_yaml_node_struct_fini(early);
  SOFT(rcl_arguments_fini(&args));
  teardown_stage("the context (rcl_shutdown)");
  SOFT(rclc_support_fini(&support));
  return 0;
}
