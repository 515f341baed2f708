/* Reader of the exported rigid-body model (layout: delan_common/rigid_body_export.py) and its
 * recursive Newton-Euler inverse dynamics.
 *
 * Spatial vectors as Pinocchio orders them: a motion (linear, angular) = (v, w), the velocity
 * of the point at the frame's origin and the angular velocity; a force (linear, angular) =
 * (f, n), the moment about that origin; each in its body's (joint's) frame. */
#include "rigid_body.h"

#include "binary_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER_BYTES 56
#define RECORD_DOUBLES 28
#define RECORD_BYTES (8 + 8 * RECORD_DOUBLES)
#define MAX_BODIES 256
/* how far from unit length an axis, and from orthonormal a rotation, may be (rounding of the
 * exporter's float64, not a modelling tolerance) */
#define UNIT_TOLERANCE 1e-9

enum {REVOLUTE = 0, PRISMATIC = 1, CONTINUOUS = 2};

typedef struct
{
  int parent, type;
  double axis[3], R[9], t[3];   /* the joint frame at q = 0 in its parent's */
  double m, h[3], I[6];         /* mass, m c, rotational inertia about the origin */
  double armature, viscous, coulomb;
} joint_t;

/* what one evaluation keeps per body: its pose in its parent's frame, its spatial velocity,
 * acceleration and the force it needs (then with its children's) */
typedef struct
{
  double R[9], p[3], v[6], a[6], f[6];
} body_t;

struct rigid_body
{
  int n, source;
  double gravity[3], eps;
  char ** names;
  joint_t * joints;
  body_t * bodies;
};

/* ------------------------------------------------------------------ 3-vectors */
static void cross(const double * a, const double * b, double * out)
{
  out[0] = a[1] * b[2] - a[2] * b[1];
  out[1] = a[2] * b[0] - a[0] * b[2];
  out[2] = a[0] * b[1] - a[1] * b[0];
}

/* out = a + b x c */
static void add_cross(const double * a, const double * b, const double * c, double * out)
{
  double bc[3];
  cross(b, c, bc);
  for (int k = 0; k < 3; k++) {out[k] = a[k] + bc[k];}
}

static void rotate(const double * R, const double * x, double * out)
{
  for (int r = 0; r < 3; r++) {
    out[r] = R[3 * r] * x[0] + R[3 * r + 1] * x[1] + R[3 * r + 2] * x[2];
  }
}

static void rotate_back(const double * R, const double * x, double * out)
{
  for (int c = 0; c < 3; c++) {out[c] = R[c] * x[0] + R[3 + c] * x[1] + R[6 + c] * x[2];}
}

/* the symmetric rotational inertia (xx, xy, yy, xz, yz, zz) times w */
static void inertia_times(const double * I, const double * w, double * out)
{
  out[0] = I[0] * w[0] + I[1] * w[1] + I[3] * w[2];
  out[1] = I[1] * w[0] + I[2] * w[1] + I[4] * w[2];
  out[2] = I[3] * w[0] + I[4] * w[1] + I[5] * w[2];
}

/* ------------------------------------------------------------------ spatial algebra */
/* the pose of body i in its parent's frame at joint position q */
static void joint_pose(const joint_t * J, double q, body_t * B)
{
  const double * u = J->axis;
  if (J->type == PRISMATIC) {
    memcpy(B->R, J->R, sizeof(B->R));
    double d[3] = {u[0] * q, u[1] * q, u[2] * q}, Rd[3];
    rotate(J->R, d, Rd);
    for (int k = 0; k < 3; k++) {B->p[k] = J->t[k] + Rd[k];}
    return;
  }
  /* Rodrigues: cos q 1 + sin q [u]x + (1 - cos q) u u^T */
  const double c = cos(q), s = sin(q), k1 = 1.0 - c;
  const double Rj[9] = {
    c + k1 * u[0] * u[0], k1 * u[0] * u[1] - s * u[2], k1 * u[0] * u[2] + s * u[1],
    k1 * u[1] * u[0] + s * u[2], c + k1 * u[1] * u[1], k1 * u[1] * u[2] - s * u[0],
    k1 * u[2] * u[0] - s * u[1], k1 * u[2] * u[1] + s * u[0], c + k1 * u[2] * u[2]};
  for (int r = 0; r < 3; r++) {
    for (int col = 0; col < 3; col++) {
      B->R[3 * r + col] = J->R[3 * r] * Rj[col] + J->R[3 * r + 1] * Rj[3 + col] +
        J->R[3 * r + 2] * Rj[6 + col];
    }
  }
  memcpy(B->p, J->t, sizeof(B->p));
}

