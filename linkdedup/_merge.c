/*
 * linkdedup._merge: merge.py's passes over the chunks' hashes, in C, for
 * the compiled build.  A vmlinux link reads about a million hashes and
 * keeps tens of thousands of types; these are the steps that touch every
 * hash, or walk the kept types' records, and that Python spent most of
 * the merge on.
 *
 * - first_occurrences: merge.py's _scan_chunks;
 * - unsafe_hashes: _unsafe_hashes, on the records of the first
 *   occurrences, read here (bounds-checked) without parsing them;
 * - layout: _own_positions, the merged table's order, and what each
 *   type id local to a blob becomes, as one map per blob;
 * - merged: the kept types, built from their records as reader.py's
 *   TypeParser builds them, their ids mapped by layout's maps.
 *
 * Together they are merge.py's _merged (tests/test_c_merge.py compares
 * them).  Where the Python would raise or meets what it does not expect
 * (a reference past a blob's last type, a record the parser refuses, a
 * kind past ENUM64, a record outside its section), the C returns None and
 * merge.py runs the Python, which decides and says why.  The passes over
 * the records read the blobs in order, and call release(part) after each,
 * so that the link can drop its pages.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../objbtf/btf/_btf.h"

#define LOCAL_BITS 20           /* merge.py's _LOCAL_BITS */
#define LOCAL_MASK ((1u << LOCAL_BITS) - 1)
#define NONE UINT32_MAX

/* ==== u64 -> u32, open addressing (hashes are spread already) ==== */

struct entry {
	uint64_t key;
	uint32_t value;         /* NONE: empty */
};

struct table {
	struct entry *slots;
	size_t mask, used;
};

static int table_init(struct table *t, size_t expected)
{
	size_t n = 64;

	while (n < expected * 2)
		n *= 2;
	if (!(t->slots = PyMem_Malloc(n * sizeof(*t->slots))))
		return -1;
	for (size_t i = 0; i < n; i++)
		t->slots[i].value = NONE;
	t->mask = n - 1;
	t->used = 0;
	return 0;
}

static inline struct entry *table_slot(const struct table *t, uint64_t key)
{
	size_t i = (size_t)(key ^ (key >> 29)) & t->mask;

	while (t->slots[i].value != NONE && t->slots[i].key != key)
		i = (i + 1) & t->mask;
	return &t->slots[i];
}

static inline uint32_t table_get(const struct table *t, uint64_t key)
{
	return table_slot(t, key)->value;
}

/* ``key`` -> ``value`` unless the table has ``key``: 0, or -1 when out of memory. */
static int table_add(struct table *t, uint64_t key, uint32_t value)
{
	struct entry *e = table_slot(t, key);

	if (e->value != NONE)
		return 0;
	e->key = key;
	e->value = value;
	if (++t->used * 2 <= t->mask + 1)
		return 0;
	struct table bigger;

	if (table_init(&bigger, t->used))
		return -1;
	for (size_t i = 0; i <= t->mask; i++)
		if (t->slots[i].value != NONE)
			*table_slot(&bigger, t->slots[i].key) = t->slots[i];
	bigger.used = t->used;
	PyMem_Free(t->slots);
	*t = bigger;
	return 0;
}

/* ==== the chunks' arrays ==== */

/* One blob's chunk (and, for unsafe_hashes, its sections). */
struct part {
	Py_buffer hashes, flags, offsets, types, strings;
	uint32_t count;
	int swap;               /* the blob's byte order is not the host's */
};

static void release_parts(struct part *parts, Py_ssize_t n)
{
	for (Py_ssize_t i = 0; i < n; i++) {
		Py_buffer *bufs[] = {&parts[i].hashes, &parts[i].flags, &parts[i].offsets,
				     &parts[i].types, &parts[i].strings};

		for (size_t j = 0; j < sizeof(bufs) / sizeof(*bufs); j++)
			if (bufs[j]->obj)
				PyBuffer_Release(bufs[j]);
	}
	PyMem_Free(parts);
}

static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *what)
{
	if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE))
		return -1;
	if (view->len % itemsize) {
		PyErr_Format(PyExc_ValueError, "%s: %zd bytes, not a whole number of items",
			     what, view->len);
		return -1;
	}
	return 0;
}

/* ``seq``'s items, each a tuple (hashes, flags) or, with ``records``,
 * (hashes, flags, offsets, types, strings, big_endian). */
static struct part *read_parts(PyObject *seq, Py_ssize_t *n, int records)
{
	PyObject *fast = PySequence_Fast(seq, "parts: a sequence");
	struct part *parts;

	if (!fast)
		return NULL;
	*n = PySequence_Fast_GET_SIZE(fast);
	if (*n > (Py_ssize_t)(UINT32_MAX >> LOCAL_BITS)) {
		PyErr_SetString(PyExc_ValueError, "parts: too many blobs");
		Py_DECREF(fast);
		return NULL;
	}
	if (!(parts = PyMem_Calloc(*n ? *n : 1, sizeof(*parts)))) {
		Py_DECREF(fast);
		PyErr_NoMemory();
		return NULL;
	}
	for (Py_ssize_t i = 0; i < *n; i++) {
		PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
		struct part *p = &parts[i];
		int big = 0;

		if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != (records ? 6 : 2)) {
			PyErr_SetString(PyExc_TypeError, "parts: tuples of the wrong size");
			goto fail;
		}
		if (get_buffer(PyTuple_GET_ITEM(item, 0), &p->hashes, 8, "hashes")
		    || get_buffer(PyTuple_GET_ITEM(item, 1), &p->flags, 1, "flags"))
			goto fail;
		if (p->hashes.len / 8 > LOCAL_MASK) {
			PyErr_SetString(PyExc_ValueError, "parts: more types in a blob than BTF holds");
			goto fail;
		}
		p->count = (uint32_t)(p->hashes.len / 8);
		if (p->flags.len != p->count) {
			PyErr_SetString(PyExc_ValueError, "parts: hashes and flags differ in length");
			goto fail;
		}
		if (!records)
			continue;
		if (get_buffer(PyTuple_GET_ITEM(item, 2), &p->offsets, 4, "offsets")
		    || get_buffer(PyTuple_GET_ITEM(item, 3), &p->types, 1, "types")
		    || get_buffer(PyTuple_GET_ITEM(item, 4), &p->strings, 1, "strings")
		    || (big = PyObject_IsTrue(PyTuple_GET_ITEM(item, 5))) < 0)
			goto fail;
		if (p->offsets.len / 4 != p->count) {
			PyErr_SetString(PyExc_ValueError, "parts: hashes and offsets differ in length");
			goto fail;
		}
		p->swap = big != PY_BIG_ENDIAN;
	}
	Py_DECREF(fast);
	return parts;
