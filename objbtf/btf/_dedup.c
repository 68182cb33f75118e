/*
 * objbtf.btf._dedup: dedup.py's passes in C, for the compiled build, on
 * base BTF of the kernel's kinds deduplicated as upstream libbpf does
 * (every object's encode, the vmlinux link).
 *
 * Both functions take the type section that _blob.write(types, host
 * order, strict=True) wrote of the model (strict: only a blob that reads
 * back as the model).  map() gives the map dedup.py's passes leave, each
 * id to the id it goes to (itself where canonical), and dedup.py compacts
 * the model by it; blob() also compacts, and gives the sections
 * writer.encode_btf would write of the result, for the encoder, which
 * then needs no model of it.  The same passes in the same order, the same
 * candidate table (the order libbpf's hashmap yields a key's ids,
 * reversed at each growth), the same graph walks; shapes and keys are the
 * model's fields as words, names as string offsets (the writer lays out
 * each string once, so equal offsets are equal names).
 *
 * It explains nothing: where dedup.py would raise (a type of kind 0, a
 * reference cycle without a struct, a graph reaching a VAR) or meet what
 * it does not expect (an id past the last type, references nested deeper
 * than Python recurses), it returns None and dedup.py runs the passes in
 * Python, which decide and say why.  tests/test_c_dedup.py compares the
 * two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_btf.h"

/* dedup.py's kind classes (_Classes, for the kernel's kinds). */
#define PRIMITIVE (BIT(K_INT) | BIT(K_FLOAT) | BIT(K_FWD) | ENUMS)
#define CHAIN (MODIFIERS | BIT(K_PTR) | BIT(K_FUNC))
#define GRAPH (STRUCTS | BIT(K_ARRAY) | BIT(K_FUNC_PROTO))
#define WALKED (STRUCTS | BIT(K_TYPEDEF))       /* struct_types (upstream) */
#define NEVER_DEDUPED (BIT(K_VAR) | BIT(K_DATASEC))

#define UNPROCESSED (-1)
#define IN_PROGRESS (-2)
#define IDENTICAL_DEPTH 16
#define MAX_REF_DEPTH 400       /* below Python's recursion limit: deeper, Python decides */

/* Table keys that are not a reference type's: a shape id, an enum's name. */
#define KEY_SHAPE 32
#define KEY_ENUM 33

/* Gave up: dedup.py decides. */
#define GIVE_UP (-1)

/* ==== words -> value: shapes, the candidate table's keys, names ==== */

struct slot {
	uint32_t hash, off, n, value;   /* n == 0: empty */
};

struct words_map {
	uint32_t *arena;                /* every key's words */
	size_t len, cap;
	struct slot *slots;
	size_t nslots, used;            /* nslots: a power of two */
};

static uint32_t hash_words(const uint32_t *w, uint32_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15u ^ n;

	for (uint32_t i = 0; i < n; i++) {
		h ^= w[i];
		h *= 0xff51afd7ed558ccdu;
		h ^= h >> 32;
	}
	return (uint32_t)h;
}

static struct slot *slot_of(const struct words_map *m, const uint32_t *key, uint32_t n,
			    uint32_t h)
{
	size_t mask = m->nslots - 1;

	for (size_t i = h & mask;; i = (i + 1) & mask) {
		struct slot *s = &m->slots[i];

		if (!s->n || (s->hash == h && s->n == n
			      && !memcmp(m->arena + s->off, key, n * sizeof(*key))))
			return s;
	}
}

/* The slot of ``key``, or NULL when the map has none. */
static struct slot *find(const struct words_map *m, const uint32_t *key, uint32_t n)
{
	struct slot *s;

	if (!m->nslots)
		return NULL;
	s = slot_of(m, key, n, hash_words(key, n));
	return s->n ? s : NULL;
}

static int rehash(struct words_map *m)
{
	size_t n = m->nslots ? m->nslots * 2 : 256;
	struct slot *old = m->slots, *slots = PyMem_Calloc(n, sizeof(*slots));

	if (!slots)
		return -1;
	m->slots = slots;
	for (size_t i = 0; i < m->nslots; i++)
		if (old[i].n) {
			size_t mask = n - 1, j = old[i].hash & mask;

			while (slots[j].n)
				j = (j + 1) & mask;
			slots[j] = old[i];
		}
	m->nslots = n;
	PyMem_Free(old);
	return 0;
}

/* The slot of ``key``, added with ``value`` when new (*added says which);
 * NULL when out of memory. */
static struct slot *find_or_add(struct words_map *m, const uint32_t *key, uint32_t n,
				uint32_t value, int *added)
{
	uint32_t h = hash_words(key, n);
	struct slot *s;

	if ((m->used + 1) * 2 > m->nslots && rehash(m))
		return NULL;
	s = slot_of(m, key, n, h);
	*added = !s->n;
	if (s->n)
		return s;
	if (grow((void **)&m->arena, &m->cap, m->len + n, sizeof(*m->arena)))
		return NULL;
	memcpy(m->arena + m->len, key, n * sizeof(*key));
	*s = (struct slot){.hash = h, .off = (uint32_t)m->len, .n = n, .value = value};
	m->len += n;
	m->used++;
	return s;
}

