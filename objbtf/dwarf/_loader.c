/*
 * objbtf.dwarf._loader: CuLoader.load_types in C, for the compiled build.
 *
 * It reads the type DIEs the C decoder keeps in C (_dies.c's Arena,
 * _arena.h) and makes the BtfType objects loader.py makes of the Dies
 * reader.py's decoder makes, field for field: the same ids in the same
 * order, the same member offsets, the same index type; base types and
 * enums through rules.py's own functions, which it calls.  Values that
 * pass through unchanged (names, sizes) are the Python objects those Dies
 * would hold.
 *
 * It takes the well-formed path: at anything it does not expect (a
 * reference to a DIE that is no type or is not in the arena, a value that is
 * not an integer where the loader computes with one, a member location that
 * is an expression, a value past 2**48) it returns None, and loader.py loads
 * the unit again from the Arena's Dies, with its own result or error
 * message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include "../btf/_btf.h"
#include "_arena.h"

/* DW_TAG_*, DW_AT_*, DW_ATE_* (constants.py's) */
enum {
	TAG_ARRAY = 0x01, TAG_CLASS = 0x02, TAG_ENUMERATION = 0x04, TAG_FORMAL_PARAMETER = 0x05,
	TAG_MEMBER = 0x0d, TAG_POINTER = 0x0f, TAG_STRUCTURE = 0x13, TAG_SUBROUTINE = 0x15,
	TAG_TYPEDEF = 0x16, TAG_UNION = 0x17, TAG_UNSPECIFIED_PARAMETERS = 0x18,
	TAG_SUBRANGE = 0x21, TAG_BASE = 0x24, TAG_CONST = 0x26, TAG_ENUMERATOR = 0x28,
	TAG_VOLATILE = 0x35, TAG_RESTRICT = 0x37, TAG_UNSPECIFIED = 0x3b, TAG_ATOMIC = 0x47,
	TAG_LLVM_ANNOTATION = 0x6000,
};
enum {
	AT_NAME = 0x03, AT_BYTE_SIZE = 0x0b, AT_BIT_OFFSET = 0x0c, AT_BIT_SIZE = 0x0d,
	AT_CONST_VALUE = 0x1c, AT_UPPER_BOUND = 0x2f, AT_ABSTRACT_ORIGIN = 0x31, AT_COUNT = 0x37,
	AT_DATA_MEMBER_LOCATION = 0x38, AT_DECLARATION = 0x3c, AT_ENCODING = 0x3e,
	AT_SPECIFICATION = 0x47, AT_TYPE = 0x49, AT_DATA_BIT_OFFSET = 0x6b,
};
enum { ATE_BOOLEAN = 0x02, ATE_FLOAT = 0x04, ATE_SIGNED = 0x05, ATE_SIGNED_CHAR = 0x06 };
/* BTF_INT_* (kinds.py's INT_SIGNED, INT_BOOL) */
enum { INT_SIGNED = 1, INT_BOOL = 4 };
/* A value the loader computes with, past this, is left to loader.py. */
#define LIMIT ((int64_t)1 << 48)

/* What init() is given: the classes made, rules.py's functions, the arena's type. */
static PyObject *btf_type, *kinds, *member_class, *param_class, *enumerator_class, *expr_class,
	*base_type_rule, *enum_type_rule, *declared_enum_rule, *arena_type, *empty;

/* One call's state: CuLoader's fields. */
struct loader {
	Arena *a;
	int32_t *ids;           /* per entry: the id of the unit's type DIE, else 0 */
	PyObject *features;
	long index_type;
	int big, address_size;
	int type_tags;          /* the unit is annotated and the type_tag feature on */
};

/* A type DIE of the unit, its tag, and the btf_type_tag annotations it
 * carries when it is a pointer (loader.py's tags_of). */
struct slot {
	int32_t entry;
	long tag;
	Py_ssize_t tags;
};

/* What a helper returns besides its value: go on, give up, or a Python error set. */
enum { OK = 0, GIVE_UP = 1, ERROR = -1 };

static const struct entry *at(const struct loader *l, int32_t idx)
{
	return &l->a->e[idx];
}

/* The value of attribute ``attr`` of entry ``idx``; NULL when it has none. */
static const struct cval *attr(const struct loader *l, int32_t idx, uint32_t attr)
{
	return arena_attr(l->a, at(l, idx), attr);
}

