/*
 * yamljson: walks libyaml's document tree recursively into jansson
 * values. Depth and the number of nodes visited are bounded, so neither
 * a deep file nor aliases repeated into a huge tree can exhaust the stack
 * or memory.
 */
#include "operator/yamljson.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define YJ_MAX_DEPTH 64
#define YJ_MAX_NODES 200000

static json_t *scalar(yaml_node_t *n)
{
	const char *s = (const char *)n->data.scalar.value;
	size_t len = n->data.scalar.length;
	char *end;

	if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return json_stringn(s, len);
	if (!strcmp(s, "true"))
		return json_true();
	if (!strcmp(s, "false"))
		return json_false();
	if (!strcmp(s, "null") || !strcmp(s, "~") || len == 0)
		return json_null();
	if (len < 32 && strspn(s, "+-0123456789") == len && strspn(s, "+-") <= 1) {
		long long v = strtoll(s, &end, 10);
		if (*end == '\0')
			return json_integer(v);
	}
	if (len < 64 && strspn(s, "+-0123456789.eE") == len) {
		double d = strtod(s, &end);
		if (*end == '\0' && end != s)
			return json_real(d);
	}
	return json_stringn(s, len);
}

static json_t *node(yaml_document_t *doc, yaml_node_t *n, int depth,
		    long *budget, struct err *e)
{
	json_t *out;

	if (--*budget < 0) {
		err_set(e, "yaml: more than %d nodes (aliases expanded)", YJ_MAX_NODES);
		return NULL;
	}

	if (!n) {
		err_set(e, "yaml: missing node");
		return NULL;
	}
	if (depth > YJ_MAX_DEPTH) {
		err_set(e, "yaml: nested deeper than %d", YJ_MAX_DEPTH);
		return NULL;
	}
	switch (n->type) {
	case YAML_SCALAR_NODE:
		return scalar(n);
	case YAML_SEQUENCE_NODE:
		out = json_array();
		for (yaml_node_item_t *i = n->data.sequence.items.start;
		     i < n->data.sequence.items.top; i++) {
			json_t *v = node(doc, yaml_document_get_node(doc, *i),
					 depth + 1, budget, e);
			if (!v) {
				json_decref(out);
				return NULL;
			}
			json_array_append_new(out, v);
		}
		return out;
	case YAML_MAPPING_NODE:
		out = json_object();
		for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
		     p < n->data.mapping.pairs.top; p++) {
			yaml_node_t *k = yaml_document_get_node(doc, p->key);
			json_t *v;

			if (!k || k->type != YAML_SCALAR_NODE) {
				json_decref(out);
				err_set(e, "yaml: a mapping key is not a scalar");
				return NULL;
			}
			v = node(doc, yaml_document_get_node(doc, p->value),
				 depth + 1, budget, e);
			if (!v) {
				json_decref(out);
				return NULL;
			}
			json_object_set_new(out, (const char *)k->data.scalar.value, v);
		}
		return out;
	default:
		err_set(e, "yaml: empty document");
		return NULL;
	}
}

json_t *yaml_to_json(const char *text, size_t len, struct err *e)
{
	yaml_parser_t p;
	yaml_document_t doc;
	json_t *out = NULL;

	if (!yaml_parser_initialize(&p)) {
		err_set(e, "yaml: out of memory");
		return NULL;
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	if (!yaml_parser_load(&p, &doc)) {
		err_set(e, "yaml: line %zu: %s", p.problem_mark.line + 1,
			p.problem ? p.problem : "syntax error");
		yaml_parser_delete(&p);
		return NULL;
	}
	if (doc.nodes.start == doc.nodes.top) {
		out = json_object();   /* an empty file is an empty map */
	} else {
		/* aliases are node ids: depth and node count bound them */
		long budget = YJ_MAX_NODES;

		out = node(&doc, yaml_document_get_root_node(&doc), 0, &budget, e);
	}
	yaml_document_delete(&doc);
	yaml_parser_delete(&p);
	return out;
}