fail:
	Py_DECREF(fast);
	release_parts(parts, *n);
	return NULL;
}

static inline uint64_t hash_at(const struct part *p, uint32_t local)
{
	return ((const uint64_t *)p->hashes.buf)[local - 1];
}

static inline int flagged(const struct part *p, uint32_t local)
{
	return ((const uint8_t *)p->flags.buf)[local - 1] != 0;
}

static inline uint32_t position(Py_ssize_t part, uint32_t local)
{
	return (uint32_t)part << LOCAL_BITS | local;
}

/* Where each part's ids start in the maps of all parts (``at[nparts]``:
 * their length); NULL when out of memory. */
static uint32_t *part_starts(const struct part *parts, Py_ssize_t nparts)
{
	uint32_t *at = PyMem_Malloc((nparts + 1) * sizeof(*at));
	size_t total = 0;

	for (Py_ssize_t i = 0; at && i <= nparts; i++) {
		at[i] = (uint32_t)total;
		total += i < nparts ? parts[i].count + 1 : 0;
	}
	return at;
}

/* Position ``pos`` names a type of ``parts``. */
static inline int in_parts(const struct part *parts, Py_ssize_t nparts, unsigned long pos)
{
	return (pos >> LOCAL_BITS) < (unsigned long)nparts && (pos & LOCAL_MASK) != 0
		&& (pos & LOCAL_MASK) <= parts[pos >> LOCAL_BITS].count;
}

static PyObject *positions_list(const uint32_t *pos, size_t n)
{
	PyObject *out = PyList_New((Py_ssize_t)n);

	for (size_t i = 0; out && i < n; i++) {
		PyObject *v = PyLong_FromUnsignedLong(pos[i]);

		if (!v) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)i, v);
	}
	return out;
}

/* ==== first_occurrences ==== */

static PyObject *first_occurrences(PyObject *self, PyObject *seq)
{
	Py_ssize_t n;
	struct part *parts = read_parts(seq, &n, 0);
	struct table first = {0};
	uint32_t *unmergeable = NULL;
	size_t nun = 0, cap = 0;
	PyObject *dict = NULL, *list = NULL, *out = NULL;

	if (!parts)
		return NULL;
	if (table_init(&first, 1 << 16))
		goto oom;
	for (Py_ssize_t i = 0; i < n; i++) {
		const struct part *p = &parts[i];

		for (uint32_t local = 1; local <= p->count; local++) {
			if (!flagged(p, local)) {
				if (table_add(&first, hash_at(p, local), position(i, local)))
					goto oom;
			} else {
				if (grow((void **)&unmergeable, &cap, nun + 1, sizeof(*unmergeable)))
					goto oom;
				unmergeable[nun++] = position(i, local);
			}
		}
	}
	if (!(dict = PyDict_New()))
		goto done;
	for (size_t s = 0; s <= first.mask; s++) {
		PyObject *k, *v;
		int failed;

		if (first.slots[s].value == NONE)
			continue;
		k = PyLong_FromUnsignedLongLong(first.slots[s].key);
		v = PyLong_FromUnsignedLong(first.slots[s].value);
		failed = !k || !v || PyDict_SetItem(dict, k, v);
		Py_XDECREF(k);
		Py_XDECREF(v);
		if (failed)
			goto done;
	}
	if ((list = positions_list(unmergeable, nun)))
		out = PyTuple_Pack(2, dict, list);
	goto done;
oom:
	PyErr_NoMemory();
done:
	Py_XDECREF(dict);
	Py_XDECREF(list);
	PyMem_Free(first.slots);
	PyMem_Free(unmergeable);
	release_parts(parts, n);
	return out;
}

/* ==== unsafe_hashes ==== */

/* A first occurrence, as _unsafe_hashes reads its type. */
struct occurrence {
	uint64_t hash;
	uint32_t pos;
	uint32_t name;          /* its named_aggregate's id, or NONE */
	uint32_t refs, nrefs;   /* the hashes of what it refers to: where, how many */
	uint8_t definition;     /* is_definition */
	uint8_t unsafe;
};

/* The hashes the first occurrences refer to, read once with their records. */
struct ref_hashes {
	const struct part *part;
	uint64_t *hash;
	size_t n, cap;
};

/* named_aggregate's texts, each once: its family (struct, union or enum)
 * and where the name's copy is in names.texts. */
struct name {
	size_t at;              /* its text in names.texts */
	uint32_t len, next;     /* next: the name before with the same text hash */
	uint8_t family;
};

/* The names are copied, not pointed to: a name met again is compared with
 * the first one's text, which in the blob would bring that blob's pages
 * back after the link released them (on a distribution's vmlinux, a
 * hundred megabytes of them, the link's peak). */
