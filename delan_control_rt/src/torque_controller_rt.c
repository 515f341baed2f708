/* torque_controller_rt: the per-cycle path of delan_control's torque_controller, compiled.
 *
 * One command per newest joint state: map by name, gate the stamp, the reference at the state's
 * stamp (reference_trajectory; the first position held without one), the law with the model
 * (pd | delan), the PD fall-back when the model's torque is not finite, the effort limits, the
 * command in the receiver's joint order (command_joints, or the joints parameter of
 * effort_controller_name, asked for once; no commands until known). When joint states
 * (re)start, or the arm jumps between two states (a sim reset), a reference left behind is
 * rejoined smoothly, or dropped when it is farther than resume_tolerance. A watchdog sends
 * zero torque once when joint states stop for watchdog_timeout. The loop times
 * itself as delan_control.loop_stats does (DDS source stamps) and reports on /diagnostics.
 *
 * rclc sets up support, node and entities; the loop is a plain rcl wait set, so that it takes
 * every queued state with its message info and answers only the newest. Parameters are read
 * once from the command line and parameter files (--ros-args -p / --params-file), matched to
 * this node's name as rclpy matches them (wildcard keys). See the package README section. */
#include <errno.h>
#include <math.h>
#include <sched.h>
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
#include <rcl_interfaces/srv/get_parameters.h>

#include "control_law.h"
#include "delan_model.h"
#include "reference.h"

#define MAX_JOINTS 64
#define BIN_US 10
#define N_BINS 2000
#define MAX_STAMP_JUMP_S 1.0
/* a stall that moved the arm and the reference apart by less than this (position, velocity)
 * needs no rejoin (reference_tracking.REJOIN_NEGLIGIBLE) */
#define REJOIN_NEGLIGIBLE_Q 1e-3
#define REJOIN_NEGLIGIBLE_QD 0.05
/* a position step beyond JUMP_FACTOR x the velocity limit x the time step + JUMP_MARGIN is a
 * jump of the arm (a sim reset, a re-homed driver), handled as a restart of the joint states;
 * joints without a velocity limit count UNLIMITED_VELOCITY (continuity.JumpDetector) */
#define JUMP_FACTOR 2.0
#define JUMP_MARGIN 0.1
#define UNLIMITED_VELOCITY 10.0
/* command order (command_order.ReceiverOrderQuery): asked of the receiving controller's
 * joints parameter when command_joints is not given; no commands until it is known */
#define ORDER_POLL_S 0.1
#define ORDER_RETRY_S 1.0
enum {ORDER_KNOWN = 0, ORDER_PENDING, ORDER_REFUSED};

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) {(void)sig; g_stop = 1;}

static double mono_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int64_t wall_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
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

typedef struct
{
  rcl_params_t * all;
  const char * fqn;
} params_t;

/* the value of name for this node: the last matching entry wins, as in rclpy */
static rcl_variant_t * param(const params_t * P, const char * name)
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

static double param_double(const params_t * P, const char * name, double dflt)
{
  rcl_variant_t * v = param(P, name);
  if (v && v->double_value) {return *v->double_value;}
  if (v && v->integer_value) {return (double)*v->integer_value;}
  return dflt;
}

static const char * param_string(const params_t * P, const char * name, const char * dflt)
{
  rcl_variant_t * v = param(P, name);
  return v && v->string_value ? v->string_value : dflt;
}

/* string array; 0 entries when absent */
static size_t param_strings(const params_t * P, const char * name, char *** out)
{
  rcl_variant_t * v = param(P, name);
  if (!v || !v->string_array_value) {return 0;}
  *out = v->string_array_value->data;
  return v->string_array_value->size;
}

/* double array of 1 (broadcast) or n values into out; -1 when absent, 1 on a bad length */
static int param_per_joint(const params_t * P, const char * name, int n, double * out)
{
  rcl_variant_t * v = param(P, name);
  if (!v) {return -1;}
  if (v->double_value) {
    for (int i = 0; i < n; i++) {out[i] = *v->double_value;}
    return 0;
  }
  if (!v->double_array_value) {return 1;}
  size_t size = v->double_array_value->size;
  if (size != 1 && size != (size_t)n) {return 1;}
  for (int i = 0; i < n; i++) {out[i] = v->double_array_value->values[size == 1 ? 0 : i];}
  return 0;
}

