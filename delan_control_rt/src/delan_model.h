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
 * the Stribeck friction law (friction 2) to version 1's none / viscous + Coulomb (0 / 1) */
#define DELAN_RT_FORMAT_VERSION 2

typedef struct delan_model delan_model;

/* Loads an exported file; NULL with a reason in err (truncated, foreign, newer, corrupt). */
delan_model * delan_model_load(const char * path, char * err, size_t err_len);
void delan_model_free(delan_model * model);
int delan_model_dof(const delan_model * model);
const char * delan_model_joint_name(const delan_model * model, int i);
int64_t delan_model_version(const delan_model * model);
/* tau = inverse dynamics at (q, qd, qdd); 0 when tau is finite, else 1 */
int delan_model_inverse(
  const delan_model * model, const double * q, const double * qd,
  const double * qdd, double * tau);

#ifdef __cplusplus
}
#endif
#endif
