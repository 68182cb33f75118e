/*
 * objbtf.btf._blob: three passes of the per-object step in C, which make
 * the .BTF blob and read it, for the compiled build.
 *
 * - write(): writer.encode_btf of base BTF of the kernel's kinds: the
 *   same words and the same string section, strings in order of first use.
 * - hashes(): hashing.type_hashes of the model the blob was written from
 *   (or read into).  The same strings hashing.py formats, made from the
 *   blob's words, hashed with BLAKE2b in one call.
 * - accepts(): whether validate.first_problem finds nothing in that model
 *   (base BTF, the rules of kernels after 6.1).  The same checks in the same
 *   order, the kernel's walk of references included.
 *
 * Each was an eighth of an object's encode in Python (bench/RESULTS.md).
 * None explains anything: on what it does not expect (a value its field
 * cannot hold, a name that is not UTF-8; a kind past ENUM64, a name or a
 * type outside its section, a name that is not ASCII, a reference chain
 * too deep for the C stack) write() and hashes() return None and accepts()
 * False, and the Python code decides on the model, with its own messages.
 * So accepts() may refuse what the kernel would take, never the other way
 * round (tests/test_blob_passes.py checks all three against the Python
 * code).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "../blake2b.h"
#include "_btf.h"

/* ==== the blob ==== */

/* INT data bits the format leaves unused (reader._INT_RESERVED). */
#define INT_RESERVED 0xf000ff00u

/* A blob's types by id, once index_types has checked that every type
 * and every name lies inside its section. */
struct blob {
	const uint8_t *types, *strings;
	Py_ssize_t strings_len;
	int big;
	Py_ssize_t n;                   /* type ids: 0 (void) to n - 1 */
	const uint8_t **at;             /* each type's struct btf_type; void's is VOID */
};

/* struct btf_type of void: kind UNKN, no name, nothing else. */
static const uint8_t VOID[12];

static inline uint32_t word(const struct blob *b, const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return b->big != PY_BIG_ENDIAN ? __builtin_bswap32(v) : v;
}

static inline int kind_of(uint32_t info)
{
	return (info >> 24) & 0x1f;
}

/* Type ``id``'s fields, as the model has them. */
static inline uint32_t info(const struct blob *b, uint32_t id)
{
	return word(b, b->at[id] + 4);
}

static inline int kind(const struct blob *b, uint32_t id)
{
	return kind_of(info(b, id));
}

static inline uint32_t vlen(const struct blob *b, uint32_t id)
{
	return info(b, id) & 0xffff;
}

static inline uint32_t kflag(const struct blob *b, uint32_t id)
{
	return info(b, id) >> 31;
}

static inline const char *name(const struct blob *b, uint32_t id)
{
	return (const char *)b->strings + word(b, b->at[id]);
}

static inline uint32_t size(const struct blob *b, uint32_t id)
{
	return BIT(kind(b, id)) & SIZED ? word(b, b->at[id] + 8) : 0;
}

/* Word ``w`` of the fixed part after struct btf_type (kinds.py's ``fixed``). */
static inline uint32_t fixed(const struct blob *b, uint32_t id, int w)
{
	return word(b, b->at[id] + 12 + 4 * w);
}

/* The model's ``type``: the size-or-type word, an ARRAY's element type. */
static inline uint32_t type(const struct blob *b, uint32_t id)
{
	int k = kind(b, id);
	if (k == K_ARRAY)
		return fixed(b, id, 0);
	return BIT(k) & SIZED ? 0 : word(b, b->at[id] + 8);
}

/* ARRAY's ``index_type`` and ``nelems``. */
static inline uint32_t index_type(const struct blob *b, uint32_t id)
{
	return fixed(b, id, 1);
}

static inline uint32_t nelems(const struct blob *b, uint32_t id)
{
	return fixed(b, id, 2);
}

/* INT's ``encoding``, ``bit_offset`` and ``bits`` (its data word). */
static inline uint32_t int_encoding(const struct blob *b, uint32_t id)
{
	return (fixed(b, id, 0) >> 24) & 0x0f;
}

static inline uint32_t int_offset(const struct blob *b, uint32_t id)
{
	return (fixed(b, id, 0) >> 16) & 0xff;
}

static inline uint32_t int_bits(const struct blob *b, uint32_t id)
{
	return fixed(b, id, 0) & 0xff;
}

/* The model's ``linkage``: FUNC's vlen, VAR's word. */
static inline uint32_t linkage(const struct blob *b, uint32_t id)
{
	int k = kind(b, id);
	return k == K_FUNC ? vlen(b, id) : k == K_VAR ? fixed(b, id, 0) : 0;
}

/* The model's ``component_idx``: DECL_TAG's, -1 for every other kind. */
static inline int64_t component_idx(const struct blob *b, uint32_t id)
{
	return kind(b, id) == K_DECL_TAG ? (int32_t)fixed(b, id, 0) : -1;
}

/* Word ``w`` of entry ``i`` of type ``id``. */
static inline uint32_t entry(const struct blob *b, uint32_t id, uint32_t i, int w)
{
	int k = kind(b, id);
	return word(b, b->at[id] + 12 + 4 * (fixed_words[k] + entry_words[k] * i + w));
}

/* Struct or union member ``i``'s ``bit_offset`` and ``bitfield_size``
 * (the offset word holds both when kind_flag is set). */
static inline uint32_t member_offset(const struct blob *b, uint32_t id, uint32_t i)
{
	uint32_t off = entry(b, id, i, 2);
	return kflag(b, id) ? off & 0xffffff : off;
}

static inline uint32_t member_bits(const struct blob *b, uint32_t id, uint32_t i)
{
	return kflag(b, id) ? entry(b, id, i, 2) >> 24 : 0;
}

/* The model's ``len(items)``. */
static inline uint32_t items(const struct blob *b, uint32_t id)
{
	return entry_words[kind(b, id)] ? vlen(b, id) : 0;
}

/* Whether a NUL-terminated name starts at ``off`` of the string section. */
static int name_ok(const struct blob *b, uint32_t off)
{
	return (Py_ssize_t)off < b->strings_len
		&& memchr(b->strings + off, 0, b->strings_len - off) != NULL;
}

/* Whether type ``t`` of ``kind`` has the layout the model can hold (vlen
 * only where entries or linkage go, INT's reserved bits clear) and all
 * its names (its own, its entries') in the string section. */
static int type_ok(const struct blob *b, const uint8_t *t, int kind)
{
	uint32_t vlen = word(b, t + 4) & 0xffff;
	if (vlen && !entry_words[kind] && kind != K_FUNC)
		return 0;
	if (kind == K_INT && word(b, t + 12) & INT_RESERVED)   /* (not indexed yet) */
		return 0;
	for (uint32_t i = 0, n = name_count(kind, vlen); i < n; i++)
		if (!name_ok(b, word(b, t + 4 * name_word(kind, i))))
			return 0;
	return 1;
}

/* Finds every type of base BTF blob ``data``: 0, or -1 for a layout this
 * does not take. */