struct names {
	struct table by_hash;   /* FNV-1a of family and text -> the last such name */
	struct name *all;
	size_t n, cap;
	char *texts;
	size_t texts_len, texts_cap;
};

static inline uint32_t word(const struct part *p, const uint8_t *at)
{
	uint32_t w;

	memcpy(&w, at, 4);
	return p->swap ? __builtin_bswap32(w) : w;
}

/* The id of (family, text), added if new; NONE when out of memory. */
static uint32_t name_id(struct names *ns, uint8_t family, const char *text, uint32_t len)
{
	uint64_t h = 0xcbf29ce484222325u ^ family;
	struct entry *e;
	uint32_t id;

	for (uint32_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)text[i]) * 0x100000001b3u;
	e = table_slot(&ns->by_hash, h);
	for (uint32_t k = e->value; k != NONE; k = ns->all[k].next)
		if (ns->all[k].family == family && ns->all[k].len == len
		    && (!len || !memcmp(ns->texts + ns->all[k].at, text, len)))
			return k;
	if (grow((void **)&ns->all, &ns->cap, ns->n + 1, sizeof(*ns->all))
	    || grow((void **)&ns->texts, &ns->texts_cap, ns->texts_len + len, 1))
		return NONE;
	if (len)
		memcpy(ns->texts + ns->texts_len, text, len);
	id = (uint32_t)ns->n++;
	ns->all[id] = (struct name){.at = ns->texts_len, .len = len, .next = e->value,
				    .family = family};
	ns->texts_len += len;
	if (e->value != NONE)
		e->value = id;
	else if (table_add(&ns->by_hash, h, id))
		return NONE;
	return id;
}

static void free_names(struct names *ns)
{
	PyMem_Free(ns->by_hash.slots);
	PyMem_Free(ns->all);
	PyMem_Free(ns->texts);
}

/* Lists by key, made in two rounds: count, then fill. */
struct lists {
	uint32_t *start;        /* nkeys + 1 */
	uint32_t *items;
	uint32_t *fill;
};

enum { GIVE_UP = 1, OUT_OF_MEMORY = -1, PY_ERROR = -2 };

/* ``release(part)``, if given, for a part whose records are read: the
 * link drops its pages (a vmlinux's blobs are 64 MB). */
static int release_part(PyObject *release, Py_ssize_t part)
{
	PyObject *index, *done;

	if (release == Py_None)
		return 0;
	if (!(index = PyLong_FromSsize_t(part)))
		return PY_ERROR;
	done = PyObject_CallOneArg(release, index);
	Py_DECREF(index);
	Py_XDECREF(done);
	return done ? 0 : PY_ERROR;
}

/* The record of the type at ``pos``: its words, checked to lie in the
 * type section: 0, or GIVE_UP. */
static int record_of(const struct part *parts, uint32_t pos, const uint8_t **rec,
		     uint32_t *kind, uint32_t *vlen)
{
	const struct part *p = &parts[pos >> LOCAL_BITS];
	uint32_t local = pos & LOCAL_MASK, off, info;
	size_t words;

	if (local == 0 || local > p->count)
		return GIVE_UP;
	off = ((const uint32_t *)p->offsets.buf)[local - 1];     /* the chunk's: host order */
	if ((size_t)off + 12 > (size_t)p->types.len)
		return GIVE_UP;
	*rec = (const uint8_t *)p->types.buf + off;
	info = word(p, *rec + 4);
	*kind = (info >> 24) & 0x1f;
	*vlen = info & 0xffff;
	if (*kind == K_UNKN || *kind > K_LAST)
		return GIVE_UP;
	words = 3 + (size_t)fixed_words[*kind] + (size_t)entry_words[*kind] * *vlen;
	return (size_t)off + 4 * words > (size_t)p->types.len ? GIVE_UP : 0;
}

/* The text of the string at ``off`` in ``p``'s section and its length;
 * NULL when it lies outside the section or is not terminated. */
static const char *text_at(const struct part *p, uint32_t off, uint32_t *len)
{
	const char *text, *end;

	if (off >= (uint64_t)p->strings.len)
		return NULL;
	text = (const char *)p->strings.buf + off;
	if (!(end = memchr(text, 0, (size_t)p->strings.len - off)))
		return NULL;
	*len = (uint32_t)(end - text);
	return text;
}

/* named_aggregate and is_definition of occurrence ``o``: 0, or GIVE_UP /
 * OUT_OF_MEMORY. */
static int name_occurrence(const struct part *parts, struct occurrence *o, struct names *ns)
{
	const struct part *p = &parts[o->pos >> LOCAL_BITS];
	const uint8_t *rec;
	uint32_t kind, vlen, info, len;
	int family;
	const char *text;

	o->name = NONE;
	if (record_of(parts, o->pos, &rec, &kind, &vlen))
		return GIVE_UP;
	info = word(p, rec + 4);
	switch (kind) {
	case K_STRUCT: family = 0; break;
	case K_UNION: family = 1; break;
	case K_FWD: family = info >> 31; break;
	case K_ENUM: case K_ENUM64: family = 2; break;
	default: return 0;
	}
	if (!(text = text_at(p, word(p, rec), &len)))
		return GIVE_UP;
	if (!len)
		return 0;
	for (uint32_t i = 0; i < len; i++)
		if (text[i] & 0x80)
			return GIVE_UP;     /* decoded with 'replace', two texts may be one name */
	o->name = name_id(ns, (uint8_t)family, text, len);
	if (o->name == NONE)
		return OUT_OF_MEMORY;
	o->definition = kind == K_STRUCT || kind == K_UNION || (kind != K_FWD && vlen > 0);
	return 0;
}

