/* A node's parameter table and services (param_server.h). */
#include "param_server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rcl/error_handling.h>
#include <rcl_interfaces/msg/parameter_descriptor.h>
#include <rcl_interfaces/msg/parameter_type.h>
#include <rcl_interfaces/msg/set_parameters_result.h>
#include <rcl_interfaces/srv/describe_parameters.h>
#include <rcl_interfaces/srv/get_parameter_types.h>
#include <rcl_interfaces/srv/get_parameters.h>
#include <rcl_interfaces/srv/list_parameters.h>
#include <rcl_interfaces/srv/set_parameters.h>
#include <rcl_interfaces/srv/set_parameters_atomically.h>
#include <rosidl_runtime_c/primitives_sequence_functions.h>
#include <rosidl_runtime_c/string_functions.h>

typedef rcl_interfaces__msg__ParameterValue value_t;
typedef rcl_interfaces__msg__Parameter parameter_t;

typedef struct
{
  char * name;
  value_t value;
  int read_only;
} entry_t;

/* one service: its request and response messages, made once, and how it answers */
typedef struct
{
  rcl_service_t service;
  size_t index;  /* in the wait set */
  void * request, * response;
  void (* answer)(param_server * s, const void * request, void * response);
  /* clears the response of the previous answer */
  void (* reset)(void * response);
  void (* destroy)(void * request, void * response);
} service_t;

struct param_server
{
  entry_t * entries;
  size_t n, capacity;
  service_t services[PARAM_SERVER_SERVICES];
  int started;
  param_on_set on_set;
  void * owner;
};

/* ------------------------------------------------------------------ table */
param_server * param_server_create(void)
{
  return calloc(1, sizeof(param_server));
}

static entry_t * find(const param_server * s, const char * name)
{
  for (size_t i = 0; i < s->n; i++) {
    if (strcmp(s->entries[i].name, name) == 0) {return &s->entries[i];}
  }
  return NULL;
}

int param_declare(param_server * s, const char * name, const value_t * value, int read_only)
{
  if (find(s, name)) {return 0;}
  if (s->n == s->capacity) {
    size_t capacity = s->capacity ? 2 * s->capacity : 32;
    entry_t * more = realloc(s->entries, capacity * sizeof(entry_t));
    if (!more) {return 0;}
    s->entries = more;
    s->capacity = capacity;
  }
  entry_t * e = &s->entries[s->n];
  e->read_only = read_only;
  if (!(e->name = strdup(name))) {return 0;}
  if (!rcl_interfaces__msg__ParameterValue__init(&e->value) ||
    !rcl_interfaces__msg__ParameterValue__copy(value, &e->value))
  {
    free(e->name);
    return 0;
  }
  s->n++;
  return 1;
}

const value_t * param_get(const param_server * s, const char * name)
{
  const entry_t * e = find(s, name);
  return e ? &e->value : NULL;
}

static const char * type_name(uint8_t type)
{
  static const char * const names[] = {"not set", "bool", "integer", "double", "string",
    "byte array", "bool array", "integer array", "double array", "string array"};
  return type < sizeof(names) / sizeof(names[0]) ? names[type] : "unknown";
}

/* 0 with the reason unless p may be set: declared, writable, of its declared type */
static int settable(const param_server * s, const parameter_t * p, char * reason, size_t len)
{
  const entry_t * e = find(s, p->name.data);
  if (!e) {
    snprintf(reason, len, "parameter %s is not declared", p->name.data);
    return 0;
  }
  if (e->read_only) {
    snprintf(reason, len, "parameter %s is read-only (read at start-up: restart the node "
      "to change it)", p->name.data);
    return 0;
  }
  if (p->value.type != e->value.type) {
    snprintf(reason, len, "parameter %s is of type %s, not %s", p->name.data,
      type_name(e->value.type), type_name(p->value.type));
    return 0;
  }
  return 1;
}

/* checks changes, hands them to the owner and, accepted, enters them; 0 with the reason */
static int set(param_server * s, const parameter_t * changes, size_t n, char * reason,
  size_t len)
{
  for (size_t i = 0; i < n; i++) {
    if (!settable(s, &changes[i], reason, len)) {return 0;}
  }
  if (!s->on_set(s->owner, changes, n, reason, len)) {return 0;}
  for (size_t i = 0; i < n; i++) {
    rcl_interfaces__msg__ParameterValue__copy(&changes[i].value,
      &find(s, changes[i].name.data)->value);
  }
  return 1;
}

