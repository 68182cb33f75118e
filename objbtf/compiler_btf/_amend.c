/*
 * objbtf.compiler_btf._amend: loader.py's _Loader in C, for the compiled
 * build: GCC's .BTF in, the types pahole would write for the object out.
 *
 * It reads the blob itself (the header, the type section as words, the
 * names) instead of reader.parse_btf's model of it, then makes the same
 * choices as _Loader, in the same order: which types stay (_choose), the
 * FWDs that are enums (_enum_forwards), the output order and ids (_order,
 * _number), the kept types as model objects (_build) and what GCC's enums
 * show it lost (_losses), calling the
 * Python back for a VAR's placement (the object's symbols decide it), takes
 * the functions' sort keys as a dict and calls rules.py for the types it
 * amends (base types, enums), so that pahole's rules stay in one place.
 *
 * Like the other C passes it explains nothing.  Where parse_btf or _Loader
 * would raise (a header, a string offset or a type it cannot read, a
 * reference past the last type, a FUNC without a FUNC_PROTO, a TYPE_TAG
 * chain too long), and where a size would pass 2^62, it returns
 * None and loader.py loads the blob in Python, with its own result or
 * error.  tests/test_c_amend.py compares the two.
 *
 * Loading GCC's BTF in Python was two thirds of the DWARF-less step: the
 * parse made an object of every word and every head, most of them of the
 * declared functions' FUNCs and FUNC_PROTOs the loader then drops.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "../btf/_btf.h"

#define HEADER_LEN 24
#define CTF_K_STRUCT 6          /* loader.CTF_K_STRUCT */
#define MAX_DEPTH 32            /* loader.MAX_DEPTH */
#define INT_RESERVED 0xf000ff00u
#define INT_SIGNED 1
#define INT_BOOL 4
#define LOST_ALL_ENUMERATORS 1      /* chunk.LOST_ALL_ENUMERATORS */
#define LOST_WIDE_ENUMERATORS 2     /* chunk.LOST_WIDE_ENUMERATORS */
#define HAS_VLEN (STRUCTS | ENUMS | BIT(K_FUNC) | BIT(K_FUNC_PROTO) | BIT(K_DATASEC))
#define PLAIN_REFERENCES (ONE_REF & ~BIT(K_DECL_TAG))

/* What init() was given: the model's classes, rules.py's functions. */
static PyObject *btf_type, *kinds, *member_class, *param_class, *enumerator_class;
static PyObject *base_type_rule, *enum_type_rule, *declared_enum_rule, *empty;

/* A name decoded, in an open-addressing table by its string offset. */
struct name {
	uint32_t off;
	PyObject *str;          /* NULL: an empty slot */
};

/* Flags per type id while choosing. */
enum { KEEP = 1, PROTO_USER = 2, ARRAY_USER = 4, INNER = 8, ENUM_FWD = 16 };

struct src {
	uint32_t *w;            /* the type section as words, host order */
	size_t nw;
	const char *str;        /* the string section */
	size_t limit;           /* every offset below names a string */
	uint32_t n;             /* types + 1 (void) */
	uint32_t *at;           /* where each type's words start (at[0]: void, none) */
	uint8_t *kind;
	uint8_t *flag;
	struct name *names;     /* by string offset, decoded on first use */
	size_t names_cap, names_len;
	PyObject *ctx;          /* loader.py's _Symbols */
};

static uint32_t rd32(const uint8_t *p, int big)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return big != PY_BIG_ENDIAN ? __builtin_bswap32(v) : v;
}

/* ---- the blob ------------------------------------------------------------ */

/* The header and the sections, as BtfHeader.read and parse_btf check them:
 * 0, or -1 to give up. */
static int read_header(struct src *s, const uint8_t *d, size_t len)
{
	int big;
	uint64_t hdr_len, type_off, type_len, str_off, str_len, end;
	const uint8_t *types;

	if (len < HEADER_LEN)
		return -1;
	if (d[0] == 0x9f && d[1] == 0xeb)
		big = 0;
	else if (d[0] == 0xeb && d[1] == 0x9f)
		big = 1;
	else
		return -1;
	if (d[2] != 1)
		return -1;
	hdr_len = rd32(d + 4, big);
	type_off = rd32(d + 8, big);
	type_len = rd32(d + 12, big);
	str_off = rd32(d + 16, big);
	str_len = rd32(d + 20, big);
	if (hdr_len < HEADER_LEN || hdr_len > len)
		return -1;
	end = len - hdr_len;
	if (type_off + type_len > end || str_off + str_len > end || type_len % 4)
		return -1;
	s->str = (const char *)d + hdr_len + str_off;
	if (str_len && s->str[0])
		return -1;
	s->limit = 0;
	for (size_t i = str_len; i > 0; i--)
		if (!s->str[i - 1]) {
			s->limit = i;
			break;
		}
	s->nw = type_len / 4;
	if (!(s->w = PyMem_Malloc(s->nw ? s->nw * 4 : 4)))
		return -1;
	types = d + hdr_len + type_off;
	for (size_t i = 0; i < s->nw; i++)
		s->w[i] = rd32(types + 4 * i, big);
	return 0;
}