static void free_map(struct words_map *m)
{
	PyMem_Free(m->arena);
	PyMem_Free(m->slots);
}

/* ==== the state of the passes (dedup.py's _Dedup) ==== */

/* A table key's canonical ids, in the order libbpf's hashmap yields them
 * when ``stamp`` == the table's growth count (_Candidates, _Several). */
struct cands {
	uint32_t n, stamp, first;
	uint32_t *ids;                  /* n >= 2 */
	size_t cap;
};

struct dedup {
	const uint32_t *w;              /* the type section, host order */
	uint32_t n;                     /* type ids 0 (void) to n - 1 */
	uint32_t *at;                   /* each type's first word; void: none */
	uint8_t *kind;
	int32_t *map;
	uint32_t *sid;                  /* shape id */
	struct words_map shapes, table;
	struct cands *cands;            /* per table key, by its slot's value */
	size_t ncands, cands_cap;
	uint64_t size, cap;             /* the hashmap libbpf's table would be */
	uint32_t grows;
	int32_t *hypot;                 /* canonical id -> candidate id, or -1 */
	uint32_t *hypot_order;          /* canonical ids in the order met */
	size_t nhypot;
	uint32_t *stack;                /* the graph walk's pairs */
	size_t stack_len, stack_cap;
	uint32_t *scratch;              /* a shape or a key being made */
	size_t scratch_cap;
};

/* Type ``id``'s words. */
static inline uint32_t name_of(const struct dedup *d, uint32_t id)
{
	return id ? d->w[d->at[id]] : 0;
}

static inline uint32_t info_of(const struct dedup *d, uint32_t id)
{
	return id ? d->w[d->at[id] + 1] : 0;
}

static inline uint32_t vlen_of(const struct dedup *d, uint32_t id)
{
	return info_of(d, id) & 0xffff;
}

static inline uint32_t kflag_of(const struct dedup *d, uint32_t id)
{
	return info_of(d, id) >> 31;
}

/* The size-or-type word. */
static inline uint32_t third(const struct dedup *d, uint32_t id)
{
	return d->w[d->at[id] + 2];
}

/* The words after struct btf_type. */
static inline const uint32_t *after(const struct dedup *d, uint32_t id)
{
	return d->w + d->at[id] + 3;
}

static inline int is(const struct dedup *d, uint32_t id, uint32_t set)
{
	return (BIT(d->kind[id]) & set) != 0;
}

/* Room for ``n`` words in the scratch buffer. */
static uint32_t *scratch(struct dedup *d, size_t n)
{
	return grow((void **)&d->scratch, &d->scratch_cap, n, sizeof(*d->scratch)) ? NULL
		: d->scratch;
}

/* Finds each type's words: 0, or GIVE_UP on a layout past the section
 * or a kind dedup.py would refuse. */
static int index_section(struct dedup *d, const uint32_t *w, size_t nwords)
{
	size_t cap = 0, count = 1;

	d->w = w;
	if (grow((void **)&d->at, &cap, 1024, sizeof(*d->at)))
		return GIVE_UP;
	d->at[0] = 0;
	for (size_t pos = 0; pos < nwords;) {
		uint32_t info, k, vlen;
		size_t len;

		if (nwords - pos < 3)
			return GIVE_UP;
		info = w[pos + 1];
		k = (info >> 24) & 0x1f;
		vlen = info & 0xffff;
		if (k == K_UNKN || k > K_LAST)
			return GIVE_UP;
		len = 3 + fixed_words[k] + (size_t)entry_words[k] * vlen;
		if (len > nwords - pos || count >= INT32_MAX
		    || grow((void **)&d->at, &cap, count + 1, sizeof(*d->at)))
			return GIVE_UP;
		d->at[count++] = (uint32_t)pos;
		pos += len;
	}
	d->n = (uint32_t)count;
	d->kind = PyMem_Malloc(d->n);
	if (!d->kind)
		return GIVE_UP;
	d->kind[0] = K_UNKN;
	for (uint32_t i = 1; i < d->n; i++)
		d->kind[i] = (w[d->at[i] + 1] >> 24) & 0x1f;
	return 0;
}

/* Whether every id a type refers to is a type. */
static int refs_ok(const struct dedup *d)
{
	for (uint32_t i = 1; i < d->n; i++) {
		int k = d->kind[i];
		const uint32_t *t = d->w + d->at[i];

		for (uint32_t j = 0, n = ref_count(k, vlen_of(d, i)); j < n; j++)
			if (t[ref_word(k, j)] >= d->n)
				return 0;
	}
	return 1;
}

/* ==== shapes (dedup.py's _Classes.shape, interned as sid) ==== */

