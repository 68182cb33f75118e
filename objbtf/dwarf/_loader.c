/*
 * objbtf.dwarf._loader: CuLoader.load_types in C, for the compiled build.
 *
 * It reads the Die objects reader.py's decoder (or _dies.c) made and makes
 * the BtfType objects loader.py makes, field for field: the same ids in the
 * same order, the same member offsets, the same index type; base types
 * and enums through rules.py's own functions, which it calls.  Values that
 * pass through unchanged (names, sizes) are the Die's own objects.
 *
 * It takes the well-formed path: at anything it does not expect (a
 * reference to a DIE that is no type, a value that is not an integer where
 * the loader computes with one, a member location that is an expression,
 * a value past 2**48, a value of a type at which the compiled loader's
 * typed methods raise TypeError) it returns None, and loader.py loads the
 * unit again, with its own result or error message.
 *
 * Loading the types was the largest pass of an object's encode left on
 * Python objects.
 *
 * The Dies, their attribute dicts and their children live as long as the
 * unit the caller holds, and nothing here changes them, so the values read
 * from them are used as borrowed references; not a Die's integers, which
 * a compiled Die makes anew on each read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include "../btf/_btf.h"

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
	AT_NAME, AT_BYTE_SIZE, AT_CONST_VALUE, AT_UPPER_BOUND, AT_ABSTRACT_ORIGIN, AT_COUNT,
	AT_DECLARATION, AT_ENCODING, AT_SPECIFICATION, AT_TYPE, N_ATTRS,
};
static const long attr_numbers[N_ATTRS] = {
	[AT_NAME] = 0x03, [AT_BYTE_SIZE] = 0x0b, [AT_CONST_VALUE] = 0x1c, [AT_UPPER_BOUND] = 0x2f,
	[AT_ABSTRACT_ORIGIN] = 0x31, [AT_COUNT] = 0x37, [AT_DECLARATION] = 0x3c,
	[AT_ENCODING] = 0x3e, [AT_SPECIFICATION] = 0x47, [AT_TYPE] = 0x49,
};
enum { ATE_BOOLEAN = 0x02, ATE_FLOAT = 0x04, ATE_SIGNED = 0x05, ATE_SIGNED_CHAR = 0x06 };
/* BTF_INT_* (kinds.py's INT_SIGNED, INT_BOOL) */
enum { INT_SIGNED = 1, INT_BOOL = 4 };
/* Where each value is in a member's item and in an enumerator's (reader.py's
 * I_TAG, M_*, E_*). */
enum { I_TAG, M_NAME, M_TYPE, M_LOCATION, M_DATA_BIT_OFFSET, M_BIT_SIZE, M_BIT_OFFSET,
       M_BYTE_SIZE };
enum { E_NAME = 1, E_VALUE = 2 };
enum { P_NAME = 1, P_TYPE, P_SPECIFICATION, P_ABSTRACT_ORIGIN };
/* A value the loader computes with, past this, is left to loader.py. */
#define LIMIT ((int64_t)1 << 48)

/* What init() is given: the classes made, rules.py's functions. */
static PyObject *btf_type, *kinds, *member_class, *param_class, *enumerator_class, *expr_class,
	*base_type_rule, *enum_type_rule, *declared_enum_rule;
static PyObject *attr_keys[N_ATTRS], *s_tag, *s_attrs, *s_children, *s_items, *s_offset, *empty;

/* One call's state: CuLoader's fields. */
struct loader {
	PyObject *by_offset;    /* DIE offset -> Die, across the object's units */
	PyObject *ids;          /* type DIE offset -> id, made here */
	PyObject *features;
	long index_type;
	int big, address_size;
	int type_tags;          /* the unit is annotated and the type_tag feature on */
};

/* A type DIE of the unit (borrowed), its tag, and the btf_type_tag
 * annotations it carries when it is a pointer (loader.py's tags_of). */
struct slot {
	PyObject *die;
	long tag;
	Py_ssize_t tags;
};

/* What a helper returns besides its value: go on, give up, or a Python error set. */
enum { OK = 0, GIVE_UP = 1, ERROR = -1 };

/* A Die's attribute ``name`` that is an object (attrs, children, items),
 * borrowed (see the header). */