/* Calls ``each(ctx, ref)`` for every type id the type at ``pos`` refers
 * to (BtfType.refs); a non-zero return stops the walk and is returned. */
static int for_each_ref(const struct part *parts, uint32_t pos,
			int (*each)(void *, uint32_t), void *ctx)
{
	const struct part *p = &parts[pos >> LOCAL_BITS];
	const uint8_t *rec;
	uint32_t kind, vlen, n;
	int ret = 0;

	if (record_of(parts, pos, &rec, &kind, &vlen))
		return GIVE_UP;
	n = ref_count(kind, vlen);
	for (uint32_t i = 0; i < n && !ret; i++)
		ret = each(ctx, word(p, rec + 4 * ref_word(kind, i)));
	return ret;
}

/* What the edge rounds share: the index of first occurrences by hash, and
 * the lists filled. */
struct edges {
	const struct occurrence *occ;
	const struct table *index;      /* hash -> occurrence */
	struct lists by_name, by_hash;
};

static inline void add_edge(struct lists *l, uint32_t key, uint32_t user, int filling)
{
	if (filling)
		l->items[l->fill[key]++] = user;
	else
		l->start[key + 1]++;
}

/* One reference of occurrence ``user``, to a type of hash ``h``: the
 * hash's users by name (a named aggregate's) or by hash.  Users by a hash
 * that is no first occurrence's are never walked (_unsafe_hashes walks
 * from first occurrences only): left out. */
static void edge(struct edges *e, uint32_t user, uint64_t h, int filling)
{
	uint32_t target = table_get(e->index, h);

	if (target == NONE)
		return;
	if (e->occ[target].name != NONE)
		add_edge(&e->by_name, e->occ[target].name, user, filling);
	else
		add_edge(&e->by_hash, target, user, filling);
}

/* Records the hash of what an occurrence refers to (a for_each_ref step). */
static int keep_ref(void *ctx, uint32_t ref)
{
	struct ref_hashes *r = ctx;

	if (!ref)
		return 0;
	if (ref > r->part->count)
		return GIVE_UP;
	if (grow((void **)&r->hash, &r->cap, r->n + 1, sizeof(*r->hash)))
		return OUT_OF_MEMORY;
	r->hash[r->n++] = hash_at(r->part, ref);
	return 0;
}

static int lists_alloc(struct lists *l, size_t keys)
{
	l->start = PyMem_Calloc(keys + 1, sizeof(*l->start));
	return l->start ? 0 : -1;
}

/* After the counting round: room for the items. */
static int lists_prepare(struct lists *l, size_t keys)
{
	for (size_t k = 0; k < keys; k++)
		l->start[k + 1] += l->start[k];
	l->items = PyMem_Malloc((l->start[keys] + 1) * sizeof(*l->items));
	l->fill = PyMem_Malloc((keys + 1) * sizeof(*l->fill));
	if (!l->items || !l->fill)
		return -1;
	memcpy(l->fill, l->start, keys * sizeof(*l->fill));
	return 0;
}

static void lists_free(struct lists *l)
{
	PyMem_Free(l->start);
	PyMem_Free(l->items);
	PyMem_Free(l->fill);
}

/* The users lists (_users), from the hashes read with the records. */
static int find_users(const struct occurrence *occ, size_t n, size_t nnames,
		      const struct table *index, const struct ref_hashes *refs, struct edges *e)
{
	*e = (struct edges){.occ = occ, .index = index};
	if (lists_alloc(&e->by_name, nnames) || lists_alloc(&e->by_hash, n))
		return OUT_OF_MEMORY;
	for (int filling = 0; filling < 2; filling++) {
		if (filling && (lists_prepare(&e->by_name, nnames) || lists_prepare(&e->by_hash, n)))
			return OUT_OF_MEMORY;
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t k = occ[i].refs; k < occ[i].refs + occ[i].nrefs; k++)
				edge(e, i, refs->hash[k], filling);
	}
	return 0;
}

/* _unsafe_hashes' walk from the ambiguous names: marks occ[].unsafe. */
static int walk_unsafe(struct occurrence *occ, size_t n, size_t nnames,
		       const struct lists *defs, const struct edges *e)
{
	uint8_t *seen = PyMem_Calloc(nnames + 1, 1);
	uint32_t *queue = PyMem_Malloc((nnames + 1) * sizeof(*queue));
	uint32_t *todo = NULL;
	size_t nqueue = 0, ntodo = 0, cap = 0;
	int ret = OUT_OF_MEMORY;

	if (!seen || !queue)
		goto done;
	for (uint32_t k = 0; k < nnames; k++)
		if (defs->start[k + 1] - defs->start[k] > 1) {
			seen[k] = 1;
			queue[nqueue++] = k;
		}
	while (nqueue) {
		uint32_t name = queue[--nqueue];
		const struct lists *from[] = {defs, &e->by_name};

		for (int l = 0; l < 2; l++) {
			uint32_t a = from[l]->start[name], b = from[l]->start[name + 1];

			if (grow((void **)&todo, &cap, ntodo + (b - a), sizeof(*todo)))
				goto done;
			memcpy(todo + ntodo, from[l]->items + a, (b - a) * sizeof(*todo));
			ntodo += b - a;
		}
		while (ntodo) {
			uint32_t i = todo[--ntodo], a, b, own;

			if (occ[i].unsafe)
				continue;
			occ[i].unsafe = 1;
			a = e->by_hash.start[i];
			b = e->by_hash.start[i + 1];
			if (grow((void **)&todo, &cap, ntodo + (b - a), sizeof(*todo)))
				goto done;
			memcpy(todo + ntodo, e->by_hash.items + a, (b - a) * sizeof(*todo));
			ntodo += b - a;
			own = occ[i].name;
			if (own != NONE && !seen[own] && occ[i].definition) {
				seen[own] = 1;
				queue[nqueue++] = own;
			}
		}
	}
	ret = 0;
done:
	PyMem_Free(seen);
	PyMem_Free(queue);
	PyMem_Free(todo);
	return ret;
}

