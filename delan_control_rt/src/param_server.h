/* The parameters of a node written on rcl alone, served as rclpy and rclcpp nodes serve them:
 * a table of declared parameters (name, value, read-only) and the rcl_interfaces services on
 * the node (~/get_parameters, ~/get_parameter_types, ~/set_parameters,
 * ~/set_parameters_atomically, ~/list_parameters, ~/describe_parameters), so that
 * `ros2 param get/set/list/describe` and parameter clients work with it. A set is checked here
 * (declared, not read-only, of the declared type) and then handed to the owner, which applies
 * it or refuses it with a reason; only what the owner accepted enters the table. The services
 * join the owner's wait set: no thread of their own. */
#ifndef DELAN_CONTROL_RT__PARAM_SERVER_H_
#define DELAN_CONTROL_RT__PARAM_SERVER_H_

#include <stddef.h>

#include <rcl/rcl.h>
#include <rcl_interfaces/msg/parameter.h>
#include <rcl_interfaces/msg/parameter_value.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct param_server param_server;

/* Applies changes (n, each declared, writable, of its declared type; set_parameters hands them
 * one at a time, set_parameters_atomically all together) and returns 1, or leaves everything
 * as it was and returns 0 with the reason. */
typedef int (*param_on_set)(
  void * owner, const rcl_interfaces__msg__Parameter * changes, size_t n, char * reason,
  size_t reason_len);

/* An empty table; NULL when out of memory. */
param_server * param_server_create(void);

/* Declares name with a copy of value; 0 when out of memory or already declared. */
int param_declare(
  param_server * s, const char * name, const rcl_interfaces__msg__ParameterValue * value,
  int read_only);

/* The value of a declared parameter, NULL when name is not declared. */
const rcl_interfaces__msg__ParameterValue * param_get(const param_server * s, const char * name);

/* The services on node, answering through on_set(owner, ...); 0 with rcl's error set. */
int param_server_start(param_server * s, rcl_node_t * node, param_on_set on_set, void * owner);

/* how many services param_server_start makes (to size a wait set) */
#define PARAM_SERVER_SERVICES 6

/* Adds the services to ws. */
void param_server_wait_on(param_server * s, rcl_wait_set_t * ws);

/* Answers the requests of the services ws found ready. */
void param_server_answer(param_server * s, const rcl_wait_set_t * ws);

/* Ends the services (when started) and frees the table. */
void param_server_free(param_server * s, rcl_node_t * node);

#ifdef __cplusplus
}
#endif
#endif