/* Where each type starts and its kind, with every check the parser makes:
 * 0, or -1 to give up. */
static int scan(struct src *s)
{
	size_t w = 0, at_cap = 0, kind_cap = 0, n = 1;

	while (w < s->nw) {
		uint32_t info, vlen, k;
		size_t end;

		if (w + 3 > s->nw)
			return -1;
		info = s->w[w + 1];
		k = (info >> 24) & 0x1f;
		vlen = info & 0xffff;
		if (k == K_UNKN || k > K_LAST || (vlen && !(HAS_VLEN & BIT(k))))
			return -1;
		end = w + 3 + fixed_words[k] + (size_t)entry_words[k] * vlen;
		if (end > s->nw)
			return -1;
		for (uint32_t i = 0, names = name_count(k, vlen); i < names; i++)
			if (s->w[w + name_word(k, i)] >= s->limit)
				return -1;
		if (k == K_INT && s->w[w + 3] & INT_RESERVED)
			return -1;
		if (n >= UINT32_MAX - 1
		    || grow((void **)&s->at, &at_cap, n + 1, sizeof(uint32_t))
		    || grow((void **)&s->kind, &kind_cap, n + 1, 1))
			return -1;
		s->at[n] = (uint32_t)w;
		s->kind[n] = (uint8_t)k;
		n++;
		w = end;
	}
	s->n = (uint32_t)n;
	if (grow((void **)&s->at, &at_cap, n, sizeof(uint32_t))
	    || grow((void **)&s->kind, &kind_cap, n, 1))
		return -1;
	return 0;
}

static size_t name_slot(const struct name *names, size_t cap, uint32_t off)
{
	size_t i = (off * 0x9e3779b1u) & (cap - 1);

	while (names[i].str && names[i].off != off)
		i = (i + 1) & (cap - 1);
	return i;
}

/* Room for one more name: 0, or -1 out of memory. */
static int more_names(struct src *s)
{
	struct name *old = s->names, *grown;
	size_t cap = s->names_cap ? s->names_cap * 2 : 1024;

	if (s->names_len * 2 < s->names_cap)
		return 0;
	if (!(grown = PyMem_Calloc(cap, sizeof(*grown))))
		return -1;
	for (size_t i = 0; i < s->names_cap; i++)
		if (old[i].str)
			grown[name_slot(grown, cap, old[i].off)] = old[i];
	PyMem_Free(old);
	s->names = grown;
	s->names_cap = cap;
	return 0;
}

/* The name at string offset ``off`` (below the limit), borrowed; decoded
 * as StringReader does (UTF-8, invalid bytes replaced). */
static PyObject *name_at(struct src *s, uint32_t off)
{
	size_t i;
	const char *p = s->str + off;

	if (more_names(s))
		return PyErr_NoMemory();
	i = name_slot(s->names, s->names_cap, off);
	if (!s->names[i].str) {
		if (!(s->names[i].str = PyUnicode_DecodeUTF8(p, (Py_ssize_t)strlen(p), "replace")))
			return NULL;
		s->names[i].off = off;
		s->names_len++;
	}
	return s->names[i].str;
}

static uint32_t word(const struct src *s, uint32_t id, int i)
{
	return s->w[s->at[id] + i];
}

static int kflag_of(const struct src *s, uint32_t id)
{
	return word(s, id, 1) >> 31;
}

static uint32_t vlen_of(const struct src *s, uint32_t id)
{
	return word(s, id, 1) & 0xffff;
}

/* ---- which types stay (_Loader._choose) -------------------------------- */

/* _Loader._size: a type's bytes, 0 for none; -1 to give up (past 2^62). */
static int64_t size_of(const struct src *s, uint32_t id, int ptr_size, int depth)
{
	int64_t inner, out;

	if (depth > MAX_DEPTH || id >= s->n || !id)
		return 0;
	uint32_t k = s->kind[id];
	if ((SIZED & BIT(k)) && k != K_DATASEC)
		return word(s, id, 2);
	if (k == K_PTR)
		return ptr_size;
	if (MODIFIERS & BIT(k))
		return size_of(s, word(s, id, 2), ptr_size, depth + 1);
	if (k == K_ARRAY) {
		if ((inner = size_of(s, word(s, id, 3), ptr_size, depth + 1)) < 0
		    || __builtin_mul_overflow(inner, (int64_t)word(s, id, 5), &out)
		    || out > ((int64_t)1 << 62))
			return -1;
		return out;
	}
	return 0;
}

/* _Loader._wants_function for a FUNC named ``name`` (a key of the
 * object's functions): 1, 0, or -1 to give up. */