/* The definitions of each name, as lists. */
static int find_definitions(const struct occurrence *occ, size_t n, size_t nnames,
			    struct lists *defs)
{
	if (lists_alloc(defs, nnames))
		return -1;
	for (int filling = 0; filling < 2; filling++) {
		if (filling && lists_prepare(defs, nnames))
			return -1;
		for (uint32_t i = 0; i < n; i++)
			if (occ[i].definition)
				add_edge(defs, occ[i].name, i, filling);
	}
	return 0;
}

static int by_position(const void *a, const void *b)
{
	uint32_t x = ((const struct occurrence *)a)->pos, y = ((const struct occurrence *)b)->pos;

	return (x > y) - (x < y);
}

/* The occurrences of ``first`` (hash -> position), in position order,
 * named, with the hashes they refer to; and the index of them by hash.
 * Each part's records are read once, and the part released after.  0, or
 * GIVE_UP / OUT_OF_MEMORY / PY_ERROR. */
static int read_first(PyObject *first, const struct part *parts, Py_ssize_t nparts,
		      PyObject *release, struct occurrence **occ, size_t *n,
		      struct table *index, struct names *ns, struct ref_hashes *refs)
{
	Py_ssize_t it = 0;
	PyObject *k, *v;
	int ret;

	*n = 0;
	if (!(*occ = PyMem_Calloc((size_t)PyDict_GET_SIZE(first) + 1, sizeof(**occ)))
	    || table_init(index, (size_t)PyDict_GET_SIZE(first))
	    || table_init(&ns->by_hash, 1024))
		return OUT_OF_MEMORY;
	while (PyDict_Next(first, &it, &k, &v)) {
		struct occurrence *o = &(*occ)[(*n)++];
		unsigned long pos = PyLong_AsUnsignedLong(v);

		o->hash = PyLong_AsUnsignedLongLong(k);
		if (PyErr_Occurred() || !in_parts(parts, nparts, pos))
			return GIVE_UP;
		o->pos = (uint32_t)pos;
	}
	qsort(*occ, *n, sizeof(**occ), by_position);
	for (size_t i = 0; i < *n; i++) {
		struct occurrence *o = &(*occ)[i];
		uint32_t part = o->pos >> LOCAL_BITS;

		refs->part = &parts[part];
		o->refs = (uint32_t)refs->n;
		if ((ret = name_occurrence(parts, o, ns)) || (ret = for_each_ref(parts, o->pos, keep_ref, refs)))
			return ret;
		o->nrefs = (uint32_t)(refs->n - o->refs);
		if (table_add(index, o->hash, (uint32_t)i))
			return OUT_OF_MEMORY;
		if ((i + 1 == *n || (*occ)[i + 1].pos >> LOCAL_BITS != part)
		    && (ret = release_part(release, part)))
			return ret;
	}
	return 0;
}

static PyObject *unsafe_hashes(PyObject *self, PyObject *args)
{
	PyObject *seq, *first, *out = NULL;
	Py_ssize_t nparts = 0;
	struct part *parts;
	struct occurrence *occ = NULL;
	struct table index = {0};
	struct names ns = {0};
	struct lists defs = {0};
	struct edges e = {0};
	struct ref_hashes refs = {0};
	PyObject *release = Py_None;
	size_t n = 0, ambiguous = 0;
	int ret;

	if (!PyArg_ParseTuple(args, "OO!|O:unsafe_hashes", &seq, &PyDict_Type, &first, &release))
		return NULL;
	if (!(parts = read_parts(seq, &nparts, 1)))
		return NULL;
	ret = read_first(first, parts, nparts, release, &occ, &n, &index, &ns, &refs);
	if (!ret)
		ret = find_definitions(occ, n, ns.n, &defs) ? OUT_OF_MEMORY : 0;
	for (size_t k = 0; !ret && k < ns.n; k++)
		ambiguous += defs.start[k + 1] - defs.start[k] > 1;
	if (!ret && ambiguous && !(ret = find_users(occ, n, ns.n, &index, &refs, &e)))
		ret = walk_unsafe(occ, n, ns.n, &defs, &e);
	if (ret == OUT_OF_MEMORY) {
		PyErr_NoMemory();
	} else if (ret == PY_ERROR) {
		/* release() raised */
	} else if (ret == GIVE_UP) {
		PyErr_Clear();
		out = Py_NewRef(Py_None);
	} else if ((out = PySet_New(NULL))) {
		for (size_t i = 0; i < n; i++) {
			PyObject *h;

			if (!occ[i].unsafe)
				continue;
			h = PyLong_FromUnsignedLongLong(occ[i].hash);
			if (!h || PySet_Add(out, h)) {
				Py_XDECREF(h);
				Py_CLEAR(out);
				break;
			}
			Py_DECREF(h);
		}
	}
	lists_free(&defs);
	PyMem_Free(refs.hash);
	lists_free(&e.by_name);
	lists_free(&e.by_hash);
	free_names(&ns);
	PyMem_Free(index.slots);
	PyMem_Free(occ);
	release_parts(parts, nparts);
	return out;
}

/* ==== layout ==== */

