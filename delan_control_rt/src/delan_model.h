/* A DeLaN exported by delan_learning.c_export (format documented there), evaluated by the C
 * kernel of delan_learning (its delan_kernel.c, compiled into this library unchanged). */
#ifndef DELAN_CONTROL_RT__DELAN_MODEL_H_
#define DELAN_CONTROL_RT__DELAN_MODEL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the newest file format this reader understands (c_export.FORMAT_VERSION); version 2 adds
 * the Stribeck friction law (friction 2) to version 1's none / viscous + Coulomb (0 / 1),
 * version 3 the role: a whole delan model or a delan_residual's residual (before it: whole) */
#define DELAN_RT_FORMAT_VERSION 3

typedef struct delan_model delan_model;

/* Loads an exported file; NULL with a reason in err (truncated, foreign, newer, corrupt). */
delan_model * delan_model_load(const char * path, char * err, size_t err_len);
void delan_model_free(delan_model * model);
int delan_model_dof(const delan_model * model);
const char * delan_model_joint_name(const delan_model * model, int i);
int64_t delan_model_version(const delan_model * model);
/* the model kind whose networks the file holds (its role): "delan" (a whole model) or
 * "delan_residual" (a residual added to the URDF's rigid-body model); the caller checks it
 * against the kind it evaluates, the same networks being a fraction of the torque as a
 * residual's and the whole of it as a model's */
const char * delan_model_kind(const delan_model * model);
/* tau = inverse dynamics at (q, qd, qdd); 0 when tau is finite, else 1 */
int delan_model_inverse(
  const delan_model * model, const double * q, const double * qd,
  const double * qdd, double * tau);

#ifdef __cplusplus
}
#endif
#endif