static int wants_function(struct src *s, PyObject *name, uint32_t proto, PyObject *named)
{
	int seen = PySet_Contains(named, name);

	if (seen)
		return seen < 0 ? -1 : 0;
	if (proto >= s->n || !proto || s->kind[proto] != K_FUNC_PROTO)
		return -1;
	for (uint32_t e = 0; e < vlen_of(s, proto); e++)
		if (word(s, proto, 3 + 2 * e + 1) && !s->str[word(s, proto, 3 + 2 * e)])
			return 0;
	return PySet_Add(named, name) ? -1 : 1;
}

/* What a type other than a FUNC_PROTO or a plain reference refers to, as
 * _choose records it: every reference is a prototype's user; an ARRAY's
 * element is inner, any other type's references are arrays' users.  0,
 * or -1 past the last type. */
static int refer(struct src *s, uint32_t i)
{
	uint32_t k = s->kind[i], v = vlen_of(s, i), elem, index;

	if (STRUCTS & BIT(k)) {
		for (uint32_t e = 0; e < v; e++)
			if (word(s, i, 4 + 3 * e) >= s->n)
				return -1;
		for (uint32_t e = 0; e < v; e++)
			s->flag[word(s, i, 4 + 3 * e)] |= PROTO_USER | ARRAY_USER;
	} else if (k == K_ARRAY) {
		elem = word(s, i, 3);
		index = word(s, i, 4);
		if (elem >= s->n || index >= s->n)
			return -1;
		s->flag[elem] |= PROTO_USER | INNER;
		s->flag[index] |= PROTO_USER;
	} else if (k == K_DECL_TAG) {
		if (word(s, i, 2) >= s->n)
			return -1;
		s->flag[word(s, i, 2)] |= PROTO_USER | ARRAY_USER;
	}
	return 0;       /* INT, ENUM, FWD, FLOAT, ENUM64 refer to nothing */
}

/* A FUNC: whether it stays, its name appended to ``chosen`` if so: 1, 0,
 * or -1 to give up. */
static int choose_function(struct src *s, uint32_t i, PyObject *name, PyObject *keys,
			   PyObject *named, PyObject *chosen)
{
	int in = PySet_Contains(keys, name), wanted;

	if (in <= 0)
		return in;
	if ((wanted = wants_function(s, name, word(s, i, 2), named)) <= 0)
		return wanted;
	return PyList_Append(chosen, name) ? -1 : 1;
}

/* A VAR: whether it stays (``ctx.place`` placed it), its (key, linkage)
 * put in ``vars_`` by id if so: 1, 0, or -1 to give up. */
static int choose_variable(struct src *s, uint32_t i, PyObject *name, int ptr_size,
			   PyObject *vars_)
{
	int64_t size = size_of(s, word(s, i, 2), ptr_size, 0);
	PyObject *placed, *id;
	int ok;

	if (size < 0)
		return -1;
	placed = PyObject_CallMethod(s->ctx, "place", "kOL", (unsigned long)i, name,
				     (long long)size);
	if (!placed)
		return -1;
	if (placed == Py_None) {
		Py_DECREF(placed);
		return 0;
	}
	id = PyLong_FromUnsignedLong(i);
	ok = id && !PyDict_SetItem(vars_, id, placed);
	Py_XDECREF(id);
	Py_DECREF(placed);
	return ok ? 1 : -1;
}

/* _choose's first walk: KEEP and the users' flags; the FUNCs chosen (their
 * names, in id order) and each placed VAR's (key, linkage) in ``vars_``, by
 * id.  0, or -1 to give up. */
static int choose(struct src *s, PyObject *keys, int var, int decl_tag, int ptr_size,
		  PyObject *chosen, PyObject *vars_)
{
	PyObject *named = PySet_New(NULL);
	int ok = named != NULL;

	for (uint32_t i = 1; ok && i < s->n; i++) {
		uint32_t k = s->kind[i], st = word(s, i, 2);
		PyObject *name = name_at(s, word(s, i, 0));
		int stays = 1;

		if (!name) {
			ok = 0;
			break;
		}
		if (PLAIN_REFERENCES & BIT(k)) {
			if (k == K_FUNC)
				stays = choose_function(s, i, name, keys, named, chosen);
			else if (k == K_VAR)
				stays = var ? choose_variable(s, i, name, ptr_size, vars_) : 0;
			if (stays < 0 || (stays && st >= s->n)) {
				ok = 0;
				break;
			}
			if (stays)
				s->flag[st] |= PROTO_USER | ARRAY_USER;
		} else if (k == K_FUNC_PROTO) {
			uint32_t v = vlen_of(s, i);

			ok = st < s->n;
			for (uint32_t e = 0; ok && e < v; e++)
				ok = word(s, i, 4 + 2 * e) < s->n;
			if (!ok)
				break;
			s->flag[st] |= ARRAY_USER;
			for (uint32_t e = 0; e < v; e++)
				s->flag[word(s, i, 4 + 2 * e)] |= ARRAY_USER;
		} else if (k == K_DATASEC || (k == K_DECL_TAG && !decl_tag)) {
			stays = 0;
		} else if (refer(s, i)) {
			ok = 0;
			break;
		}
		if (stays)
			s->flag[i] |= KEEP;
	}
	Py_XDECREF(named);
	return ok ? 0 : -1;
}