/* The Python object of ``v`` (a new reference), ``fallback`` (borrowed) for none. */
static PyObject *object_or(const struct loader *l, const struct cval *v, PyObject *fallback)
{
	return v ? cval_object(l->a->info.buf, v, expr_class) : Py_NewRef(fallback);
}

/* ``v`` as an integer within LIMIT: 1, or 0 when it is not one. */
static int small_int(const struct cval *v, int64_t *out)
{
	int64_t n;

	if (!v || !cval_is_int(v))
		return 0;
	if (v->kind == CV_UINT) {
		if (v->u >= (uint64_t)LIMIT)
			return 0;
		*out = (int64_t)v->u;
		return 1;
	}
	n = (int64_t)cval_bits(v);
	if (n >= LIMIT || n <= -LIMIT)
		return 0;
	*out = n;
	return 1;
}

/* An item's integer value, none as 0: 1, or 0 when it is neither. */
static int item_int(const struct loader *l, int32_t idx, uint32_t a, int64_t *out)
{
	const struct cval *v = attr(l, idx, a);

	*out = 0;
	return !v || small_int(v, out);
}

/* The DIE entry a reference value ``v`` names (true, an integer): into
 * *idx; GIVE_UP where the arena has none (a DIE made in Python, or no DIE:
 * loader.py decides). */
static int referenced(const struct loader *l, const struct cval *v, int32_t *idx)
{
	*idx = arena_find(l->a, cval_bits(v));
	return *idx == NONE ? GIVE_UP : OK;
}

/* The DIE entry a type's reference ``v`` names, as CuLoader.type_size and
 * _underlying_signed find it: into *idx, NONE for none (absent, or 0);
 * GIVE_UP for a value that is no integer (the compiled loader raises
 * TypeError) or a DIE the arena has not. */
static int referenced_type(const struct loader *l, const struct cval *v, int32_t *idx)
{
	*idx = NONE;
	if (v && !cval_is_int(v))
		return GIVE_UP;
	if (!v || !cval_truth(v))
		return OK;
	return referenced(l, v, idx);
}

/* The attribute of entry ``idx`` or of its specification or abstract
 * origin (CuLoader.origin_attr), into *out (NULL without one). */
static int origin_attr(const struct loader *l, int32_t idx, uint32_t a, const struct cval **out)
{
	*out = NULL;
	for (int seen = 0; seen < 8; seen++) {
		const struct cval *next;

		if ((*out = attr(l, idx, a)))
			return OK;
		next = attr(l, idx, AT_SPECIFICATION);
		if (!next || !cval_truth(next))
			next = attr(l, idx, AT_ABSTRACT_ORIGIN);
		if (!next || !cval_truth(next) || !cval_is_int(next))
			return OK;      /* (a reference that is no integer names no DIE) */
		if (referenced(l, next, &idx))
			return GIVE_UP;
	}
	return OK;
}

/* The id a DW_AT_type value ``v`` refers to (CuLoader.ref). */
static int ref(const struct loader *l, const struct cval *v, long *id)
{
	for (int depth = 0;; depth++) {
		int32_t idx;
		int64_t n;
		uint32_t tag;

		if (!v)
			return *id = 0, OK;
		if (!small_int(v, &n))
			return GIVE_UP;
		if (!n)
			return *id = 0, OK;
		if (n < 0 || referenced(l, v, &idx))
			return GIVE_UP;
		if (l->ids[idx])
			return *id = l->ids[idx], OK;
		tag = at(l, idx)->tag;
		if (depth >= 32 || (tag != TAG_ATOMIC && tag != TAG_UNSPECIFIED))
			return GIVE_UP;         /* loader.py names the DIE */
		if (tag == TAG_UNSPECIFIED)
			return *id = 0, OK;
		v = attr(l, idx, AT_TYPE);
	}
}

/* The element count of an array DIE (CuLoader._nelems), modulo 2**32 as
 * the loader's result is. */
static int nelems(const struct loader *l, int32_t idx, uint32_t *out)
{
	uint32_t n = 1;

	for (int32_t c = at(l, idx)->first_child; c != NONE; c = at(l, c)->next) {
		const struct cval *ub, *count;

		if (at(l, c)->tag != TAG_SUBRANGE)
			continue;
		if ((ub = attr(l, c, AT_UPPER_BOUND)) && ub->kind != CV_EXPR) {
			if (!cval_is_int(ub))
				return GIVE_UP;
			n *= (uint32_t)cval_bits(ub) + 1;
		} else {
			count = attr(l, c, AT_COUNT);
			n *= count && cval_is_int(count) ? (uint32_t)cval_bits(count) : 0;
		}
	}
	*out = n;
	return OK;
}