/* The hashes of ``set`` (of ints) in a table; -1 with an error set. */
static int read_hash_set(PyObject *set, struct table *t)
{
	PyObject *it, *k;

	if (table_init(t, (size_t)PySet_GET_SIZE(set)))
		return PyErr_NoMemory(), -1;
	if (!(it = PyObject_GetIter(set)))
		return -1;
	while ((k = PyIter_Next(it))) {
		uint64_t h = PyLong_AsUnsignedLongLong(k);

		Py_DECREF(k);
		if (PyErr_Occurred() || table_add(t, h, 1))
			break;
	}
	Py_DECREF(it);
	if (PyErr_Occurred())
		return -1;
	return t->used == (size_t)PySet_GET_SIZE(set) ? 0 : (PyErr_NoMemory(), -1);
}

static PyObject *layout(PyObject *self, PyObject *args)
{
	PyObject *seq, *first, *unsafe, *unmergeable, *fast = NULL;
	PyObject *out = NULL, *order = NULL, *maps = NULL;
	unsigned long start;
	Py_ssize_t nparts = 0, it = 0;
	struct part *parts;
	struct table bad = {0}, by_hash = {0};
	uint32_t *own = NULL, *at = NULL, *kept = NULL, *map;
	size_t total = 0, nkept = 0, cap = 0;
	PyObject *k, *v;

	if (!PyArg_ParseTuple(args, "OO!O!Ok:layout", &seq, &PyDict_Type, &first,
			      &PySet_Type, &unsafe, &unmergeable, &start))
		return NULL;
	if (!start) {
		PyErr_SetString(PyExc_ValueError, "layout: ids start at 1 or later");
		return NULL;
	}
	if (!(parts = read_parts(seq, &nparts, 0)))
		return NULL;
	if (!(at = part_starts(parts, nparts)))
		goto oom;
	total = at[nparts];
	/* own[at[part] + local]: the type's own id once numbered; 1 until then
	 * for a type taken as it is or its hash's first occurrence. */
	if (!(own = PyMem_Calloc(total + 1, sizeof(*own))))
		goto oom;
	if (read_hash_set(unsafe, &bad))
		goto done;
	fast = PySequence_Fast(unmergeable, "unmergeable: a sequence");
	if (!fast)
		goto done;
	for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(fast); j++) {
		unsigned long pos = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(fast, j));

		if (PyErr_Occurred())
			goto done;
		if (!in_parts(parts, nparts, pos))
			goto give_up;
		own[at[pos >> LOCAL_BITS] + (pos & LOCAL_MASK)] = 1;
	}
	for (Py_ssize_t i = 0; bad.used && i < nparts; i++)
		for (uint32_t local = 1; local <= parts[i].count; local++)
			if (table_get(&bad, hash_at(&parts[i], local)) != NONE)
				own[at[i] + local] = 1;
	while (PyDict_Next(first, &it, &k, &v)) {
		uint64_t h = PyLong_AsUnsignedLongLong(k);
		unsigned long pos = PyLong_AsUnsignedLong(v);

		if (PyErr_Occurred())
			goto done;
		if (!in_parts(parts, nparts, pos))
			goto give_up;
		if (table_get(&bad, h) == NONE)
			own[at[pos >> LOCAL_BITS] + (pos & LOCAL_MASK)] = 1;
	}
	/* Number the kept types in position order. */
	for (Py_ssize_t i = 0; i < nparts; i++)
		for (uint32_t local = 1; local <= parts[i].count; local++)
			if (own[at[i] + local]) {
				if (grow((void **)&kept, &cap, nkept + 1, sizeof(*kept)))
					goto oom;
				kept[nkept] = position(i, local);
				own[at[i] + local] = (uint32_t)(start + nkept++);
			}
	if (table_init(&by_hash, nkept))
		goto oom;
	for (size_t j = 0; j < nkept; j++) {
		const struct part *p = &parts[kept[j] >> LOCAL_BITS];
		uint32_t local = kept[j] & LOCAL_MASK;

		if (!flagged(p, local) && table_get(&bad, hash_at(p, local)) == NONE
		    && table_add(&by_hash, hash_at(p, local), own[at[kept[j] >> LOCAL_BITS] + local]))
			goto oom;
	}
	if (!(maps = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(total * 4))))
		goto done;
	map = (uint32_t *)PyBytes_AS_STRING(maps);
	for (Py_ssize_t i = 0; i < nparts; i++) {
		map[at[i]] = 0;
		for (uint32_t local = 1; local <= parts[i].count; local++) {
			uint32_t id = own[at[i] + local];

			if (!id && (id = table_get(&by_hash, hash_at(&parts[i], local))) == NONE)
				goto give_up;
			map[at[i] + local] = id;
		}
	}
	if ((order = positions_list(kept, nkept)))
		out = PyTuple_Pack(2, order, maps);
	goto done;
give_up:
	PyErr_Clear();
	out = Py_NewRef(Py_None);
	goto done;
oom:
	PyErr_NoMemory();
done:
	Py_XDECREF(fast);
	Py_XDECREF(order);
	Py_XDECREF(maps);
	PyMem_Free(bad.slots);
	PyMem_Free(by_hash.slots);
	PyMem_Free(own);
	PyMem_Free(at);
	PyMem_Free(kept);
	release_parts(parts, nparts);
	return out;
}

/* ==== merged ==== */

/* reader.py's TypeParser, for the kernel's kinds (kinds.py's registry). */
#define HAS_VLEN (STRUCTS | ENUMS | BIT(K_FUNC) | BIT(K_FUNC_PROTO) | BIT(K_DATASEC))
#define SIZE_WORD (BIT(K_INT) | STRUCTS | ENUMS | BIT(K_DATASEC) | BIT(K_FLOAT))
#define INT_RESERVED 0xf000ff00u

/* What merged() builds with: types.new_type (a BtfType), the kinds, the
 * entries' classes; and each name once by its text. */