/* _choose's second walk: FUNC_PROTOs only for their users, inner ARRAYs
 * folded into the outer one, DECL_TAGs of what stays (in id order: a tag
 * sees its target's choice as it stands). */
static void settle(struct src *s)
{
	for (uint32_t i = 1; i < s->n; i++) {
		uint32_t k = s->kind[i];
		uint8_t *f = &s->flag[i];

		if (k == K_FUNC_PROTO)
			*f = (*f & ~KEEP) | ((*f & PROTO_USER) ? KEEP : 0);
		else if (k == K_ARRAY && (*f & INNER) && !(*f & ARRAY_USER))
			*f &= ~KEEP;
		else if (k == K_DECL_TAG && (*f & KEEP) && !(s->flag[word(s, i, 2)] & KEEP))
			*f &= ~KEEP;
	}
}

/* _enum_forwards: ENUM_FWD on the FWDs that are enums' declarations. */
static void enum_forwards(struct src *s)
{
	for (uint32_t i = 1; i < s->n; i++)
		if (s->kind[i] == K_FWD && word(s, i, 2) > CTF_K_STRUCT && !kflag_of(s, i))
			s->flag[i] |= ENUM_FWD;
	for (uint32_t i = 1; i < s->n; i++) {
		if (s->kind[i] != K_FUNC_PROTO || !(s->flag[i] & KEEP))
			continue;
		for (uint32_t e = 0; e <= vlen_of(s, i); e++) {
			uint32_t ref = e ? word(s, i, 4 + 2 * (e - 1)) : word(s, i, 2);

			for (int d = 0; d < MAX_DEPTH; d++) {
				if (!(0 < ref && ref < s->n) || !(MODIFIERS & BIT(s->kind[ref])))
					break;
				ref = word(s, ref, 2);
			}
			if (0 < ref && ref < s->n && s->kind[ref] == K_FWD && !kflag_of(s, ref))
				s->flag[ref] |= ENUM_FWD;
		}
	}
}

/* ---- the output's order and ids (_Loader._order, _number) -------------- */

struct order {
	uint32_t *ids;          /* the types in output order, TYPE_TAGs left out included */
	size_t len;
	uint32_t *new_id;       /* by source id */
	uint32_t emitted;       /* how many types the output has */
	uint32_t index_type;
};

/* ``ids`` (FUNCs or VARs) sorted in place by their keys, stably: a FUNC's
 * from ``func_keys`` by its name, a VAR's from ``vars_`` by its id (the
 * first of its (key, linkage)).  0, or -1 to give up. */
static int sort_by_key(struct src *s, uint32_t *ids, size_t n, PyObject *func_keys,
		       PyObject *vars_)
{
	PyObject *rows = PyList_New((Py_ssize_t)n);
	int ok = rows != NULL;

	for (size_t j = 0; ok && j < n; j++) {
		PyObject *key, *row, *id = PyLong_FromUnsignedLong(ids[j]);

		if (!id) {
			ok = 0;
			break;
		}
		if (func_keys) {
			PyObject *name = name_at(s, word(s, ids[j], 0));

			key = name ? PyDict_GetItemWithError(func_keys, name) : NULL;
		} else {
			PyObject *placed = PyDict_GetItemWithError(vars_, id);

			key = placed && PyTuple_Check(placed) && PyTuple_GET_SIZE(placed) == 2
			      ? PyTuple_GET_ITEM(placed, 0) : NULL;
		}
		row = key ? PyTuple_Pack(2, key, id) : NULL;
		Py_DECREF(id);
		if (!row) {
			ok = 0;
			break;
		}
		PyList_SET_ITEM(rows, (Py_ssize_t)j, row);
	}
	ok = ok && !PyList_Sort(rows);
	for (size_t j = 0; ok && j < n; j++) {
		PyObject *id = PyTuple_GET_ITEM(PyList_GET_ITEM(rows, (Py_ssize_t)j), 1);

		ids[j] = (uint32_t)PyLong_AsUnsignedLong(id);
	}
	Py_XDECREF(rows);
	return ok ? 0 : -1;
}

/* _order: the kept types in the compiler's order, but the FUNCs, then the
 * VARs, last, each by its symbol's place and followed by its DECL_TAGs. */