/* The byte size of the type DIE a reference ``v`` names (CuLoader.type_size). */
static int type_size(const struct loader *l, const struct cval *v, int depth, int64_t *out)
{
	const struct cval *size;
	int64_t n, inner;
	uint32_t count;
	int32_t idx;
	int r;

	*out = 0;
	if ((r = referenced_type(l, v, &idx)) || idx == NONE || depth > 32)
		return r;
	if ((size = attr(l, idx, AT_BYTE_SIZE)))
		return small_int(size, out) ? OK : GIVE_UP;
	switch (at(l, idx)->tag) {
	case TAG_POINTER:
		*out = l->address_size;
		return OK;
	case TAG_ARRAY:
		if ((r = type_size(l, attr(l, idx, AT_TYPE), depth + 1, &inner))
		    || (r = nelems(l, idx, &count)))
			return r;
		/* |inner| < 2**48 and count < 2**32: the product fits 64 bits. */
		n = inner * (int64_t)count;
		if (n >= LIMIT || n <= -LIMIT)
			return GIVE_UP;
		*out = n;
		return OK;
	case TAG_TYPEDEF: case TAG_CONST: case TAG_VOLATILE: case TAG_RESTRICT: case TAG_ATOMIC:
		return type_size(l, attr(l, idx, AT_TYPE), depth + 1, out);
	}
	return OK;
}

/* The fields of a type of ``kind`` named ``name`` (a new reference, NULL:
 * none), all else 0, component_idx -1 and no items: new references, to set
 * more of. */
static void fields_of(PyObject **f, int kind, PyObject *name)
{
	f[0] = Py_NewRef(PyList_GET_ITEM(kinds, kind));
	f[1] = name ? name : Py_NewRef(empty);
	for (int i = 2; i < 11; i++)
		f[i] = PyLong_FromLong(0);
	f[11] = PyLong_FromLong(-1);
	f[12] = PyTuple_New(0);
}

/* Replace field ``i`` of ``f`` by the new reference ``v``. */
static void set(PyObject **f, int i, PyObject *v)
{
	Py_XSETREF(f[i], v);
}

/* The name of entry ``idx`` (a new reference), NULL for none; GIVE_UP for
 * a name that is no str (reader.py's form rules make that impossible). */
static int name_of(const struct loader *l, int32_t idx, PyObject **out)
{
	const struct cval *v = attr(l, idx, AT_NAME);

	*out = NULL;
	if (!v)
		return OK;
	if (v->kind != CV_STR)
		return GIVE_UP;
	*out = Py_NewRef(v->str);
	return OK;
}

/* A member's bit offset (CuLoader._member_bit_offset), a new reference;
 * *skip for a static member. */
static int member_bit_offset(const struct loader *l, int32_t m, int in_union, int64_t bits,
			     PyObject **out, int *skip)
{
	const struct cval *dbo = attr(l, m, AT_DATA_BIT_OFFSET);
	const struct cval *loc = attr(l, m, AT_DATA_MEMBER_LOCATION);
	int64_t bit_off, old, byte_size;
	int r;

	*skip = 0;
	if (dbo)
		return small_int(dbo, &bit_off) ? ((*out = object_or(l, dbo, NULL)) ? OK : ERROR)
			: GIVE_UP;
	if (!loc) {
		*skip = !in_union;
		return (*out = PyLong_FromLong(0)) ? OK : ERROR;
	}
	if (!small_int(loc, &bit_off))
		return GIVE_UP;         /* an expression: DWARF 2's DW_OP_plus_uconst */
	bit_off *= 8;
	if (bits && attr(l, m, AT_BIT_OFFSET)) {
		if (!item_int(l, m, AT_BIT_OFFSET, &old) || !item_int(l, m, AT_BYTE_SIZE, &byte_size))
			return GIVE_UP;
		if (!byte_size && (r = type_size(l, attr(l, m, AT_TYPE), 0, &byte_size)))
			return r;
		bit_off += l->big ? old : byte_size * 8 - old - bits;
	}
	return (*out = PyLong_FromLongLong(bit_off)) ? OK : ERROR;
}