static PyObject *field(PyObject *die, PyObject *name)
{
	PyObject *v = PyObject_GetAttr(die, name);

	Py_XDECREF(v);
	return v;
}

/* The value of ``attr`` in a Die's attribute dict, borrowed; NULL when it
 * has none (or on an error, which PyErr_Occurred tells). */
static PyObject *get(PyObject *attrs, int attr)
{
	return PyDict_Check(attrs) ? PyDict_GetItemWithError(attrs, attr_keys[attr]) : NULL;
}

/* A Die's children or items (``name``), borrowed, into *out: OK for the
 * list or tuple the decoder made, GIVE_UP for another object, ERROR
 * without one. */
static int sequence_of(PyObject *die, PyObject *name, PyObject **out)
{
	if (!(*out = field(die, name)))
		return ERROR;
	return PyList_Check(*out) || PyTuple_Check(*out) ? OK : GIVE_UP;
}

static PyObject *die_attr(PyObject *die, int attr)
{
	PyObject *attrs = field(die, s_attrs);

	return attrs ? get(attrs, attr) : NULL;
}

/* ``v`` as an integer within LIMIT: 1, or 0 when it is not one. */
static int small_int(PyObject *v, int64_t *out)
{
	int overflow;
	long long n;

	if (!v || !PyLong_Check(v))
		return 0;
	n = PyLong_AsLongLongAndOverflow(v, &overflow);
	if (overflow || n >= LIMIT || n <= -LIMIT)
		return 0;
	*out = n;
	return 1;
}

/* A Die's tag; -1 for what is no Die with an integer tag, which the
 * callers give up on (loader.py raises or skips it as it does). */
static long tag_of(PyObject *die)
{
	PyObject *v = PyObject_GetAttr(die, s_tag);
	int64_t tag;
	int ok = small_int(v, &tag);

	if (!v)
		PyErr_Clear();
	Py_XDECREF(v);
	return ok && tag >= 0 ? (long)tag : -1;
}

/* Python's truth of ``v`` (absent: false); -1 on an error. */
static int truth(PyObject *v)
{
	return v ? PyObject_IsTrue(v) : 0;
}

/* The attribute of ``die`` or of its specification or abstract origin
 * (CuLoader.origin_attr), borrowed; NULL without one. */
static PyObject *origin_attr(struct loader *l, PyObject *die, int attr)
{
	for (int seen = 0; die && seen < 8; seen++) {
		PyObject *attrs = field(die, s_attrs), *v, *next;
		int t;

		if (!attrs)
			return NULL;
		if (((v = get(attrs, attr)) && v != Py_None) || PyErr_Occurred())
			return v;
		next = get(attrs, AT_SPECIFICATION);
		if ((t = truth(next)) < 0)
			return NULL;
		if (!t && !(next = get(attrs, AT_ABSTRACT_ORIGIN)) && PyErr_Occurred())
			return NULL;
		if ((t = truth(next)) < 0)
			return NULL;
		die = t ? PyDict_GetItemWithError(l->by_offset, next) : NULL;
	}
	return NULL;
}

/* The id a DW_AT_type value ``off`` refers to (CuLoader.ref). */
static int ref(struct loader *l, PyObject *off, long *id)
{
	for (int depth = 0;; depth++) {
		PyObject *known, *die;
		int64_t n;
		long tag;

		if (!off || off == Py_None)
			return *id = 0, OK;
		if (!small_int(off, &n))
			return GIVE_UP;
		if (!n)
			return *id = 0, OK;
		if ((known = PyDict_GetItemWithError(l->ids, off))) {
			*id = PyLong_AsLong(known);
			return OK;
		}
		if (!(die = PyDict_GetItemWithError(l->by_offset, off)))
			return PyErr_Occurred() ? ERROR : GIVE_UP;
		tag = tag_of(die);
		if (depth >= 32 || (tag != TAG_ATOMIC && tag != TAG_UNSPECIFIED))
			return GIVE_UP;         /* loader.py names the DIE */
		if (tag == TAG_UNSPECIFIED)
			return *id = 0, OK;
		off = die_attr(die, AT_TYPE);
		if (PyErr_Occurred())
			return ERROR;
	}
}

/* The element count of an array DIE (CuLoader._nelems), modulo 2**32 as
 * the loader's result is. */