static int order_types(struct src *s, struct order *o, PyObject *func_keys, PyObject *vars_)
{
	uint32_t n = s->n, nf = 0, nv = 0, nb = 0;
	uint32_t *funcs = PyMem_Malloc(n * sizeof(uint32_t));
	uint32_t *vars = PyMem_Malloc(n * sizeof(uint32_t));
	uint32_t *first = PyMem_Calloc(n, sizeof(uint32_t)), *last = PyMem_Calloc(n, sizeof(uint32_t));
	uint32_t *next = PyMem_Calloc(n, sizeof(uint32_t));
	int ok = funcs && vars && first && last && next
		 && (o->ids = PyMem_Malloc(n * sizeof(uint32_t)));

	for (uint32_t i = 1; ok && i < n; i++) {
		uint32_t k = s->kind[i], t;

		if (!(s->flag[i] & KEEP))
			continue;
		if (k == K_FUNC) {
			funcs[nf++] = i;
		} else if (k == K_VAR) {
			vars[nv++] = i;
		} else if (k == K_DECL_TAG && ((t = word(s, i, 2)) && (s->kind[t] == K_FUNC
								       || s->kind[t] == K_VAR))) {
			if (last[t])
				next[last[t]] = i;
			else
				first[t] = i;
			last[t] = i;
		} else {
			o->ids[nb++] = i;
		}
	}
	ok = ok && !sort_by_key(s, funcs, nf, func_keys, NULL)
		&& !sort_by_key(s, vars, nv, NULL, vars_);
	for (uint32_t j = 0; ok && j < nf + nv; j++) {
		uint32_t i = j < nf ? funcs[j] : vars[j - nf];

		o->ids[nb++] = i;
		for (uint32_t tag = first[i]; tag; tag = next[tag])
			o->ids[nb++] = tag;
	}
	o->len = nb;
	PyMem_Free(funcs);
	PyMem_Free(vars);
	PyMem_Free(first);
	PyMem_Free(last);
	PyMem_Free(next);
	return ok ? 0 : -1;
}

/* A 4-byte signed INT named int (_is_int), as the compiler wrote it. */
static int is_int(const struct src *s, uint32_t i)
{
	return s->kind[i] == K_INT && !strcmp(s->str + word(s, i, 0), "int")
	       && word(s, i, 2) == 4 && ((word(s, i, 3) >> 24) & 0x0f & INT_SIGNED);
}

/* _number: each type's new id; a TYPE_TAG the features leave out takes its
 * target's (past further tags); the arrays' index type, the unit's int
 * or one after the types.  0, or -1 to give up (a chain of tags too long). */
static int number(struct src *s, struct order *o, int type_tag)
{
	size_t kept = 0, dropped = 0;
	uint32_t *tags = PyMem_Malloc((o->len ? o->len : 1) * sizeof(uint32_t));
	int has_array = 0, ok = tags && (o->new_id = PyMem_Calloc(s->n, sizeof(uint32_t)));

	for (size_t j = 0; ok && j < o->len; j++) {
		uint32_t i = o->ids[j], k = s->kind[i];

		if (k == K_TYPE_TAG && !type_tag) {
			tags[dropped++] = i;
			continue;
		}
		o->ids[kept++] = i;
		o->new_id[i] = (uint32_t)kept;
		if (!o->index_type && is_int(s, i))
			o->index_type = (uint32_t)kept;
		has_array |= k == K_ARRAY;
	}
	for (size_t j = 0; ok && j < dropped; j++) {
		uint32_t t = tags[j];
		int d = 0;

		for (; d < MAX_DEPTH; d++) {
			if (!t || s->kind[t] != K_TYPE_TAG)
				break;
			t = word(s, t, 2);
		}
		ok = d < MAX_DEPTH;
		if (ok)
			o->new_id[tags[j]] = o->new_id[t];
	}
	PyMem_Free(tags);
	o->emitted = (uint32_t)kept;
	if (has_array && !o->index_type)
		o->index_type = (uint32_t)kept + 1;
	return ok ? 0 : -1;
}

/* ---- the types (_Loader._build) ------------------------------------------ */

/* The fields of a type of kind ``k`` named ``name`` (borrowed), with
 * ``size``, ``type`` and ``kflag``, all else 0, component_idx -1, no items. */
static void fields(PyObject **f, uint32_t k, PyObject *name, uint32_t size, uint32_t type,
		   int kflag)
{
	f[0] = Py_NewRef(PyList_GET_ITEM(kinds, k));
	f[1] = Py_NewRef(name);
	f[2] = PyLong_FromUnsignedLong(size);
	f[3] = PyLong_FromUnsignedLong(type);
	f[4] = PyLong_FromLong(kflag);
	for (int i = 5; i < 11; i++)
		f[i] = PyLong_FromLong(0);
	f[11] = PyLong_FromLong(-1);
	f[12] = PyTuple_New(0);
}