/* The words of type ``id``'s shape: all a graph walk compares of it but
 * the ids it refers to.  Their number, or GIVE_UP. */
static long shape_words(struct dedup *d, uint32_t id, uint32_t **out)
{
	int k = d->kind[id];
	uint32_t vlen = vlen_of(d, id), n = 0;
	const uint32_t *e;
	uint32_t *s = scratch(d, 5 + 3 * (size_t)vlen);

	if (!(*out = s))
		return GIVE_UP;
	s[n++] = k;
	s[n++] = name_of(d, id);
	if (!(BIT(k) & (PRIMITIVE | GRAPH | CHAIN)))
		return n;               /* the others, void too: kind and name */
	e = after(d, id);
	s[n++] = kflag_of(d, id);
	if (BIT(k) & STRUCTS) {
		s[n++] = third(d, id);
		s[n++] = vlen;
		for (uint32_t j = 0; j < vlen; j++) {
			s[n++] = e[3 * j];          /* name */
			s[n++] = e[3 * j + 2];      /* bit offset and bitfield size */
		}
	} else if (BIT(k) & CHAIN) {
		s[n++] = k == K_FUNC ? vlen : 0;        /* linkage */
	} else if (k == K_ARRAY) {
		s[n++] = e[2];
	} else if (k == K_FUNC_PROTO) {
		s[n++] = vlen;
		for (uint32_t j = 0; j < vlen; j++)
			s[n++] = e[2 * j];
	} else if (k == K_INT) {
		s[n++] = third(d, id);
		s[n++] = e[0];
	} else if (k == K_FLOAT || k == K_FWD) {
		s[n++] = third(d, id);              /* FLOAT's size, FWD's type */
	} else {                                    /* ENUM, ENUM64 */
		uint32_t words = entry_words[k] * vlen;

		s[n++] = third(d, id);
		s[n++] = vlen;
		memcpy(s + n, e, words * sizeof(*s));
		n += words;
	}
	return n;
}

static int shape_ids(struct dedup *d)
{
	d->sid = PyMem_Malloc(d->n * sizeof(*d->sid));
	if (!d->sid)
		return GIVE_UP;
	for (uint32_t i = 0; i < d->n; i++) {
		uint32_t *s;
		long n = shape_words(d, i, &s);
		int added;
		struct slot *slot;

		if (n < 0 || !(slot = find_or_add(&d->shapes, s, (uint32_t)n,
						  (uint32_t)d->shapes.used, &added)))
			return GIVE_UP;
		d->sid[i] = slot->value;
	}
	return 0;
}

/* ==== the candidate table (dedup.py's _Candidates) ==== */

static void count_add(struct dedup *d)
{
	d->size++;
	if (d->size * 4 / 3 > d->cap) {
		d->cap = d->cap * 2 > 4 ? d->cap * 2 : 4;
		d->grows++;
	}
}

/* ``c``'s ids in the order the hashmap yields them now. */
static const uint32_t *ordered(struct dedup *d, struct cands *c)
{
	if (c->n < 2)
		return &c->first;
	if ((d->grows - c->stamp) & 1)
		for (uint32_t i = 0, j = c->n - 1; i < j; i++, j--) {
			uint32_t x = c->ids[i];

			c->ids[i] = c->ids[j];
			c->ids[j] = x;
		}
	c->stamp = d->grows;
	return c->ids;
}

/* The candidates of ``key``, or NULL when it has none. */
static struct cands *candidates(struct dedup *d, const uint32_t *key, uint32_t n)
{
	struct slot *s = find(&d->table, key, n);

	return s ? &d->cands[s->value] : NULL;
}

/* The candidates of ``key``, made empty when new; NULL when out of memory. */
static struct cands *candidates_made(struct dedup *d, const uint32_t *key, uint32_t n)
{
	int added;
	struct slot *s;

	if (grow((void **)&d->cands, &d->cands_cap, d->ncands + 1, sizeof(*d->cands))
	    || !(s = find_or_add(&d->table, key, n, (uint32_t)d->ncands, &added)))
		return NULL;
	if (added)
		d->cands[d->ncands++] = (struct cands){0};
	return &d->cands[s->value];
}

/* _Candidates.add: ``id`` becomes the first candidate of ``key``. */
static int table_add(struct dedup *d, const uint32_t *key, uint32_t n, uint32_t id)
{
	struct cands *c = candidates_made(d, key, n);

	if (!c)
		return GIVE_UP;
	count_add(d);
	if (c->n == 0) {
		c->first = id;
		c->n = 1;
		return 0;
	}
	if (grow((void **)&c->ids, &c->cap, c->n + 1, sizeof(*c->ids)))
		return GIVE_UP;
	if (c->n == 1) {
		c->ids[0] = id;
		c->ids[1] = c->first;
		c->n = 2;
		c->stamp = d->grows;
		return 0;
	}
	ordered(d, c);
	memmove(c->ids + 1, c->ids, c->n * sizeof(*c->ids));
	c->ids[0] = id;
	c->n++;
	return 0;
}