static int nelems(PyObject *die, uint32_t *out)
{
	PyObject *children;
	uint32_t n = 1;
	Py_ssize_t count;
	int r;

	if ((r = sequence_of(die, s_children, &children)))
		return r;
	count = PySequence_Fast_GET_SIZE(children);
	for (Py_ssize_t i = 0; i < count; i++) {
		PyObject *sub = PySequence_Fast_ITEMS(children)[i], *ub, *c;
		long tag = tag_of(sub);

		if (tag < 0)
			return GIVE_UP;
		if (tag != TAG_SUBRANGE)
			continue;
		if ((ub = die_attr(sub, AT_UPPER_BOUND)) && !PyObject_TypeCheck(ub, (PyTypeObject *)expr_class)) {
			if (!PyLong_Check(ub))
				return GIVE_UP;
			n *= (uint32_t)PyLong_AsUnsignedLongLongMask(ub) + 1;
		} else {
			if (PyErr_Occurred() || (!(c = die_attr(sub, AT_COUNT)) && PyErr_Occurred()))
				return ERROR;
			n *= c && PyLong_Check(c) ? (uint32_t)PyLong_AsUnsignedLongLongMask(c) : 0;
		}
		if (PyErr_Occurred())
			return ERROR;
	}
	*out = n;
	return OK;
}

/* Whether ``off`` is what the loader's methods take for a DIE's offset:
 * an integer or None (the compiled loader raises TypeError at others). */
static int is_offset(PyObject *off)
{
	return !off || off == Py_None || PyLong_Check(off);
}

/* The byte size of the type DIE at ``off`` (CuLoader.type_size). */
static int type_size(struct loader *l, PyObject *off, int depth, int64_t *out)
{
	PyObject *die, *attrs, *size;
	int64_t n, inner;
	uint32_t count;
	long tag;
	int t, r;

	*out = 0;
	if (!is_offset(off))
		return GIVE_UP;
	if ((t = truth(off)) <= 0)
		return t < 0 ? ERROR : OK;
	if (!(die = PyDict_GetItemWithError(l->by_offset, off)) || depth > 32)
		return PyErr_Occurred() ? ERROR : OK;
	if (!(attrs = field(die, s_attrs)))
		return ERROR;
	if ((size = get(attrs, AT_BYTE_SIZE)))
		return small_int(size, out) ? OK : GIVE_UP;
	if (PyErr_Occurred())
		return ERROR;
	switch ((tag = tag_of(die))) {
	case TAG_POINTER:
		*out = l->address_size;
		return OK;
	case TAG_ARRAY:
		if ((r = type_size(l, get(attrs, AT_TYPE), depth + 1, &inner)) || (r = nelems(die, &count)))
			return r;
		/* |inner| < 2**48 and count < 2**32: the product fits 64 bits. */
		n = inner * (int64_t)count;
		if (n >= LIMIT || n <= -LIMIT)
			return GIVE_UP;
		*out = n;
		return OK;
	case TAG_TYPEDEF: case TAG_CONST: case TAG_VOLATILE: case TAG_RESTRICT: case TAG_ATOMIC:
		return type_size(l, get(attrs, AT_TYPE), depth + 1, out);
	}
	return OK;
}

/* The fields of a type of ``kind`` named ``name`` (borrowed), all else 0,
 * component_idx -1 and no items: new references, to set more of. */