static PyObject *call(PyObject *rule, PyObject **args, int n)
{
	PyObject *t = PyObject_Vectorcall(rule, args, n, NULL);

	for (int i = 0; i < n; i++)
		Py_XDECREF(args[i]);
	return t;
}

/* Member ``e`` of STRUCT or UNION ``i``: name, new type, bit offset,
 * bitfield size. */
static PyObject *member(struct src *s, const struct order *o, uint32_t i, uint32_t e)
{
	uint32_t off = word(s, i, 5 + 3 * e);
	int kflag = kflag_of(s, i);
	PyObject *m[4] = {
		Py_XNewRef(name_at(s, word(s, i, 3 + 3 * e))),
		PyLong_FromUnsignedLong(o->new_id[word(s, i, 4 + 3 * e)]),
		PyLong_FromUnsignedLong(kflag ? off & 0xffffff : off),
		PyLong_FromUnsignedLong(kflag ? off >> 24 : 0),
	};

	return new_entry(member_class, 4, m);
}

/* Parameter ``e`` of FUNC_PROTO ``i``: name, new type. */
static PyObject *param(struct src *s, const struct order *o, uint32_t i, uint32_t e)
{
	PyObject *p[2] = {
		Py_XNewRef(name_at(s, word(s, i, 3 + 2 * e))),
		PyLong_FromUnsignedLong(o->new_id[word(s, i, 4 + 2 * e)]),
	};

	return new_entry(param_class, 2, p);
}

/* Type ``i`` from ``f`` with its items, each made by ``entry``. */
static PyObject *with_items(struct src *s, const struct order *o, uint32_t i, PyObject **f,
			    PyObject *(*entry)(struct src *, const struct order *, uint32_t,
					       uint32_t))
{
	uint32_t v = vlen_of(s, i);
	PyObject *items = PyTuple_New(v);

	for (uint32_t e = 0; items && e < v; e++) {
		PyObject *item = entry(s, o, i, e);

		if (!item)
			Py_CLEAR(items);
		else
			PyTuple_SET_ITEM(items, e, item);
	}
	Py_XSETREF(f[12], items);
	return new_type(btf_type, f);
}

/* _flat_array: one ARRAY for a chain of nested ones, of the product of
 * their counts (in 32 bits).  NULL with no error set: give up. */
static PyObject *array(struct src *s, const struct order *o, uint32_t i, PyObject **f)
{
	uint32_t elem = word(s, i, 3), nelems = word(s, i, 5);

	for (int d = 0; d < MAX_DEPTH; d++) {
		if (elem >= s->n) {
			for (int j = 0; j < 13; j++)
				Py_XDECREF(f[j]);
			return NULL;
		}
		if (s->kind[elem] != K_ARRAY)
			break;
		nelems *= word(s, elem, 5);
		elem = word(s, elem, 3);
	}
	Py_XSETREF(f[1], Py_NewRef(empty));
	Py_XSETREF(f[3], PyLong_FromUnsignedLong(o->new_id[elem]));
	Py_XSETREF(f[4], PyLong_FromLong(0));
	Py_XSETREF(f[8], PyLong_FromUnsignedLong(o->index_type));
	Py_XSETREF(f[9], PyLong_FromUnsignedLong(nelems));
	return new_type(btf_type, f);
}

/* An ENUM's or ENUM64's values as signed numbers (GCC's ENUM values are
 * 32 bits, signed; an ENUM64's are signed with its kind_flag), through
 * rules.enum_type. */
static PyObject *enumeration(struct src *s, uint32_t i, PyObject *name, PyObject *features)
{
	uint32_t k = s->kind[i], v = vlen_of(s, i), per = entry_words[k];
	int kflag = kflag_of(s, i), negative = 0;
	PyObject *values = PyList_New(v), *args[5];

	for (uint32_t e = 0; values && e < v; e++) {
		uint32_t at = 3 + per * e;
		PyObject *pair[2];

		if (k == K_ENUM) {
			int32_t value = (int32_t)word(s, i, at + 1);

			negative |= value < 0;
			pair[1] = PyLong_FromLong(value);
		} else {
			uint64_t u = (uint64_t)word(s, i, at + 2) << 32 | word(s, i, at + 1);

			pair[1] = kflag ? PyLong_FromLongLong((int64_t)u) : PyLong_FromUnsignedLongLong(u);
		}
		pair[0] = Py_XNewRef(name_at(s, word(s, i, at)));
		PyObject *entry = new_entry(enumerator_class, 2, pair);

		if (!entry)
			Py_CLEAR(values);
		else
			PyList_SET_ITEM(values, e, entry);
	}
	if (!values)
		return NULL;
	args[0] = Py_NewRef(name);
	args[1] = PyLong_FromUnsignedLong(word(s, i, 2));
	args[2] = values;
	args[3] = PyBool_FromLong(k == K_ENUM ? negative : kflag);
	args[4] = Py_NewRef(features);
	return call(enum_type_rule, args, 5);
}