/* The Member of item ``m`` into ``members``, unless it is a static one;
 * *bitfields set when it is one.  An item of another tag (which a Die's
 * tuple would be too short for) is loader.py's. */
static int add_member(const struct loader *l, int32_t m, int in_union, PyObject *members,
		      int *bitfields)
{
	PyObject *one[4], *member;
	int64_t bits, off = 0;
	long type_id;
	int skip, r;

	if (at(l, m)->tag != TAG_MEMBER || !item_int(l, m, AT_BIT_SIZE, &bits))
		return GIVE_UP;
	if ((r = member_bit_offset(l, m, in_union, bits, &one[2], &skip)))
		return r;
	if (skip) {
		Py_DECREF(one[2]);
		return OK;
	}
	if ((r = ref(l, attr(l, m, AT_TYPE), &type_id))) {
		Py_DECREF(one[2]);
		return r;
	}
	if (PyLong_Check(one[2]))
		off = PyLong_AsLongLong(one[2]);
	*bitfields |= bits || off % 8;
	one[0] = object_or(l, attr(l, m, AT_NAME), empty);
	one[1] = PyLong_FromLong(type_id);
	one[3] = PyLong_FromLongLong(bits);
	if (!(member = new_entry(member_class, 4, one)))
		return ERROR;
	r = PyList_Append(members, member) ? ERROR : OK;
	Py_DECREF(member);
	return r;
}

/* A struct, union or class DIE's type (CuLoader._struct). */
static int struct_type(const struct loader *l, int32_t idx, long tag, PyObject **out)
{
	const struct cval *declared = attr(l, idx, AT_DECLARATION);
	PyObject *name, *members, *f[13];
	int in_union = tag == TAG_UNION, bitfields = 0, r;

	if ((r = name_of(l, idx, &name)))
		return r;
	if (declared && cval_truth(declared)) {
		fields_of(f, K_FWD, name);
		set(f, 4, PyLong_FromLong(in_union));   /* fwd_union */
		return (*out = new_type(btf_type, f)) ? OK : ERROR;
	}
	if (!(members = PyList_New(0))) {
		Py_XDECREF(name);
		return ERROR;
	}
	for (int32_t m = at(l, idx)->first_item; r == OK && m != NONE; m = at(l, m)->next)
		r = add_member(l, m, in_union, members, &bitfields);
	if (r) {
		Py_XDECREF(name);
		Py_DECREF(members);
		return r;
	}
	fields_of(f, in_union ? K_UNION : K_STRUCT, name);
	if (attr(l, idx, AT_BYTE_SIZE))
		set(f, 2, object_or(l, attr(l, idx, AT_BYTE_SIZE), NULL));
	set(f, 4, PyLong_FromLong(bitfields));
	set(f, 12, PyList_AsTuple(members));
	Py_DECREF(members);
	return (*out = new_type(btf_type, f)) ? OK : ERROR;
}

/* Whether the type a reference ``v`` names is a signed base type
 * (CuLoader._underlying_signed). */
static int underlying_signed(const struct loader *l, const struct cval *v, int *out)
{
	const struct cval *enc;
	int32_t idx;
	int64_t e;
	int r;

	*out = 0;
	if ((r = referenced_type(l, v, &idx)) || idx == NONE)
		return r;
	if (!(enc = attr(l, idx, AT_ENCODING)))
		return OK;
	if (!small_int(enc, &e))
		return GIVE_UP;
	*out = e == ATE_SIGNED || e == ATE_SIGNED_CHAR;
	return OK;
}

/* Call ``rule`` with ``n`` new references (NULL among them: an error set). */
static PyObject *call_rule(PyObject *rule, int n, PyObject **args)
{
	PyObject *t = NULL;
	int ok = 1;

	for (int i = 0; i < n; i++)
		ok = ok && args[i];
	if (ok)
		t = PyObject_Vectorcall(rule, args, n, NULL);
	for (int i = 0; i < n; i++)
		Py_XDECREF(args[i]);
	return t;
}

