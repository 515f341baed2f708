/* The torque laws of delan_control.control_laws that need no URDF model, on plain arrays. */
#ifndef DELAN_CONTROL_RT__CONTROL_LAW_H_
#define DELAN_CONTROL_RT__CONTROL_LAW_H_

#include "delan_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {LAW_COMPUTED_TORQUE = 0, LAW_FEEDFORWARD_PD = 1} control_law_t;

typedef struct
{
  int n;
  const double * ct_kp, * ct_kd, * kp, * kd;  /* (n,) */
  const unsigned char * continuous;           /* (n,) 1: position error wrapped to (-pi, pi] */
} law_gains_t;

/* Unclamped torque (n,) of law with model (NULL = PD); work holds 3 n doubles. Returns 1 when
 * the model's torque was not finite and PD stands in (as control_terms' caller does). */
int control_torque(
  const delan_model * model, control_law_t law, const law_gains_t * g,
  const double * q, const double * qd, const double * q_ref, const double * qd_ref,
  const double * qdd_ref, double * tau, double * work);

/* tau clipped to [-limits, limits] */
void clamp_torque(int n, double * tau, const double * limits);

#ifdef __cplusplus
}
#endif
#endif