/* ------------------------------------------------------------------ loop timing */
typedef struct
{
  int64_t hist[N_BINS + 1], window[N_BINS + 1];
  double max_us, window_max_us;
  int64_t states, missed, clock_skew, last_command_ns;
} loop_stats_t;

/* count states taken together, the oldest published at first_ns; only the last is answered */
static void stats_received(loop_stats_t * s, int64_t first_ns, int count)
{
  s->states += count;
  if (s->last_command_ns && first_ns < s->last_command_ns) {s->missed++;}
  s->missed += count - 1;
  s->last_command_ns = 0;
}

static void stats_command(loop_stats_t * s, int64_t state_ns, int64_t command_ns)
{
  s->last_command_ns = command_ns;
  double us = (command_ns - state_ns) * 1e-3;
  if (us < 0.0) {
    s->clock_skew++;
    return;
  }
  int bin = (int)(us / BIN_US);
  s->hist[bin < N_BINS ? bin : N_BINS]++;
  if (us > s->max_us) {s->max_us = us;}
  if (us > s->window_max_us) {s->window_max_us = us;}
}

static double percentile_us(const int64_t * h, double q)
{
  int64_t total = 0, cum = 0;
  for (int i = 0; i <= N_BINS; i++) {total += h[i];}
  if (!total) {return NAN;}
  for (int k = 0; k <= N_BINS; k++) {
    cum += h[k];
    if ((double)cum >= q / 100.0 * total) {return k >= N_BINS ? INFINITY : (k + 1) * BIN_US;}
  }
  return INFINITY;
}

/* ------------------------------------------------------------------ controller */
typedef struct
{
  int n;
  char * joints[MAX_JOINTS];
  int cmd_index[MAX_JOINTS];        /* command slot i takes model joint cmd_index[i] */
  int order_state;                  /* ORDER_*: commands go out only when known */
  int order_warn;                   /* known, but the model order as a fall-back */
  double order_deadline, order_sent, order_timeout;
  char receiver[256], order_message[512];
  double limits[MAX_JOINTS], kp[MAX_JOINTS], kd[MAX_JOINTS], ct_kp[MAX_JOINTS],
    ct_kd[MAX_JOINTS];
  unsigned char continuous[MAX_JOINTS];
  law_gains_t gains;
  control_law_t law;
  const char * model_kind;
  int follow_learner;               /* delan without a file of its own: learner/model_update */
  delan_model * model, * old_model; /* old: faded out over blend_time after a switch */
  double blend_start, blend_time, watchdog_timeout;
  double velocity_limits[MAX_JOINTS], resume_tolerance, resume_time;
  /* reference: the trajectory, the offset that rejoins it after a stall, and the deviation
   * "arm minus reference" of the last command on it (none: have_deviation 0) */
  reference_t * ref, * rejoin;
  double deviation[2 * MAX_JOINTS];
  int have_deviation;
  double q_ref[MAX_JOINTS], qd_ref[MAX_JOINTS], qdd_ref[MAX_JOINTS];
  double off_q[MAX_JOINTS], off_qd[MAX_JOINTS], off_qdd[MAX_JOINTS];
  /* state */
  double hold[MAX_JOINTS], q[MAX_JOINTS], qd[MAX_JOINTS];
  double tau[MAX_JOINTS], tau_old[MAX_JOINTS], work[3 * MAX_JOINTS];
  int msg_index[MAX_JOINTS];
  int stale, have_stamp, have_candidate;
  double last_stamp, candidate, last_state_time;
  /* the previous state's position and stamp, for jump detection (have_last_q 0: none) */
  double last_q[MAX_JOINTS], last_q_t;
  int have_last_q;
  /* counters (diagnostics) */
  int64_t commands_sent, fallbacks, watchdog_trips, rejected, model_loads;
  int64_t references, references_rejected, references_rejoined, references_dropped;
  char last_reject[160];
  loop_stats_t stats;
} controller_t;