/* An enumeration DIE's type (CuLoader._enum), through rules.py. */
static int enum_type(const struct loader *l, int32_t idx, PyObject **out)
{
	const struct entry *e = at(l, idx);
	const struct cval *declared = attr(l, idx, AT_DECLARATION);
	PyObject *name, *values, *args[5];
	int is_signed = 0, r;

	if ((r = name_of(l, idx, &name)))
		return r;
	if (declared && cval_truth(declared) && e->first_child == NONE && e->first_item == NONE) {
		args[0] = name ? name : Py_NewRef(empty);
		return (*out = call_rule(declared_enum_rule, 1, args)) ? OK : ERROR;
	}
	if (!(values = PyList_New(0))) {
		Py_XDECREF(name);
		return ERROR;
	}
	for (int32_t i = e->first_item; r == OK && i != NONE; i = at(l, i)->next) {
		PyObject *one[2], *value;
		uint32_t tag = at(l, i)->tag;

		if (tag == TAG_UNSPECIFIED_PARAMETERS) {
			r = GIVE_UP;    /* a Die's tuple too short for an enumerator's value */
			break;
		}
		if (tag != TAG_ENUMERATOR)
			continue;
		one[0] = object_or(l, attr(l, i, AT_NAME), empty);
		one[1] = attr(l, i, AT_CONST_VALUE) ? object_or(l, attr(l, i, AT_CONST_VALUE), NULL)
			: PyLong_FromLong(0);
		if (!(value = new_entry(enumerator_class, 2, one)) || PyList_Append(values, value))
			r = ERROR;
		Py_XDECREF(value);
	}
	if (r == OK)
		r = underlying_signed(l, attr(l, idx, AT_TYPE), &is_signed);
	if (r) {
		Py_XDECREF(name);
		Py_DECREF(values);
		return r;
	}
	args[0] = name ? name : Py_NewRef(empty);
	args[1] = attr(l, idx, AT_BYTE_SIZE) ? object_or(l, attr(l, idx, AT_BYTE_SIZE), NULL)
		: PyLong_FromLong(4);
	args[2] = values;
	args[3] = PyBool_FromLong(is_signed);
	args[4] = Py_NewRef(l->features);
	return (*out = call_rule(enum_type_rule, 5, args)) ? OK : ERROR;
}

/* A base type DIE's INT or FLOAT (CuLoader._base_type), through rules.py. */
static int base_type(const struct loader *l, int32_t idx, PyObject **out)
{
	const struct cval *enc_v = attr(l, idx, AT_ENCODING), *size = attr(l, idx, AT_BYTE_SIZE);
	PyObject *name, *args[5];
	int64_t enc = 0;
	int r;

	if (enc_v && !small_int(enc_v, &enc))
		return GIVE_UP;
	if ((r = name_of(l, idx, &name)))
		return r;
	args[0] = name ? name : Py_NewRef(empty);
	args[1] = size ? object_or(l, size, NULL) : PyLong_FromLong(0);
	args[2] = PyLong_FromLong(enc == ATE_SIGNED || enc == ATE_SIGNED_CHAR ? INT_SIGNED
				  : enc == ATE_BOOLEAN ? INT_BOOL : 0);
	args[3] = PyBool_FromLong(enc == ATE_FLOAT);
	args[4] = Py_NewRef(l->features);
	return (*out = call_rule(base_type_rule, 5, args)) ? OK : ERROR;
}

/* A function type's parameter, an item, as a Param (CuLoader.params), a
 * new reference in *out; NULL for what is no parameter. */
static int param_entry(const struct loader *l, int32_t p, PyObject **out)
{
	const struct cval *name;
	PyObject *one[2];
	uint32_t tag = at(l, p)->tag;
	long type_id;
	int r;

	*out = NULL;
	if (tag == TAG_UNSPECIFIED_PARAMETERS) {
		one[0] = Py_NewRef(empty);
		one[1] = PyLong_FromLong(0);
		return (*out = new_entry(param_class, 2, one)) ? OK : ERROR;
	}
	if (tag != TAG_FORMAL_PARAMETER)
		return OK;
	/* Names or types found through another DIE: loader.py follows them. */
	if (attr(l, p, AT_SPECIFICATION) || attr(l, p, AT_ABSTRACT_ORIGIN))
		return GIVE_UP;
	if ((name = attr(l, p, AT_NAME)) && name->kind != CV_STR)
		return GIVE_UP;         /* CuLoader.params returns (str, int) pairs */
	if ((r = ref(l, attr(l, p, AT_TYPE), &type_id)))
		return r;
	one[0] = object_or(l, name, empty);
	one[1] = PyLong_FromLong(type_id);
	return (*out = new_entry(param_class, 2, one)) ? OK : ERROR;
}