/* _Candidates.first_or_add: the first candidate of ``key``, or ``id``,
 * added, when it has none. */
static long first_or_add(struct dedup *d, const uint32_t *key, uint32_t n, uint32_t id)
{
	struct cands *c = candidates(d, key, n);

	if (c && c->n)
		return ordered(d, c)[0];
	return table_add(d, key, n, id) ? GIVE_UP : (long)id;
}

/* _set_canonical. */
static int set_canonical(struct dedup *d, const uint32_t *key, uint32_t n, uint32_t id,
			 uint32_t new_id)
{
	d->map[id] = (int32_t)new_id;
	return new_id == id ? table_add(d, key, n, id) : 0;
}

/* ==== the passes ==== */

static uint32_t resolve(const struct dedup *d, uint32_t i)
{
	int32_t j = d->map[i];

	while (j >= 0 && (uint32_t)j != i) {
		i = (uint32_t)j;
		j = d->map[i];
	}
	return i;
}

static int prim_enum(struct dedup *d, uint32_t i)
{
	uint32_t key[2] = {KEY_ENUM, name_of(d, i)}, new_id = i, s = d->sid[i];
	int has_items = vlen_of(d, i) != 0;
	struct cands *c = candidates(d, key, 2);

	if (c && c->n) {
		const uint32_t *ids = ordered(d, c);

		for (uint32_t j = 0; j < c->n; j++) {
			if (d->sid[ids[j]] == s || !has_items) {
				new_id = ids[j];
				break;
			}
			if (!vlen_of(d, ids[j]))
				d->map[ids[j]] = (int32_t)i;    /* a forward goes to i */
		}
	}
	return set_canonical(d, key, 2, i, new_id);
}

static int prim_types(struct dedup *d)
{
	for (uint32_t i = 1; i < d->n; i++) {
		if (is(d, i, ENUMS)) {
			if (prim_enum(d, i))
				return GIVE_UP;
		} else if (is(d, i, PRIMITIVE)) {
			uint32_t key[2] = {KEY_SHAPE, d->sid[i]};
			long c = first_or_add(d, key, 2, i);

			if (c < 0)
				return GIVE_UP;
			d->map[i] = (int32_t)c;
		}
	}
	return 0;
}

/* dedup.py's kids(): the ids a graph walk compares, into ``out`` (room
 * for 2 + vlen); their number, or GIVE_UP where dedup.py raises. */
static long kids(const struct dedup *d, uint32_t id, const uint32_t **out, uint32_t *buf)
{
	int k = d->kind[id];
	const uint32_t *e = after(d, id);
	uint32_t vlen = vlen_of(d, id);

	*out = buf;
	if (BIT(k) & CHAIN) {
		buf[0] = third(d, id);
		return 1;
	}
	if (k == K_ARRAY) {
		buf[0] = e[1];          /* index type, then element type */
		buf[1] = e[0];
		return 2;
	}
	if (BIT(k) & STRUCTS) {
		for (uint32_t j = 0; j < vlen; j++)
			buf[j] = e[3 * j + 1];
		return vlen;
	}
	if (k == K_FUNC_PROTO) {
		buf[0] = third(d, id);
		for (uint32_t j = 0; j < vlen; j++)
			buf[j + 1] = e[2 * j + 1];
		return vlen + 1;
	}
	if (BIT(k) & PRIMITIVE)
		return 0;
	return GIVE_UP;
}

/* Buffers for kids(), on the stack for most types. */
#define KIDS_ON_STACK 64

static uint32_t *kids_buffer(uint32_t vlen, uint32_t *on_stack)
{
	return vlen + 2 <= KIDS_ON_STACK ? on_stack : PyMem_Malloc((vlen + 2) * sizeof(uint32_t));
}

static void kids_free(uint32_t *buf, uint32_t *on_stack)
{
	if (buf != on_stack)
		PyMem_Free(buf);
}

/* _identical_types: 1, 0, or GIVE_UP. */
static int identical(struct dedup *d, uint32_t id1, uint32_t id2, int depth)
{
	uint32_t steps = 0, s1[KIDS_ON_STACK], s2[KIDS_ON_STACK], *b1, *b2;
	const uint32_t *k1, *k2;
	long n1, n2;
	int k, r = 1;

	while (is(d, id1, CHAIN) && d->sid[id1] == d->sid[id2]) {
		id1 = third(d, id1);
		id2 = third(d, id2);
		if (++steps > d->n)
			return 0;               /* a loop (dedup.py: not the same) */
	}
	k = d->kind[id1];
	if (depth <= 0 || k != d->kind[id2])
		return 0;
	if (k == K_UNKN)
		return 1;
	if (BIT(k) & ENUMS)
		return d->sid[id1] == d->sid[id2]
		       || (name_of(d, id1) == name_of(d, id2) && !(vlen_of(d, id1) && vlen_of(d, id2)));
	if (!(BIT(k) & (PRIMITIVE | GRAPH)) || d->sid[id1] != d->sid[id2])
		return 0;
	b1 = kids_buffer(vlen_of(d, id1), s1);
	b2 = kids_buffer(vlen_of(d, id2), s2);
	if (!b1 || !b2) {
		r = GIVE_UP;
		goto out;
	}
	n1 = kids(d, id1, &k1, b1);
	n2 = kids(d, id2, &k2, b2);
	for (long j = 0; j < n1 && j < n2 && r == 1; j++)
		if (k1[j] != k2[j])
			r = identical(d, k1[j], k2[j], depth - 1);
out:
	if (b1)
		kids_free(b1, s1);
	if (b2)
		kids_free(b2, s2);
	return r;
}

