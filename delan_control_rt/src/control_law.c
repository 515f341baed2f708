/* Same arithmetic, in the same order, as delan_control.control_laws.control_terms. */
#include "control_law.h"

#include <math.h>
#include <string.h>

static const char * const LAW_NAMES[LAW_COUNT] = {"computed_torque", "feedforward_pd",
  "computed_torque_urdf_feedback", "feedforward_urdf_pd"};

const char * control_law_name(control_law_t law)
{
  return (unsigned)law < LAW_COUNT ? LAW_NAMES[law] : "unknown";
}

int control_law_parse(const char * name)
{
  for (int k = 0; k < LAW_COUNT; k++) {
    if (strcmp(name, LAW_NAMES[k]) == 0) {return k;}
  }
  return -1;
}

int control_law_urdf_feedback(control_law_t law)
{
  return law == LAW_COMPUTED_TORQUE_URDF_FEEDBACK || law == LAW_FEEDFORWARD_URDF_PD;
}

double wrap_angle(double x)
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

/* control_terms' URDF-feedback laws: the model's inverse dynamics (on the state, or on the
 * reference) plus the URDF's mass matrix at the measured q times the computed-torque feedback
 * acceleration v; scratch holds n doubles (model_inverse's, then H v) */
static int urdf_feedback_torque(
  const model_t * model, control_law_t law, rigid_body * feedback, const law_gains_t * g,
  const double * q, const double * qd, const double * q_ref, const double * qd_ref,
  const double * qdd_ref, const double * v, double * tau, double * scratch)
{
  int bad = law == LAW_COMPUTED_TORQUE_URDF_FEEDBACK ?
    model_inverse(model, q, qd, qdd_ref, tau, scratch) :
    model_inverse(model, q_ref, qd_ref, qdd_ref, tau, scratch);
  if (!feedback) {return 1;}
  bad |= rigid_body_mass_times(feedback, q, v, scratch);
  for (int i = 0; i < g->n; i++) {
    tau[i] = tau[i] + scratch[i];
    bad |= !isfinite(tau[i]);
  }
  return bad;
}

int control_torque(
  const model_t * model, control_law_t law, rigid_body * feedback, const law_gains_t * g,
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
  } else if (control_law_urdf_feedback(law)) {
    for (int i = 0; i < n; i++) {acc[i] = g->ct_kp[i] * e[i] + g->ct_kd[i] * e_dot[i];}
    bad = urdf_feedback_torque(model, law, feedback, g, q, qd, q_ref, qd_ref, qdd_ref, acc, tau,
        scratch);
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