static void fields_of(PyObject **f, int kind, PyObject *name)
{
	f[0] = Py_NewRef(PyList_GET_ITEM(kinds, kind));
	f[1] = Py_NewRef(name ? name : empty);
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

/* ``v``, or ``fallback`` for None (loader._or), as a new reference. */
static PyObject *or_else(PyObject *v, PyObject *fallback)
{
	return Py_NewRef(v == Py_None ? fallback : v);
}

/* The integer value of an item's field ``i``, None as 0: 1, or 0 when it
 * is neither. */
static int item_int(PyObject *item, int i, int64_t *out)
{
	PyObject *v = PyTuple_GET_ITEM(item, i);

	*out = 0;
	return v == Py_None || small_int(v, out);
}

/* A member's bit offset (CuLoader._member_bit_offset), a new reference;
 * *skip for a static member. */
static int member_bit_offset(struct loader *l, PyObject *m, int in_union, int64_t bits,
			     PyObject **out, int *skip)
{
	PyObject *dbo = PyTuple_GET_ITEM(m, M_DATA_BIT_OFFSET), *loc = PyTuple_GET_ITEM(m, M_LOCATION);
	int64_t bit_off, old, byte_size;
	int r;

	*skip = 0;
	if (dbo != Py_None)
		return small_int(dbo, &bit_off) ? (*out = Py_NewRef(dbo), OK) : GIVE_UP;
	if (loc == Py_None) {
		*skip = !in_union;
		return (*out = PyLong_FromLong(0)) ? OK : ERROR;
	}
	if (!small_int(loc, &bit_off))
		return GIVE_UP;         /* an expression: DWARF 2's DW_OP_plus_uconst */
	bit_off *= 8;
	if (bits && PyTuple_GET_ITEM(m, M_BIT_OFFSET) != Py_None) {
		if (!item_int(m, M_BIT_OFFSET, &old) || !item_int(m, M_BYTE_SIZE, &byte_size))
			return GIVE_UP;
		if (!byte_size && (r = type_size(l, PyTuple_GET_ITEM(m, M_TYPE), 0, &byte_size)))
			return r;
		bit_off += l->big ? old : byte_size * 8 - old - bits;
	}
	return (*out = PyLong_FromLongLong(bit_off)) ? OK : ERROR;
}

/* The Member of item ``m`` into ``members``, unless it is no member or a
 * static one; *bitfields set when it is one. */
static int add_member(struct loader *l, PyObject *m, int in_union, PyObject *members,
		      int *bitfields)
{
	PyObject *one[4], *member;
	int64_t tag, bits, off = 0;
	long type_id;
	int skip, r;

	if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) <= M_BYTE_SIZE
	    || !small_int(PyTuple_GET_ITEM(m, I_TAG), &tag) || !item_int(m, M_BIT_SIZE, &bits))
		return GIVE_UP;
	if (tag != TAG_MEMBER)
		return OK;
	if ((r = member_bit_offset(l, m, in_union, bits, &one[2], &skip)))
		return r;
	if (skip) {
		Py_DECREF(one[2]);
		return OK;
	}
	if ((r = ref(l, PyTuple_GET_ITEM(m, M_TYPE), &type_id))) {
		Py_DECREF(one[2]);
		return r;
	}
	small_int(one[2], &off);
	*bitfields |= bits || off % 8;
	one[0] = or_else(PyTuple_GET_ITEM(m, M_NAME), empty);
	one[1] = PyLong_FromLong(type_id);
	one[3] = PyLong_FromLongLong(bits);
	if (!(member = new_entry(member_class, 4, one)))
		return ERROR;
	r = PyList_Append(members, member) ? ERROR : OK;
	Py_DECREF(member);
	return r;
}

/* A struct, union or class DIE's type (CuLoader._struct). */
static int struct_type(struct loader *l, PyObject *die, PyObject *attrs, long tag, PyObject **out)
{
	PyObject *name = get(attrs, AT_NAME), *items, *size = NULL, *members, *f[13];
	int in_union = tag == TAG_UNION, bitfields = 0, r = OK, declared;

	if (PyErr_Occurred() || (declared = truth(get(attrs, AT_DECLARATION))) < 0)
		return ERROR;
	if (declared) {
		fields_of(f, K_FWD, name);
		set(f, 4, PyLong_FromLong(in_union));   /* fwd_union */
		return (*out = new_type(btf_type, f)) ? OK : ERROR;
	}
	if ((r = sequence_of(die, s_items, &items)))
		return r;
	if (!(members = PyList_New(0)))
		return ERROR;
	for (Py_ssize_t i = 0; r == OK && i < PySequence_Fast_GET_SIZE(items); i++)
		r = add_member(l, PySequence_Fast_ITEMS(items)[i], in_union, members, &bitfields);
	if (r == OK && !(size = get(attrs, AT_BYTE_SIZE)) && PyErr_Occurred())
		r = ERROR;
	if (r) {
		Py_DECREF(members);
		return r;
	}
	fields_of(f, in_union ? K_UNION : K_STRUCT, name);
	if (size)
		set(f, 2, Py_NewRef(size));
	set(f, 4, PyLong_FromLong(bitfields));
	set(f, 12, PyList_AsTuple(members));
	Py_DECREF(members);
	return (*out = new_type(btf_type, f)) ? OK : ERROR;
}