static int fwd_kind(const struct dedup *d, uint32_t id)
{
	return kflag_of(d, id) ? K_UNION : K_STRUCT;
}

/* _compatible: a FWD and a struct or union of its name and kind, or an
 * enum and an enum forward of its name. */
static int compatible(const struct dedup *d, uint32_t cand, uint32_t canon)
{
	int ka = d->kind[cand], kb = d->kind[canon];

	if (name_of(d, cand) != name_of(d, canon))
		return 0;
	if (ka == K_FWD && kb != K_FWD)
		return fwd_kind(d, cand) == kb;
	if (kb == K_FWD && ka != K_FWD)
		return fwd_kind(d, canon) == ka;        /* (canon is never a base type) */
	return ka == kb && BIT(ka) & ENUMS && !(vlen_of(d, cand) && vlen_of(d, canon));
}

static int push_pair(struct dedup *d, uint32_t cand, uint32_t canon)
{
	if (grow((void **)&d->stack, &d->stack_cap, d->stack_len + 2, sizeof(*d->stack)))
		return GIVE_UP;
	d->stack[d->stack_len++] = cand;
	d->stack[d->stack_len++] = canon;
	return 0;
}

static void clear_hypot(struct dedup *d)
{
	for (size_t j = 0; j < d->nhypot; j++)
		d->hypot[d->hypot_order[j]] = -1;
	d->nhypot = 0;
}

/* is_equiv: whether the graphs from the two are one type, recording in
 * hypot the candidate each canonical type met.  1, 0, or GIVE_UP. */
static int is_equiv(struct dedup *d, uint32_t cand_id, uint32_t canon_id)
{
	uint32_t sa[KIDS_ON_STACK], sb[KIDS_ON_STACK];

	d->stack_len = 0;
	if (push_pair(d, cand_id, canon_id))
		return GIVE_UP;
	while (d->stack_len) {
		uint32_t canon = d->stack[--d->stack_len], cand = d->stack[--d->stack_len];
		uint32_t a = resolve(d, cand), b = resolve(d, canon), *ba, *bb;
		const uint32_t *ka, *kb;
		long na, nb;
		int32_t seen;

		if (a == b)
			continue;
		if (b != canon && d->kind[canon] == K_FWD && d->kind[b] != K_FWD)
			canon = b;
		seen = d->hypot[canon];
		if (seen >= 0) {
			int same = (uint32_t)seen == cand ? 1
				   : identical(d, (uint32_t)seen, cand, IDENTICAL_DEPTH);

			if (same < 0)
				return GIVE_UP;
			if (same)
				continue;
			return 0;
		}
		d->hypot[canon] = (int32_t)cand;
		d->hypot_order[d->nhypot++] = canon;
		if (d->sid[cand] != d->sid[canon]) {
			if (compatible(d, cand, canon))
				continue;
			return 0;
		}
		if (!(ba = kids_buffer(vlen_of(d, cand), sa)))
			return GIVE_UP;
		na = kids(d, cand, &ka, ba);
		if (na > 0) {
			if (!(bb = kids_buffer(vlen_of(d, canon), sb))) {
				kids_free(ba, sa);
				return GIVE_UP;
			}
			nb = kids(d, canon, &kb, bb);
			for (long j = (na < nb ? na : nb) - 1; j >= 0; j--)
				if (push_pair(d, ka[j], kb[j])) {
					na = GIVE_UP;
					break;
				}
			kids_free(bb, sb);
		}
		kids_free(ba, sa);
		if (na < 0)
			return GIVE_UP;
	}
	return 1;
}

/* _merge_hypot (base BTF: no canonical type is a base's). */
static void merge_hypot(struct dedup *d)
{
	int32_t *m = d->map;

	for (size_t j = 0; j < d->nhypot; j++) {
		uint32_t c_id = resolve(d, d->hypot_order[j]);
		uint32_t t_id = resolve(d, (uint32_t)d->hypot[d->hypot_order[j]]);
		int tk = d->kind[t_id], ck = d->kind[c_id];

		if (ck == K_FWD) {
			if (tk != K_FWD)
				m[c_id] = (int32_t)t_id;
		} else if (tk == K_FWD) {
			m[t_id] = (int32_t)c_id;
		} else if (BIT(tk) & STRUCTS && m[c_id] >= 0 && m[t_id] < 0) {
			m[t_id] = (int32_t)c_id;
		}
	}
}

