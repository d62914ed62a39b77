/*
 * yamljson: a YAML document (libyaml) read into a jansson value, for the
 * operator's own inputs (kubeconfig files). Scalars stay strings except
 * plain true/false/null and plain numbers; aliases are expanded within a
 * bound on the number of nodes. The input is bounded by its caller.
 */
#ifndef DDILOCO_YAMLJSON_H
#define DDILOCO_YAMLJSON_H

#include <jansson.h>
#include <stddef.h>

#include "common/err.h"

/* The first document of text as a new JSON value (NULL on error). */
json_t *yaml_to_json(const char *text, size_t len, struct err *e);

#endif