/* Whether the type at ``off`` is a signed base type (CuLoader._underlying_signed). */
static int underlying_signed(struct loader *l, PyObject *off, int *out)
{
	PyObject *die, *enc;
	int64_t e;
	int t;

	*out = 0;
	if (!is_offset(off))
		return GIVE_UP;
	if ((t = truth(off)) <= 0)
		return t < 0 ? ERROR : OK;
	if (!(die = PyDict_GetItemWithError(l->by_offset, off)))
		return PyErr_Occurred() ? ERROR : OK;
	if (!(enc = die_attr(die, AT_ENCODING)))
		return PyErr_Occurred() ? ERROR : OK;
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
static int enum_type(struct loader *l, PyObject *die, PyObject *attrs, PyObject **out)
{
	PyObject *children = field(die, s_children), *items, *name = get(attrs, AT_NAME);
	PyObject *size = NULL, *values, *args[5];
	int declared, is_signed = 0, r;

	if (!children || PyErr_Occurred() || (declared = truth(get(attrs, AT_DECLARATION))) < 0)
		return ERROR;
	if ((r = sequence_of(die, s_items, &items)))
		return r;
	if (declared && !PyObject_IsTrue(children) && !PySequence_Fast_GET_SIZE(items)) {
		args[0] = Py_NewRef(name ? name : empty);
		return (*out = call_rule(declared_enum_rule, 1, args)) ? OK : ERROR;
	}
	if (!(values = PyList_New(0)))
		return ERROR;
	for (Py_ssize_t i = 0; r == OK && i < PySequence_Fast_GET_SIZE(items); i++) {
		PyObject *e = PySequence_Fast_ITEMS(items)[i], *one[2], *value;
		int64_t tag;

		if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) <= E_VALUE
		    || !small_int(PyTuple_GET_ITEM(e, I_TAG), &tag)) {
			r = GIVE_UP;
			break;
		}
		if (tag != TAG_ENUMERATOR)
			continue;
		one[0] = or_else(PyTuple_GET_ITEM(e, E_NAME), empty);
		one[1] = PyTuple_GET_ITEM(e, E_VALUE) == Py_None ? PyLong_FromLong(0)
			: Py_NewRef(PyTuple_GET_ITEM(e, E_VALUE));
		if (!(value = new_entry(enumerator_class, 2, one)) || PyList_Append(values, value))
			r = ERROR;
		Py_XDECREF(value);
	}
	if (r == OK)
		r = underlying_signed(l, get(attrs, AT_TYPE), &is_signed);
	if (r == OK && !(size = get(attrs, AT_BYTE_SIZE)) && PyErr_Occurred())
		r = ERROR;
	if (r) {
		Py_DECREF(values);
		return r;
	}
	args[0] = Py_NewRef(name ? name : empty);
	args[1] = size ? Py_NewRef(size) : PyLong_FromLong(4);
	args[2] = values;
	args[3] = PyBool_FromLong(is_signed);
	args[4] = Py_NewRef(l->features);
	return (*out = call_rule(enum_type_rule, 5, args)) ? OK : ERROR;
}

/* A base type DIE's INT or FLOAT (CuLoader._base_type), through rules.py. */
static int base_type(struct loader *l, PyObject *attrs, PyObject **out)
{
	PyObject *enc_v = get(attrs, AT_ENCODING), *name = get(attrs, AT_NAME), *size, *args[5];
	int64_t enc = 0;

	if (PyErr_Occurred() || (!(size = get(attrs, AT_BYTE_SIZE)) && PyErr_Occurred()))
		return ERROR;
	if (enc_v && !small_int(enc_v, &enc))
		return GIVE_UP;
	args[0] = Py_NewRef(name ? name : empty);
	args[1] = size ? Py_NewRef(size) : PyLong_FromLong(0);
	args[2] = PyLong_FromLong(enc == ATE_SIGNED || enc == ATE_SIGNED_CHAR ? INT_SIGNED
				  : enc == ATE_BOOLEAN ? INT_BOOL : 0);
	args[3] = PyBool_FromLong(enc == ATE_FLOAT);
	args[4] = Py_NewRef(l->features);
	return (*out = call_rule(base_type_rule, 5, args)) ? OK : ERROR;
}