static void result(rcl_interfaces__msg__SetParametersResult * r, int ok, const char * reason)
{
  r->successful = ok;
  rosidl_runtime_c__String__assign(&r->reason, ok ? "" : reason);
}

/* ------------------------------------------------------------------ answers */
static void answer_get(param_server * s, const void * request, void * response)
{
  const rcl_interfaces__srv__GetParameters_Request * rq = request;
  rcl_interfaces__srv__GetParameters_Response * rs = response;
  if (!rcl_interfaces__msg__ParameterValue__Sequence__init(&rs->values, rq->names.size)) {return;}
  for (size_t i = 0; i < rq->names.size; i++) {
    const value_t * v = param_get(s, rq->names.data[i].data);
    if (v) {rcl_interfaces__msg__ParameterValue__copy(v, &rs->values.data[i]);}
  }
}

static void answer_types(param_server * s, const void * request, void * response)
{
  const rcl_interfaces__srv__GetParameterTypes_Request * rq = request;
  rcl_interfaces__srv__GetParameterTypes_Response * rs = response;
  if (!rosidl_runtime_c__uint8__Sequence__init(&rs->types, rq->names.size)) {return;}
  for (size_t i = 0; i < rq->names.size; i++) {
    const value_t * v = param_get(s, rq->names.data[i].data);
    rs->types.data[i] = v ? v->type : rcl_interfaces__msg__ParameterType__PARAMETER_NOT_SET;
  }
}

/* each parameter on its own, in order, as rclpy's set_parameters */
static void answer_set(param_server * s, const void * request, void * response)
{
  const rcl_interfaces__srv__SetParameters_Request * rq = request;
  rcl_interfaces__srv__SetParameters_Response * rs = response;
  const size_t n = rq->parameters.size;
  if (!rcl_interfaces__msg__SetParametersResult__Sequence__init(&rs->results, n)) {return;}
  for (size_t i = 0; i < n; i++) {
    char reason[1024];
    int ok = set(s, &rq->parameters.data[i], 1, reason, sizeof(reason));
    result(&rs->results.data[i], ok, reason);
  }
}

static void answer_set_atomically(param_server * s, const void * request, void * response)
{
  const rcl_interfaces__srv__SetParametersAtomically_Request * rq = request;
  rcl_interfaces__srv__SetParametersAtomically_Response * rs = response;
  char reason[1024];
  int ok = set(s, rq->parameters.data, rq->parameters.size, reason, sizeof(reason));
  result(&rs->result, ok, reason);
}

/* a name under one of the prefixes (all names without prefixes) */
static int listed(const rosidl_runtime_c__String__Sequence * prefixes, const char * name)
{
  if (prefixes->size == 0) {return 1;}
  for (size_t k = 0; k < prefixes->size; k++) {
    const char * p = prefixes->data[k].data;
    size_t len = strlen(p);
    if (strncmp(name, p, len) == 0 && (name[len] == '\0' || name[len] == '.')) {return 1;}
  }
  return 0;
}

static void answer_list(param_server * s, const void * request, void * response)
{
  const rcl_interfaces__srv__ListParameters_Request * rq = request;
  rcl_interfaces__srv__ListParameters_Response * rs = response;
  size_t count = 0;
  for (size_t i = 0; i < s->n; i++) {count += listed(&rq->prefixes, s->entries[i].name);}
  if (!rosidl_runtime_c__String__Sequence__init(&rs->result.names, count)) {return;}
  for (size_t i = 0, k = 0; i < s->n; i++) {
    if (listed(&rq->prefixes, s->entries[i].name)) {
      rosidl_runtime_c__String__assign(&rs->result.names.data[k++], s->entries[i].name);
    }
  }
}

static void answer_describe(param_server * s, const void * request, void * response)
{
  const rcl_interfaces__srv__DescribeParameters_Request * rq = request;
  rcl_interfaces__srv__DescribeParameters_Response * rs = response;
  const size_t n = rq->names.size;
  if (!rcl_interfaces__msg__ParameterDescriptor__Sequence__init(&rs->descriptors, n)) {return;}
  for (size_t i = 0; i < n; i++) {
    const entry_t * e = find(s, rq->names.data[i].data);
    rcl_interfaces__msg__ParameterDescriptor * d = &rs->descriptors.data[i];
    rosidl_runtime_c__String__assign(&d->name, rq->names.data[i].data);
    d->type = e ? e->value.type : rcl_interfaces__msg__ParameterType__PARAMETER_NOT_SET;
    d->read_only = e && e->read_only;
  }
}

