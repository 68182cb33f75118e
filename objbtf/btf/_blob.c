/*
 * objbtf.btf._blob: hashing.py's type hashes in C, read from a written
 * .BTF blob instead of the model, for the compiled build.
 *
 * The encoder writes an object's BTF and then hashes its types; in Python
 * the hashing was an eighth of the per-object step (bench/RESULTS.md), all
 * of it formatting strings and calling blake2b type by type.  Here the same
 * strings are made from the blob's words and hashed with BLAKE2b (RFC 7693)
 * in one call.  hashes() gives what hashing.type_hashes gives for the model
 * the blob was written from, or None for anything it does not expect (a
 * kind past ENUM64, a name or reference outside its section, split BTF, a
 * reference chain too deep for the C stack): hashing.py then hashes the
 * model itself.  So the C code never explains a problem, it only stops.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../blake2b.h"

/* blake2b(data, digest_size=8), as int.from_bytes(digest, 'little'). */
static uint64_t blake2b_8(const uint8_t *data, size_t len)
{
	struct blake2b s;
	b2_init(&s);
	b2_update(&s, data, len);
	return b2_final(&s);
}

/* ---- the blob ---- */

enum {
	K_UNKN, K_INT, K_PTR, K_ARRAY, K_STRUCT, K_UNION, K_ENUM, K_FWD, K_TYPEDEF, K_VOLATILE,
	K_CONST, K_RESTRICT, K_FUNC, K_FUNC_PROTO, K_VAR, K_DATASEC, K_FLOAT, K_DECL_TAG,
	K_TYPE_TAG, K_ENUM64, K_LAST = K_ENUM64,
};

/* Words after struct btf_type: fixed ones, and per entry (kinds.py's layouts). */
static const int fixed_words[K_LAST + 1] = {
	[K_INT] = 1, [K_ARRAY] = 3, [K_VAR] = 1, [K_DECL_TAG] = 1,
};
static const int entry_words[K_LAST + 1] = {
	[K_STRUCT] = 3, [K_UNION] = 3, [K_ENUM] = 2, [K_FUNC_PROTO] = 2, [K_DATASEC] = 3,
	[K_ENUM64] = 3,
};
/* Kinds whose size-or-type word is a size (the model's ``size``). */
static const int sized[K_LAST + 1] = {
	[K_INT] = 1, [K_STRUCT] = 1, [K_UNION] = 1, [K_ENUM] = 1, [K_DATASEC] = 1, [K_FLOAT] = 1,
	[K_ENUM64] = 1,
};
/* Kinds that refer to one type, through the size-or-type word (KINDS.one_ref). */
static const int one_ref[K_LAST + 1] = {
	[K_PTR] = 1, [K_TYPEDEF] = 1, [K_VOLATILE] = 1, [K_CONST] = 1, [K_RESTRICT] = 1,
	[K_FUNC] = 1, [K_VAR] = 1, [K_DECL_TAG] = 1, [K_TYPE_TAG] = 1,
};

#define UNMERGEABLE 1
#define MAX_DEPTH 256           /* nested hashes before handing over to Python */

struct blob {
	const uint8_t *types, *strings;
	Py_ssize_t strings_len;
	int big;
	Py_ssize_t n;                   /* type ids: 0 (void) to n - 1 */
	const uint8_t **at;             /* each type's struct btf_type */
	/* per type id */
	uint64_t *hashes;
	uint8_t *flags, *state;         /* state: 0 new, 1 in progress, 2 done */
	uint8_t (*digest)[8];           /* an unnamed type's hash, once done */
	/* the string being hashed: one per nesting level, reused */
	char **buf;
	size_t *cap;
};

static inline uint32_t word(const struct blob *b, const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return b->big ? __builtin_bswap32(v) : v;
}

static inline uint32_t info_of(const struct blob *b, Py_ssize_t id)
{
	return word(b, b->at[id] + 4);
}

static inline int kind_of(uint32_t info)
{
	return (info >> 24) & 0x1f;
}

/* Whether a NUL-terminated name starts at ``off`` of the string section. */
static int name_ok(const struct blob *b, uint32_t off)
{
	return (Py_ssize_t)off < b->strings_len
		&& memchr(b->strings + off, 0, b->strings_len - off) != NULL;
}

/* Whether the names of type ``t`` of ``kind`` (its own, its entries') are
 * in the string section, so that hashing can read them without checks. */
static int names_ok(const struct blob *b, const uint8_t *t, int kind)
{
	uint32_t vlen = word(b, t + 4) & 0xffff;
	if (!name_ok(b, word(b, t)))
		return 0;
	if (kind == K_DATASEC)          /* its entries have no names */
		return 1;
	for (uint32_t i = 0; i < vlen && entry_words[kind]; i++)
		if (!name_ok(b, word(b, t + 12 + 4 * entry_words[kind] * i)))
			return 0;
	return 1;
}