static int struct_type(struct dedup *d, uint32_t i, const uint32_t *key, struct cands *c)
{
	uint32_t new_id = i;
	const uint32_t *ids = ordered(d, c);

	for (uint32_t j = 0; j < c->n; j++) {
		int r;

		clear_hypot(d);
		r = is_equiv(d, i, ids[j]);
		if (r < 0)
			return GIVE_UP;
		if (r) {
			merge_hypot(d);
			new_id = ids[j];
			break;
		}
	}
	return set_canonical(d, key, 2, i, new_id);
}

static int struct_types(struct dedup *d)
{
	for (uint32_t i = 1; i < d->n; i++) {
		uint32_t key[2] = {KEY_SHAPE, d->sid[i]};
		struct cands *c;

		if (!is(d, i, WALKED) || d->map[i] >= 0)
			continue;
		c = candidates(d, key, 2);
		if (c && c->n ? struct_type(d, i, key, c) : set_canonical(d, key, 2, i, i))
			return GIVE_UP;
	}
	return 0;
}

/* resolve_fwds: each FWD still canonical to the one struct or union of
 * its name. */
static int resolve_fwds(struct dedup *d)
{
	struct words_map own = {0};
	int err = 0;

	for (uint32_t i = 1; i < d->n && !err; i++) {
		uint32_t name = name_of(d, i);
		int added;
		struct slot *s;

		if (!is(d, i, STRUCTS) || d->map[i] != (int32_t)i)
			continue;
		if (!(s = find_or_add(&own, &name, 1, i, &added)))
			err = GIVE_UP;
		else if (!added)
			s->value = 0;           /* more than one */
	}
	for (uint32_t i = 1; i < d->n && !err; i++) {
		uint32_t name = name_of(d, i);
		struct slot *s;

		if (d->kind[i] != K_FWD || d->map[i] != (int32_t)i)
			continue;
		s = find(&own, &name, 1);
		if (s && s->value && d->kind[s->value] == fwd_kind(d, i))
			d->map[i] = (int32_t)s->value;
	}
	free_map(&own);
	return err;
}

/* _ref_type: the canonical id of reference type ``i``, deduplicating the
 * types it leads to first (depth first); or GIVE_UP. */
static long ref_type(struct dedup *d, uint32_t i, int depth);

/* A reference type's key, on the stack for most (a prototype of up to 13
 * parameters): each level of ref_type's recursion has its own. */
#define KEY_ON_STACK 32

static long canonical_target(struct dedup *d, uint32_t x, int depth)
{
	return d->map[x] == (int32_t)x ? x : ref_type(d, x, depth + 1);
}

static long ref_type(struct dedup *d, uint32_t i, int depth)
{
	int32_t j = d->map[i];
	uint32_t on_stack[KEY_ON_STACK], *key = on_stack, n = 0, vlen;
	const uint32_t *e;
	int k = d->kind[i];
	long x, found;

	if (j == (int32_t)i)
		return i;
	if (j >= 0)
		return resolve(d, i);
	if (j == IN_PROGRESS || depth > MAX_REF_DEPTH)
		return GIVE_UP;
	d->map[i] = IN_PROGRESS;
	if (!(BIT(k) & (CHAIN | BIT(K_ARRAY) | BIT(K_FUNC_PROTO) | BIT(K_DECL_TAG))))
		return GIVE_UP;
	vlen = vlen_of(d, i);
	e = after(d, i);
	if (6 + 2 * (size_t)vlen > KEY_ON_STACK
	    && !(key = PyMem_Malloc((6 + 2 * (size_t)vlen) * sizeof(*key))))
		return GIVE_UP;
	key[n++] = k;
	key[n++] = name_of(d, i);
	key[n++] = kflag_of(d, i);
	if (BIT(k) & CHAIN) {
		key[n++] = k == K_FUNC ? vlen : 0;
		x = canonical_target(d, third(d, i), depth);
		key[n++] = (uint32_t)x;
	} else if (k == K_FUNC_PROTO) {
		x = canonical_target(d, third(d, i), depth);
		key[n++] = (uint32_t)x;
		key[n++] = vlen;
		for (uint32_t p = 0; p < vlen && x >= 0; p++) {
			key[n++] = e[2 * p];
			x = canonical_target(d, e[2 * p + 1], depth);
			key[n++] = (uint32_t)x;
		}
	} else if (k == K_ARRAY) {
		key[n++] = e[2];
		x = canonical_target(d, e[0], depth);
		key[n++] = (uint32_t)x;
		if (x >= 0) {
			x = canonical_target(d, e[1], depth);
			key[n++] = (uint32_t)x;
		}
	} else {                        /* DECL_TAG */
		key[n++] = e[0];
		x = canonical_target(d, third(d, i), depth);
		key[n++] = (uint32_t)x;
	}
	found = x < 0 ? GIVE_UP : first_or_add(d, key, n, i);
	if (key != on_stack)
		PyMem_Free(key);
	if (found >= 0)
		d->map[i] = (int32_t)found;
	return found;
}