/* ------------------------------------------------------------------ services */
/* the create / reset / destroy of one service type's messages */
#define SERVICE_MESSAGES(T) \
  static void reset_ ## T(void * response) \
  { \
    rcl_interfaces__srv__ ## T ## _Response__fini(response); \
    rcl_interfaces__srv__ ## T ## _Response__init(response); \
  } \
  static void destroy_ ## T(void * request, void * response) \
  { \
    rcl_interfaces__srv__ ## T ## _Request__destroy(request); \
    rcl_interfaces__srv__ ## T ## _Response__destroy(response); \
  }

SERVICE_MESSAGES(GetParameters)
SERVICE_MESSAGES(GetParameterTypes)
SERVICE_MESSAGES(SetParameters)
SERVICE_MESSAGES(SetParametersAtomically)
SERVICE_MESSAGES(ListParameters)
SERVICE_MESSAGES(DescribeParameters)

#define SERVICE(T, suffix, answer_fn) \
  {ROSIDL_GET_SRV_TYPE_SUPPORT(rcl_interfaces, srv, T), "~/" suffix, \
    rcl_interfaces__srv__ ## T ## _Request__create(), \
    rcl_interfaces__srv__ ## T ## _Response__create(), answer_fn, reset_ ## T, destroy_ ## T}

int param_server_start(param_server * s, rcl_node_t * node, param_on_set on_set, void * owner)
{
  const struct
  {
    const rosidl_service_type_support_t * type;
    const char * name;
    void * request, * response;
    void (* answer)(param_server *, const void *, void *);
    void (* reset)(void *);
    void (* destroy)(void *, void *);
  } kinds[PARAM_SERVER_SERVICES] = {
    SERVICE(GetParameters, "get_parameters", answer_get),
    SERVICE(GetParameterTypes, "get_parameter_types", answer_types),
    SERVICE(SetParameters, "set_parameters", answer_set),
    SERVICE(SetParametersAtomically, "set_parameters_atomically", answer_set_atomically),
    SERVICE(ListParameters, "list_parameters", answer_list),
    SERVICE(DescribeParameters, "describe_parameters", answer_describe),
  };
  s->on_set = on_set;
  s->owner = owner;
  rcl_service_options_t options = rcl_service_get_default_options();
  options.qos = rmw_qos_profile_parameters;
  int ok = 1;
  for (int k = 0; k < PARAM_SERVER_SERVICES; k++) {
    service_t * v = &s->services[k];
    v->service = rcl_get_zero_initialized_service();
    v->request = kinds[k].request;
    v->response = kinds[k].response;
    v->answer = kinds[k].answer;
    v->reset = kinds[k].reset;
    v->destroy = kinds[k].destroy;
    ok &= v->request && v->response && rcl_service_init(&v->service, node, kinds[k].type,
      kinds[k].name, &options) == RCL_RET_OK;
  }
  s->started = 1;
  return ok;
}

void param_server_wait_on(param_server * s, rcl_wait_set_t * ws)
{
  for (int k = 0; k < PARAM_SERVER_SERVICES; k++) {
    if (rcl_wait_set_add_service(ws, &s->services[k].service, &s->services[k].index) !=
      RCL_RET_OK)
    {
      rcl_reset_error();
    }
  }
}

void param_server_answer(param_server * s, const rcl_wait_set_t * ws)
{
  for (int k = 0; k < PARAM_SERVER_SERVICES; k++) {
    service_t * v = &s->services[k];
    if (v->index >= ws->size_of_services || !ws->services[v->index]) {continue;}
    rmw_request_id_t header;
    while (rcl_take_request(&v->service, &header, v->request) == RCL_RET_OK) {
      v->reset(v->response);
      v->answer(s, v->request, v->response);
      if (rcl_send_response(&v->service, &header, v->response) != RCL_RET_OK) {
        fprintf(stderr, "[param_server] response not sent: %s\n", rcl_get_error_string().str);
      }
    }
    rcl_reset_error();
  }
}

void param_server_free(param_server * s, rcl_node_t * node)
{
  if (!s) {return;}
  for (int k = 0; s->started && k < PARAM_SERVER_SERVICES; k++) {
    service_t * v = &s->services[k];
    if (rcl_service_fini(&v->service, node) != RCL_RET_OK) {rcl_reset_error();}
    v->destroy(v->request, v->response);
  }
  for (size_t i = 0; i < s->n; i++) {
    free(s->entries[i].name);
    rcl_interfaces__msg__ParameterValue__fini(&s->entries[i].value);
  }
  free(s->entries);
  free(s);
}