/* A subroutine type's FUNC_PROTO (CuLoader.proto and params), from its
 * items. */
static int proto(const struct loader *l, int32_t idx, PyObject **out)
{
	const struct cval *ret_off;
	PyObject *params, *f[13];
	long ret;
	int r;

	if ((r = origin_attr(l, idx, AT_TYPE, &ret_off)) || (r = ref(l, ret_off, &ret)))
		return r;
	if (!(params = PyList_New(0)))
		return ERROR;
	for (int32_t i = at(l, idx)->first_item; r == OK && i != NONE; i = at(l, i)->next) {
		PyObject *param;

		r = param_entry(l, i, &param);
		if (r == OK && param && PyList_Append(params, param))
			r = ERROR;
		Py_XDECREF(param);
	}
	if (r) {
		Py_DECREF(params);
		return r;
	}
	fields_of(f, K_FUNC_PROTO, NULL);
	set(f, 3, PyLong_FromLong(ret));
	set(f, 12, PyList_AsTuple(params));
	Py_DECREF(params);
	return (*out = new_type(btf_type, f)) ? OK : ERROR;
}

/* A type of one reference (a pointer, a qualifier, a typedef). */
static int ref_type(const struct loader *l, int32_t idx, int kind, PyObject **out)
{
	PyObject *name = NULL, *f[13];
	long target;
	int r;

	if ((r = ref(l, attr(l, idx, AT_TYPE), &target))
	    || (kind == K_TYPEDEF && (r = name_of(l, idx, &name))))
		return r;
	fields_of(f, kind, name);
	set(f, 3, PyLong_FromLong(target));
	return (*out = new_type(btf_type, f)) ? OK : ERROR;
}

static int array_type(const struct loader *l, int32_t idx, PyObject **out)
{
	PyObject *f[13];
	uint32_t count;
	long element;
	int r;

	if ((r = ref(l, attr(l, idx, AT_TYPE), &element)) || (r = nelems(l, idx, &count)))
		return r;
	fields_of(f, K_ARRAY, NULL);
	set(f, 3, PyLong_FromLong(element));
	set(f, 8, PyLong_FromLong(l->index_type));
	set(f, 9, PyLong_FromUnsignedLong(count));
	return (*out = new_type(btf_type, f)) ? OK : ERROR;
}

/* The BtfType of one type DIE (CuLoader._encode). */
static int encode(const struct loader *l, int32_t idx, long tag, PyObject **out)
{
	switch (tag) {
	case TAG_BASE:
		return base_type(l, idx, out);
	case TAG_POINTER:
		return ref_type(l, idx, K_PTR, out);
	case TAG_CONST:
		return ref_type(l, idx, K_CONST, out);
	case TAG_VOLATILE:
		return ref_type(l, idx, K_VOLATILE, out);
	case TAG_RESTRICT:
		return ref_type(l, idx, K_RESTRICT, out);
	case TAG_TYPEDEF:
		return ref_type(l, idx, K_TYPEDEF, out);
	case TAG_STRUCTURE: case TAG_UNION: case TAG_CLASS:
		return struct_type(l, idx, tag, out);
	case TAG_ENUMERATION:
		return enum_type(l, idx, out);
	case TAG_ARRAY:
		return array_type(l, idx, out);
	case TAG_SUBROUTINE:
		return proto(l, idx, out);
	}
	return GIVE_UP;
}

static int is_type_tag(long tag)
{
	switch (tag) {
	case TAG_ARRAY: case TAG_ENUMERATION: case TAG_POINTER: case TAG_STRUCTURE: case TAG_CLASS:
	case TAG_SUBROUTINE: case TAG_TYPEDEF: case TAG_UNION: case TAG_BASE: case TAG_CONST:
	case TAG_VOLATILE: case TAG_RESTRICT:
		return 1;
	}
	return 0;       /* DW_TAG_atomic_type and unspecified_type stand for their target */
}

/* Whether a value ``v`` is the str ``text``. */
static int is_text(const struct cval *v, const char *text)
{
	return v && v->kind == CV_STR && !PyUnicode_CompareWithASCIIString(v->str, text);
}

