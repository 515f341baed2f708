/* Same arithmetic, in the same order, as delan_control.control_laws.control_terms. */
#include "control_law.h"

#include <math.h>

static double wrap_angle(double x)
{
  /* numpy's remainder takes the divisor's sign; fmod the dividend's */
  const double two_pi = 2.0 * M_PI;
  double r = fmod(-x + M_PI, two_pi);
  if (r < 0.0) {r += two_pi;}
  return -r + M_PI;
}

static void pd(const law_gains_t * g, const double * e, const double * e_dot, double * tau)
{
  for (int i = 0; i < g->n; i++) {tau[i] = g->kp[i] * e[i] + g->kd[i] * e_dot[i];}
}

int model_present(const model_t * m)
{
  return m && (m->rb || m->delan);
}

int model_inverse(
  const model_t * m, const double * q, const double * qd, const double * qdd, double * tau,
  double * work)
{
  if (!m->rb) {return delan_model_inverse(m->delan, q, qd, qdd, tau);}
  int bad = rigid_body_inverse(m->rb, q, qd, qdd, tau);
  if (m->delan) {
    const int n = rigid_body_dof(m->rb);
    bad |= delan_model_inverse(m->delan, q, qd, qdd, work);
    for (int i = 0; i < n; i++) {tau[i] += work[i];}
  }
  return bad;
}

int control_torque(
  const model_t * model, control_law_t law, const law_gains_t * g,
  const double * q, const double * qd, const double * q_ref, const double * qd_ref,
  const double * qdd_ref, double * tau, double * work)
{
  const int n = g->n;
  double * e = work, * e_dot = work + n, * acc = work + 2 * n, * scratch = work + 3 * n;
  for (int i = 0; i < n; i++) {
    e[i] = q_ref[i] - q[i];
    if (g->continuous && g->continuous[i]) {e[i] = wrap_angle(e[i]);}
    e_dot[i] = qd_ref[i] - qd[i];
  }
  if (!model_present(model)) {
    pd(g, e, e_dot, tau);
    return 0;
  }
  int bad;
  if (law == LAW_COMPUTED_TORQUE) {
    for (int i = 0; i < n; i++) {
      acc[i] = qdd_ref[i] + g->ct_kp[i] * e[i] + g->ct_kd[i] * e_dot[i];
    }
    bad = model_inverse(model, q, qd, acc, tau, scratch);
  } else {
    bad = model_inverse(model, q_ref, qd_ref, qdd_ref, tau, scratch);
    for (int i = 0; i < n; i++) {tau[i] = tau[i] + g->kp[i] * e[i] + g->kd[i] * e_dot[i];}
    for (int i = 0; i < n; i++) {bad |= !isfinite(tau[i]);}
  }
  if (bad) {pd(g, e, e_dot, tau);}
  return bad;
}

void clamp_torque(int n, double * tau, const double * limits)
{
  for (int i = 0; i < n; i++) {
    if (tau[i] > limits[i]) {tau[i] = limits[i];}
    if (tau[i] < -limits[i]) {tau[i] = -limits[i];}
  }
}