struct builder {
	PyObject *new_type, *kinds, *member, *param, *enumerator, *secinfo;
	struct names texts;             /* family 0 */
	PyObject **text_objects;        /* by the text's id */
	size_t made, objects_cap;
};

/* The str of the name at ``off`` in part ``p``'s strings, decoded as
 * StringReader does (a new reference), or NULL: *give_up when it lies
 * outside the section, else a Python error. */
static PyObject *name_at(struct builder *b, const struct part *p, uint32_t off, int *give_up)
{
	const char *text;
	uint32_t id, len;

	if (!(text = text_at(p, off, &len)))
		return *give_up = 1, NULL;
	if (grow((void **)&b->text_objects, &b->objects_cap, b->made + 1, sizeof(*b->text_objects))
	    || (id = name_id(&b->texts, 0, text, len)) == NONE)
		return PyErr_NoMemory();
	if (id < b->made)
		return Py_NewRef(b->text_objects[id]);
	if (!(b->text_objects[id] = PyUnicode_DecodeUTF8(text, len, "replace")))
		return NULL;
	b->made++;
	return Py_NewRef(b->text_objects[id]);
}

static inline PyObject *u32(uint32_t v)
{
	return PyLong_FromUnsignedLong(v);
}

/* The id local part ``p`` refers to by ``ref``, merged; NULL: *give_up past
 * its last type. */
static inline PyObject *merged_id(uint32_t ref, const struct part *p, const uint32_t *map,
				  int *give_up)
{
	if (ref > p->count)
		return *give_up = 1, NULL;
	return u32(map[ref]);
}

/* The items of a type with entries (members, enumerators, params, secinfos). */
static PyObject *entries_of(struct builder *b, const struct part *p, uint32_t kind,
			    uint32_t kflag, uint32_t vlen, const uint8_t *at, const uint32_t *map,
			    int *give_up)
{
	PyObject *items = PyTuple_New(vlen);

	for (uint32_t j = 0; items && j < vlen; j++) {
		const uint8_t *e = at + 4 * entry_words[kind] * j;
		PyObject *f[4], *one = NULL;
		uint32_t w1 = word(p, e + 4), w2 = entry_words[kind] > 2 ? word(p, e + 8) : 0;

		switch (kind) {
		case K_STRUCT: case K_UNION:
			f[0] = name_at(b, p, word(p, e), give_up);
			f[1] = merged_id(w1, p, map, give_up);
			f[2] = u32(kflag ? w2 & 0xffffff : w2);
			f[3] = u32(kflag ? w2 >> 24 : 0);
			one = new_entry(b->member, 4, f);
			break;
		case K_FUNC_PROTO:
			f[0] = name_at(b, p, word(p, e), give_up);
			f[1] = merged_id(w1, p, map, give_up);
			one = new_entry(b->param, 2, f);
			break;
		case K_ENUM:
			f[0] = name_at(b, p, word(p, e), give_up);
			f[1] = kflag ? PyLong_FromLong((int32_t)w1) : u32(w1);
			one = new_entry(b->enumerator, 2, f);
			break;
		case K_ENUM64: {
			uint64_t v = (uint64_t)w2 << 32 | w1;

			f[0] = name_at(b, p, word(p, e), give_up);
			f[1] = kflag ? PyLong_FromLongLong((int64_t)v) : PyLong_FromUnsignedLongLong(v);
			one = new_entry(b->enumerator, 2, f);
			break;
		}
		case K_DATASEC:
			f[0] = merged_id(word(p, e), p, map, give_up);
			f[1] = u32(w1);
			f[2] = u32(w2);
			one = new_entry(b->secinfo, 3, f);
			break;
		}
		if (!one)
			Py_CLEAR(items);
		else
			PyTuple_SET_ITEM(items, j, one);
	}
	return items;
}

/* The BtfType of the record at ``pos``, as TypeParser.parse makes it, its
 * ids merged by ``map``; NULL: *give_up (what the parser would refuse, or
 * past the blob's last type), else a Python error. */
static PyObject *build(struct builder *b, const struct part *parts, uint32_t pos,
		       const uint32_t *map, int *give_up)
{
	const struct part *p = &parts[pos >> LOCAL_BITS];
	const uint8_t *rec;
	uint32_t kind, vlen, info, st, extra = 0, kflag;
	/* BtfType's fields, in its __init__'s order, after kind and name. */
	PyObject *args[13] = {0}, *t = NULL;
	uint32_t v[10] = {0};   /* size, type, kflag, encoding, bit_offset, bits, index_type,
				   nelems, linkage, (component_idx apart) */
	long component_idx = -1;

	if (record_of(parts, pos, &rec, &kind, &vlen))
		return *give_up = 1, NULL;
	info = word(p, rec + 4);
	st = word(p, rec + 8);
	kflag = info >> 31;
	if (vlen && !(HAS_VLEN & BIT(kind)))
		return *give_up = 1, NULL;
	if (fixed_words[kind])
		extra = word(p, rec + 12);
	v[2] = kflag;
	if (SIZE_WORD & BIT(kind))
		v[0] = st;
	switch (kind) {
	case K_INT:
		if (extra & INT_RESERVED)
			return *give_up = 1, NULL;
		v[3] = (extra >> 24) & 0x0f;
		v[4] = (extra >> 16) & 0xff;
		v[5] = extra & 0xff;
		break;
	case K_ARRAY:
		if (word(p, rec + 12) > p->count || word(p, rec + 16) > p->count)
			return *give_up = 1, NULL;
		v[1] = map[word(p, rec + 12)];
		v[6] = map[word(p, rec + 16)];
		v[7] = word(p, rec + 20);
		break;
	case K_FWD:
		v[1] = st;              /* a leaf: not an id, kept as it is */
		break;
	case K_FUNC:
		v[8] = vlen;
		break;
	case K_VAR:
		v[8] = extra;
		break;
	case K_DECL_TAG:
		component_idx = (int32_t)extra;
		break;
	}
	if ((ONE_REF | BIT(K_FUNC_PROTO)) & BIT(kind)) {
		if (st > p->count)
			return *give_up = 1, NULL;
		v[1] = map[st];
	}
	args[0] = Py_NewRef(PyList_GET_ITEM(b->kinds, kind));
	args[1] = name_at(b, p, word(p, rec), give_up);
	for (int i = 0; i < 9; i++)
		args[2 + i] = u32(v[i]);
	args[11] = PyLong_FromLong(component_idx);
	args[12] = entry_words[kind]
		? entries_of(b, p, kind, kflag, vlen, rec + 12 + 4 * fixed_words[kind], map, give_up)
		: PyTuple_New(0);
	for (int i = 0; i < 13; i++)
		if (!args[i])
			goto done;
	t = PyObject_Vectorcall(b->new_type, args, 13, NULL);
done:
	for (int i = 0; i < 13; i++)
		Py_XDECREF(args[i]);
	return t;
}