/* a motion of the parent's frame seen at body B's origin, in B's frame */
static void motion_to_child(const body_t * B, const double * m, double * out)
{
  double lin[3];
  add_cross(m, m + 3, B->p, lin);   /* v + w x p: the velocity at the child's origin */
  rotate_back(B->R, lin, out);
  rotate_back(B->R, m + 3, out + 3);
}

/* out = m x s, the spatial cross product of motions (v, w) x (sv, sw) = (w x sv + v x sw,
 * w x sw) */
static void motion_cross(const double * m, const double * s, double * out)
{
  double a[3], b[3];
  cross(m + 3, s, a);
  cross(m, s + 3, b);
  for (int k = 0; k < 3; k++) {out[k] = a[k] + b[k];}
  cross(m + 3, s + 3, out + 3);
}

/* the spatial inertia of J times the motion m: (m v - h x w, I w + h x v) */
static void inertia_motion(const joint_t * J, const double * m, double * out)
{
  double hw[3], hv[3], Iw[3];
  cross(J->h, m + 3, hw);
  cross(J->h, m, hv);
  inertia_times(J->I, m + 3, Iw);
  for (int k = 0; k < 3; k++) {
    out[k] = J->m * m[k] - hw[k];
    out[3 + k] = Iw[k] + hv[k];
  }
}

/* out += m x* f, the dual cross product (v, w) x* (f, n) = (w x f, w x n + v x f) */
static void add_force_cross(const double * m, const double * f, double * out)
{
  double a[3], b[3], c[3];
  cross(m + 3, f, a);
  cross(m + 3, f + 3, b);
  cross(m, f, c);
  for (int k = 0; k < 3; k++) {
    out[k] += a[k];
    out[3 + k] += b[k] + c[k];
  }
}

/* a force of body B (in B's frame) added to its parent's, in the parent's frame */
static void force_to_parent(const body_t * B, double * parent_f)
{
  double f[3], n[3];
  rotate(B->R, B->f, f);
  rotate(B->R, B->f + 3, n);
  add_cross(n, B->p, f, n);   /* the moment about the parent's origin */
  for (int k = 0; k < 3; k++) {
    parent_f[k] += f[k];
    parent_f[3 + k] += n[k];
  }
}

/* the joint's motion subspace times x: (0, u x) revolute, (u x, 0) prismatic */
static void subspace(const joint_t * J, double x, double * out)
{
  const int at = J->type == PRISMATIC ? 0 : 3;
  memset(out, 0, 6 * sizeof(double));
  for (int k = 0; k < 3; k++) {out[at + k] = J->axis[k] * x;}
}

/* ------------------------------------------------------------------ RNEA */
/* The recursive Newton-Euler pass: tau = H(q) qdd + armature qdd, plus, when qd is given,
 * c(q, qd) + g(q) + viscous qd + coulomb tanh(qd / eps). Without qd every velocity is zero
 * and gravity is off: the bias and friction terms vanish rather than being cancelled. */