static int reject(controller_t * c, const char * reason, const char * detail)
{
  c->rejected++;
  /* throttled: the first, then every 1000th */
  if (c->rejected == 1 || c->rejected % 1000 == 0) {
    fprintf(stderr, "[torque_controller_rt] rejected joint state (%lld so far): %s: %s\n",
      (long long)c->rejected, reason, detail);
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

/* reference_tracking.ReferenceTracker.resume: what the stall added to the deviation "arm
 * minus reference" is brought back in over resume_time (no torque step), or the reference is
 * dropped when the arm is more than resume_tolerance from it (the arm is elsewhere). */
static void reference_on_resume(controller_t * c, double t, const char * cause)
{
  if (!c->ref) {return;}
  const int n = c->n;
  double grown[2 * MAX_JOINTS], error = 0.0;
  int negligible = 1;
  reference_sample(c->ref, t, c->q_ref, c->qd_ref, c->qdd_ref);
  for (int i = 0; i < n; i++) {
    grown[i] = c->q[i] - c->q_ref[i];
    grown[n + i] = c->qd[i] - c->qd_ref[i];
    if (c->have_deviation) {
      grown[i] -= c->deviation[i];
      grown[n + i] -= c->deviation[n + i];
    }
    negligible &= fabs(grown[i]) <= REJOIN_NEGLIGIBLE_Q &&
      fabs(grown[n + i]) <= REJOIN_NEGLIGIBLE_QD;
    if (fabs(grown[i]) > error) {error = fabs(grown[i]);}
  }
  if (negligible) {return;}
  reference_free(c->rejoin);
  c->rejoin = NULL;
  if (error <= c->resume_tolerance) {
    c->rejoin = reference_rejoin(n, t, grown, grown + n, c->velocity_limits, c->resume_time,
        0.25);
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
    "arrives\n", error, cause, c->resume_tolerance);
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
  c->have_deviation = 1;
}

/* continuity.JumpDetector.check: the largest joint step when the state at t is a jump of the
 * arm from the previous one, else -1; remembers this state. */
static double jump_check(controller_t * c, double t)
{
  const int had = c->have_last_q;
  const double dt = had && t > c->last_q_t ? t - c->last_q_t : 0.0;
  double largest = -1.0, step_max = 0.0;
  for (int i = 0; i < c->n; i++) {
    double step = fabs(c->q[i] - c->last_q[i]);
    double v = c->velocity_limits[i];
    if (!(isfinite(v) && v > 0)) {v = UNLIMITED_VELOCITY;}
    if (had && step > JUMP_FACTOR * v * dt + JUMP_MARGIN) {largest = 0.0;}
    if (step > step_max) {step_max = step;}
    c->last_q[i] = c->q[i];
  }
  c->last_q_t = t;
  c->have_last_q = 1;
  return largest < 0.0 ? -1.0 : step_max;
}

/* One cycle (torque_controller._control): 1 when tau holds a command. */
static int control(controller_t * c, const sensor_msgs__msg__JointState * m, double now)
{
  if (!map_state(c, m)) {return 0;}
  double t = m->header.stamp.sec + 1e-9 * m->header.stamp.nanosec;
  if (t == 0.0) {t = wall_ns() * 1e-9;}
  const char * bad = stamp_check(c, t);
  if (bad) {return reject(c, bad, "header stamp");}
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
  reference_now(c, t);
  if (control_torque(c->model, c->law, &c->gains, c->q, c->qd, c->q_ref, c->qd_ref,
    c->qdd_ref, c->tau, c->work))
  {
    c->fallbacks++;
  }
  if (c->blend_start > 0) {
    double w = c->blend_time > 0 ? (now - c->blend_start) / c->blend_time : 1.0;
    if (w >= 0.0 && w < 1.0) {
      c->fallbacks += control_torque(c->old_model, c->law, &c->gains, c->q, c->qd, c->q_ref,
        c->qd_ref, c->qdd_ref, c->tau_old, c->work);
      for (int i = 0; i < c->n; i++) {c->tau[i] = w * c->tau[i] + (1.0 - w) * c->tau_old[i];}
    } else {
      delan_model_free(c->old_model);
      c->old_model = NULL;
      c->blend_start = 0;
    }
  }
  clamp_torque(c->n, c->tau, c->limits);
  return 1;
}

/* a learner version (or a file at start-up): switched to bumplessly; 0 when refused */
static int adopt_model(controller_t * c, const char * path, double now)
{
  char err[512];
  delan_model * m = delan_model_load(path, err, sizeof(err));
  if (m && delan_model_dof(m) != c->n) {
    snprintf(err, sizeof(err), "%s has %d joints, the controller %d", path, delan_model_dof(m),
      c->n);
    delan_model_free(m);
    m = NULL;
  }
  for (int i = 0; m && i < c->n; i++) {
    if (strcmp(delan_model_joint_name(m, i), c->joints[i]) != 0) {
      snprintf(err, sizeof(err), "%s: joint %d is %s, not %s", path, i,
        delan_model_joint_name(m, i), c->joints[i]);
      delan_model_free(m);
      m = NULL;
    }
  }
  if (!m) {
    fprintf(stderr, "[torque_controller_rt] model refused: %s\n", err);
    return 0;
  }
  delan_model_free(c->old_model);
  c->old_model = c->model;
  c->model = m;
  c->blend_start = now;
  c->model_loads++;
  fprintf(stderr, "[torque_controller_rt] DeLaN v%lld from %s\n",
    (long long)delan_model_version(m), path);
  return 1;
}

/* torque_controller._on_reference: a JointTrajectory with every controlled joint (any order,
 * others ignored) and positions on every point; stamped 0: from now. A bad one is counted and
 * the current reference kept. */
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
    if (t0 == 0.0) {t0 = wall_ns() * 1e-9;}
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
  reference_free(c->ref);
  reference_free(c->rejoin);
  c->ref = ref;
  c->rejoin = NULL;
  c->have_deviation = 0;
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
  if (*k >= seq->size) {return;}
  rosidl_runtime_c__String__assign(&seq->data[*k].key, key);
  rosidl_runtime_c__String__assign(&seq->data[*k].value, buf);
  (*k)++;
}

static void publish_diagnostics(rcl_publisher_t * pub, controller_t * c, const char * fqn,
  const char * hw)
{
  diagnostic_msgs__msg__DiagnosticArray arr;
  diagnostic_msgs__msg__DiagnosticArray__init(&arr);
  diagnostic_msgs__msg__DiagnosticStatus__Sequence__init(&arr.status, 1);
  diagnostic_msgs__msg__DiagnosticStatus * st = &arr.status.data[0];
  int64_t now = wall_ns();
  arr.header.stamp.sec = (int32_t)(now / 1000000000LL);
  arr.header.stamp.nanosec = (uint32_t)(now % 1000000000LL);
  /* the command order first (ERROR refused, WARN waiting or fallen back), then staleness */
  char message[600] = "ok";
  st->level = diagnostic_msgs__msg__DiagnosticStatus__OK;
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
  diagnostic_msgs__msg__KeyValue__Sequence__init(&st->values, 32);
  loop_stats_t * s = &c->stats;
  int64_t w[N_BINS + 1];
  for (int i = 0; i <= N_BINS; i++) {w[i] = s->hist[i] - s->window[i];}
  static char hist[N_BINS * 16];
  size_t len = 0;
  hist[0] = '\0';
  for (int i = 0; i <= N_BINS && len < sizeof(hist) - 40; i++) {
    if (s->hist[i]) {
      len += snprintf(hist + len, sizeof(hist) - len, "%s%d:%lld", len ? "," : "", i,
          (long long)s->hist[i]);
    }
  }
  size_t k = 0;
  kv(&st->values, &k, "model", "%s", c->model_kind);
  kv(&st->values, &k, "model_version", "%lld",
    (long long)(c->model ? delan_model_version(c->model) : 0));
  kv(&st->values, &k, "law", "%s", c->law == LAW_COMPUTED_TORQUE ? "computed_torque" :
    "feedforward_pd");
  kv(&st->values, &k, "commands_sent", "%lld", (long long)c->commands_sent);
  kv(&st->values, &k, "fallbacks", "%lld", (long long)c->fallbacks);
  kv(&st->values, &k, "watchdog_trips", "%lld", (long long)c->watchdog_trips);
  kv(&st->values, &k, "rejected_joint_states", "%lld", (long long)c->rejected);
  kv(&st->values, &k, "last_rejection", "%s", c->last_reject);
  kv(&st->values, &k, "model_loads", "%lld", (long long)c->model_loads);
  kv(&st->values, &k, "holding", "%s", c->ref ? "false" : "true");
  kv(&st->values, &k, "references_received", "%lld", (long long)c->references);
  kv(&st->values, &k, "rejected_references", "%lld", (long long)c->references_rejected);
  kv(&st->values, &k, "references_rejoined", "%lld", (long long)c->references_rejoined);
  kv(&st->values, &k, "references_dropped", "%lld", (long long)c->references_dropped);
  kv(&st->values, &k, "command_order", "%s%s", c->order_state == ORDER_PENDING ? "pending" :
    c->order_state == ORDER_REFUSED ? "refused: " : c->order_warn ? "model order (fallback)" :
    "", c->order_state == ORDER_KNOWN && !c->order_warn ? c->receiver :
    c->order_state == ORDER_REFUSED ? c->receiver : "");
  kv(&st->values, &k, "loop_latency_p50_us", "%.0f", percentile_us(w, 50));
  kv(&st->values, &k, "loop_latency_p99_us", "%.0f", percentile_us(w, 99));
  kv(&st->values, &k, "loop_latency_max_us", "%.0f", s->window_max_us);
  kv(&st->values, &k, "loop_latency_max_all_us", "%.0f", s->max_us);
  kv(&st->values, &k, "joint_states_received", "%lld", (long long)s->states);
  kv(&st->values, &k, "missed_cycles", "%lld", (long long)s->missed);
  kv(&st->values, &k, "clock_skew_samples", "%lld", (long long)s->clock_skew);
  kv(&st->values, &k, "latency_histogram_10us", "%s", hist);
  st->values.size = k;
  memcpy(s->window, s->hist, sizeof(s->hist));
  s->window_max_us = 0.0;
  if (rcl_publish(pub, &arr, NULL) != RCL_RET_OK) {rcl_reset_error();}
  st->values.size = 25;
  diagnostic_msgs__msg__DiagnosticArray__fini(&arr);
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

/* cmd_index from a joint order (CommandOrder): 0 with the reason when the names are not the
 * model's joints, each once. */
static int order_from_names(controller_t * c, char * const * order, size_t n_order, char * err,
  size_t err_len)
{
  if (n_order != (size_t)c->n) {
    snprintf(err, err_len, "%zu joints, the model has %d", n_order, c->n);
    return 0;
  }
  int index[MAX_JOINTS];
  for (size_t i = 0; i < n_order; i++) {
    index[i] = -1;
    for (int j = 0; j < c->n; j++) {
      if (strcmp(order[i], c->joints[j]) == 0) {index[i] = j;}
    }
    for (size_t k = 0; k < i; k++) {
      if (strcmp(order[i], order[k]) == 0) {index[i] = -1;}
    }
    if (index[i] < 0) {
      snprintf(err, err_len, "%s, which is not a model joint, or repeated", order[i]);
      return 0;
    }
  }
  memcpy(c->cmd_index, index, sizeof(int) * c->n);
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
  char msg[512];
  snprintf(msg, sizeof(msg), "%s: commanding in the model joint order, which drives the wrong "
    "motors if the receiving controller orders its joints otherwise; set command_joints or "
    "effort_controller_name", why);
  order_decided(c, ORDER_KNOWN, 1, msg);
}

/* The receiver's answer to GetParameters(['joints']). */
static void order_answer(controller_t * c, const rcl_interfaces__srv__GetParameters_Response * r)
{
  char msg[512], err[256];
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
  char * names[MAX_JOINTS];
  if (n > MAX_JOINTS) {
    snprintf(err, sizeof(err), "%zu joints, the model has %d", n, c->n);
  } else {
    for (size_t i = 0; i < n; i++) {names[i] = v->string_array_value.data[i].data;}
  }
  if (n > MAX_JOINTS || !order_from_names(c, names, n, err, sizeof(err))) {
    snprintf(msg, sizeof(msg), "refusing to command: %s takes commands for %s", c->receiver,
      err);
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

static int configure(controller_t * c, const params_t * P, char * err, size_t err_len)
{
  char ** names = NULL;
  size_t n = param_strings(P, "joint_names", &names);
  if (n == 0 || n > MAX_JOINTS) {
    snprintf(err, err_len, "joint_names (the model's joints in order) must name 1 to %d joints",
      MAX_JOINTS);
    return 0;
  }
  c->n = (int)n;
  for (size_t i = 0; i < n; i++) {c->joints[i] = names[i];}
  const char * per_joint[5] = {"effort_limits", "kp", "kd", "ct_kp", "ct_kd"};
  double * dst[5] = {c->limits, c->kp, c->kd, c->ct_kp, c->ct_kd};
  for (int k = 0; k < 5; k++) {
    if (param_per_joint(P, per_joint[k], c->n, dst[k]) != 0) {
      snprintf(err, err_len, "%s needs 1 or %d values (no URDF here to derive it from: the "
        "launch files fill it in)", per_joint[k], c->n);
      return 0;
    }
    for (int i = 0; i < c->n; i++) {
      if (!isfinite(dst[k][i]) || dst[k][i] < 0) {
        snprintf(err, err_len, "%s values must be finite and >= 0", per_joint[k]);
        return 0;
      }
    }
  }
  double scale = param_double(P, "effort_limit_scale", 1.0);
  if (!(scale >= 0.01 && scale <= 1.0)) {
    snprintf(err, err_len, "effort_limit_scale must be in [0.01, 1]");
    return 0;
  }
  for (int i = 0; i < c->n; i++) {c->limits[i] *= scale;}
  char ** cont = NULL;
  size_t n_cont = param_strings(P, "continuous_joints", &cont);
  for (int i = 0; i < c->n; i++) {
    for (size_t j = 0; j < n_cont; j++) {c->continuous[i] |= strcmp(cont[j], c->joints[i]) == 0;}
  }
  c->gains = (law_gains_t){c->n, c->ct_kp, c->ct_kd, c->kp, c->kd, c->continuous};
  const char * law = param_string(P, "law", "computed_torque");
  if (strcmp(law, "computed_torque") == 0) {
    c->law = LAW_COMPUTED_TORQUE;
  } else if (strcmp(law, "feedforward_pd") == 0) {
    c->law = LAW_FEEDFORWARD_PD;
  } else {
    snprintf(err, err_len, "law=%s is not available compiled (computed_torque, feedforward_pd; "
      "the URDF-feedback laws need the URDF's mass matrix)", law);
    return 0;
  }
  c->watchdog_timeout = param_double(P, "watchdog_timeout", 0.1);
  c->resume_tolerance = param_double(P, "resume_tolerance", 1.0);
  c->resume_time = param_double(P, "resume_time", 1.0);
  if (!(c->resume_tolerance >= 0.0 && c->resume_tolerance <= 1e3) ||
    !(c->resume_time >= 0.0 && c->resume_time <= 60.0))
  {
    snprintf(err, err_len, "resume_tolerance must be in [0, 1000] and resume_time in [0, 60]");
    return 0;
  }
  /* absent: 1 rad/s (m/s) per joint for the rejoin's pace, as for a URDF without limits */
  for (int i = 0; i < c->n; i++) {c->velocity_limits[i] = 1.0;}
  if (param_per_joint(P, "velocity_limits", c->n, c->velocity_limits) > 0) {
    snprintf(err, err_len, "velocity_limits needs 1 or %d values", c->n);
    return 0;
  }
  c->blend_time = param_double(P, "switch_blend_time", 0.2);
  if (!(c->watchdog_timeout >= 0.001 && c->watchdog_timeout <= 10.0)) {
    snprintf(err, err_len, "watchdog_timeout must be in [0.001, 10]");
    return 0;
  }
  char ** order = NULL;
  size_t n_order = param_strings(P, "command_joints", &order);
  for (int i = 0; i < c->n; i++) {c->cmd_index[i] = i;}
  const char * receiver = param_string(P, "effort_controller_name", "effort_controller");
  if (n_order) {
    char why[256];
    if (!order_from_names(c, order, n_order, why, sizeof(why))) {
      snprintf(err, err_len, "command_joints: %s", why);
      return 0;
    }
    c->order_state = ORDER_KNOWN;
    snprintf(c->receiver, sizeof(c->receiver), "command_joints");
  } else if (!*receiver) {
    snprintf(c->receiver, sizeof(c->receiver), "(none)");
    order_fallback(c, "neither command_joints nor effort_controller_name given");
  } else {
    /* asked of the receiver in the loop (ReceiverOrderQuery); no commands until known */
    snprintf(c->receiver, sizeof(c->receiver), "%s", receiver);
    c->order_timeout = param_double(P, "effort_controller_timeout", 5.0);
    if (!(c->order_timeout >= 0.1 && c->order_timeout <= 600.0)) {
      snprintf(err, err_len, "effort_controller_timeout must be in [0.1, 600]");
      return 0;
    }
    c->order_state = ORDER_PENDING;
    c->order_deadline = mono_s() + c->order_timeout;
  }
  c->model_kind = param_string(P, "model", "pd");
  if (strcmp(c->model_kind, "delan") == 0) {
    const char * weights = param_string(P, "delan_weights", "");
    const char * ckpt = param_string(P, "delan_checkpoint", "");
    char path[4096];
    snprintf(path, sizeof(path), "%s%s", *weights ? weights : ckpt, *weights ? "" : ".cw");
    c->follow_learner = !*weights && !*ckpt;
    if (!c->follow_learner && !adopt_model(c, path, mono_s())) {
      snprintf(err, err_len, "model=delan: %s cannot be used", path);
      return 0;
    }
    c->blend_start = 0;
    delan_model_free(c->old_model);
    c->old_model = NULL;
    if (c->follow_learner) {
      fprintf(stderr, "[torque_controller_rt] model=delan: PD until the learner publishes a "
        "version (its checkpoint's .cw file)\n");
    }
  } else if (strcmp(c->model_kind, "pd") != 0) {
    snprintf(err, err_len, "model=%s is not available compiled (pd, delan)", c->model_kind);
    return 0;
  }
  return 1;
}

static void realtime(int priority)
{
  if (priority <= 0) {return;}
  struct sched_param sp = {.sched_priority = priority};
  /* before the middleware's threads exist: they inherit it */
  if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
    fprintf(stderr, "[torque_controller_rt] SCHED_FIFO %d refused (%s): normal scheduling; "
      "needs CAP_SYS_NICE or an rtprio limit\n", priority, strerror(errno));
  }
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
  params_t P = {early, "/torque_controller_rt"};
  /* the node's name is known once it exists; the priority is looked up for any name */
  int prio = 0;
  for (size_t i = 0; early && i < early->num_nodes; i++) {
    for (size_t j = 0; j < early->params[i].num_params; j++) {
      rcl_variant_t * v = &early->params[i].parameter_values[j];
      if (!strcmp(early->params[i].parameter_names[j], "realtime_priority") && v->integer_value) {
        prio = (int)*v->integer_value;
      }
    }
  }
  realtime(prio);
  CHECK(rclc_support_init(&support, argc, (const char * const *)argv, &alloc));
  rcl_node_t node = rcl_get_zero_initialized_node();
  CHECK(rclc_node_init_default(&node, "torque_controller_rt", "", &support));
  P.fqn = rcl_node_get_fully_qualified_name(&node);

  static controller_t c;
  memset(&c, 0, sizeof(c));
  c.stale = 1;
  char err[512];
  if (!configure(&c, &P, err, sizeof(err))) {return die(err);}
  const char * hw = param_string(&P, "hardware_id", P.fqn);

  rcl_subscription_t sub_js = rcl_get_zero_initialized_subscription();
  rmw_qos_profile_t js_qos = rmw_qos_profile_sensor_data;
  js_qos.depth = 10;
  CHECK(rclc_subscription_init(&sub_js, &node,
    ROSIDL_GET_MSG_TYPE_SUPPORT(sensor_msgs, msg, JointState), "joint_states", &js_qos));
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
  CHECK(rclc_publisher_init_default(&pub_cmd, &node,
    ROSIDL_GET_MSG_TYPE_SUPPORT(std_msgs, msg, Float64MultiArray), "effort_controller/commands"));
  rcl_publisher_t pub_diag = rcl_get_zero_initialized_publisher();
  CHECK(rclc_publisher_init_default(&pub_diag, &node,
    ROSIDL_GET_MSG_TYPE_SUPPORT(diagnostic_msgs, msg, DiagnosticArray), "/diagnostics"));

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
      char why[400];
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
  CHECK(rcl_wait_set_init(&ws, 3, 0, 0, 1, 0, 0, &support.context, alloc));
  fprintf(stderr, "[torque_controller_rt] controlling %d joints with model=%s law=%s\n", c.n,
    c.model_kind, c.law == LAW_COMPUTED_TORQUE ? "computed_torque" : "feedforward_pd");

  double next_diag = mono_s() + 1.0;
  while (!g_stop && rcl_context_is_valid(&support.context)) {
    double now = mono_s();
    double wait = next_diag - now;
    if (!c.stale && c.watchdog_timeout / 2.0 < wait) {wait = c.watchdog_timeout / 2.0;}
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
    if (c.order_state == ORDER_PENDING) {SOFT(rcl_wait_set_add_client(&ws, &order_client, NULL));}
    rcl_ret_t rc = rcl_wait(&ws, wait > 0 ? RCL_S_TO_NS(wait) : 0);
    if (rc != RCL_RET_OK && rc != RCL_RET_TIMEOUT) {rcl_reset_error();}
    if (c.order_state == ORDER_PENDING && ws.size_of_clients && ws.clients[0]) {
      rmw_request_id_t header;
      if (rcl_take_response(&order_client, &header, &order_resp) == RCL_RET_OK) {
        order_answer(&c, &order_resp);
      }
      rcl_reset_error();
    }
    if (ws.subscriptions[0]) {
      /* everything queued; only the newest is answered */
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
        stats_received(&c.stats, first_ns, count);
        if (control(&c, js[newest], mono_s()) && c.order_state == ORDER_KNOWN) {
          publish_command(&pub_cmd, &cmd, &c, c.tau);
          c.commands_sent++;
          stats_command(&c.stats, newest_info.source_timestamp, wall_ns());
        }
      }
    }
    if (ws.subscriptions[1]) {
      rmw_message_info_t info;
      while (rcl_take(&sub_up, up, &info, NULL) == RCL_RET_OK) {
        if (!c.follow_learner) {continue;}
        char path[4096];
        snprintf(path, sizeof(path), "%s.cw", up->checkpoint_path.data);
        adopt_model(&c, path, mono_s());
      }
      rcl_reset_error();
    }
    if (ws.subscriptions[2]) {
      rmw_message_info_t info;
      while (rcl_take(&sub_ref, traj, &info, NULL) == RCL_RET_OK) {on_reference(&c, traj);}
      rcl_reset_error();
    }
    now = mono_s();
    /* the watchdog: states older than watchdog_timeout stop the commands, with one zero */
    if (!c.stale && c.last_state_time > 0 && now - c.last_state_time > c.watchdog_timeout) {
      c.stale = 1;
      c.watchdog_trips++;
      if (c.order_state == ORDER_KNOWN) {publish_command(&pub_cmd, &cmd, &c, NULL);}
      fprintf(stderr, "[torque_controller_rt] joint states stale for > %.3f s: zero torque "
        "sent, commanding stopped\n", c.watchdog_timeout);
    }
    if (now >= next_diag) {
      publish_diagnostics(&pub_diag, &c, P.fqn, hw);
      next_diag = now + 1.0;
    }
  }
  fprintf(stderr, "[torque_controller_rt] shutting down\n");
  SOFT(rcl_wait_set_fini(&ws));
  if (rcl_client_is_valid(&order_client)) {SOFT(rcl_client_fini(&order_client, &node));}
  rcl_interfaces__srv__GetParameters_Request__fini(&order_req);
  rcl_interfaces__srv__GetParameters_Response__fini(&order_resp);
  sensor_msgs__msg__JointState__destroy(js[0]);
  sensor_msgs__msg__JointState__destroy(js[1]);
  delan_msgs__msg__ModelUpdate__destroy(up);
  trajectory_msgs__msg__JointTrajectory__destroy(traj);
  std_msgs__msg__Float64MultiArray__fini(&cmd);
  SOFT(rcl_publisher_fini(&pub_cmd, &node));
  SOFT(rcl_publisher_fini(&pub_diag, &node));
  SOFT(rcl_subscription_fini(&sub_js, &node));
  SOFT(rcl_subscription_fini(&sub_up, &node));
  SOFT(rcl_subscription_fini(&sub_ref, &node));
  SOFT(rcl_node_fini(&node));
  delan_model_free(c.model);
  delan_model_free(c.old_model);
  reference_free(c.ref);
  reference_free(c.rejoin);
  rcl_yaml_node_struct_fini(early);
  SOFT(rcl_arguments_fini(&args));
  SOFT(rclc_support_fini(&support));
  return 0;
}