/* Whether child ``c`` of a DIE is a ``kind`` annotation (CuLoader._annotations). */
static int annotation(const struct loader *l, int32_t c, const char *kind)
{
	return at(l, c)->tag == TAG_LLVM_ANNOTATION && is_text(attr(l, c, AT_NAME), kind);
}

/* The number of btf_type_tag annotations among a pointer's children. */
static Py_ssize_t count_type_tags(const struct loader *l, int32_t idx)
{
	Py_ssize_t count = 0;

	for (int32_t c = at(l, idx)->first_child; c != NONE; c = at(l, c)->next)
		count += annotation(l, c, "btf_type_tag");
	return count;
}

/* The first pass of CuLoader.load_types: an id for each type DIE of the
 * arena's DIEs ``first`` to ``end`` from ``next_id`` on (after the ids of
 * its type tags), and the unit's index type; the type DIEs into *slots,
 * their number into *n, the id after the last into *end_id. */
static int number_types(struct loader *l, Py_ssize_t first, Py_ssize_t end, long next_id,
			struct slot **slots, Py_ssize_t *n, long *end_id)
{
	int has_array = 0;

	*n = 0;
	if (!(*slots = PyMem_Malloc(sizeof(**slots) * (end - first + 1))))
		return PyErr_NoMemory(), ERROR;
	for (Py_ssize_t i = first; i < end; i++) {
		int32_t idx = l->a->dies[i];
		long tag = at(l, idx)->tag;
		Py_ssize_t tags = 0;

		if (!is_type_tag(tag))
			continue;
		if (tag == TAG_POINTER && l->type_tags) {
			tags = count_type_tags(l, idx);
			next_id += tags;
		} else if (tag == TAG_ARRAY) {
			has_array = 1;
		} else if (tag == TAG_BASE && !l->index_type && is_text(attr(l, idx, AT_NAME), "int")) {
			l->index_type = next_id;
		}
		if (next_id >= INT32_MAX)
			return GIVE_UP;
		l->ids[idx] = (int32_t)next_id;
		(*slots)[(*n)++] = (struct slot){idx, tag, tags};
		next_id++;
	}
	if (has_array && !l->index_type)
		l->index_type = next_id;
	*end_id = next_id;
	return OK;
}

/* A pointer with btf_type_tag annotations: TYPE_TAGs chained as pahole
 * chains them (CuLoader._add_type_tags) into ``list``, whose first type
 * has id ``first``, then the PTR to the last of them. */
static int tagged_pointer(const struct loader *l, int32_t idx, PyObject *list, long first,
			  PyObject **out)
{
	PyObject *f[13];
	long target;
	int r;

	if ((r = ref(l, attr(l, idx, AT_TYPE), &target)))
		return r;
	for (int32_t c = at(l, idx)->first_child; c != NONE; c = at(l, c)->next) {
		const struct cval *value;
		PyObject *t;
		int failed;

		if (!annotation(l, c, "btf_type_tag"))
			continue;
		value = attr(l, c, AT_CONST_VALUE);
		fields_of(f, K_TYPE_TAG, value && value->kind == CV_STR ? Py_NewRef(value->str) : NULL);
		set(f, 3, PyLong_FromLong(target));
		if (!(t = new_type(btf_type, f)))
			return ERROR;
		failed = PyList_Append(list, t);
		Py_DECREF(t);
		if (failed)
			return ERROR;
		target = first + PyList_GET_SIZE(list) - 1;
	}
	fields_of(f, K_PTR, NULL);
	set(f, 3, PyLong_FromLong(target));
	return (*out = new_type(btf_type, f)) ? OK : ERROR;
}

/* The ids of the unit's type DIEs by offset, as CuLoader.ids holds them. */
static PyObject *ids_dict(const struct loader *l, const struct slot *slots, Py_ssize_t n)
{
	PyObject *ids = PyDict_New();

	for (Py_ssize_t i = 0; ids && i < n; i++) {
		PyObject *off = PyLong_FromSsize_t(at(l, slots[i].entry)->offset);
		PyObject *id = PyLong_FromLong(l->ids[slots[i].entry]);

		if (!off || !id || PyDict_SetItem(ids, off, id))
			Py_CLEAR(ids);
		Py_XDECREF(off);
		Py_XDECREF(id);
	}
	return ids;
}