static int rnea(
  rigid_body * M, const double * q, const double * qd, const double * qdd, double * tau)
{
  /* the base accelerates up at g: gravity acts on every body without a term of its own */
  const double g = qd ? 1.0 : 0.0;
  const double base_a[6] = {-g * M->gravity[0], -g * M->gravity[1], -g * M->gravity[2], 0.0,
    0.0, 0.0};
  const double base_v[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  for (int i = 0; i < M->n; i++) {
    const joint_t * J = &M->joints[i];
    body_t * B = &M->bodies[i];
    const double * vp = J->parent < 0 ? base_v : M->bodies[J->parent].v;
    const double * ap = J->parent < 0 ? base_a : M->bodies[J->parent].a;
    double s_qd[6], s_qdd[6], bias[6], Iv[6];
    joint_pose(J, q[i], B);
    subspace(J, qd ? qd[i] : 0.0, s_qd);
    subspace(J, qdd[i], s_qdd);
    motion_to_child(B, vp, B->v);
    motion_to_child(B, ap, B->a);
    for (int k = 0; k < 6; k++) {B->v[k] += s_qd[k];}
    motion_cross(B->v, s_qd, bias);
    for (int k = 0; k < 6; k++) {B->a[k] += s_qdd[k] + bias[k];}
    inertia_motion(J, B->a, B->f);
    inertia_motion(J, B->v, Iv);
    add_force_cross(B->v, Iv, B->f);
  }
  int bad = 0;
  for (int i = M->n - 1; i >= 0; i--) {
    const joint_t * J = &M->joints[i];
    const body_t * B = &M->bodies[i];
    const int at = J->type == PRISMATIC ? 0 : 3;
    tau[i] = J->axis[0] * B->f[at] + J->axis[1] * B->f[at + 1] + J->axis[2] * B->f[at + 2];
    if (qd) {
      tau[i] += J->armature * qdd[i] + J->viscous * qd[i] + J->coulomb * tanh(qd[i] / M->eps);
    } else {
      tau[i] += J->armature * qdd[i];
    }
    if (J->parent >= 0) {force_to_parent(B, M->bodies[J->parent].f);}
    bad |= !isfinite(tau[i]);
  }
  return bad;
}

int rigid_body_inverse(
  rigid_body * M, const double * q, const double * qd, const double * qdd, double * tau)
{
  return rnea(M, q, qd, qdd, tau);
}

int rigid_body_mass_times(rigid_body * M, const double * q, const double * x, double * out)
{
  return rnea(M, q, NULL, x, out);
}

/* ------------------------------------------------------------------ loading */
static int finite_all(const double * x, int k)
{
  for (int i = 0; i < k; i++) {
    if (!isfinite(x[i])) {return 0;}
  }
  return 1;
}

/* NULL when J is a joint of this format, else what is wrong with it */
static const char * joint_problem(const joint_t * J, int i)
{
  if (J->parent < -1 || J->parent >= i) {return "parent not an earlier joint";}
  if (J->type != REVOLUTE && J->type != PRISMATIC && J->type != CONTINUOUS) {
    return "unknown joint type";
  }
  const double * u = J->axis;
  if (fabs(u[0] * u[0] + u[1] * u[1] + u[2] * u[2] - 1.0) > UNIT_TOLERANCE) {
    return "axis not of unit length";
  }
  const double * R = J->R;
  for (int a = 0; a < 3; a++) {
    for (int b = 0; b < 3; b++) {
      double dot = R[a] * R[b] + R[3 + a] * R[3 + b] + R[6 + a] * R[6 + b];
      if (fabs(dot - (a == b)) > UNIT_TOLERANCE) {return "rotation not orthonormal";}
    }
  }
  double det = R[0] * (R[4] * R[8] - R[5] * R[7]) - R[1] * (R[3] * R[8] - R[5] * R[6]) +
    R[2] * (R[3] * R[7] - R[4] * R[6]);
  if (det < 0.0) {return "rotation is a reflection";}
  return NULL;
}

#define FAIL(...) do {snprintf(err, err_len, __VA_ARGS__); goto fail;} while (0)

rigid_body * rigid_body_load(const char * path, char * err, size_t err_len)
{
  size_t size = 0;
  unsigned char * blob = bin_read_file(path, &size, err, err_len);
  if (!blob) {return NULL;}
  rigid_body * M = calloc(1, sizeof(*M));
  if (!M) {
    free(blob);
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  if (!bin_check_frame(blob, size, HEADER_BYTES, "DELANRB\0", RIGID_BODY_FORMAT_VERSION,
    "rigid-body model file", path, err, err_len))
  {
    goto fail;
  }
  int32_t d[2];
  memcpy(d, blob + 16, sizeof(d));
  memcpy(M->gravity, blob + 24, sizeof(M->gravity));
  memcpy(&M->eps, blob + 48, sizeof(M->eps));
  if (d[0] < 1 || d[0] > MAX_BODIES) {FAIL("%s: %d joints (1 to %d)", path, d[0], MAX_BODIES);}
  M->n = d[0];
  M->source = d[1];
  if (M->source != RIGID_BODY_URDF && M->source != RIGID_BODY_IDENTIFIED) {
    FAIL("%s: unknown source %d", path, M->source);
  }
  if (!finite_all(M->gravity, 3) || !(M->eps > 0.0) || !isfinite(M->eps)) {
    FAIL("%s: gravity must be finite and the Coulomb smoothing > 0", path);
  }
  bin_cursor_t c = {blob + HEADER_BYTES, size - 8 - HEADER_BYTES};
  M->names = calloc((size_t)M->n, sizeof(char *));
  M->joints = calloc((size_t)M->n, sizeof(joint_t));
  M->bodies = calloc((size_t)M->n, sizeof(body_t));
  if (!M->names || !M->joints || !M->bodies) {FAIL("out of memory");}
  for (int i = 0; i < M->n; i++) {
    if (!(M->names[i] = bin_take_string(&c))) {FAIL("%s: truncated joint names", path);}
  }
  const size_t need = (size_t)M->n * RECORD_BYTES;
  if (need > c.left) {FAIL("%s: truncated (%zu bytes of joints missing)", path, need - c.left);}
  if (need < c.left) {FAIL("%s: %zu bytes more than its joints take", path, c.left - need);}
  for (int i = 0; i < M->n; i++) {
    joint_t * J = &M->joints[i];
    int32_t kind[2];
    memcpy(kind, bin_take(&c, 8), 8);
    J->parent = kind[0];
    J->type = kind[1];
    /* the record's doubles in the order of joint_t's, from axis to coulomb */
    double * dst[9] = {J->axis, J->R, J->t, &J->m, J->h, J->I, &J->armature, &J->viscous,
      &J->coulomb};
    const size_t len[9] = {3, 9, 3, 1, 3, 6, 1, 1, 1};
    int finite = 1;
    for (int k = 0; k < 9; k++) {
      memcpy(dst[k], bin_take(&c, 8 * len[k]), 8 * len[k]);
      finite &= finite_all(dst[k], (int)len[k]);
    }
    const char * problem = finite ? joint_problem(J, i) : "non-finite values";
    if (problem) {FAIL("%s: joint %d (%s): %s", path, i, M->names[i], problem);}
  }
  free(blob);
  return M;
fail:
  free(blob);
  rigid_body_free(M);
  return NULL;
}

void rigid_body_free(rigid_body * M)
{
  if (!M) {return;}
  if (M->names) {
    for (int i = 0; i < M->n; i++) {free(M->names[i]);}
    free(M->names);
  }
  free(M->joints);
  free(M->bodies);
  free(M);
}

int rigid_body_dof(const rigid_body * M) {return M->n;}
const char * rigid_body_joint_name(const rigid_body * M, int i) {return M->names[i];}
int rigid_body_source(const rigid_body * M) {return M->source;}
int rigid_body_continuous(const rigid_body * M, int i) {return M->joints[i].type == CONTINUOUS;}