static int ref_types(struct dedup *d)
{
	for (uint32_t i = 1; i < d->n; i++)
		if (d->map[i] < 0 && ref_type(d, i, 0) < 0)
			return GIVE_UP;
	return 0;
}

/* ==== the module ==== */

static int init(struct dedup *d)
{
	d->map = PyMem_Malloc(d->n * sizeof(*d->map));
	d->hypot = PyMem_Malloc(d->n * sizeof(*d->hypot));
	d->hypot_order = PyMem_Malloc(d->n * sizeof(*d->hypot_order));
	if (!d->map || !d->hypot || !d->hypot_order)
		return GIVE_UP;
	d->map[0] = 0;
	for (uint32_t i = 1; i < d->n; i++)
		d->map[i] = is(d, i, NEVER_DEDUPED) ? (int32_t)i : UNPROCESSED;
	memset(d->hypot, 0xff, d->n * sizeof(*d->hypot));
	return 0;
}

static void release(struct dedup *d)
{
	for (size_t i = 0; i < d->ncands; i++)
		PyMem_Free(d->cands[i].ids);
	PyMem_Free(d->cands);
	free_map(&d->shapes);
	free_map(&d->table);
	PyMem_Free(d->at);
	PyMem_Free(d->kind);
	PyMem_Free(d->map);
	PyMem_Free(d->sid);
	PyMem_Free(d->hypot);
	PyMem_Free(d->hypot_order);
	PyMem_Free(d->stack);
	PyMem_Free(d->scratch);
}

/* The passes over type section ``section``: 0, or GIVE_UP. */
static int run_passes(struct dedup *d, const Py_buffer *section)
{
	if (section->len % 4 || index_section(d, section->buf, section->len / 4) || !refs_ok(d)
	    || init(d) || shape_ids(d) || prim_types(d) || struct_types(d) || resolve_fwds(d)
	    || ref_types(d))
		return GIVE_UP;
	return 0;
}

static PyObject *dedup_map(PyObject *self, PyObject *arg)
{
	Py_buffer section;
	struct dedup d = {0};
	PyObject *out = NULL;

	(void)self;
	if (PyObject_GetBuffer(arg, &section, PyBUF_SIMPLE))
		return NULL;
	if (run_passes(&d, &section) == 0)
		out = PyList_New(d.n);
	for (uint32_t i = 0; out && i < d.n; i++) {
		PyObject *v = PyLong_FromLong(d.map[i]);

		if (!v)
			Py_CLEAR(out);
		else
			PyList_SET_ITEM(out, i, v);
	}
	release(&d);
	PyBuffer_Release(&section);
	if (!out && PyErr_Occurred())
		return NULL;
	return out ? out : Py_NewRef(Py_None);
}

/* ==== the deduplicated blob: dedup.py's _compact, then the writer ==== */

struct compacted {
	uint32_t *words;
	size_t n, cap;
	char *strings;
	size_t strings_len, strings_cap;
	uint32_t *name_at;              /* input string offset -> output's, or UINT32_MAX */
	const char *in_strings;
	size_t in_len;
};

/* Each type's id in the output (the canonical types in id order), or
 * NULL when one resolves to a type with no canonical copy (dedup.py
 * raises). */
static int32_t *final_ids(const struct dedup *d)
{
	int32_t *new_id = PyMem_Malloc(d->n * sizeof(*new_id));
	int32_t *final = PyMem_Malloc(d->n * sizeof(*final));
	int32_t next = 1;

	if (!new_id || !final)
		goto fail;
	new_id[0] = 0;
	for (uint32_t i = 1; i < d->n; i++)
		new_id[i] = d->map[i] == (int32_t)i ? next++ : -1;
	for (uint32_t i = 0; i < d->n; i++)
		if ((final[i] = new_id[resolve(d, i)]) < 0)
			goto fail;
	PyMem_Free(new_id);
	return final;
fail:
	PyMem_Free(new_id);
	PyMem_Free(final);
	return NULL;
}

/* Name offset ``*word`` rewritten to the output's string section, where
 * each string is laid out on first use, as the writer does. */
static int rename_word(struct compacted *c, uint32_t *word)
{
	uint32_t old = *word;

	if (old >= c->in_len)
		return GIVE_UP;
	if (c->name_at[old] == UINT32_MAX) {
		const char *s = c->in_strings + old;
		size_t len = strnlen(s, c->in_len - old);

		if (len == c->in_len - old
		    || grow((void **)&c->strings, &c->strings_cap, c->strings_len + len + 1, 1))
			return GIVE_UP;
		memcpy(c->strings + c->strings_len, s, len + 1);
		c->name_at[old] = (uint32_t)c->strings_len;
		c->strings_len += len + 1;
	}
	*word = c->name_at[old];
	return 0;
}