/* A function type's parameter, an item, as a Param (CuLoader.params), a
 * new reference in *out; NULL for what is no parameter. */
static int param_entry(struct loader *l, PyObject *p, PyObject **out)
{
	PyObject *one[2], *name;
	int64_t tag;
	long type_id;
	int r;

	*out = NULL;
	if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) < 2
	    || !small_int(PyTuple_GET_ITEM(p, I_TAG), &tag))
		return GIVE_UP;
	if (tag == TAG_UNSPECIFIED_PARAMETERS) {
		one[0] = Py_NewRef(empty);
		one[1] = PyLong_FromLong(0);
		return (*out = new_entry(param_class, 2, one)) ? OK : ERROR;
	}
	if (tag != TAG_FORMAL_PARAMETER)
		return OK;
	/* Names or types found through another DIE: loader.py follows them. */
	if (PyTuple_GET_SIZE(p) <= P_ABSTRACT_ORIGIN
	    || PyTuple_GET_ITEM(p, P_SPECIFICATION) != Py_None
	    || PyTuple_GET_ITEM(p, P_ABSTRACT_ORIGIN) != Py_None)
		return GIVE_UP;
	name = PyTuple_GET_ITEM(p, P_NAME);
	if (name != Py_None && !PyUnicode_Check(name))
		return GIVE_UP;         /* CuLoader.params returns (str, int) pairs */
	if ((r = ref(l, PyTuple_GET_ITEM(p, P_TYPE), &type_id)))
		return r;
	one[0] = or_else(name, empty);
	one[1] = PyLong_FromLong(type_id);
	return (*out = new_entry(param_class, 2, one)) ? OK : ERROR;
}

/* A subroutine type's FUNC_PROTO (CuLoader.proto and params), from its
 * items. */