/* A growable string. */
struct out {
	char **buf;
	size_t *cap, len;
	int failed;
};

static void put(struct out *o, const void *data, size_t len)
{
	if (o->failed)
		return;
	if (o->len + len > *o->cap) {
		size_t cap = (*o->cap ? *o->cap : 256);
		while (cap < o->len + len)
			cap *= 2;
		char *grown = PyMem_Realloc(*o->buf, cap);
		if (!grown) {
			o->failed = 1;
			return;
		}
		*o->buf = grown;
		*o->cap = cap;
	}
	memcpy(*o->buf + o->len, data, len);
	o->len += len;
}

static void put_str(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

static void put_char(struct out *o, char c)
{
	put(o, &c, 1);
}

/* str(v) of Python's int, for v >= 0. */
static void put_uint(struct out *o, uint64_t v)
{
	char text[20];
	int at = sizeof(text);
	do {
		text[--at] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put(o, text + at, sizeof(text) - at);
}

/* str(v) of Python's int. */
static void put_int(struct out *o, int64_t v)
{
	if (v < 0) {
		put_char(o, '-');
		put_uint(o, -(uint64_t)v);
	} else {
		put_uint(o, (uint64_t)v);
	}
}

/* 'struct NAME', 'union NAME' or 'enum NAME' (hashing.named_aggregate)
 * for a named type dedup matches by name, else NULL with *prefix unset. */
static const char *aggregate_prefix(int kind, uint32_t info)
{
	switch (kind) {
	case K_STRUCT:
		return "struct ";
	case K_UNION:
		return "union ";
	case K_FWD:
		return info >> 31 ? "union " : "struct ";
	case K_ENUM:
	case K_ENUM64:
		return "enum ";
	}
	return NULL;
}

/* The name of type ``id`` when it is a named aggregate, whose references
 * hash as its name (with its prefix in *prefix, if asked), else NULL. */
static const char *aggregate_name(const struct blob *b, Py_ssize_t id, const char **prefix)
{
	const uint8_t *t = b->at[id];
	uint32_t info = word(b, t + 4);
	const char *p = aggregate_prefix(kind_of(info), info);
	const char *name = (const char *)b->strings + word(b, t);
	if (!p || !*name)
		return NULL;
	if (prefix)
		*prefix = p;
	return name;
}

static int hash_type(struct blob *b, Py_ssize_t id, int depth);

/* Appends what a reference to ``ref`` contributes (Hasher._token); -1 to give up. */
static int put_token(struct blob *b, struct out *o, Py_ssize_t ref, int depth)
{
	const char *name, *prefix;
	if (ref == 0) {
		put_char(o, 'V');
		return 0;
	}
	if (ref >= b->n)
		return -1;
	if ((name = aggregate_name(b, ref, &prefix))) {
		put_char(o, 'N');
		put_str(o, prefix);
		put_str(o, name);
		return 0;
	}
	if (b->state[ref] == 1) {       /* a cycle without a named aggregate */
		uint8_t le[8];
		b->flags[ref] |= UNMERGEABLE;
		for (int i = 0; i < 8; i++)
			le[i] = (uint8_t)((uint64_t)ref >> (8 * i));
		put_char(o, 'H');
		put(o, le, 8);
		return 0;
	}
	if (b->state[ref] == 0 && hash_type(b, ref, depth + 1) < 0)
		return -1;
	put_char(o, 'H');
	put(o, b->digest[ref], 8);
	return 0;
}

/* How many type ids type ``t`` of ``kind`` refers to (BtfType.refs). */
static uint32_t count_refs(const struct blob *b, const uint8_t *t, int kind)
{
	uint32_t vlen = word(b, t + 4) & 0xffff;
	if (one_ref[kind])
		return 1;
	switch (kind) {
	case K_ARRAY:
		return 2;
	case K_FUNC_PROTO:
		return 1 + vlen;
	case K_STRUCT:
	case K_UNION:
	case K_DATASEC:
		return vlen;
	}
	return 0;
}

/* Reference ``i`` of type ``t``, in BtfType.refs' order. */
static uint32_t ref_at(const struct blob *b, const uint8_t *t, int kind, uint32_t i)
{
	const uint8_t *extra = t + 12;
	switch (kind) {
	case K_ARRAY:
		return word(b, extra + 4 * i);
	case K_FUNC_PROTO:
		return i ? word(b, extra + 8 * (i - 1) + 4) : word(b, t + 8);
	case K_STRUCT:
	case K_UNION:
		return word(b, extra + 12 * i + 4);
	case K_DATASEC:
		return word(b, extra + 12 * i);
	}
	return word(b, t + 8);          /* one_ref */
}

/* Hashes type ``id`` (Hasher._hash): 0, or -1 to give up. */
static int hash_type(struct blob *b, Py_ssize_t id, int depth)
{
	if (depth >= MAX_DEPTH)
		return -1;
	const uint8_t *t = b->at[id];
	uint32_t name_off = word(b, t), info = word(b, t + 4), st = word(b, t + 8);
	uint32_t vlen = info & 0xffff, kflag = info >> 31;
	int kind = kind_of(info);
	const uint8_t *extra = t + 12;
	const char *name = (const char *)b->strings + name_off;
	uint32_t nrefs;
	struct out o = {&b->buf[depth], &b->cap[depth], 0, 0};
	uint64_t encoding = 0, bit_offset = 0, bits = 0, nelems = 0, linkage = 0;
	int64_t component_idx = -1;

	b->state[id] = 1;
	if (kind == K_INT) {
		uint32_t v = word(b, extra);
		encoding = (v >> 24) & 0x0f;
		bit_offset = (v >> 16) & 0xff;
		bits = v & 0xff;
	} else if (kind == K_ARRAY) {
		nelems = word(b, extra + 8);
	} else if (kind == K_FUNC) {
		linkage = vlen;
	} else if (kind == K_VAR) {
		linkage = word(b, extra);
	} else if (kind == K_DECL_TAG) {
		component_idx = (int32_t)word(b, extra);
	}

	/* Hasher._scalars: the type's own fields, then \x1d and its entries. */
	put_int(&o, kind);
	put_char(&o, '\x1f');
	put_str(&o, name);
	put_char(&o, '\x1f');
	put_uint(&o, sized[kind] ? st : 0);
	put_char(&o, '\x1f');
	put_uint(&o, kflag);
	put_char(&o, '\x1f');
	put_uint(&o, encoding);
	put_char(&o, '\x1f');
	put_uint(&o, bit_offset);
	put_char(&o, '\x1f');
	put_uint(&o, bits);
	put_char(&o, '\x1f');
	put_uint(&o, nelems);
	put_char(&o, '\x1f');
	put_uint(&o, linkage);
	put_char(&o, '\x1f');
	put_int(&o, component_idx);
	put_char(&o, '\x1d');
	for (uint32_t i = 0; i < vlen && entry_words[kind]; i++) {
		const uint8_t *e = extra + 4 * entry_words[kind] * i;
		if (i)
			put_char(&o, '\x1e');
		if (kind == K_DATASEC) {
			put_uint(&o, word(b, e + 8));
			continue;
		}
		put_str(&o, (const char *)b->strings + word(b, e));
		if (kind == K_FUNC_PROTO)
			continue;
		put_char(&o, '\x1f');
		if (kind == K_STRUCT || kind == K_UNION) {
			uint32_t off = word(b, e + 8);
			put_uint(&o, kflag ? off & 0xffffff : off);
			put_char(&o, '\x1f');
			put_uint(&o, kflag ? off >> 24 : 0);
		} else if (kind == K_ENUM) {
			uint32_t v = word(b, e + 4);
			put_int(&o, kflag ? (int64_t)(int32_t)v : (int64_t)v);
		} else {                /* ENUM64 */
			uint64_t v = (uint64_t)word(b, e + 8) << 32 | word(b, e + 4);
			if (kflag)
				put_int(&o, (int64_t)v);
			else
				put_uint(&o, v);
		}
	}

	nrefs = count_refs(b, t, kind);
	for (uint32_t i = 0; i < nrefs; i++) {
		put_char(&o, '\x1c');
		if (put_token(b, &o, ref_at(b, t, kind, i), depth) < 0)
			return -1;
	}
	if (o.failed)
		return -1;

	uint8_t flag = (kind == K_VAR || kind == K_DATASEC) ? UNMERGEABLE : 0;
	for (uint32_t i = 0; i < nrefs; i++) {
		uint32_t ref = ref_at(b, t, kind, i);
		if (ref && !aggregate_name(b, ref, NULL))
			flag |= b->flags[ref];
	}
	uint64_t h = blake2b_8((const uint8_t *)*o.buf, o.len);
	b->flags[id] |= flag;
	b->hashes[id] = h;
	for (int i = 0; i < 8; i++)
		b->digest[id][i] = (uint8_t)(h >> (8 * i));
	b->state[id] = 2;
	return 0;
}

/* Finds every type's start: 0, or -1 for a layout this does not take. */
static int index_types(struct blob *b, const uint8_t *data, Py_ssize_t len)
{
	uint32_t hdr_len, type_off, type_len, str_off, str_len;
	uint16_t magic;

	if (len < 24)
		return -1;
	memcpy(&magic, data, 2);
	if (b->big)
		magic = __builtin_bswap16(magic);
	if (magic != 0xeb9f || data[2] != 1)
		return -1;
	hdr_len = word(b, data + 4);
	type_off = word(b, data + 8);
	type_len = word(b, data + 12);
	str_off = word(b, data + 16);
	str_len = word(b, data + 20);
	if (hdr_len < 24 || (uint64_t)hdr_len + type_off + type_len > (uint64_t)len
	    || (uint64_t)hdr_len + str_off + str_len > (uint64_t)len)
		return -1;
	b->types = data + hdr_len + type_off;
	b->strings = data + hdr_len + str_off;
	b->strings_len = str_len;

	Py_ssize_t count = 0, cap = 1024;
	const uint8_t **at = PyMem_Malloc(cap * sizeof(*at));
	if (!at)
		return -1;
	at[count++] = NULL;             /* void */
	for (uint32_t pos = 0; pos < type_len;) {
		if (type_len - pos < 12)
			goto bad;
		const uint8_t *t = b->types + pos;
		uint32_t info = word(b, t + 4);
		int kind = kind_of(info);
		if (kind == K_UNKN || kind > K_LAST)
			goto bad;
		uint64_t size = 12 + 4 * (uint64_t)(fixed_words[kind]
						    + entry_words[kind] * (uint64_t)(info & 0xffff));
		if (size > type_len - pos || !names_ok(b, t, kind))
			goto bad;
		if (count == cap) {
			const uint8_t **grown = PyMem_Realloc(at, 2 * cap * sizeof(*at));
			if (!grown)
				goto bad;
			at = grown;
			cap *= 2;
		}
		at[count++] = t;
		pos += (uint32_t)size;
	}
	b->at = at;
	b->n = count;
	return 0;
bad:
	PyMem_Free(at);
	return -1;
}

static void release(struct blob *b)
{
	if (b->buf)
		for (int i = 0; i < MAX_DEPTH; i++)
			PyMem_Free(b->buf[i]);
	PyMem_Free(b->buf);
	PyMem_Free(b->cap);
	PyMem_Free(b->at);
	PyMem_Free(b->hashes);
	PyMem_Free(b->flags);
	PyMem_Free(b->state);
	PyMem_Free(b->digest);
}

/* The result as hashing.type_hashes gives it: ([hash per id], bytearray of flags). */
static PyObject *result(const struct blob *b)
{
	PyObject *list = PyList_New(b->n), *flags = NULL, *pair;
	if (!list)
		return NULL;
	for (Py_ssize_t i = 0; i < b->n; i++) {
		PyObject *h = PyLong_FromUnsignedLongLong(b->hashes[i]);
		if (!h) {
			Py_DECREF(list);
			return NULL;
		}
		PyList_SET_ITEM(list, i, h);
	}
	flags = PyByteArray_FromStringAndSize((const char *)b->flags, b->n);
	if (!flags) {
		Py_DECREF(list);
		return NULL;
	}
	pair = PyTuple_Pack(2, list, flags);
	Py_DECREF(list);
	Py_DECREF(flags);
	return pair;
}

static PyObject *hashes(PyObject *self, PyObject *args)
{
	Py_buffer raw;
	int big;
	struct blob b;
	PyObject *out = NULL;

	if (!PyArg_ParseTuple(args, "y*p", &raw, &big))
		return NULL;
	memset(&b, 0, sizeof(b));
	b.big = big;
	if (index_types(&b, raw.buf, raw.len) < 0)
		goto none;
	b.hashes = PyMem_Calloc(b.n, sizeof(*b.hashes));
	b.flags = PyMem_Calloc(b.n, 1);
	b.state = PyMem_Calloc(b.n, 1);
	b.digest = PyMem_Calloc(b.n, sizeof(*b.digest));
	b.buf = PyMem_Calloc(MAX_DEPTH, sizeof(*b.buf));
	b.cap = PyMem_Calloc(MAX_DEPTH, sizeof(*b.cap));
	if (!b.hashes || !b.flags || !b.state || !b.digest || !b.buf || !b.cap)
		goto none;
	for (Py_ssize_t id = 1; id < b.n; id++)
		if (!b.state[id] && hash_type(&b, id, 0) < 0)
			goto none;
	out = result(&b);
	release(&b);
	PyBuffer_Release(&raw);
	return out;
none:
	release(&b);
	PyBuffer_Release(&raw);
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"hashes", hashes, METH_VARARGS,
	 "hashes(blob, big_endian) -> (hashes, flags) as hashing.type_hashes gives them "
	 "for the model the blob was written from, or None to hash the model instead."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "objbtf.btf._blob",
	"hashing.py's type hashes of a written .BTF blob, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__blob(void)
{
	return PyModule_Create(&module);
}
