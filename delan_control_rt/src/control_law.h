/* The torque laws of delan_control.control_laws on plain arrays, with the feed-forward model of
 * the torque controller's model kinds; the URDF-feedback laws take the URDF's mass matrix from
 * its rigid-body model (rigid_body_mass_times). */
#ifndef DELAN_CONTROL_RT__CONTROL_LAW_H_
#define DELAN_CONTROL_RT__CONTROL_LAW_H_

#include "delan_model.h"
#include "rigid_body.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum
{
  LAW_COMPUTED_TORQUE = 0,
  LAW_FEEDFORWARD_PD = 1,
  LAW_COMPUTED_TORQUE_URDF_FEEDBACK = 2,
  LAW_FEEDFORWARD_URDF_PD = 3,
  LAW_COUNT
} control_law_t;

/* control_laws.LAWS' name of law */
const char * control_law_name(control_law_t law);
/* the law named name; -1 when there is none */
int control_law_parse(const char * name);
/* 1 for the laws whose feedback goes through the URDF's mass matrix (URDF_FEEDBACK_LAWS) */
int control_law_urdf_feedback(control_law_t law);

/* x wrapped to (-pi, pi] (control_laws.wrap_angle): a continuous joint's angle difference */
double wrap_angle(double x);

/* The feed-forward model: the rigid-body model (pinocchio, identified), the DeLaN (delan) or
 * their sum (delan_residual: delan_common.residual_dynamics.NominalPlusResidual); neither is PD
 * alone. */
typedef struct
{
  rigid_body * rb;
  delan_model * delan;
} model_t;

/* 1 when m holds a model (else the laws are PD) */
int model_present(const model_t * m);

/* tau (n,) = the model's inverse dynamics at (q, qd, qdd); work holds n doubles. 0 when tau is
 * finite, else 1. */
int model_inverse(
  const model_t * m, const double * q, const double * qd, const double * qdd, double * tau,
  double * work);

typedef struct
{
  int n;
  const double * ct_kp, * ct_kd, * kp, * kd;  /* (n,) */
  const unsigned char * continuous;           /* (n,) 1: position error wrapped to (-pi, pi] */
} law_gains_t;

/* Unclamped torque (n,) of law with model (NULL or none = PD) and, for the URDF-feedback laws,
 * feedback, the URDF's rigid-body model (its mass matrix; NULL: those laws fail, as
 * control_terms raises without one); work holds 4 n doubles. Returns 1 when the model's torque
 * was not finite and PD stands in (as control_terms' caller does). */
int control_torque(
  const model_t * model, control_law_t law, rigid_body * feedback, const law_gains_t * g,
  const double * q, const double * qd, const double * q_ref, const double * qd_ref,
  const double * qdd_ref, double * tau, double * work);

/* tau clipped to [-limits, limits] */
void clamp_torque(int n, double * tau, const double * limits);

#ifdef __cplusplus
}
#endif
#endif
