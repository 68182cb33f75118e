/*
 * The type DIEs of one object as _dies.c keeps them in C, and _loader.c reads
 * them: no Python object per DIE, member or value.
 *
 * The loader is all that reads most DIEs (types, their members, enumerators,
 * subranges and parameters), and making them Python objects for it was most
 * of the decoder's time and a good part of the loader's.  So _dies.c keeps in
 * Python only the DIEs the encoder's Python code walks (the unit's own,
 * functions, variables and what is under them), and every type DIE, with
 * all it holds, here: an Arena, one per object.  A type DIE becomes the Die
 * reader.py's decoder makes only when Python asks for it (Arena.die,
 * Arena.dies), once.
 *
 * Entries are DIEs and items (reader.ITEM_ATTRS: the members, enumerators
 * and parameters a type DIE holds), in .debug_info order.  Each has the
 * values of its wanted attributes as reader.py converts them (struct cval),
 * its children (kept DIEs) and items as chains of entry indices.  ``dies``
 * lists the DIE entries, in offset order, which arena_find() searches.
 */
#ifndef OBJBTF_ARENA_H
#define OBJBTF_ARENA_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* What reader.py's converter makes of a value: an int (from an unsigned or a
 * signed form), True, a str, bytes, or an Expr (a block). */
enum cv_kind { CV_UINT, CV_SINT, CV_TRUE, CV_STR, CV_BYTES, CV_EXPR };

struct cval {
	uint32_t attr;
	uint32_t kind;
	union {
		uint64_t u;             /* CV_UINT; CV_SINT as an int64_t */
		PyObject *str;          /* CV_STR: a reference the arena holds */
		struct {
			Py_ssize_t pos, len;    /* CV_BYTES, CV_EXPR: where in .debug_info */
		} span;
	};
};

enum {
	E_ITEM = 1,             /* an item, not a DIE */
	E_TOP = 2,              /* a DIE whose parent is the unit's */
	E_CHILDREN = 4,         /* its abbreviation has children: a Die's lists exist */
	E_ITEM_PARENT = 8,      /* a DIE whose children can be items (reader.ITEM_PARENTS) */
};

#define NONE (-1)

struct entry {
	Py_ssize_t offset;
	uint32_t tag, flags;
	int32_t first_child, first_item, next;  /* chains of entry indices; NONE ends one */
	uint32_t first_val, nvals;
};

typedef struct {
	PyObject_HEAD
	struct entry *e;
	Py_ssize_t n, cap;
	struct cval *v;
	Py_ssize_t nv, capv;
	int32_t *dies;          /* the DIE entries, by offset */
	Py_ssize_t ndies, capd;
	Py_buffer info;         /* .debug_info, for bytes and Expr values */
	PyObject *made;         /* offset -> the Die made of an entry */
} Arena;

/* The value of ``attr`` of entry ``e``; NULL when it has none.  The last
 * of an attribute given twice, as reader.py's dict keeps it. */
static inline const struct cval *arena_attr(const Arena *a, const struct entry *e, uint32_t attr)
{
	for (uint32_t i = e->nvals; i-- > 0;)
		if (a->v[e->first_val + i].attr == attr)
			return &a->v[e->first_val + i];
	return NULL;
}

/* The index of the DIE entry at ``offset``, or NONE. */
static inline int32_t arena_find(const Arena *a, uint64_t offset)
{
	Py_ssize_t lo = 0, hi = a->ndies;

	while (lo < hi) {
		Py_ssize_t mid = lo + (hi - lo) / 2;
		uint64_t at = (uint64_t)a->e[a->dies[mid]].offset;

		if (at == offset)
			return a->dies[mid];
		if (at < offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NONE;
}

/* Whether ``v`` is what Python takes for an int (bool included). */
static inline int cval_is_int(const struct cval *v)
{
	return v->kind == CV_UINT || v->kind == CV_SINT || v->kind == CV_TRUE;
}

/* An int value ``v`` modulo 2**64 (a signed one in two's complement). */
static inline uint64_t cval_bits(const struct cval *v)
{
	return v->kind == CV_TRUE ? 1 : v->u;
}

/* Python's truth of ``v``: an Expr is a tuple of two, always true. */
static inline int cval_truth(const struct cval *v)
{
	switch (v->kind) {
	case CV_UINT: case CV_SINT:
		return v->u != 0;
	case CV_STR:
		return PyUnicode_GET_LENGTH(v->str) != 0;
	case CV_BYTES:
		return v->span.len != 0;
	}
	return 1;
}

/* The Python object of ``v`` (.debug_info at ``info``; Expr: reader.Expr),
 * a new reference. */
static inline PyObject *cval_object(const uint8_t *info, const struct cval *v, PyObject *expr)
{
	PyObject *data;

	switch (v->kind) {
	case CV_UINT:
		return PyLong_FromUnsignedLongLong(v->u);
	case CV_SINT:
		return PyLong_FromLongLong((int64_t)v->u);
	case CV_TRUE:
		Py_RETURN_TRUE;
	case CV_STR:
		return Py_NewRef(v->str);
	case CV_BYTES:
		return PyBytes_FromStringAndSize((const char *)info + v->span.pos, v->span.len);
	}
	if (!(data = PyBytes_FromStringAndSize((const char *)info + v->span.pos, v->span.len)))
		return NULL;
	return PyObject_CallFunction(expr, "nN", v->span.pos, data);
}

#endif