static int index_types(struct blob *b, const uint8_t *data, Py_ssize_t len)
{
	uint32_t hdr_len, type_off, type_len, str_off, str_len;
	uint16_t magic;

	if (len < 24)
		return -1;
	memcpy(&magic, data, 2);
	if (b->big != PY_BIG_ENDIAN)
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
	at[count++] = VOID;
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
		if (size > type_len - pos || !type_ok(b, t, kind))
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

/* ==== hashes: hashing.Hasher ==== */

#define UNMERGEABLE 1
#define MAX_NESTING 256         /* nested hashes before handing over to Python */

struct hasher {
	const struct blob *b;
	/* per type id */
	uint64_t *hashes;
	uint8_t *flags, *state;         /* state: 0 new, 1 in progress, 2 done */
	uint8_t (*digest)[8];           /* an unnamed type's hash, once done */
	/* the string being hashed: one per nesting level, reused */
	char **buf;
	size_t *cap;
};

/* A growable string. */
struct out {
	char **buf;
	size_t *cap, len;
	int failed;
};

/* Makes room for ``len`` more bytes: 0, or -1 (and o->failed) when out of memory. */
static int make_room(struct out *o, size_t len)
{
	void *buf = *o->buf;
	if (o->failed || grow(&buf, o->cap, o->len + len, 1) < 0) {
		o->failed = 1;
		return -1;
	}
	*o->buf = buf;
	return 0;
}

static inline void put(struct out *o, const void *data, size_t len)
{
	if (o->len + len > *o->cap && make_room(o, len) < 0)
		return;
	memcpy(*o->buf + o->len, data, len);
	o->len += len;
}

static inline void put_str(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

static inline void put_char(struct out *o, char c)
{
	if (o->len >= *o->cap && make_room(o, 1) < 0)
		return;
	(*o->buf)[o->len++] = c;
}

/* str(v) of Python's int, for v >= 0. */
static void put_uint(struct out *o, uint64_t v)
{
	if (v < 10) {           /* most fields: 0 */
		put_char(o, (char)('0' + v));
		return;
	}
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

/* The name of type ``id`` when it is a named aggregate (hashing.named_aggregate),
 * whose references hash as 'struct NAME', 'union NAME' or 'enum NAME' (its
 * prefix in *prefix), else NULL. */
static const char *aggregate_name(const struct blob *b, uint32_t id, const char **prefix)
{
	const char *p;
	const char *n = name(b, id);
	int k = kind(b, id);

	if (!*n)
		return NULL;
	if (k == K_STRUCT)
		p = "struct ";
	else if (k == K_UNION)
		p = "union ";
	else if (k == K_FWD)
		p = kflag(b, id) ? "union " : "struct ";
	else if (BIT(k) & ENUMS)
		p = "enum ";
	else
		return NULL;
	*prefix = p;
	return n;
}

static int hash_type(struct hasher *h, uint32_t id, int depth);

/* Appends what a reference to ``ref`` contributes (Hasher._token); returns
 * the flags it passes on to the referrer (none through a named aggregate's
 * name), or -1 to give up. */
static int put_token(struct hasher *h, struct out *o, uint32_t ref, int depth)
{
	const char *n, *prefix;
	if (ref == 0) {
		put_char(o, 'V');
		return 0;
	}
	if (ref >= h->b->n)
		return -1;
	if ((n = aggregate_name(h->b, ref, &prefix))) {
		put_char(o, 'N');
		put_str(o, prefix);
		put_str(o, n);
		return 0;
	}
	if (h->state[ref] == 1) {       /* a cycle without a named aggregate */
		uint8_t le[8];
		h->flags[ref] |= UNMERGEABLE;
		for (int i = 0; i < 8; i++)
			le[i] = (uint8_t)((uint64_t)ref >> (8 * i));
		put_char(o, 'H');
		put(o, le, 8);
		return h->flags[ref];
	}
	if (h->state[ref] == 0 && hash_type(h, ref, depth + 1) < 0)
		return -1;
	put_char(o, 'H');
	put(o, h->digest[ref], 8);
	return h->flags[ref];
}

/* Appends Hasher._scalars: the type's own fields, then \x1d and its entries. */
static void put_scalars(const struct blob *b, struct out *o, uint32_t id)
{
	int k = kind(b, id), is_int = k == K_INT;
	uint32_t flag = kflag(b, id);

	put_int(o, k);
	put_char(o, '\x1f');
	put_str(o, name(b, id));
	put_char(o, '\x1f');
	put_uint(o, size(b, id));
	put_char(o, '\x1f');
	put_uint(o, flag);
	put_char(o, '\x1f');
	put_uint(o, is_int ? int_encoding(b, id) : 0);
	put_char(o, '\x1f');
	put_uint(o, is_int ? int_offset(b, id) : 0);
	put_char(o, '\x1f');
	put_uint(o, is_int ? int_bits(b, id) : 0);
	put_char(o, '\x1f');
	put_uint(o, k == K_ARRAY ? nelems(b, id) : 0);
	put_char(o, '\x1f');
	put_uint(o, linkage(b, id));
	put_char(o, '\x1f');
	put_int(o, component_idx(b, id));
	put_char(o, '\x1d');
	for (uint32_t i = 0; i < items(b, id); i++) {
		if (i)
			put_char(o, '\x1e');
		if (k == K_DATASEC) {
			put_uint(o, entry(b, id, i, 2));
			continue;
		}
		put_str(o, (const char *)b->strings + entry(b, id, i, 0));
		if (k == K_FUNC_PROTO)
			continue;
		put_char(o, '\x1f');
		if (BIT(k) & STRUCTS) {
			put_uint(o, member_offset(b, id, i));
			put_char(o, '\x1f');
			put_uint(o, member_bits(b, id, i));
		} else if (k == K_ENUM) {
			uint32_t v = entry(b, id, i, 1);
			put_int(o, flag ? (int64_t)(int32_t)v : (int64_t)v);
		} else {                /* ENUM64 */
			uint64_t v = (uint64_t)entry(b, id, i, 2) << 32 | entry(b, id, i, 1);
			if (flag)
				put_int(o, (int64_t)v);
			else
				put_uint(o, v);
		}
	}
}

/* Hashes type ``id`` (Hasher._hash): 0, or -1 to give up. */
static int hash_type(struct hasher *h, uint32_t id, int depth)
{
	const struct blob *b = h->b;
	int k = kind(b, id);
	uint32_t nrefs = ref_count(k, vlen(b, id));     /* BtfType.refs */

	if (depth >= MAX_NESTING)
		return -1;
	struct out o = {&h->buf[depth], &h->cap[depth], 0, 0};
	/* A done type's flags never change again, and an ancestor's (in
	 * progress) become UNMERGEABLE when its token is put: so each token's
	 * flags, read as it is put, are what they are once every token is. */
	int flag = (k == K_VAR || k == K_DATASEC) ? UNMERGEABLE : 0;
	h->state[id] = 1;
	put_scalars(b, &o, id);
	for (uint32_t i = 0; i < nrefs; i++) {
		put_char(&o, '\x1c');
		int passed = put_token(h, &o, word(b, b->at[id] + 4 * ref_word(k, i)), depth);
		if (passed < 0)
			return -1;
		flag |= passed;
	}
	if (o.failed)
		return -1;

	struct blake2b s;
	b2_init(&s);
	b2_update(&s, *o.buf, o.len);
	uint64_t digest = b2_final(&s);
	h->flags[id] |= flag;
	h->hashes[id] = digest;
	for (int i = 0; i < 8; i++)
		h->digest[id][i] = (uint8_t)(digest >> (8 * i));
	h->state[id] = 2;
	return 0;
}

/* ([hash per id], bytearray of flags), as hashing.type_hashes gives them. */
static PyObject *hash_result(const struct hasher *h)
{
	Py_ssize_t n = h->b->n;
	PyObject *list = PyList_New(n), *flags, *pair;
	if (!list)
		return NULL;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *value = PyLong_FromUnsignedLongLong(h->hashes[i]);
		if (!value) {
			Py_DECREF(list);
			return NULL;
		}
		PyList_SET_ITEM(list, i, value);
	}
	flags = PyByteArray_FromStringAndSize((const char *)h->flags, n);
	if (!flags) {
		Py_DECREF(list);
		return NULL;
	}
	pair = PyTuple_Pack(2, list, flags);
	Py_DECREF(list);
	Py_DECREF(flags);
	return pair;
}

/* The hashes of indexed blob ``b``, or None. */
static PyObject *hash_blob(const struct blob *b)
{
	struct hasher h = {.b = b};
	PyObject *out = NULL;
	Py_ssize_t id;

	h.hashes = PyMem_Calloc(b->n, sizeof(*h.hashes));
	h.flags = PyMem_Calloc(b->n, 1);
	h.state = PyMem_Calloc(b->n, 1);
	h.digest = PyMem_Calloc(b->n, sizeof(*h.digest));
	h.buf = PyMem_Calloc(MAX_NESTING, sizeof(*h.buf));
	h.cap = PyMem_Calloc(MAX_NESTING, sizeof(*h.cap));
	if (h.hashes && h.flags && h.state && h.digest && h.buf && h.cap) {
		for (id = 1; id < b->n; id++)
			if (!h.state[id] && hash_type(&h, (uint32_t)id, 0) < 0)
				break;
		out = id == b->n ? hash_result(&h) : Py_NewRef(Py_None);
	} else {
		out = Py_NewRef(Py_None);
	}
	if (h.buf)
		for (int i = 0; i < MAX_NESTING; i++)
			PyMem_Free(h.buf[i]);
	PyMem_Free(h.buf);
	PyMem_Free(h.cap);
	PyMem_Free(h.hashes);
	PyMem_Free(h.flags);
	PyMem_Free(h.state);
	PyMem_Free(h.digest);
	return out;
}

/* ==== accepts: validate._Checker, for base BTF and the rules after 6.1 ==== */

#define BTF_MAX_TYPE 0xfffffu
#define MAX_RESOLVE_DEPTH 32
#define MAX_NAME_BYTES 512
#define U32 0xffffffffu

#define NEEDS_RESOLVE (MODIFIERS | BIT(K_PTR) | STRUCTS | BIT(K_ARRAY) | BIT(K_VAR) \
		       | BIT(K_FUNC) | BIT(K_DECL_TAG) | BIT(K_DATASEC))
/* Types that may only start a resolution, never be referred to by one. */
#define SOURCE_ONLY (BIT(K_VAR) | BIT(K_DECL_TAG) | BIT(K_DATASEC))
#define NO_SIZE (BIT(K_UNKN) | BIT(K_FWD) | BIT(K_FUNC) | BIT(K_FUNC_PROTO) | BIT(K_DECL_TAG))
#define DECL_TAG_TARGETS (BIT(K_FUNC) | STRUCTS | BIT(K_VAR) | BIT(K_TYPEDEF))
#define REFERENCES (MODIFIERS | BIT(K_PTR) | BIT(K_VAR))
#define OWN_SIZE ((SIZED | BIT(K_PTR)) & ~BIT(K_DATASEC))

enum { NOT_VISITED, VISITED, RESOLVED };
enum { MODE_TBD, MODE_PTR, MODE_STRUCT };
/* Per walk mode, the kinds the walk goes into rather than stopping at. */
static const uint32_t walked[] = {
	[MODE_TBD] = NEEDS_RESOLVE,
	[MODE_PTR] = MODIFIERS | BIT(K_PTR),
	[MODE_STRUCT] = MODIFIERS | BIT(K_ARRAY) | STRUCTS,
};

struct checker {
	const struct blob *b;
	uint32_t ptr_size;
	uint8_t *state;
	uint32_t *rid, *rsize;
	struct { uint32_t id, next; } stack[MAX_RESOLVE_DEPTH];
	int depth, mode;
};

/* Every rule below returns 0 when the type passes it, -1 when it does not
 * or may not: no reason, since Python says it. */
#define REQUIRE(cond) do { if (!(cond)) return -1; } while (0)

/* An ASCII identifier of at most MAX_NAME_BYTES bytes (validate._Checker.identifier;
 * other names are Python's to judge). */
static int identifier(const char *s)
{
	size_t n = 0;
	for (; s[n]; n++) {
		unsigned char c = (unsigned char)s[n];
		int letter = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == '.';
		if (!(letter || (n && c >= '0' && c <= '9')))
			return 0;
	}
	return n && n <= MAX_NAME_BYTES;
}

/* A DATASEC's name: printable ASCII (validate._SECTION_NAME's ASCII part). */
static int section_name(const char *s)
{
	size_t n = 0;
	for (; s[n]; n++)
		if ((unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e)
			return 0;
	return n && n <= MAX_NAME_BYTES;
}

static inline int in(uint32_t set, int kind)
{
	return (BIT(kind) & set) != 0;
}

static inline int valid_id(const struct checker *c, uint32_t id)
{
	return id < (uint32_t)c->b->n;
}

/* -- each type on its own (the _meta_* rules) -- */

/* Struct and union members (_meta_struct, _member_meta). */
static int members_meta(const struct blob *b, uint32_t id)
{
	uint64_t last = 0;
	int union_ = kind(b, id) == K_UNION;
	for (uint32_t i = 0; i < vlen(b, id); i++) {
		const char *n = (const char *)b->strings + entry(b, id, i, 0);
		uint32_t mtype = entry(b, id, i, 1), off = member_offset(b, id, i);
		REQUIRE(!*n || identifier(n));
		REQUIRE(mtype && mtype <= BTF_MAX_TYPE);
		REQUIRE(!(union_ && off));
		REQUIRE(off >= last);
		REQUIRE(((uint64_t)off + 7) >> 3 <= size(b, id));
		last = off;
	}
	return 0;
}

static int enum_meta(const struct blob *b, uint32_t id)
{
	uint32_t s = size(b, id);
	REQUIRE(s == 1 || s == 2 || s == 4 || s == 8);
	REQUIRE(!*name(b, id) || identifier(name(b, id)));
	for (uint32_t i = 0; i < vlen(b, id); i++)
		REQUIRE(identifier((const char *)b->strings + entry(b, id, i, 0)));
	return 0;
}

static int datasec_meta(const struct blob *b, uint32_t id)
{
	uint32_t s = size(b, id);
	uint64_t end = 0, total = 0;
	REQUIRE(s && !kflag(b, id) && section_name(name(b, id)));
	for (uint32_t i = 0; i < vlen(b, id); i++) {
		uint32_t vtype = entry(b, id, i, 0), off = entry(b, id, i, 1), vsize = entry(b, id, i, 2);
		REQUIRE(vtype && vtype <= BTF_MAX_TYPE);
		REQUIRE(off >= end && off < s);
		REQUIRE(vsize && vsize <= s && (uint64_t)off + vsize <= s);
		end = (uint64_t)off + vsize;
		total += vsize;
	}
	REQUIRE(total <= s);
	return 0;
}

static int meta(const struct blob *b, uint32_t id)
{
	const char *n = name(b, id);
	uint32_t st = word(b, b->at[id] + 8), flag = kflag(b, id);
	int k = kind(b, id);

	switch (k) {
	case K_INT: {
		uint32_t encoding = int_encoding(b, id), nbits = int_bits(b, id) + int_offset(b, id);
		REQUIRE(nbits <= 128 && (nbits + 7) >> 3 <= st);
		REQUIRE(encoding == 0 || encoding == 1 || encoding == 2 || encoding == 4);
		REQUIRE(!flag);
		return 0;
	}
	case K_PTR:
	case K_VOLATILE:
	case K_CONST:
	case K_RESTRICT:
		REQUIRE(!flag && st <= BTF_MAX_TYPE && !*n);
		return 0;
	case K_TYPEDEF:
		REQUIRE(!flag && st <= BTF_MAX_TYPE && identifier(n));
		return 0;
	case K_TYPE_TAG:                /* kind_flag: an attribute tag (Linux 6.13) */
		REQUIRE(st <= BTF_MAX_TYPE && *n);
		return 0;
	case K_ARRAY: {
		uint32_t elem = type(b, id), index = index_type(b, id);
		REQUIRE(!*n && !flag);
		REQUIRE(elem && elem <= BTF_MAX_TYPE && index && index <= BTF_MAX_TYPE);
		return 0;
	}
	case K_STRUCT:
	case K_UNION:
		REQUIRE(!*n || identifier(n));
		return members_meta(b, id);
	case K_ENUM:
	case K_ENUM64:
		return enum_meta(b, id);
	case K_FWD:
		REQUIRE(!st && identifier(n));
		return 0;
	case K_FUNC:
		REQUIRE(identifier(n) && linkage(b, id) <= 1 && !flag);
		return 0;
	case K_FUNC_PROTO:
		REQUIRE(!*n && !flag);
		return 0;
	case K_VAR:
		REQUIRE(!flag && identifier(n) && st && st <= BTF_MAX_TYPE && linkage(b, id) <= 1);
		return 0;
	case K_DATASEC:
		return datasec_meta(b, id);
	case K_FLOAT:
		REQUIRE(!flag && (st == 2 || st == 4 || st == 8 || st == 12 || st == 16));
		return 0;
	case K_DECL_TAG:                /* kind_flag: an attribute tag (Linux 6.13) */
		REQUIRE(*n && component_idx(b, id) >= -1);
		return 0;
	}
	return -1;
}

/* -- references: the kernel's walk (_Checker.resolve and its steps) -- */

static inline int resolved(const struct checker *c, uint32_t id)
{
	return c->state[id] == RESOLVED;
}

static inline int sink(const struct checker *c, uint32_t id)
{
	return !in(walked[c->mode], kind(c->b, id));
}

static int push(struct checker *c, uint32_t id)
{
	REQUIRE(c->depth < MAX_RESOLVE_DEPTH && c->state[id] == NOT_VISITED);
	c->state[id] = VISITED;
	c->stack[c->depth].id = id;
	c->stack[c->depth].next = 0;
	c->depth++;
	if (c->mode == MODE_TBD) {
		int k = kind(c->b, id);
		if (k == K_PTR)
			c->mode = MODE_PTR;
		else if (in(STRUCTS | BIT(K_ARRAY), k))
			c->mode = MODE_STRUCT;
	}
	return 0;
}

static void pop(struct checker *c, uint32_t rid, uint32_t rsize)
{
	uint32_t id = c->stack[--c->depth].id;
	c->state[id] = RESOLVED;
	c->rid[id] = rid;
	c->rsize[id] = rsize;
}

/* The size a type has without resolving through it (_own_size); 0 with
 * *has = 0 for none. */
static uint32_t own_size(const struct checker *c, uint32_t id, int *has)
{
	int k = kind(c->b, id);
	*has = 1;
	if (in(SIZED, k))
		return size(c->b, id);
	if (k == K_ARRAY)
		return c->rsize[id];
	if (k == K_PTR)
		return c->ptr_size;
	*has = 0;
	return 0;
}

/* btf_type_id_size: the sized type ``id`` stands for and its size; 0 for none. */
static int id_size(const struct checker *c, uint32_t id, uint32_t *sid, uint32_t *ssize)
{
	int has;
	if (!valid_id(c, id) || in(NO_SIZE, kind(c->b, id)))
		return 0;
	*ssize = own_size(c, id, &has);
	*sid = id;
	if (has)
		return 1;
	if (!in(MODIFIERS | BIT(K_VAR), kind(c->b, id)))
		return 0;
	id = c->rid[id];
	if (!valid_id(c, id) || in(NO_SIZE, kind(c->b, id)))
		return 0;
	*ssize = own_size(c, id, &has);
	*sid = id;
	return has;
}

static int regular_int(const struct blob *b, uint32_t id)
{
	uint32_t bits = int_bits(b, id), nbytes = (bits + 7) >> 3;
	return !(bits % 8) && !int_offset(b, id)
		&& (nbytes == 1 || nbytes == 2 || nbytes == 4 || nbytes == 8 || nbytes == 16);
}

static int bits_fit(uint64_t struct_size, uint64_t bit_offset, uint64_t nbits)
{
	uint64_t copy_bits = nbits + bit_offset % 8, byte_off = bit_offset >> 3;
	REQUIRE(copy_bits <= 128);
	REQUIRE(struct_size >= byte_off && struct_size - byte_off >= (copy_bits + 7) >> 3);
	return 0;
}

/* _member_sized: byte-aligned members of ``msize`` bytes. */
static int member_sized(uint32_t s_size, uint32_t off, uint64_t msize)
{
	REQUIRE(!(off % 8));
	REQUIRE(((s_size - (off >> 3)) & U32) >= msize);
	return 0;
}

/* check_member: member ``i`` of struct ``sid`` against its type. */
static int check_member(const struct checker *c, uint32_t sid, uint32_t i)
{
	const struct blob *b = c->b;
	uint32_t mtype = entry(b, sid, i, 1), off = member_offset(b, sid, i);
	uint32_t nbits = member_bits(b, sid, i), s_size = size(b, sid), msize;
	int bitfields = kflag(b, sid), k = kind(b, mtype);

	if (in(MODIFIERS, k)) {
		REQUIRE(id_size(c, mtype, &mtype, &msize));
		k = kind(b, mtype);
	}
	if (bitfields && k == K_INT) {  /* check_int_bitfield */
		REQUIRE(regular_int(b, mtype));
		if (!nbits) {
			REQUIRE(!(off % 8));
			nbits = int_bits(b, mtype);
		} else {
			REQUIRE(nbits <= int_bits(b, mtype));
		}
		return bits_fit(s_size, off, nbits);
	}
	if (bitfields && in(ENUMS, k)) {        /* check_enum_bitfield */
		if (!nbits) {
			REQUIRE(!(off % 8));
			nbits = 32;
		} else {
			REQUIRE(nbits <= 32);
		}
		REQUIRE(((uint64_t)off + nbits + 7) >> 3 <= s_size);
		return 0;
	}
	REQUIRE(!nbits);
	switch (k) {
	case K_INT:
		REQUIRE(U32 - off >= int_offset(b, mtype));
		return bits_fit(s_size, (uint64_t)off + int_offset(b, mtype), int_bits(b, mtype));
	case K_PTR:
		return member_sized(s_size, off, c->ptr_size);
	case K_ARRAY: {
		uint32_t aid;
		if (!id_size(c, mtype, &aid, &msize))
			msize = 0;
		return member_sized(s_size, off, msize);
	}
	case K_STRUCT:
	case K_UNION:
	case K_ENUM:
	case K_ENUM64:
		return member_sized(s_size, off, size(b, mtype));
	case K_FLOAT: {
		uint32_t fsize = size(b, mtype);
		uint64_t align_bits = (c->ptr_size < fsize ? c->ptr_size : fsize) * 8ull;
		REQUIRE(!align_bits || !(off % align_bits));
		REQUIRE((uint64_t)(off >> 3) + fsize <= s_size);
		return 0;
	}
	}
	return -1;
}

/* 1 if ``ref`` was pushed to resolve first, 0 if it need not be, -1 if it
 * has no size (needs_first). */
static int needs_first(struct checker *c, uint32_t ref)
{
	REQUIRE(valid_id(c, ref) && !in(NO_SIZE | SOURCE_ONLY, kind(c->b, ref)));
	if (!sink(c, ref) && !resolved(c, ref))
		return push(c, ref) < 0 ? -1 : 1;
	return 0;
}

/* PTR, modifiers and VAR (resolve_reference). */
static int resolve_reference(struct checker *c, uint32_t id)
{
	const struct blob *b = c->b;
	int follow_ptr = in(BIT(K_PTR) | BIT(K_VAR), kind(b, id));
	uint32_t next = type(b, id), sid, ssize;
	int nk;

	REQUIRE(valid_id(c, next) && !in(SOURCE_ONLY, kind(b, next)));
	nk = kind(b, next);
	if (in(walked[c->mode], nk) && !resolved(c, next))
		return push(c, next);
	if (in(SIZED | BIT(K_PTR), nk)) {
		pop(c, next, 0);
		return 0;
	}
	if (follow_ptr && in(MODIFIERS, nk)) {
		uint32_t target = c->rid[next];
		if (valid_id(c, target) && kind(b, target) == K_PTR && !sink(c, target)
		    && !resolved(c, target))
			return push(c, target);
	}
	if (id_size(c, next, &sid, &ssize)) {
		pop(c, sid, 0);
		return 0;
	}
	REQUIRE(kind(b, id) != K_VAR);
	if (resolved(c, next))
		next = c->rid[next];
	REQUIRE(valid_id(c, next) && in(BIT(K_UNKN) | BIT(K_FWD) | BIT(K_FUNC_PROTO), kind(b, next)));
	pop(c, next, 0);
	return 0;
}

static int resolve_struct(struct checker *c, uint32_t id, uint32_t start)
{
	const struct blob *b = c->b;
	if (start) {
		REQUIRE(resolved(c, entry(b, id, start - 1, 1)));
		REQUIRE(check_member(c, id, start - 1) == 0);
	}
	for (uint32_t i = start; i < vlen(b, id); i++) {
		uint32_t ref = entry(b, id, i, 1);
		c->stack[c->depth - 1].next = i + 1;
		REQUIRE(valid_id(c, ref) && !in(NO_SIZE | SOURCE_ONLY, kind(b, ref)));
		if (in(walked[c->mode], kind(b, ref)) && !resolved(c, ref))
			return push(c, ref);
		REQUIRE(check_member(c, id, i) == 0);
	}
	pop(c, 0, 0);
	return 0;
}

static int resolve_array(struct checker *c, uint32_t id)
{
	const struct blob *b = c->b;
	uint32_t index = index_type(b, id), elem = type(b, id), n = nelems(b, id), sid, ssize;
	int first = needs_first(c, index);

	if (first)
		return first < 0 ? -1 : 0;
	REQUIRE(id_size(c, index, &sid, &ssize));
	REQUIRE(kind(b, sid) == K_INT && regular_int(b, sid));
	first = needs_first(c, elem);
	if (first)
		return first < 0 ? -1 : 0;
	REQUIRE(id_size(c, elem, &sid, &ssize));
	REQUIRE(kind(b, sid) != K_INT || regular_int(b, sid));
	REQUIRE(!n || ssize <= U32 / n);
	pop(c, sid, ssize * n);
	return 0;
}

static int resolve_func(struct checker *c, uint32_t id)
{
	const struct blob *b = c->b;
	uint32_t proto = type(b, id);
	REQUIRE(valid_id(c, proto) && kind(b, proto) == K_FUNC_PROTO);
	for (uint32_t i = 0; i < vlen(b, proto); i++)
		REQUIRE(b->strings[entry(b, proto, i, 0)] || !entry(b, proto, i, 1));
	pop(c, proto, 0);
	return 0;
}

static int resolve_decl_tag(struct checker *c, uint32_t id)
{
	const struct blob *b = c->b;
	uint32_t target = type(b, id);
	int64_t component = component_idx(b, id);

	REQUIRE(valid_id(c, target) && in(DECL_TAG_TARGETS, kind(b, target)));
	if (!sink(c, target) && !resolved(c, target))
		return push(c, target);
	if (component != -1) {
		uint32_t owner = target;
		REQUIRE(!in(BIT(K_VAR) | BIT(K_TYPEDEF), kind(b, target)));
		if (kind(b, target) == K_FUNC)
			owner = type(b, target);
		/* A FUNC's target that is no type counts as void: no components. */
		REQUIRE(valid_id(c, owner) && component < items(b, owner));
	}
	pop(c, target, 0);
	return 0;
}

static int resolve_datasec(struct checker *c, uint32_t id, uint32_t start)
{
	const struct blob *b = c->b;
	c->mode = MODE_TBD;
	for (uint32_t i = start; i < vlen(b, id); i++) {
		uint32_t var = entry(b, id, i, 0), sid, ssize;
		REQUIRE(valid_id(c, var) && kind(b, var) == K_VAR);
		if (!sink(c, var) && !resolved(c, var)) {
			c->stack[c->depth - 1].next = i + 1;
			return push(c, var);
		}
		REQUIRE(id_size(c, type(b, var), &sid, &ssize));
		REQUIRE(entry(b, id, i, 2) >= ssize);
	}
	pop(c, 0, 0);
	return 0;
}

/* resolve_valid: what the walk left for ``id`` is what the kernel requires. */
static int resolve_valid(const struct checker *c, uint32_t id)
{
	const struct blob *b = c->b;
	uint32_t rid = c->rid[id], rsize = c->rsize[id], sid, ssize;
	int k = kind(b, id);

	REQUIRE(resolved(c, id));
	if (in(STRUCTS | BIT(K_DATASEC), k))
		REQUIRE(!rid && !rsize);
	else if (in(BIT(K_DECL_TAG) | BIT(K_FUNC), k))
		REQUIRE(rid && !rsize);
	else if (in(MODIFIERS | BIT(K_PTR) | BIT(K_VAR), k))
		REQUIRE(valid_id(c, rid) && !in(MODIFIERS | BIT(K_VAR) | BIT(K_DATASEC), kind(b, rid)));
	else if (k == K_ARRAY) {
		REQUIRE(id_size(c, type(b, id), &sid, &ssize));
		REQUIRE(!in(MODIFIERS, kind(b, sid)));
		REQUIRE(((uint64_t)nelems(b, id) * ssize & U32) == rsize);
	} else
		return -1;
	return 0;
}

/* Resolve ``root`` and what it needs, depth first (btf_resolve). */
static int resolve(struct checker *c, uint32_t root)
{
	const struct blob *b = c->b;
	int k = kind(b, root);

	if (in(REFERENCES, k) && c->state[root] == NOT_VISITED) {
		/* A target with a size of its own that needs no walk: at once. */
		uint32_t next = type(b, root);
		uint32_t set = k == K_PTR ? walked[MODE_PTR] : NEEDS_RESOLVE;
		if (valid_id(c, next) && in(OWN_SIZE, kind(b, next))
		    && (!in(set, kind(b, next)) || resolved(c, next))) {
			c->state[root] = RESOLVED;
			c->rid[root] = next;
			c->rsize[root] = 0;
			return 0;
		}
	}
	c->mode = MODE_TBD;
	REQUIRE(push(c, root) == 0);
	while (c->depth) {
		uint32_t id = c->stack[c->depth - 1].id, next = c->stack[c->depth - 1].next;
		int step;
		switch (kind(b, id)) {
		case K_STRUCT:
		case K_UNION:
			step = resolve_struct(c, id, next);
			break;
		case K_ARRAY:
			step = resolve_array(c, id);
			break;
		case K_FUNC:
			step = resolve_func(c, id);
			break;
		case K_DECL_TAG:
			step = resolve_decl_tag(c, id);
			break;
		case K_DATASEC:
			step = resolve_datasec(c, id, next);
			break;
		default:                /* PTR, modifiers, VAR */
			step = resolve_reference(c, id);
		}
		REQUIRE(step == 0);
	}
	return resolve_valid(c, root);
}

/* check_func_proto: the return type and the arguments. */
static int check_func_proto(struct checker *c, uint32_t id)
{
	const struct blob *b = c->b;
	uint32_t ret = type(b, id), nargs = vlen(b, id), sid, ssize;

	if (ret) {
		REQUIRE(valid_id(c, ret) && !in(SOURCE_ONLY, kind(b, ret)));
		if (in(NEEDS_RESOLVE, kind(b, ret)) && !resolved(c, ret))
			REQUIRE(resolve(c, ret) == 0);
		REQUIRE(id_size(c, ret, &sid, &ssize));
	}
	if (nargs && !entry(b, id, nargs - 1, 1)) {     /* varargs: void, unnamed */
		REQUIRE(!b->strings[entry(b, id, nargs - 1, 0)]);
		nargs--;
	}
	for (uint32_t i = 0; i < nargs; i++) {
		const char *n = (const char *)b->strings + entry(b, id, i, 0);
		uint32_t arg = entry(b, id, i, 1);
		REQUIRE(valid_id(c, arg) && !in(SOURCE_ONLY, kind(b, arg)));
		REQUIRE(!*n || identifier(n));
		if (in(NEEDS_RESOLVE, kind(b, arg)) && !resolved(c, arg))
			REQUIRE(resolve(c, arg) == 0);
		REQUIRE(id_size(c, arg, &sid, &ssize));
	}
	return 0;
}

/* check_type_tags: in every chain of modifiers, type tags come first. */
static int check_type_tags(const struct checker *c)
{
	const struct blob *b = c->b;
	uint32_t good_id = 0;
	for (uint32_t id = 1; id < (uint32_t)b->n; id++) {
		uint32_t cur = id;
		int k = kind(b, id), in_tags = k == K_TYPE_TAG, limit = MAX_RESOLVE_DEPTH;
		if (!in(MODIFIERS, k))
			continue;
		while (in(MODIFIERS, k)) {
			REQUIRE(limit--);
			REQUIRE(k != K_TYPE_TAG || in_tags);
			in_tags = in_tags && k == K_TYPE_TAG;
			if (cur <= good_id)
				break;
			cur = type(b, cur);
			REQUIRE(valid_id(c, cur));
			k = kind(b, cur);
		}
		good_id = id;
	}
	return 0;
}

/* _Checker.run: every type on its own, then references, then type tags. */
static int check(struct checker *c)
{
	const struct blob *b = c->b;
	REQUIRE((uint32_t)b->n <= BTF_MAX_TYPE);
	for (uint32_t id = 1; id < (uint32_t)b->n; id++)
		REQUIRE(meta(b, id) == 0);
	for (uint32_t id = 1; id < (uint32_t)b->n; id++) {
		int k = kind(b, id);
		if (in(NEEDS_RESOLVE, k) && !resolved(c, id))
			REQUIRE(resolve(c, id) == 0);
		if (k == K_FUNC_PROTO)
			REQUIRE(check_func_proto(c, id) == 0);
	}
	return check_type_tags(c);
}

/* Whether indexed blob ``b`` passes for a target of ``ptr_size``-byte pointers. */
static int accepted(const struct blob *b, uint32_t ptr_size)
{
	struct checker c = {.b = b, .ptr_size = ptr_size};
	int ok = 0;

	c.state = PyMem_Calloc(b->n, 1);
	c.rid = PyMem_Calloc(b->n, sizeof(*c.rid));
	c.rsize = PyMem_Calloc(b->n, sizeof(*c.rsize));
	if (c.state && c.rid && c.rsize)
		ok = check(&c) == 0;
	PyMem_Free(c.state);
	PyMem_Free(c.rid);
	PyMem_Free(c.rsize);
	return ok;
}

/* ==== write: writer.encode_btf, for base BTF of the kernel's kinds ==== */

/* The model's attributes the writer reads (types.BtfType), interned. */
enum {
	A_KIND, A_NAME, A_SIZE, A_TYPE, A_KFLAG, A_ENCODING, A_BIT_OFFSET, A_BITS, A_INDEX_TYPE,
	A_NELEMS, A_LINKAGE, A_COMPONENT_IDX, A_ITEMS, A_COUNT,
};
static const char *const attr_names[A_COUNT] = {
	"kind", "name", "size", "type", "kflag", "encoding", "bit_offset", "bits", "index_type",
	"nelems", "linkage", "component_idx", "items",
};
static PyObject *attrs[A_COUNT];

/* How the writer reads those attributes of the class of the first type
 * written (types.BtfType): straight from the getter of a getset descriptor
 * (mypyc's compiled class) or the slot of a member descriptor (the pure
 * Python class with __slots__), as PyObject_GetAttr would call them once it
 * has found them in the class; a class whose attribute lookup is its own,
 * an instance of another class, an attribute found otherwise or an empty
 * slot go through PyObject_GetAttr. */
struct attr_reader {
	PyTypeObject *cls;
	getter get[A_COUNT];
	void *closure[A_COUNT];
	Py_ssize_t offset[A_COUNT];     /* of a slot; 0: none */
};

static void find_attrs(struct attr_reader *r, PyObject *t)
{
	PyTypeObject *cls = Py_TYPE(t);

	if (cls->tp_getattro != PyObject_GenericGetAttr)
		return;
	r->cls = cls;
	for (int i = 0; i < A_COUNT; i++) {
		PyObject *d = _PyType_Lookup(cls, attrs[i]);  /* borrowed */
		if (d && Py_IS_TYPE(d, &PyGetSetDescr_Type)) {
			PyGetSetDef *def = ((PyGetSetDescrObject *)d)->d_getset;
			r->get[i] = def->get;
			r->closure[i] = def->closure;
		} else if (d && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
			PyMemberDef *def = ((PyMemberDescrObject *)d)->d_member;
			if (def->type == T_OBJECT_EX && !(def->flags & READ_RESTRICTED))
				r->offset[i] = def->offset;
		}
	}
}

/* Attribute ``attr`` of ``t`` (a new reference), or NULL with an error set. */
static PyObject *get_attr(const struct attr_reader *r, PyObject *t, int attr)
{
	if (Py_TYPE(t) == r->cls) {
		if (r->get[attr])
			return r->get[attr](t, r->closure[attr]);
		if (r->offset[attr]) {
			PyObject *v = *(PyObject **)((char *)t + r->offset[attr]);
			if (v)
				return Py_NewRef(v);
		}
	}
	return PyObject_GetAttr(t, attrs[attr]);
}

/* The size-or-type word of each kind (kinds.py's KINDS): its size, 0, or its type. */
#define SIZE_WORD (BIT(K_INT) | BIT(K_STRUCT) | BIT(K_UNION) | BIT(K_ENUM) | BIT(K_DATASEC) \
		   | BIT(K_FLOAT) | BIT(K_ENUM64))
#define ZERO_WORD BIT(K_ARRAY)

/* A string laid out in the string section, found by its text. */
struct laid_out {
	Py_hash_t hash;                 /* Python's, of the str */
	Py_ssize_t at, len;             /* at: 0 for an empty slot (and for '') */
};

/* The section being written: its words and its strings, laid out in
 * order of first use (strings.StringTable), ``laid_out`` by text: an
 * open-addressed table, at most half full. */
struct writer {
	uint32_t *words;
	Py_ssize_t n;
	size_t cap;
	char *strings;
	Py_ssize_t strings_len;
	size_t strings_cap;
	struct laid_out *laid_out;
	size_t laid_out_cap, laid_out_n;        /* cap: a power of 2 */
	PyObject *starts;               /* each type's offset in the type section, if asked */
	int strict;                     /* only what reads back as the model (dedup) */
	struct attr_reader attrs;
};

static int emit(struct writer *w, uint64_t v)
{
	if (v > U32 || grow((void **)&w->words, &w->cap, w->n + 1, sizeof(*w->words)))
		return -1;
	w->words[w->n++] = (uint32_t)v;
	return 0;
}

/* The exact value of int ``v``, or -1 for anything else (Python would
 * raise, or does what the C code does not repeat). */
static int exact(PyObject *v, int64_t *out)
{
	int overflow;

	if (!v || !PyLong_Check(v))
		return -1;
	*out = PyLong_AsLongLongAndOverflow(v, &overflow);
	return overflow || (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* The low 64 bits of int ``v`` (what Python's ``v & mask`` keeps). */
static int masked(PyObject *v, uint64_t *out)
{
	if (!v || !PyLong_Check(v))
		return -1;
	*out = PyLong_AsUnsignedLongLongMask(v);
	return *out == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

/* A word from int ``v``: it must fit as it is, as array('I') takes it. */
static int emit_exact(struct writer *w, PyObject *v)
{
	int64_t x;

	return exact(v, &x) || x < 0 ? -1 : emit(w, (uint64_t)x);
}

static int emit_attr(struct writer *w, PyObject *t, int attr)
{
	PyObject *v = get_attr(&w->attrs, t, attr);
	int err = emit_exact(w, v);

	Py_XDECREF(v);
	return err;
}

static int attr_masked(struct writer *w, PyObject *t, int attr, uint64_t *out)
{
	PyObject *v = get_attr(&w->attrs, t, attr);
	int err = masked(v, out);

	Py_XDECREF(v);
	return err;
}

static int attr_exact(struct writer *w, PyObject *t, int attr, int64_t *out)
{
	PyObject *v = get_attr(&w->attrs, t, attr);
	int err = exact(v, out);

	Py_XDECREF(v);
	return err;
}

/* Whether attribute ``attr`` of ``t`` is an int from 0 to ``max``. */
static int attr_within(struct writer *w, PyObject *t, int attr, int64_t max)
{
	int64_t v;

	return attr_exact(w, t, attr, &v) == 0 && v >= 0 && v <= max;
}

/* Strict mode: whether enumerator value ``v`` is one the reader gives
 * back from its words (signed for kind_flag 1, else unsigned), so that
 * equal words are equal values. */
static int value_reads_back(PyObject *v, int kind, int is_signed)
{
	int64_t x;

	if (kind == K_ENUM) {
		if (exact(v, &x))
			return 0;
		return is_signed ? x >= INT32_MIN && x <= INT32_MAX : x >= 0 && x <= (int64_t)U32;
	}
	if (is_signed)
		return exact(v, &x) == 0;
	if (!PyLong_Check(v))
		return 0;
	PyLong_AsUnsignedLongLong(v);
	if (PyErr_Occurred()) {
		PyErr_Clear();
		return 0;
	}
	return 1;
}

/* The slot in ``table`` (of ``cap`` slots, strings laid out in
 * ``strings``) of the string of ``hash`` whose UTF-8 is ``utf8``: its own,
 * or the empty one where it would go. */
static struct laid_out *slot_of(struct laid_out *table, size_t cap, const char *strings,
				Py_hash_t hash, const char *utf8, Py_ssize_t len)
{
	size_t mask = cap - 1, i = (size_t)hash & mask;
	struct laid_out *e;

	for (;; i = (i + 1) & mask) {
		e = &table[i];
		if (!e->at || (e->hash == hash && e->len == len
			       && memcmp(strings + e->at, utf8, (size_t)len) == 0))
			return e;
	}
}

/* Doubles the table of laid-out strings: 0, or -1 when out of memory. */
static int more_laid_out(struct writer *w)
{
	size_t cap = 2 * w->laid_out_cap;
	struct laid_out *bigger = PyMem_Calloc(cap, sizeof(*bigger));

	if (!bigger)
		return -1;
	for (size_t i = 0; i < w->laid_out_cap; i++) {
		const struct laid_out *e = &w->laid_out[i];
		if (e->at)
			*slot_of(bigger, cap, w->strings, e->hash, w->strings + e->at, e->len) = *e;
	}
	PyMem_Free(w->laid_out);
	w->laid_out = bigger;
	w->laid_out_cap = cap;
	return 0;
}

/* The offset of string ``s``, laid out on first use ('' is at 0). */
static int emit_string(struct writer *w, PyObject *s)
{
	const char *utf8;
	Py_ssize_t len, at = w->strings_len;
	Py_hash_t hash;
	struct laid_out *e;

	if (!PyUnicode_CheckExact(s) || (hash = PyObject_Hash(s)) == -1
	    || !(utf8 = PyUnicode_AsUTF8AndSize(s, &len)))
		return -1;      /* a str subclass, or not UTF-8 (a surrogate): Python decides */
	if (!len)
		return emit(w, 0);
	e = slot_of(w->laid_out, w->laid_out_cap, w->strings, hash, utf8, len);
	if (e->at)
		return emit(w, (uint64_t)e->at);
	if (w->strict && memchr(utf8, 0, len))
		return -1;      /* strict: every name is the string up to its NUL */
	if (grow((void **)&w->strings, &w->strings_cap, at + len + 1, 1))
		return -1;
	memcpy(w->strings + at, utf8, len);
	w->strings[at + len] = 0;
	w->strings_len = at + len + 1;
	*e = (struct laid_out){hash, at, len};
	if (2 * ++w->laid_out_n >= w->laid_out_cap && more_laid_out(w))
		return -1;
	return emit(w, (uint64_t)at);
}

/* ``items``' entries, each a tuple of ``len`` fields (0: any length). */
static PyObject *const *entry_fields(PyObject *e, Py_ssize_t len)
{
	if (!PyTuple_Check(e) || (len && PyTuple_GET_SIZE(e) != len))
		return NULL;
	return &PyTuple_GET_ITEM(e, 0);
}

static int emit_entry(struct writer *w, PyObject *e, int kind, int bitfields)
{
	static const Py_ssize_t lens[K_LAST + 1] = {
		[K_STRUCT] = 4, [K_UNION] = 4, [K_ENUM] = 2, [K_ENUM64] = 2, [K_FUNC_PROTO] = 2,
	};
	PyObject *const *f = entry_fields(e, lens[kind]);
	int64_t off, bits;
	uint64_t v;

	if (!f)
		return -1;
	if (w->strict && (kind == K_ENUM || kind == K_ENUM64)
	    && !value_reads_back(f[1], kind, bitfields))
		return -1;
	switch (kind) {
	case K_STRUCT:
	case K_UNION:
		if (emit_string(w, f[0]) || emit_exact(w, f[1]))
			return -1;
		if (!bitfields)         /* (strict: no bitfield size the word cannot hold) */
			return w->strict && (exact(f[3], &bits) || bits) ? -1 : emit_exact(w, f[2]);
		if (exact(f[2], &off) || exact(f[3], &bits) || off < 0 || bits < 0 || bits > 0xff
		    || (w->strict && off > 0xffffff))
			return -1;
		return emit(w, (uint64_t)bits << 24 | (uint64_t)off);
	case K_ENUM:
		return emit_string(w, f[0]) || masked(f[1], &v) || emit(w, v & U32) ? -1 : 0;
	case K_ENUM64:
		return emit_string(w, f[0]) || masked(f[1], &v) || emit(w, v & U32)
		       || emit(w, v >> 32) ? -1 : 0;
	case K_FUNC_PROTO:
		return emit_string(w, f[0]) || emit_exact(w, f[1]) ? -1 : 0;
	default:                /* DATASEC: every field a word */
		for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(e); i++)
			if (emit_exact(w, f[i]))
				return -1;
		return 0;
	}
}

/* The words after struct btf_type that are not entries. */
static int emit_fixed(struct writer *w, PyObject *t, int kind)
{
	uint64_t enc, off, bits;
	int64_t idx;

	switch (kind) {
	case K_INT:
		if (w->strict && !(attr_within(w, t, A_ENCODING, 0x0f)
				   && attr_within(w, t, A_BIT_OFFSET, 0xff)
				   && attr_within(w, t, A_BITS, 0xff)))
			return -1;
		if (attr_masked(w, t, A_ENCODING, &enc) || attr_masked(w, t, A_BIT_OFFSET, &off)
		    || attr_masked(w, t, A_BITS, &bits))
			return -1;
		return emit(w, (enc & 0x0f) << 24 | (off & 0xff) << 16 | (bits & 0xff));
	case K_ARRAY:
		return emit_attr(w, t, A_TYPE) || emit_attr(w, t, A_INDEX_TYPE)
		       || emit_attr(w, t, A_NELEMS) ? -1 : 0;
	case K_VAR:
		return emit_attr(w, t, A_LINKAGE);
	case K_DECL_TAG:
		if (attr_exact(w, t, A_COMPONENT_IDX, &idx) || idx < -((int64_t)1 << 31)
		    || idx >= (int64_t)1 << 31)
			return -1;
		return emit(w, (uint64_t)idx & U32);
	default:
		return 0;
	}
}

/* One type: struct btf_type, then its fixed words and its entries. */
static int emit_type(struct writer *w, PyObject *t)
{
	PyObject *items = get_attr(&w->attrs, t, A_ITEMS), *name = NULL;
	int64_t kind, kflag, vlen;
	int err = -1;

	if (!items || !PyTuple_Check(items) || attr_exact(w, t, A_KIND, &kind) || kind < 0
	    || kind > K_LAST || attr_exact(w, t, A_KFLAG, &kflag))
		goto out;
	/* Strict: a kind dedup knows, a kind_flag the bit holds, and no
	 * linkage where the format has none (dedup compares the model's). */
	if (w->strict && (kind == K_UNKN || kflag < 0 || kflag > 1
			  || (BIT(kind) & (MODIFIERS | BIT(K_PTR)) && !attr_within(w, t, A_LINKAGE, 0))))
		goto out;
	if (kind == K_FUNC) {
		if (attr_exact(w, t, A_LINKAGE, &vlen))
			goto out;
	} else {
		vlen = PyTuple_GET_SIZE(items);
	}
	if (vlen > 0xffff || !(name = get_attr(&w->attrs, t, A_NAME)) || emit_string(w, name)
	    || emit(w, ((uint64_t)kflag & 1) << 31 | (uint64_t)kind << 24
		    | ((uint64_t)vlen & 0xffff)))
		goto out;
	if (BIT(kind) & ZERO_WORD ? emit(w, 0)
	    : emit_attr(w, t, BIT(kind) & SIZE_WORD ? A_SIZE : A_TYPE))
		goto out;
	if (emit_fixed(w, t, (int)kind))
		goto out;
	if (entry_words[kind])
		for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++)
			if (emit_entry(w, PyTuple_GET_ITEM(items, i), (int)kind, kflag != 0))
				goto out;
	err = 0;
out:
	Py_XDECREF(name);
	Py_XDECREF(items);
	return err;
}

/* The type section, the string section and each type's offset of the
 * types after void in ``types``; None where the Python writer decides.
 * strict: None also wherever the blob would not read back as ``types``,
 * and no offsets (the C dedup indexes the blob itself). */
static PyObject *write_types(PyObject *types, int big, int strict)
{
	struct writer w = {.strict = strict, .laid_out_cap = 1024};
	PyObject *out = NULL;
	int failed;

	w.laid_out = PyMem_Calloc(w.laid_out_cap, sizeof(*w.laid_out));
	w.starts = strict ? NULL : PyList_New(0);
	failed = !w.laid_out || (!strict && !w.starts)
		 || grow((void **)&w.strings, &w.strings_cap, 1, 1);
	if (!failed)
		w.strings[w.strings_len++] = 0;
	if (PyList_GET_SIZE(types) > 1)
		find_attrs(&w.attrs, PyList_GET_ITEM(types, 1));
	for (Py_ssize_t i = 1; !failed && i < PyList_GET_SIZE(types); i++) {
		if (!strict) {
			PyObject *start = PyLong_FromSsize_t(w.n * 4);
			failed = !start || PyList_Append(w.starts, start);
			Py_XDECREF(start);
		}
		failed = failed || emit_type(&w, PyList_GET_ITEM(types, i));
	}
	if (!failed) {
		if (big != PY_BIG_ENDIAN)
			for (Py_ssize_t i = 0; i < w.n; i++)
				w.words[i] = __builtin_bswap32(w.words[i]);
		const char *words = w.n ? (const char *)w.words : "";
		out = strict ? Py_BuildValue("(y#y#)", words, w.n * 4, w.strings, w.strings_len)
			     : Py_BuildValue("(y#y#O)", words, w.n * 4, w.strings, w.strings_len,
					     w.starts);
	}
	PyErr_Clear();          /* whatever went wrong, Python says what */
	PyMem_Free(w.words);
	PyMem_Free(w.strings);
	PyMem_Free(w.laid_out);
	Py_XDECREF(w.starts);
	return out ? out : Py_NewRef(Py_None);
}

/* ==== the module ==== */

static PyObject *hashes(PyObject *self, PyObject *args)
{
	Py_buffer raw;
	int big;
	struct blob b = {0};
	PyObject *out;

	(void)self;
	if (!PyArg_ParseTuple(args, "y*p", &raw, &big))
		return NULL;
	b.big = big;
	out = index_types(&b, raw.buf, raw.len) == 0 ? hash_blob(&b) : Py_NewRef(Py_None);
	PyMem_Free(b.at);
	PyBuffer_Release(&raw);
	return out;
}

static PyObject *accepts(PyObject *self, PyObject *args)
{
	Py_buffer raw;
	int big, ok = 0;
	unsigned int ptr_size;
	struct blob b = {0};

	(void)self;
	if (!PyArg_ParseTuple(args, "y*pI", &raw, &big, &ptr_size))
		return NULL;
	b.big = big;
	if ((ptr_size == 4 || ptr_size == 8) && index_types(&b, raw.buf, raw.len) == 0)
		ok = accepted(&b, ptr_size);
	PyMem_Free(b.at);
	PyBuffer_Release(&raw);
	return PyBool_FromLong(ok);
}

static PyObject *write_blob(PyObject *self, PyObject *args)
{
	PyObject *types;
	int big, strict = 0;

	(void)self;
	if (!PyArg_ParseTuple(args, "O!p|p", &PyList_Type, &types, &big, &strict))
		return NULL;
	return write_types(types, big, strict);
}

static PyMethodDef methods[] = {
	{"hashes", hashes, METH_VARARGS,
	 "hashes(blob, big_endian) -> (hashes, flags) as hashing.type_hashes gives them "
	 "for the blob's model, or None: hash the model instead."},
	{"accepts", accepts, METH_VARARGS,
	 "accepts(blob, big_endian, ptr_size) -> True if validate.first_problem finds "
	 "nothing in the blob's model; False: ask it."},
	{"write", write_blob, METH_VARARGS,
	 "write(types, big_endian, strict=False) -> (type section, string section, each type's "
	 "offset) as writer.encode_btf lays out the base BTF of types[1:], or None: let it "
	 "decide.  strict: (type section, string section), None too where the blob would not "
	 "read back as types (dedup)."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "objbtf.btf._blob",
	"A .BTF blob written, hashed and checked against the kernel's rules, in C.", -1, methods,
	NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__blob(void)
{
	for (int i = 0; i < A_COUNT; i++)
		if (!attrs[i] && !(attrs[i] = PyUnicode_InternFromString(attr_names[i])))
			return NULL;
	return PyModule_Create(&module);
}
