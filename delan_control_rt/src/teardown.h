/* A deadline for a node's teardown after its loop: destroying the entities, the node and the
 * context takes milliseconds; a teardown stuck in the middleware past TEARDOWN_TIMEOUT_S ends
 * the process with exit status 1 and a line on stderr naming the node and the stage, as the
 * Python nodes' teardown deadline does (delan_common.ros.spin), instead of waiting for
 * launch's SIGKILL without a trace. No ROS dependency. */
#ifndef DELAN_CONTROL_RT__TEARDOWN_H_
#define DELAN_CONTROL_RT__TEARDOWN_H_

#ifdef __cplusplus
extern "C" {
#endif

/* seconds the teardown gets (the Python nodes' TEARDOWN_TIMEOUT_S) */
#define TEARDOWN_TIMEOUT_S 4

/* arm the deadline (SIGALRM) for node_name's teardown, `seconds` from now */
void teardown_deadline(const char * node_name, unsigned int seconds);

/* the stage the teardown is in (a string literal), named if the deadline passes */
void teardown_stage(const char * stage);

#ifdef __cplusplus
}
#endif
#endif