static PyObject *merged(PyObject *self, PyObject *args)
{
	PyObject *seq, *order, *maps, *classes, *release = Py_None, *fast = NULL, *out = NULL;
	Py_ssize_t nparts = 0, n, read_part = 0;     /* read_part: the part of the last type built */
	Py_buffer map = {0};
	struct part *parts;
	struct builder b = {0};
	uint32_t *at = NULL;
	int give_up = 0;

	if (!PyArg_ParseTuple(args, "OOOO!|O:merged", &seq, &order, &maps, &PyTuple_Type, &classes,
			      &release))
		return NULL;
	if (!PyArg_ParseTuple(classes, "OO!OOOO:merged's classes", &b.new_type, &PyList_Type,
			      &b.kinds, &b.member, &b.param, &b.enumerator, &b.secinfo))
		return NULL;
	if (PyList_GET_SIZE(b.kinds) <= K_LAST) {
		PyErr_SetString(PyExc_ValueError, "merged: a kind for each number up to ENUM64");
		return NULL;
	}
	if (!(parts = read_parts(seq, &nparts, 1)))
		return NULL;
	if (get_buffer(maps, &map, 4, "maps") || !(fast = PySequence_Fast(order, "order")))
		goto done;
	if (!(at = part_starts(parts, nparts)) || table_init(&b.texts.by_hash, 1 << 14)) {
		PyErr_NoMemory();
		goto done;
	}
	if ((size_t)map.len != 4 * (size_t)at[nparts]) {
		PyErr_SetString(PyExc_ValueError, "maps: not one id per type and blob");
		goto done;
	}
	n = PySequence_Fast_GET_SIZE(fast);
	if (!(out = PyList_New(n)))
		goto done;
	for (Py_ssize_t j = 0; j < n; j++) {
		unsigned long pos = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(fast, j));
		PyObject *t = NULL;

		if (!PyErr_Occurred()) {
			if (in_parts(parts, nparts, pos))
				t = build(&b, parts, (uint32_t)pos,
					  (const uint32_t *)map.buf + at[pos >> LOCAL_BITS], &give_up);
			else
				give_up = 1;
		}
		/* The order ascends: a part is read once the next position is another's. */
		if (t && j && (Py_ssize_t)(pos >> LOCAL_BITS) != read_part && release_part(release, read_part))
			Py_CLEAR(t);
		if (!t) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, j, t);
		read_part = (Py_ssize_t)(pos >> LOCAL_BITS);
	}
	if (out && n && release_part(release, read_part))
		Py_CLEAR(out);
	if (give_up) {
		PyErr_Clear();
		out = Py_NewRef(Py_None);
	}
done:
	Py_XDECREF(fast);
	if (map.obj)
		PyBuffer_Release(&map);
	for (size_t i = 0; i < b.made; i++)
		Py_DECREF(b.text_objects[i]);
	PyMem_Free(b.text_objects);
	free_names(&b.texts);
	PyMem_Free(at);
	release_parts(parts, nparts);
	return out;
}

static PyMethodDef methods[] = {
	{"first_occurrences", first_occurrences, METH_O,
	 "first_occurrences(parts) -> (first, unmergeable): merge.py's _scan_chunks; parts: "
	 "(hashes, flags) of each blob's chunk, in merge order."},
	{"unsafe_hashes", unsafe_hashes, METH_VARARGS,
	 "unsafe_hashes(parts, first, release=None) -> set: merge.py's _unsafe_hashes; parts: "
	 "(hashes, flags, offsets, types, strings, big_endian) of each blob; release(i) once part "
	 "i's records are read; None: let merge.py decide."},
	{"layout", layout, METH_VARARGS,
	 "layout(parts, first, unsafe, unmergeable, start) -> (order, maps): the merged "
	 "table's positions in order, and the u32 ids each blob's local ids 0..count become "
	 "(host order), blob after blob; parts: (hashes, flags); None: let merge.py decide."},
	{"merged", merged, METH_VARARGS,
	 "merged(parts, order, maps, classes, release=None) -> list: the types at the positions "
	 "of order (ascending), as reader.TypeParser makes them, their ids mapped by layout's "
	 "maps; classes: (BtfType, the Kind of each number, Member, Param, Enumerator, "
	 "VarSecinfo); parts as for unsafe_hashes; release(i) once part i is read; None: let "
	 "merge.py decide."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "linkdedup._merge",
	"merge.py's passes over the chunks' hashes, in C.", -1, methods,
	NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__merge(void)
{
	return PyModule_Create(&module);
}