/* Canonical type ``id``'s words, its ids and names rewritten. */
static int put_type(struct compacted *c, const struct dedup *d, uint32_t id,
		    const int32_t *final)
{
	int k = d->kind[id];
	uint32_t vlen = vlen_of(d, id), *t;
	size_t len = 3 + fixed_words[k] + (size_t)entry_words[k] * (entry_words[k] ? vlen : 0);

	if (grow((void **)&c->words, &c->cap, c->n + len, sizeof(*c->words)))
		return GIVE_UP;
	t = c->words + c->n;
	memcpy(t, d->w + d->at[id], len * sizeof(*t));
	c->n += len;
	for (uint32_t i = 0, n = name_count(k, vlen); i < n; i++)
		if (rename_word(c, &t[name_word(k, i)]))
			return GIVE_UP;
	for (uint32_t i = 0, n = ref_count(k, vlen); i < n; i++) {
		uint32_t *ref = &t[ref_word(k, i)];

		*ref = (uint32_t)final[*ref];
	}
	return 0;
}

/* Appends ``v`` to ``list``: 0, or -1 (an exception set). */
static int append_size(PyObject *list, size_t v)
{
	PyObject *x = PyLong_FromSize_t(v);
	int err = !x || PyList_Append(list, x);

	Py_XDECREF(x);
	return err ? -1 : 0;
}

/* (type section, string section, each type's offset, the DATASECs'
 * positions among the types) of the canonical types, or NULL (no
 * exception: Python decides) when something is off. */
static PyObject *compacted_blob(const struct dedup *d, const Py_buffer *strings, int big)
{
	struct compacted c = {.in_strings = strings->buf, .in_len = (size_t)strings->len};
	int32_t *final = final_ids(d);
	PyObject *starts = PyList_New(0), *datasecs = PyList_New(0), *out = NULL;
	size_t kept = 0;
	int failed = !final || !starts || !datasecs || !c.in_len
		     || !(c.name_at = PyMem_Malloc(c.in_len * sizeof(*c.name_at)));

	if (!failed) {
		memset(c.name_at, 0xff, c.in_len * sizeof(*c.name_at));
		c.name_at[0] = 0;
		failed = grow((void **)&c.strings, &c.strings_cap, 4096, 1);
		if (!failed)
			c.strings[c.strings_len++] = 0;
	}
	for (uint32_t i = 1; !failed && i < d->n; i++) {
		if (d->map[i] != (int32_t)i)
			continue;
		failed = append_size(starts, c.n * 4) || put_type(&c, d, i, final)
			 || (d->kind[i] == K_DATASEC && append_size(datasecs, kept));
		kept++;
	}
	if (!failed) {
		if (big != PY_BIG_ENDIAN)
			for (size_t i = 0; i < c.n; i++)
				c.words[i] = __builtin_bswap32(c.words[i]);
		out = Py_BuildValue("(y#y#OO)", c.n ? (const char *)c.words : "",
				    (Py_ssize_t)(c.n * 4), c.strings, (Py_ssize_t)c.strings_len,
				    starts, datasecs);
	}
	PyErr_Clear();
	PyMem_Free(final);
	PyMem_Free(c.words);
	PyMem_Free(c.strings);
	PyMem_Free(c.name_at);
	Py_XDECREF(starts);
	Py_XDECREF(datasecs);
	return out;
}

static PyObject *dedup_blob(PyObject *self, PyObject *args)
{
	Py_buffer section, strings;
	int big;
	struct dedup d = {0};
	PyObject *out = NULL;

	(void)self;
	if (!PyArg_ParseTuple(args, "y*y*p", &section, &strings, &big))
		return NULL;
	if (run_passes(&d, &section) == 0)
		out = compacted_blob(&d, &strings, big);
	release(&d);
	PyBuffer_Release(&section);
	PyBuffer_Release(&strings);
	return out ? out : Py_NewRef(Py_None);
}

static PyMethodDef methods[] = {
	{"map", dedup_map, METH_O,
	 "map(section) -> list: dedup.py's map (each id to the id it goes to) of the type "
	 "section _blob.write(types, host order, strict=True) wrote, upstream libbpf's dedup "
	 "of base BTF; None: let dedup.py decide."},
	{"blob", dedup_blob, METH_VARARGS,
	 "blob(section, strings, big_endian) -> (type section, string section, each type's "
	 "offset, the DATASECs' positions) of the deduplicated types, as writer.encode_btf lays them out, from what "
	 "_blob.write(types, host order, strict=True) wrote; None: let dedup.py decide."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "objbtf.btf._dedup",
	"dedup.py's passes over a written type section, in C.", -1, methods,
	NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__dedup(void)
{
	return PyModule_Create(&module);
}