/* The compiler's base type or enum in pahole's form (_amended). */
static PyObject *amended(struct src *s, uint32_t i, PyObject *name, PyObject *features)
{
	uint32_t k = s->kind[i];
	PyObject *args[5];

	if (k == K_ENUM || k == K_ENUM64)
		return enumeration(s, i, name, features);
	args[0] = Py_NewRef(name);
	args[1] = PyLong_FromUnsignedLong(word(s, i, 2));
	args[2] = PyLong_FromUnsignedLong(k == K_INT ? (word(s, i, 3) >> 24) & 0x0f
					  & (INT_SIGNED | INT_BOOL) : 0);
	args[3] = PyBool_FromLong(k == K_FLOAT);
	args[4] = Py_NewRef(features);
	return call(base_type_rule, args, 5);
}

/* The output type for source type ``i``; NULL with no error set to give up. */
static PyObject *build_one(struct src *s, const struct order *o, uint32_t i, PyObject *features,
			   PyObject *vars_)
{
	uint32_t k = s->kind[i], st = word(s, i, 2);
	int kflag = kflag_of(s, i);
	PyObject *name = name_at(s, word(s, i, 0)), *f[13];

	if (!name)
		return NULL;
	if (PLAIN_REFERENCES & BIT(k)) {
		fields(f, k, name, 0, o->new_id[st], kflag);
		if (k == K_VAR) {
			PyObject *id = PyLong_FromUnsignedLong(i);
			PyObject *placed = id ? PyDict_GetItemWithError(vars_, id) : NULL;

			Py_XDECREF(id);
			if (!placed || !PyTuple_Check(placed) || PyTuple_GET_SIZE(placed) != 2) {
				for (int j = 0; j < 13; j++)
					Py_XDECREF(f[j]);
				return NULL;
			}
			Py_XSETREF(f[10], Py_NewRef(PyTuple_GET_ITEM(placed, 1)));
		}
		return new_type(btf_type, f);
	}
	if (STRUCTS & BIT(k)) {
		fields(f, k, name, st, 0, kflag);
		return with_items(s, o, i, f, member);
	}
	if (k == K_FUNC_PROTO) {
		fields(f, k, name, 0, o->new_id[st], kflag);
		return with_items(s, o, i, f, param);
	}
	if (k == K_ARRAY) {
		fields(f, k, name, 0, 0, 0);
		return array(s, o, i, f);
	}
	if (k == K_FWD) {
		if (s->flag[i] & ENUM_FWD)
			return PyObject_CallOneArg(declared_enum_rule, name);
		fields(f, k, name, 0, 0, kflag);
		return new_type(btf_type, f);
	}
	if (k == K_DECL_TAG) {
		fields(f, k, name, 0, o->new_id[st], kflag);
		Py_XSETREF(f[11], PyLong_FromLong((int32_t)word(s, i, 3)));
		return new_type(btf_type, f);
	}
	return amended(s, i, name, features);
}

/* _Loader._losses: a GCC ENUM with a size, without enumerators (all lost)
 * or of 8 bytes with none past 31 bits (the wide ones lost). */
static uint32_t lost_enumerators(const struct src *s, uint32_t i)
{
	uint32_t v, size;

	if (s->kind[i] != K_ENUM || !(size = word(s, i, 2)))
		return 0;
	v = vlen_of(s, i);
	if (!v)
		return LOST_ALL_ENUMERATORS;
	if (size <= 4)
		return 0;
	for (uint32_t e = 0; e < v; e++)
		if (word(s, i, 4 + 2 * e) >> 31)
			return 0;
	return LOST_WIDE_ENUMERATORS;
}

/* _Loader._losses: (chunk.LOST_*, name) of each enum that lost values, in
 * id order; NULL on an error. */
static PyObject *losses(struct src *s)
{
	PyObject *out = PyList_New(0);

	for (uint32_t i = 1; out && i < s->n; i++) {
		uint32_t lost = lost_enumerators(s, i);
		PyObject *name = lost ? name_at(s, word(s, i, 0)) : NULL, *row;

		if (!lost)
			continue;
		row = name ? Py_BuildValue("(IO)", lost, name) : NULL;
		if (!row || PyList_Append(out, row))
			Py_CLEAR(out);
		Py_XDECREF(row);
	}
	return out;
}

/* ---- the module ----------------------------------------------------------- */

static void release(struct src *s, struct order *o)
{
	for (size_t i = 0; i < s->names_cap; i++)
		Py_XDECREF(s->names[i].str);
	PyMem_Free(s->names);
	PyMem_Free(s->w);
	PyMem_Free(s->at);
	PyMem_Free(s->kind);
	PyMem_Free(s->flag);
	PyMem_Free(o->ids);
	PyMem_Free(o->new_id);
}