static PyObject *load_types(PyObject *self, PyObject *args)
{
	PyObject *arena, *list = NULL, *out = NULL, *ids, *f[13];
	struct loader l = {0};
	struct slot *slots = NULL;
	Py_ssize_t first, end, n = 0;
	long next_id, end_id;
	int r = ERROR;

	if (!btf_type)
		return PyErr_Format(PyExc_RuntimeError, "_loader.init was not called");
	if (!PyArg_ParseTuple(args, "O!nnliipO:load_types", (PyTypeObject *)arena_type, &arena,
			      &first, &end, &next_id, &l.address_size, &l.big, &l.type_tags,
			      &l.features))
		return NULL;
	l.a = (Arena *)arena;
	if (first < 0 || end > l.a->ndies || first > end)
		return PyErr_Format(PyExc_IndexError, "load_types(%zd, %zd) of %zd DIEs", first, end,
				    l.a->ndies);
	if (!(l.ids = PyMem_Calloc(l.a->n + 1, sizeof(*l.ids))) || !(list = PyList_New(0))) {
		if (!PyErr_Occurred())
			PyErr_NoMemory();
		goto done;
	}
	if ((r = number_types(&l, first, end, next_id, &slots, &n, &end_id)))
		goto end;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *t;
		int failed;

		r = slots[i].tags ? tagged_pointer(&l, slots[i].entry, list, next_id, &t)
			: encode(&l, slots[i].entry, slots[i].tag, &t);
		if (r)
			goto end;
		failed = PyList_Append(list, t);
		Py_DECREF(t);
		if (failed) {
			r = ERROR;
			goto end;
		}
	}
	if (l.index_type == end_id) {
		fields_of(f, K_INT, NULL);
		set(f, 1, PyUnicode_FromString("int"));
		set(f, 2, PyLong_FromLong(4));
		set(f, 5, PyLong_FromLong(INT_SIGNED));
		set(f, 7, PyLong_FromLong(32));
		PyObject *t = new_type(btf_type, f);
		r = !t || PyList_Append(list, t) ? ERROR : OK;
		Py_XDECREF(t);
	}
end:
	if (r == OK && (ids = ids_dict(&l, slots, n))) {
		out = Py_BuildValue("(OOl)", ids, list, l.index_type);
		Py_DECREF(ids);
	} else if (r == GIVE_UP && !PyErr_Occurred()) {
		out = Py_NewRef(Py_None);
	}
done:
	PyMem_Free(slots);
	PyMem_Free(l.ids);
	Py_XDECREF(list);
	return out;
}

static PyObject *init(PyObject *self, PyObject *args)
{
	PyObject *given[10];

	if (!PyArg_ParseTuple(args, "OO!OOOOOOOO!:init", &given[0], &PyList_Type, &given[1],
			      &given[2], &given[3], &given[4], &given[5], &given[6], &given[7],
			      &given[8], &PyType_Type, &given[9]))
		return NULL;
	if (PyList_GET_SIZE(given[1]) <= K_LAST)
		return PyErr_Format(PyExc_ValueError, "init: %d kinds expected", K_LAST + 1);
	if (((PyTypeObject *)given[9])->tp_basicsize != sizeof(Arena))
		return PyErr_Format(PyExc_ValueError, "init: an Arena of another _arena.h");
	if (!empty && !(empty = PyUnicode_FromString("")))
		return NULL;
	PyObject **slots[10] = { &btf_type, &kinds, &member_class, &param_class, &enumerator_class,
				 &expr_class, &base_type_rule, &enum_type_rule, &declared_enum_rule,
				 &arena_type };
	for (int i = 0; i < 10; i++)
		Py_XSETREF(*slots[i], Py_NewRef(given[i]));
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"init", init, METH_VARARGS,
	 "init(new_type, the Kind of each number, Member, Param, Enumerator, Expr, base_type, "
	 "enum_type, declared_enum, _dies.Arena): what loader.py makes (types.new_type makes a "
	 "BtfType), rules.py's functions, where the type DIEs are."},
	{"load_types", load_types, METH_VARARGS,
	 "load_types(arena, first, end, next_id, address_size, big_endian, type_tags, features): "
	 "the ids of a unit's type DIEs (the arena's DIEs first to end), its types and its index "
	 "type as CuLoader.load_types makes them (type_tags: the unit's btf_type_tag chains too), "
	 "or None where loader.py must decide."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "objbtf.dwarf._loader",
	"CuLoader.load_types in C, for the compiled build (see _loader.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__loader(void)
{
	return PyModule_Create(&module);
}
