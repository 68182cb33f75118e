/*
 * What the C code over BTF (_blob.c, _dedup.c, _loader.c, _amend.c, _merge.c)
 * shares: the kernel's kinds (numbers, the words each kind's layout adds
 * after struct btf_type as kinds.py's registry has them, sets of kinds,
 * which words hold type ids and names; a registry other than kinds.py's
 * KINDS never reaches this code: kinds.in_c),
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

/*
 * The field iterator: which words of a type hold type ids and string
 * offsets, counted in 32-bit words from the start of its struct btf_type
 * (kinds.py's layouts: fields named ``type``, ``index_type``, ``name_off``).
 * The walks over all of a type's type ids or names (_blob.c's hashes and
 * checks, _dedup.c's and _amend.c's checks, _dedup.c's compaction,
 * _merge.c's edges) go through it, in BtfType.refs' order: the
 * size-or-type word, the fixed words, the entries.  tests/test_c_kinds.py
 * checks these tables, and every set of kinds here and in the C files,
 * against kinds.py.
 */
/* Kinds whose size-or-type word is a type id. */
#define TYPE_WORD_REF (ONE_REF | BIT(K_FUNC_PROTO))
/* How many of a kind's first fixed words are type ids. */
static const uint32_t fixed_ref_words[K_LAST + 1] = {
	[K_ARRAY] = 2,
};
/* Kinds whose entries hold a type id, and in which of their words. */
#define ENTRY_TYPED (STRUCTS | BIT(K_FUNC_PROTO) | BIT(K_DATASEC))
static const uint32_t entry_type_word[K_LAST + 1] = {
	[K_STRUCT] = 1, [K_UNION] = 1, [K_FUNC_PROTO] = 1, [K_DATASEC] = 0,
};
/* Kinds whose entries have names: the first word of each entry. */
#define ENTRY_NAMED (STRUCTS | ENUMS | BIT(K_FUNC_PROTO))

/* How many type ids a type of kind ``k`` (at most K_LAST) with ``vlen``
 * refers to (BtfType.refs). */
static inline uint32_t ref_count(int k, uint32_t vlen)
{
	return (BIT(k) & TYPE_WORD_REF ? 1 : 0) + fixed_ref_words[k]
		+ (BIT(k) & ENTRY_TYPED ? vlen : 0);
}

/* The word that holds reference ``i`` (below ref_count) of a type of kind ``k``. */
static inline uint32_t ref_word(int k, uint32_t i)
{
	if (BIT(k) & TYPE_WORD_REF) {
		if (!i)
			return 2;
		i--;
	}
	if (i < fixed_ref_words[k])
		return 3 + i;
	i -= fixed_ref_words[k];
	return 3 + fixed_words[k] + entry_words[k] * i + entry_type_word[k];
}

/* How many string offsets a type of kind ``k`` with ``vlen`` holds: its
 * name's, and its entries' names'. */
static inline uint32_t name_count(int k, uint32_t vlen)
{
	return 1 + (BIT(k) & ENTRY_NAMED ? vlen : 0);
}

/* The word that holds string offset ``i`` (below name_count) of a type of kind ``k``. */
static inline uint32_t name_word(int k, uint32_t i)
{
	return i ? 3 + fixed_words[k] + entry_words[k] * (i - 1) : 0;
}

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