/* The kept types, in order, as a list; None with no error to give up. */
static PyObject *build(struct src *s, const struct order *o, PyObject *features, PyObject *vars_)
{
	PyObject *types = PyList_New(o->emitted);

	for (uint32_t j = 0; types && j < o->emitted; j++) {
		PyObject *t = build_one(s, o, o->ids[j], features, vars_);

		if (!t) {
			Py_CLEAR(types);
			if (!PyErr_Occurred())
				types = Py_NewRef(Py_None);
			break;
		}
		PyList_SET_ITEM(types, j, t);
	}
	return types;
}

/* The new ids of the placed VARs, by source id. */
static PyObject *placed_ids(const struct order *o, PyObject *vars_)
{
	PyObject *out = PyDict_New(), *id, *value;
	Py_ssize_t pos = 0;

	while (out && PyDict_Next(vars_, &pos, &id, &value)) {
		unsigned long i = PyLong_AsUnsignedLong(id);
		PyObject *new = PyLong_FromUnsignedLong(o->new_id[i]);

		if (!new || PyDict_SetItem(out, id, new))
			Py_CLEAR(out);
		Py_XDECREF(new);
	}
	return out;
}

static PyObject *load(PyObject *self, PyObject *args)
{
	Py_buffer data;
	PyObject *ctx, *keys, *func_keys, *features, *out = NULL;
	int var, decl_tag, type_tag, ptr_size;
	struct src s = {0};
	struct order o = {0};
	PyObject *chosen = NULL, *vars_ = NULL, *types = NULL, *ids = NULL, *lost = NULL;

	if (!PyArg_ParseTuple(args, "y*OO!O!Opppi:load", &data, &ctx, &PySet_Type, &keys,
			      &PyDict_Type, &func_keys, &features, &var, &decl_tag, &type_tag,
			      &ptr_size))
		return NULL;
	s.ctx = ctx;
	if (read_header(&s, data.buf, (size_t)data.len) || scan(&s)
	    || !(s.flag = PyMem_Calloc(s.n, 1)))
		goto give_up;
	s.kind[0] = K_UNKN;
	s.at[0] = 0;
	if (!(chosen = PyList_New(0)) || !(vars_ = PyDict_New())
	    || choose(&s, keys, var, decl_tag, ptr_size, chosen, vars_))
		goto fail;
	settle(&s);
	enum_forwards(&s);
	if (order_types(&s, &o, func_keys, vars_) || number(&s, &o, type_tag)
	    || !(types = build(&s, &o, features, vars_)) || types == Py_None
	    || !(ids = placed_ids(&o, vars_)) || !(lost = losses(&s)))
		goto fail;
	out = Py_BuildValue("(OIOOO)", types, o.index_type, ids, chosen, lost);
	goto done;
fail:
	if (PyErr_Occurred())
		goto done;
give_up:
	PyErr_Clear();
	out = Py_NewRef(Py_None);
done:
	Py_XDECREF(chosen);
	Py_XDECREF(vars_);
	Py_XDECREF(types);
	Py_XDECREF(ids);
	Py_XDECREF(lost);
	release(&s, &o);
	PyBuffer_Release(&data);
	return out;
}

static PyObject *init(PyObject *self, PyObject *args)
{
	PyObject *given[8];

	if (!PyArg_ParseTuple(args, "OO!OOOOOO:init", &given[0], &PyList_Type, &given[1],
			      &given[2], &given[3], &given[4], &given[5], &given[6], &given[7]))
		return NULL;
	if (PyList_GET_SIZE(given[1]) <= K_LAST)
		return PyErr_Format(PyExc_ValueError, "init: %d kinds expected", K_LAST + 1);
	if (!empty && !(empty = PyUnicode_FromString("")))
		return NULL;
	PyObject **slots[8] = { &btf_type, &kinds, &member_class, &param_class, &enumerator_class,
				&base_type_rule, &enum_type_rule, &declared_enum_rule };
	for (int i = 0; i < 8; i++)
		Py_XSETREF(*slots[i], Py_NewRef(given[i]));
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"init", init, METH_VARARGS,
	 "init(new_type, the Kind of each number, Member, Param, Enumerator, base_type, "
	 "enum_type, declared_enum): what loader.py makes (types.new_type makes a BtfType), "
	 "rules.py's functions."},
	{"load", load, METH_VARARGS,
	 "load(blob, symbols, function keys, function sort keys, features, var, decl_tag, "
	 "type_tag, pointer size) -> (types, index type, new ids of the placed VARs, chosen "
	 "functions, losses), as _Loader makes them, or None where loader.py must decide."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "objbtf.compiler_btf._amend",
	"_Loader of compiler_btf/loader.py in C, for the compiled build (see _amend.c).", -1,
	methods,
};

PyMODINIT_FUNC PyInit__amend(void)
{
	return PyModule_Create(&module);
}
