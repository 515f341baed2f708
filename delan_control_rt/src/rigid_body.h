/* A rigid-body model exported by delan_common.rigid_body_export (format documented there: the
 * URDF's reduced Pinocchio model or identified parameters on its kinematics, with friction),
 * evaluated by recursive Newton-Euler:
 *
 *   tau = H(q) qdd + c(q, qd) + g(q) + armature qdd + viscous qd + coulomb tanh(qd / eps)
 *
 * what delan_common.robot_model.RobotModel.inverse (Pinocchio's RNEA + the URDF's friction)
 * and delan_control.sysid.IdentifiedModel.inverse compute. Loading allocates everything an
 * evaluation needs: rigid_body_inverse and rigid_body_mass_times allocate nothing. */
#ifndef DELAN_CONTROL_RT__RIGID_BODY_H_
#define DELAN_CONTROL_RT__RIGID_BODY_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the newest file format this reader understands (rigid_body_export.FORMAT_VERSION) */
#define RIGID_BODY_FORMAT_VERSION 1

/* what the file was made from (its header's source field) */
enum {RIGID_BODY_URDF = 0, RIGID_BODY_IDENTIFIED = 1};

typedef struct rigid_body rigid_body;

/* Loads an exported file; NULL with a reason in err (truncated, foreign, newer, corrupt). */
rigid_body * rigid_body_load(const char * path, char * err, size_t err_len);
void rigid_body_free(rigid_body * model);
int rigid_body_dof(const rigid_body * model);
const char * rigid_body_joint_name(const rigid_body * model, int i);
/* RIGID_BODY_URDF or RIGID_BODY_IDENTIFIED */
int rigid_body_source(const rigid_body * model);
/* 1 when joint i is continuous (its angle unbounded) */
int rigid_body_continuous(const rigid_body * model, int i);
/* tau (n,) at (q, qd, qdd); 0 when tau is finite, else 1. Uses the model's own work space:
 * one evaluation at a time per model. */
int rigid_body_inverse(
  rigid_body * model, const double * q, const double * qd, const double * qdd, double * tau);
/* out (n,) = (H(q) + diag(armature)) x, the mass matrix (Pinocchio's crba, armature
 * included) times x: one pass at zero velocity without gravity or friction. 0 when out is
 * finite, else 1. The same work space as rigid_body_inverse. */
int rigid_body_mass_times(rigid_body * model, const double * q, const double * x, double * out);

#ifdef __cplusplus
}
#endif
#endif
