/*
 * What the C passes over BTF (_blob.c, _dedup.c) share: the kernel's
 * kinds (numbers, the words each kind's layout adds after struct
 * btf_type as kinds.py's registry has them, sets of kinds), the host's
 * byte order, and a buffer that grows.
 */
#ifndef OBJBTF_BTF_H
#define OBJBTF_BTF_H

#if PY_BIG_ENDIAN
#define HOST_BIG 1
#else
#define HOST_BIG 0
#endif

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

#endif