static int proto(struct loader *l, PyObject *die, PyObject **out)
{
	PyObject *items, *params, *ret_off, *f[13];
	long ret;
	int r;

	if ((r = sequence_of(die, s_items, &items)))
		return r;
	if (!(ret_off = origin_attr(l, die, AT_TYPE)) && PyErr_Occurred())
		return ERROR;
	if ((r = ref(l, ret_off, &ret)))
		return r;
	if (!(params = PyList_New(0)))
		return ERROR;
	for (Py_ssize_t i = 0; r == OK && i < PySequence_Fast_GET_SIZE(items); i++) {
		PyObject *param;

		r = param_entry(l, PySequence_Fast_ITEMS(items)[i], &param);
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
static int ref_type(struct loader *l, PyObject *attrs, int kind, PyObject **out)
{
	PyObject *name = kind == K_TYPEDEF ? get(attrs, AT_NAME) : NULL, *f[13];
	long target;
	int r;

	if (PyErr_Occurred())
		return ERROR;
	if ((r = ref(l, get(attrs, AT_TYPE), &target)))
		return r;
	fields_of(f, kind, name);
	set(f, 3, PyLong_FromLong(target));
	return (*out = new_type(btf_type, f)) ? OK : ERROR;
}

static int array_type(struct loader *l, PyObject *die, PyObject *attrs, PyObject **out)
{
	PyObject *f[13];
	uint32_t count;
	long element;
	int r;

	if ((r = ref(l, get(attrs, AT_TYPE), &element)) || (r = nelems(die, &count)))
		return r;
	fields_of(f, K_ARRAY, NULL);
	set(f, 3, PyLong_FromLong(element));
	set(f, 8, PyLong_FromLong(l->index_type));
	set(f, 9, PyLong_FromUnsignedLong(count));
	return (*out = new_type(btf_type, f)) ? OK : ERROR;
}

/* The BtfType of one type DIE (CuLoader._encode). */
static int encode(struct loader *l, PyObject *die, long tag, PyObject **out)
{
	PyObject *attrs = field(die, s_attrs);

	if (!attrs)
		return ERROR;
	if (!PyDict_Check(attrs))
		return GIVE_UP;
	switch (tag) {
	case TAG_BASE:
		return base_type(l, attrs, out);
	case TAG_POINTER:
		return ref_type(l, attrs, K_PTR, out);
	case TAG_CONST:
		return ref_type(l, attrs, K_CONST, out);
	case TAG_VOLATILE:
		return ref_type(l, attrs, K_VOLATILE, out);
	case TAG_RESTRICT:
		return ref_type(l, attrs, K_RESTRICT, out);
	case TAG_TYPEDEF:
		return ref_type(l, attrs, K_TYPEDEF, out);
	case TAG_STRUCTURE: case TAG_UNION: case TAG_CLASS:
		return struct_type(l, die, attrs, tag, out);
	case TAG_ENUMERATION:
		return enum_type(l, die, attrs, out);
	case TAG_ARRAY:
		return array_type(l, die, attrs, out);
	case TAG_SUBROUTINE:
		return proto(l, die, out);
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

/* Whether child ``c`` of a DIE is a ``kind`` annotation, into *is
 * (CuLoader._annotations). */
static int annotation(PyObject *c, const char *kind, int *is)
{
	PyObject *name;
	long tag = tag_of(c);

	*is = 0;
	if (tag < 0)
		return GIVE_UP;
	if (tag != TAG_LLVM_ANNOTATION)
		return OK;
	if (!(name = die_attr(c, AT_NAME)))
		return PyErr_Occurred() ? ERROR : OK;
	*is = PyUnicode_Check(name) && !PyUnicode_CompareWithASCIIString(name, kind);
	return OK;
}

/* The number of btf_type_tag annotations among a pointer's children. */
static int count_type_tags(PyObject *die, Py_ssize_t *count)
{
	PyObject *children;
	int is, r;

	*count = 0;
	if ((r = sequence_of(die, s_children, &children)))
		return r;
	for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(children); i++) {
		if ((r = annotation(PySequence_Fast_ITEMS(children)[i], "btf_type_tag", &is)))
			return r;
		*count += is;
	}
	return OK;
}

/* The first pass of CuLoader.load_types: an id for each type DIE of
 * ``dies`` from ``next_id`` on (after the ids of its type tags), and the
 * unit's index type; the type DIEs into *slots, their number into *n,
 * the id after the last into *end. */
static int number_types(struct loader *l, PyObject *dies, long next_id, struct slot **slots,
			Py_ssize_t *n, long *end)
{
	int has_array = 0, r;

	*n = 0;
	if (!(*slots = PyMem_Malloc(sizeof(**slots) * (PyList_GET_SIZE(dies) + 1))))
		return PyErr_NoMemory(), ERROR;
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(dies); i++) {
		PyObject *die = PyList_GET_ITEM(dies, i), *offset, *id, *name;
		long tag = tag_of(die);
		Py_ssize_t tags = 0;
		int failed;

		if (tag < 0)
			return GIVE_UP;
		if (!is_type_tag(tag))
			continue;
		if (tag == TAG_POINTER && l->type_tags) {
			if ((r = count_type_tags(die, &tags)))
				return r;
			next_id += tags;
		} else if (tag == TAG_ARRAY) {
			has_array = 1;
		} else if (tag == TAG_BASE && !l->index_type) {
			if (!(name = die_attr(die, AT_NAME)) && PyErr_Occurred())
				return ERROR;
			if (name && PyUnicode_Check(name) && !PyUnicode_CompareWithASCIIString(name, "int"))
				l->index_type = next_id;
		}
		if (!(offset = PyObject_GetAttr(die, s_offset)) || !(id = PyLong_FromLong(next_id))) {
			Py_XDECREF(offset);
			return ERROR;
		}
		failed = PyDict_SetItem(l->ids, offset, id);
		Py_DECREF(offset);
		Py_DECREF(id);
		if (failed)
			return ERROR;
		(*slots)[(*n)++] = (struct slot){die, tag, tags};
		next_id++;
	}
	if (has_array && !l->index_type)
		l->index_type = next_id;
	*end = next_id;
	return OK;
}

/* A pointer with btf_type_tag annotations: TYPE_TAGs chained as pahole
 * chains them (CuLoader._add_type_tags) into ``list``, whose first type
 * has id ``first``, then the PTR to the last of them. */
static int tagged_pointer(struct loader *l, PyObject *die, PyObject *list, long first,
			  PyObject **out)
{
	PyObject *children, *f[13];
	long target;
	int r;

	if ((r = sequence_of(die, s_children, &children))
	    || (r = ref(l, die_attr(die, AT_TYPE), &target)))
		return r;
	if (PyErr_Occurred())
		return ERROR;
	for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(children); i++) {
		PyObject *c = PySequence_Fast_ITEMS(children)[i], *value, *t;
		int is, failed;

		if ((r = annotation(c, "btf_type_tag", &is)))
			return r;
		if (!is)
			continue;
		if (!(value = die_attr(c, AT_CONST_VALUE)) && PyErr_Occurred())
			return ERROR;
		fields_of(f, K_TYPE_TAG, value && PyUnicode_Check(value) ? value : NULL);
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

static PyObject *load_types(PyObject *self, PyObject *args)
{
	PyObject *dies, *list = NULL, *out = NULL, *f[13];
	struct loader l = {0};
	struct slot *slots = NULL;
	Py_ssize_t n = 0;
	long next_id, end;
	int r;

	if (!PyArg_ParseTuple(args, "O!O!liipO:load_types", &PyList_Type, &dies, &PyDict_Type,
			      &l.by_offset, &next_id, &l.address_size, &l.big, &l.type_tags,
			      &l.features))
		return NULL;
	if (!btf_type)
		return PyErr_Format(PyExc_RuntimeError, "_loader.init was not called");
	if (!(l.ids = PyDict_New()) || !(list = PyList_New(0)))
		goto done;
	if ((r = number_types(&l, dies, next_id, &slots, &n, &end)))
		goto end;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *t;
		int failed;

		r = slots[i].tags ? tagged_pointer(&l, slots[i].die, list, next_id, &t)
			: encode(&l, slots[i].die, slots[i].tag, &t);
		if (r)
			goto end;
		failed = PyList_Append(list, t);
		Py_DECREF(t);
		if (failed) {
			r = ERROR;
			goto end;
		}
	}
	if (l.index_type == end) {
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
	if (r == OK)
		out = Py_BuildValue("(OOl)", l.ids, list, l.index_type);
	else if (r == GIVE_UP && !PyErr_Occurred())
		out = Py_NewRef(Py_None);
done:
	PyMem_Free(slots);
	Py_XDECREF(l.ids);
	Py_XDECREF(list);
	return out;
}

static PyObject *init(PyObject *self, PyObject *args)
{
	PyObject *given[9];

	if (!PyArg_ParseTuple(args, "OO!OOOOOOO:init", &given[0], &PyList_Type, &given[1],
			      &given[2], &given[3], &given[4], &given[5], &given[6], &given[7],
			      &given[8]))
		return NULL;
	if (PyList_GET_SIZE(given[1]) <= K_LAST)
		return PyErr_Format(PyExc_ValueError, "init: %d kinds expected", K_LAST + 1);
	for (int i = 0; i < N_ATTRS; i++)
		if (!attr_keys[i] && !(attr_keys[i] = PyLong_FromLong(attr_numbers[i])))
			return NULL;
	if ((!s_tag && !(s_tag = PyUnicode_InternFromString("tag")))
	    || (!s_attrs && !(s_attrs = PyUnicode_InternFromString("attrs")))
	    || (!s_children && !(s_children = PyUnicode_InternFromString("children")))
	    || (!s_items && !(s_items = PyUnicode_InternFromString("items")))
	    || (!s_offset && !(s_offset = PyUnicode_InternFromString("offset")))
	    || (!empty && !(empty = PyUnicode_FromString(""))))
		return NULL;
	PyObject **slots[9] = { &btf_type, &kinds, &member_class, &param_class, &enumerator_class,
				&expr_class, &base_type_rule, &enum_type_rule, &declared_enum_rule };
	for (int i = 0; i < 9; i++)
		Py_XSETREF(*slots[i], Py_NewRef(given[i]));
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"init", init, METH_VARARGS,
	 "init(new_type, the Kind of each number, Member, Param, Enumerator, Expr, base_type, "
	 "enum_type, declared_enum): what loader.py makes (types.new_type makes a BtfType), "
	 "rules.py's functions."},
	{"load_types", load_types, METH_VARARGS,
	 "load_types(dies, by_offset, next_id, address_size, big_endian, type_tags, features): "
	 "the ids of a unit's type DIEs, its types and its index type as CuLoader.load_types "
	 "makes them (type_tags: the unit's btf_type_tag chains too), or None where loader.py "
	 "must decide."},
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
