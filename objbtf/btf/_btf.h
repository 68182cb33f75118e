/*
 * What the C code over BTF (_blob.c, _dedup.c, _loader.c, _amend.c, _merge.c)
 * shares: the kernel's kinds (numbers, the words each kind's layout adds
 * after struct btf_type as kinds.py's registry has them, sets of kinds),
 * a buffer that grows, and the making of the model's types (BtfType) and
 * their entries (Member, Param, ...).  The host's byte order is Python's
 * PY_BIG_ENDIAN.
 */
#ifndef OBJBTF_BTF_H
#define OBJBTF_BTF_H

enum {
	K_UNKN, K_INT, K_PTR, K_ARRAY, K_STRUCT, K_UNION, K_ENUM, K_FWD, K_TYPEDEF, K_VOLATILE,
	K_CONST, K_RESTRICT, K_FUNC, K_FUNC_PROTO, K_VAR, K_DATASEC, K_FLOAT, K_DECL_TAG,
	K_TYPE_TAG, K_ENUM64, K_LAST = K_ENUM64,
};

#define BIT(k) (1u << (k))

/* Words after struct btf_type: fixed ones, and per entry (kinds.py's layouts). */
static const int fixed_words[K_LAST + 1] = {
	[K_INT] = 1, [K_ARRAY] = 3, [K_VAR] = 1, [K_DECL_TAG] = 1,
};
static const int entry_words[K_LAST + 1] = {
	[K_STRUCT] = 3, [K_UNION] = 3, [K_ENUM] = 2, [K_FUNC_PROTO] = 2, [K_DATASEC] = 3,
	[K_ENUM64] = 3,
};

/* Sets of kinds (kinds.py's registry, validate.py's and dedup.py's sets). */
#define SIZED (BIT(K_INT) | BIT(K_STRUCT) | BIT(K_UNION) | BIT(K_ENUM) | BIT(K_DATASEC) \
	       | BIT(K_FLOAT) | BIT(K_ENUM64))
#define MODIFIERS (BIT(K_TYPEDEF) | BIT(K_VOLATILE) | BIT(K_CONST) | BIT(K_RESTRICT) \
		   | BIT(K_TYPE_TAG))
#define ONE_REF (MODIFIERS | BIT(K_PTR) | BIT(K_FUNC) | BIT(K_VAR) | BIT(K_DECL_TAG))
#define STRUCTS (BIT(K_STRUCT) | BIT(K_UNION))
#define ENUMS (BIT(K_ENUM) | BIT(K_ENUM64))

/* Room for ``need`` items of ``size`` bytes in ``*buf``, of ``*cap``
 * items, growing it by doubling: 0, or -1 when out of memory. */
static inline int grow(void **buf, size_t *cap, size_t need, size_t size)
{
	size_t more = *cap ? *cap : 16;
	void *grown;

	if (need <= *cap)
		return 0;
	while (more < need)
		more *= 2;
	if (!(grown = PyMem_Realloc(*buf, more * size)))
		return -1;
	*buf = grown;
	*cap = more;
	return 0;
}

/* A NamedTuple of ``cls`` (a model entry: Member, Param, Enumerator,
 * VarSecinfo) from ``n`` new references (NULL: an error set; the
 * references are taken either way). */
static inline PyObject *new_entry(PyObject *cls, int n, PyObject **items)
{
	PyObject *t = ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, n);
	int ok = t != NULL;

	for (int i = 0; i < n; i++) {
		ok = ok && items[i];
		if (t && items[i])
			PyTuple_SET_ITEM(t, i, items[i]);
		else
			Py_XDECREF(items[i]);
	}
	if (!ok)
		Py_CLEAR(t);
	return t;
}

/* A BtfType from BtfType.__init__'s 13 fields, each a new reference (NULL
 * among them: an error set), made by ``cls``: types.new_type, whose compiled
 * call takes them as a vector (the class's call would pack and parse them);
 * the references are taken either way. */
static inline PyObject *new_type(PyObject *cls, PyObject **fields)
{
	PyObject *t = NULL;
	int i;

	for (i = 0; i < 13 && fields[i]; i++)
		;
	if (i == 13)
		t = PyObject_Vectorcall(cls, fields, 13, NULL);
	for (i = 0; i < 13; i++)
		Py_XDECREF(fields[i]);
	return t;
}

#endif
