/*
 * objbtf.dwarf._dies: reader.read_units in C, for the compiled build.
 *
 * It decodes what reader.py's decoder decodes, attribute for attribute: the
 * same DIEs kept (the sets reader.py hands to init()), the same items
 * (members, enumerators, a function type's parameters), the same values
 * and conversions.  It only takes the well-formed path: at anything it does
 * not expect (a truncated or damaged section, a form it does not decode, a
 * value past 64 bits, an index outside its section) it returns None, and
 * reader.py's decoder decodes the sections again, with its own result or
 * error message.  So the C code never has to name what is wrong, only to
 * stop safely; every read is bounds-checked.
 *
 * The DIEs the encoder's Python code walks (the unit's own, functions,
 * variables and what is under them) become the Die objects reader.py makes;
 * every type DIE, with what is under it, stays in C, in the object's Arena
 * (_arena.h), which _loader.c reads and which makes a type DIE's Die only
 * when Python asks for it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_arena.h"

/* DW_FORM_* (DWARF 5, 7.5.6, and the GNU extensions reader.py knows) */
enum {
	F_ADDR = 0x01, F_BLOCK2 = 0x03, F_BLOCK4 = 0x04, F_DATA2 = 0x05, F_DATA4 = 0x06,
	F_DATA8 = 0x07, F_STRING = 0x08, F_BLOCK = 0x09, F_BLOCK1 = 0x0a, F_DATA1 = 0x0b,
	F_FLAG = 0x0c, F_SDATA = 0x0d, F_STRP = 0x0e, F_UDATA = 0x0f, F_REF_ADDR = 0x10,
	F_REF1 = 0x11, F_REF2 = 0x12, F_REF4 = 0x13, F_REF8 = 0x14, F_REF_UDATA = 0x15,
	F_INDIRECT = 0x16, F_SEC_OFFSET = 0x17, F_EXPRLOC = 0x18, F_FLAG_PRESENT = 0x19,
	F_STRX = 0x1a, F_ADDRX = 0x1b, F_REF_SUP4 = 0x1c, F_STRP_SUP = 0x1d, F_DATA16 = 0x1e,
	F_LINE_STRP = 0x1f, F_REF_SIG8 = 0x20, F_IMPLICIT_CONST = 0x21, F_LOCLISTX = 0x22,
	F_RNGLISTX = 0x23, F_REF_SUP8 = 0x24, F_STRX1 = 0x25, F_STRX2 = 0x26, F_STRX3 = 0x27,
	F_STRX4 = 0x28, F_ADDRX1 = 0x29, F_ADDRX2 = 0x2a, F_ADDRX3 = 0x2b, F_ADDRX4 = 0x2c,
	F_GNU_ADDR_INDEX = 0x1f01, F_GNU_STR_INDEX = 0x1f02, F_GNU_REF_ALT = 0x1f20,
	F_GNU_STRP_ALT = 0x1f21,
};

/* DW_AT_* whose raw values set the unit's bases (reader._unit_bases). */
enum { AT_STR_OFFSETS_BASE = 0x72, AT_ADDR_BASE = 0x73, AT_LOCLISTS_BASE = 0x8c };

/* How an attribute's bytes decode (reader._compile_plan's steps). */
enum step { S_FIXED, S_ULEB, S_SLEB, S_CSTR, S_BLOCK_ULEB, S_BLOCK_FIXED, S_TRUE, S_IMPLICIT };

/* A decoded value before conversion (reader._UnitDecoder.values). */
enum raw_kind { R_UINT, R_SINT, R_TRUE, R_BYTES, R_BLOCK, R_CSTR };

struct raw {
	enum raw_kind kind;
	uint64_t u;             /* R_UINT; R_SINT as int64 */
	Py_ssize_t pos, len;    /* R_BYTES, R_BLOCK, R_CSTR: where in .debug_info */
};

struct spec {
	uint64_t attr, form;
	int64_t implicit;
	enum step step;
	int size;               /* S_FIXED: bytes; S_BLOCK_FIXED: bytes of the length */
	int wanted;
};

struct abbrev {
	uint64_t tag;
	int has_children, defined;
	Py_ssize_t first, count;        /* its specs in the table's pool */
	Py_ssize_t fixed_size;          /* -1 unless every form has a fixed size */
};

struct abbrevs {
	struct abbrev *by_code;
	Py_ssize_t codes;               /* by_code has codes entries */
	struct spec *specs;
	Py_ssize_t nspecs, cap;
	int annotated;
};

struct section {
	const uint8_t *p;
	Py_ssize_t n;
};

/* ---- what init() was given ------------------------------------------------- */

#define BITMAP_BITS 65536
static uint8_t type_tags[BITMAP_BITS / 8], child_tags[BITMAP_BITS / 8], top_tags[BITMAP_BITS / 8];
static uint8_t item_parents[BITMAP_BITS / 8];
static uint8_t wanted_attrs[BITMAP_BITS / 8];
/* die_type: reader.new_die, whose compiled call takes its arguments as a vector. */
static PyObject *die_type, *unit_type, *expr_type;
/* An item's children when its abbreviation has none. */
static PyObject *no_kids;
static uint64_t annotation_tag;

/* reader.ITEM_ATTRS: the children kept as items, and the attributes of each. */
#define MAX_ITEM_TAGS 4
#define MAX_ITEM_ATTRS 8
static struct {
	uint64_t tag;
	int count;
	uint64_t attrs[MAX_ITEM_ATTRS];
} items[MAX_ITEM_TAGS];
static int nitems;

/* reader._FORMS_OF: the forms an attribute may have. */
#define MAX_RULES 8
#define MAX_RULE_FORMS 16
static struct {
	uint64_t attr;
	int count;
	uint64_t forms[MAX_RULE_FORMS];
} rules[MAX_RULES];
static int nrules;

static int bit(const uint8_t *map, uint64_t i)
{
	return i < BITMAP_BITS && (map[i >> 3] >> (i & 7) & 1);
}

static int fill_bitmap(uint8_t *map, PyObject *set)
{
	PyObject *it = PyObject_GetIter(set), *item;

	if (!it)
		return -1;
	memset(map, 0, BITMAP_BITS / 8);
	while ((item = PyIter_Next(it))) {
		unsigned long v = PyLong_AsUnsignedLong(item);

		Py_DECREF(item);
		if (PyErr_Occurred() || v >= BITMAP_BITS) {
			Py_DECREF(it);
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_ValueError, "a tag or attribute past 0xffff");
			return -1;
		}
		map[v >> 3] |= 1 << (v & 7);
	}
	Py_DECREF(it);
	return PyErr_Occurred() ? -1 : 0;
}

static int fill_rules(PyObject *forms_of)
{
	PyObject *attr, *rule;
	Py_ssize_t i = 0;

	nrules = 0;
	while (PyDict_Next(forms_of, &i, &attr, &rule)) {
		PyObject *forms = PyTuple_Check(rule) && PyTuple_GET_SIZE(rule) == 3
				  ? PyTuple_GET_ITEM(rule, 2) : NULL;
		PyObject *it, *item;

		if (!forms || nrules == MAX_RULES) {
			PyErr_SetString(PyExc_ValueError, "forms_of: (name, what, forms) per attribute");
			return -1;
		}
		rules[nrules].attr = PyLong_AsUnsignedLongLong(attr);
		rules[nrules].count = 0;
		if (!(it = PyObject_GetIter(forms)))
			return -1;
		while ((item = PyIter_Next(it))) {
			if (rules[nrules].count == MAX_RULE_FORMS) {
				Py_DECREF(item);
				Py_DECREF(it);
				PyErr_SetString(PyExc_ValueError, "forms_of: too many forms");
				return -1;
			}
			rules[nrules].forms[rules[nrules].count++] = PyLong_AsUnsignedLongLong(item);
			Py_DECREF(item);
		}
		Py_DECREF(it);
		if (PyErr_Occurred())
			return -1;
		nrules++;
	}
	return 0;
}

/* Whether reader._FORMS_OF lets ``attr`` have ``form``. */
static int form_allowed(uint64_t attr, uint64_t form)
{
	for (int r = 0; r < nrules; r++) {
		if (rules[r].attr != attr)
			continue;
		for (int f = 0; f < rules[r].count; f++)
			if (rules[r].forms[f] == form)
				return 1;
		return 0;
	}
	return 1;
}

/* items[] from reader.ITEM_ATTRS: tag -> tuple of attributes. */
static int fill_items(PyObject *item_attrs)
{
	PyObject *tag, *attrs;
	Py_ssize_t pos = 0;

	nitems = 0;
	while (PyDict_Next(item_attrs, &pos, &tag, &attrs)) {
		Py_ssize_t n = PyTuple_Check(attrs) ? PyTuple_GET_SIZE(attrs) : -1;

		if (nitems == MAX_ITEM_TAGS || n < 0 || n > MAX_ITEM_ATTRS) {
			PyErr_SetString(PyExc_ValueError, "ITEM_ATTRS does not fit _dies.c's table");
			return -1;
		}
		items[nitems].tag = PyLong_AsUnsignedLongLong(tag);
		items[nitems].count = (int)n;
		for (Py_ssize_t i = 0; i < n; i++)
			items[nitems].attrs[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(attrs, i));
		if (PyErr_Occurred())
			return -1;
		nitems++;
	}
	return 0;
}

/* The index of ``tag`` in items[], or -1 if it is not an item's. */
static int item_of(uint64_t tag)
{
	for (int i = 0; i < nitems; i++)
		if (items[i].tag == tag)
			return i;
	return -1;
}

static PyObject *init(PyObject *self, PyObject *args)
{
	PyObject *die, *unit, *expr, *types, *children, *tops, *wanted, *forms_of, *item_attrs;
	PyObject *parents;
	unsigned long long annotation;

	if (!PyArg_ParseTuple(args, "OOOOOOOO!KO!O:init", &die, &unit, &expr, &types, &children,
			      &tops, &wanted, &PyDict_Type, &forms_of, &annotation, &PyDict_Type,
			      &item_attrs, &parents))
		return NULL;
	if (fill_bitmap(type_tags, types) || fill_bitmap(child_tags, children)
	    || fill_bitmap(top_tags, tops) || fill_bitmap(wanted_attrs, wanted)
	    || fill_rules(forms_of) || fill_items(item_attrs) || fill_bitmap(item_parents, parents))
		return NULL;
	/* Items are an arena's: only a type DIE has them. */
	for (int i = 0; i < BITMAP_BITS; i++)
		if (bit(item_parents, i) && !bit(type_tags, i))
			return PyErr_Format(PyExc_ValueError, "item parent tag 0x%x is no type tag", i);
	if (!no_kids && !(no_kids = PyTuple_New(0)))
		return NULL;
	Py_INCREF(die);
	Py_INCREF(unit);
	Py_INCREF(expr);
	Py_XSETREF(die_type, die);
	Py_XSETREF(unit_type, unit);
	Py_XSETREF(expr_type, expr);
	annotation_tag = annotation;
	Py_RETURN_NONE;
}

/* ---- bytes ------------------------------------------------------------------ */

/* The unsigned integer of ``size`` bytes at ``pos``; -1 past the section. */
static int read_uint(const struct section *s, Py_ssize_t pos, int size, int big, uint64_t *out)
{
	uint64_t v = 0;

	if (pos < 0 || size > s->n - pos)
		return -1;
	for (int i = 0; i < size; i++)
		v |= (uint64_t)s->p[pos + (big ? i : size - 1 - i)] << (8 * (size - 1 - i));
	*out = v;
	return 0;
}

/* A LEB128 that fits 64 bits, unsigned or (``sign``) signed, the latter
 * sign-extended; reader.read_uleb has no limit, and a longer value makes the
 * Python decoder take over.  A tenth byte holds bit 63 alone: 0 or 1 for an
 * unsigned value, the sign repeated (0 or 0x7f) for a signed one. */
static int read_leb(const struct section *s, Py_ssize_t *pos, int sign, uint64_t *out)
{
	uint64_t v = 0;

	for (int shift = 0; shift < 64; shift += 7) {
		uint8_t b;

		if (*pos >= s->n)
			return -1;
		b = s->p[(*pos)++];
		if (shift == 63 && (sign ? b != 0 && b != 0x7f : b > 1))
			return -1;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (b < 0x80) {
			if (sign && b & 0x40 && shift < 57)
				v |= ~(uint64_t)0 << (shift + 7);
			*out = v;
			return 0;
		}
	}
	return -1;
}

static int read_uleb(const struct section *s, Py_ssize_t *pos, uint64_t *out)
{
	return read_leb(s, pos, 0, out);
}

static int read_sleb(const struct section *s, Py_ssize_t *pos, int64_t *out)
{
	return read_leb(s, pos, 1, (uint64_t *)out);
}

/* Past a LEB128 of any length, as reader._UnitDecoder.skip steps over one. */
static int skip_leb(const struct section *s, Py_ssize_t *pos)
{
	while (*pos < s->n && s->p[*pos] & 0x80)
		(*pos)++;
	if (*pos >= s->n)
		return -1;
	(*pos)++;
	return 0;
}

/* ---- abbreviations (reader.parse_abbrevs, reader._compile_plan) ------------ */

/* The step and size of ``form``; -1 for a form this decoder does not take. */
static int form_step(uint64_t form, int addr_size, int off_size, int version, struct spec *sp)
{
	int size = 0;

	switch (form) {
	case F_DATA1: case F_FLAG: case F_REF1: case F_STRX1: case F_ADDRX1:
		size = 1; break;
	case F_DATA2: case F_REF2: case F_STRX2: case F_ADDRX2:
		size = 2; break;
	case F_STRX3: case F_ADDRX3:
		size = 3; break;
	case F_DATA4: case F_REF4: case F_STRX4: case F_ADDRX4: case F_REF_SUP4:
		size = 4; break;
	case F_DATA8: case F_REF8: case F_REF_SIG8: case F_REF_SUP8:
		size = 8; break;
	case F_DATA16:
		size = 16; break;
	case F_ADDR:
		size = addr_size; break;
	case F_REF_ADDR:
		size = version == 2 ? addr_size : off_size; break;
	case F_STRP: case F_SEC_OFFSET: case F_LINE_STRP: case F_STRP_SUP: case F_GNU_REF_ALT:
	case F_GNU_STRP_ALT:
		size = off_size; break;
	case F_UDATA: case F_REF_UDATA: case F_STRX: case F_ADDRX: case F_LOCLISTX:
	case F_RNGLISTX: case F_GNU_ADDR_INDEX: case F_GNU_STR_INDEX:
		sp->step = S_ULEB; return 0;
	case F_SDATA:
		sp->step = S_SLEB; return 0;
	case F_STRING:
		sp->step = S_CSTR; return 0;
	case F_BLOCK: case F_EXPRLOC:
		sp->step = S_BLOCK_ULEB; return 0;
	case F_BLOCK1:
		sp->step = S_BLOCK_FIXED; sp->size = 1; return 0;
	case F_BLOCK2:
		sp->step = S_BLOCK_FIXED; sp->size = 2; return 0;
	case F_BLOCK4:
		sp->step = S_BLOCK_FIXED; sp->size = 4; return 0;
	case F_FLAG_PRESENT:
		sp->step = S_TRUE; return 0;
	case F_IMPLICIT_CONST:
		sp->step = S_IMPLICIT; return 0;
	default:                /* DW_FORM_indirect, and forms reader.py refuses */
		return -1;
	}
	sp->step = S_FIXED;
	sp->size = size;
	return 0;
}

#define MAX_CODE 65536

static void free_abbrevs(struct abbrevs *t)
{
	PyMem_Free(t->by_code);
	PyMem_Free(t->specs);
	memset(t, 0, sizeof(*t));
}

static int add_spec(struct abbrevs *t, const struct spec *sp)
{
	if (t->nspecs == t->cap) {
		Py_ssize_t cap = t->cap ? 2 * t->cap : 256;
		struct spec *specs = PyMem_Realloc(t->specs, cap * sizeof(*specs));

		if (!specs)
			return -1;
		t->specs = specs;
		t->cap = cap;
	}
	t->specs[t->nspecs++] = *sp;
	return 0;
}

/* The table at ``pos``; -1 where reader.parse_abbrevs would raise, or on a
 * code past MAX_CODE or a form not decoded here. */
static int parse_abbrevs(const struct section *s, Py_ssize_t pos, int addr_size, int off_size,
			 int version, struct abbrevs *t)
{
	memset(t, 0, sizeof(*t));
	while (pos < s->n) {
		uint64_t code, tag;
		struct abbrev ab = {0};

		if (read_uleb(s, &pos, &code))
			return -1;
		if (code == 0)
			break;
		if (code >= MAX_CODE || read_uleb(s, &pos, &tag) || pos >= s->n)
			return -1;
		ab.tag = tag;
		ab.has_children = s->p[pos++] != 0;
		ab.defined = 1;
		ab.first = t->nspecs;
		ab.fixed_size = 0;
		for (;;) {
			struct spec sp = {0};

			if (read_uleb(s, &pos, &sp.attr) || read_uleb(s, &pos, &sp.form))
				return -1;
			if (sp.attr == 0 && sp.form == 0)
				break;
			if (sp.form == F_IMPLICIT_CONST && read_sleb(s, &pos, &sp.implicit))
				return -1;
			if (form_step(sp.form, addr_size, off_size, version, &sp))
				return -1;
			sp.wanted = bit(wanted_attrs, sp.attr);
			if (sp.step == S_FIXED && ab.fixed_size >= 0)
				ab.fixed_size += sp.size;
			else if (sp.step != S_TRUE && sp.step != S_IMPLICIT)
				ab.fixed_size = -1;
			if (add_spec(t, &sp))
				return -2;
		}
		ab.count = t->nspecs - ab.first;
		if ((Py_ssize_t)code >= t->codes) {
			Py_ssize_t codes = (Py_ssize_t)code + 1 > 2 * t->codes ? (Py_ssize_t)code + 1
								 : 2 * t->codes;
			struct abbrev *by_code = PyMem_Realloc(t->by_code, codes * sizeof(*by_code));

			if (!by_code)
				return -2;
			memset(by_code + t->codes, 0, (codes - t->codes) * sizeof(*by_code));
			t->by_code = by_code;
			t->codes = codes;
		}
		t->by_code[code] = ab;
	}
	for (Py_ssize_t c = 0; c < t->codes; c++)
		t->annotated |= t->by_code[c].defined && t->by_code[c].tag == annotation_tag;
	return 0;
}

/* ---- strings ---------------------------------------------------------------- */

/* .debug_str strings by offset: member and type names repeat a lot. */
struct strings {
	Py_ssize_t *keys;
	PyObject **values;
	Py_ssize_t size, used;
};

static void free_strings(struct strings *c)
{
	for (Py_ssize_t i = 0; i < c->size; i++)
		Py_XDECREF(c->values[i]);
	PyMem_Free(c->keys);
	PyMem_Free(c->values);
	memset(c, 0, sizeof(*c));
}

/* The NUL-terminated string at ``off`` as UTF-8 with 'replace' (reader._cstr);
 * NULL with no exception set when it is outside the section. */
static PyObject *cstr(const struct section *s, uint64_t off)
{
	const uint8_t *end;

	if (off >= (uint64_t)s->n)
		return NULL;
	end = memchr(s->p + off, 0, s->n - off);
	if (!end)
		return NULL;
	return PyUnicode_DecodeUTF8((const char *)s->p + off, end - (s->p + off), "replace");
}

static int strings_grow(struct strings *c)
{
	Py_ssize_t size = c->size ? 2 * c->size : 1024;
	Py_ssize_t *keys = PyMem_Malloc(size * sizeof(*keys));
	PyObject **values = PyMem_Calloc(size, sizeof(*values));

	if (!keys || !values) {
		PyMem_Free(keys);
		PyMem_Free(values);
		return -1;
	}
	for (Py_ssize_t i = 0; i < c->size; i++) {
		Py_ssize_t j;

		if (!c->values[i])
			continue;
		for (j = c->keys[i] & (size - 1); values[j]; j = (j + 1) & (size - 1))
			;
		keys[j] = c->keys[i];
		values[j] = c->values[i];
	}
	PyMem_Free(c->keys);
	PyMem_Free(c->values);
	c->keys = keys;
	c->values = values;
	c->size = size;
	return 0;
}

/* A new reference to the .debug_str string at ``off`` (reader's strp). */
static PyObject *strp(struct strings *c, const struct section *str, uint64_t off)
{
	Py_ssize_t j;
	PyObject *v;

	if (off >= (uint64_t)str->n)
		return NULL;
	if (2 * (c->used + 1) > c->size && strings_grow(c))
		return PyErr_NoMemory();
	for (j = (Py_ssize_t)(off * 0x9e3779b97f4a7c15ull >> 20) & (c->size - 1); c->values[j];
	     j = (j + 1) & (c->size - 1))
		if (c->keys[j] == (Py_ssize_t)off) {
			Py_INCREF(c->values[j]);
			return c->values[j];
		}
	if (!(v = cstr(str, off)))
		return NULL;
	c->keys[j] = (Py_ssize_t)off;
	c->values[j] = v;
	c->used++;
	Py_INCREF(v);
	return v;
}

/* ---- one unit (reader._read_unit) ------------------------------------------ */

struct unit {
	const struct section *info, *str, *line_str, *str_offsets, *loclists;
	int big, version, addr_size, off_size;
	uint64_t cu_offset, str_offsets_base, addr_base, loclists_base;
	struct abbrevs abbrevs;
	struct strings *strings;
};

/* Decode the values of one DIE's specs at ``*pos``: the wanted ones into
 * ``raws`` (in spec order), the others only stepped over. */
static int decode_values(const struct unit *u, const struct abbrev *ab, Py_ssize_t *pos,
			 struct raw *raws)
{
	const struct section *s = u->info;

	for (Py_ssize_t i = 0; i < ab->count; i++) {
		const struct spec *sp = &u->abbrevs.specs[ab->first + i];
		struct raw r = {R_UINT, 0, 0, 0};
		uint64_t len;
		int64_t sv;

		switch (sp->step) {
		case S_FIXED:
			if (sp->size > 8 || sp->size == 3) {
				if (sp->size > s->n - *pos)
					return -1;
				r.kind = R_BYTES;
				r.pos = *pos;
				r.len = sp->size;
			} else if (sp->wanted && read_uint(s, *pos, sp->size, u->big, &r.u)) {
				return -1;
			}
			*pos += sp->size;
			break;
		case S_ULEB:
			if (sp->wanted ? read_uleb(s, pos, &r.u) : skip_leb(s, pos))
				return -1;
			break;
		case S_SLEB:
			if (!sp->wanted) {
				if (skip_leb(s, pos))
					return -1;
				break;
			}
			if (read_sleb(s, pos, &sv))
				return -1;
			r.kind = R_SINT;
			r.u = (uint64_t)sv;
			break;
		case S_CSTR: {
			const uint8_t *end = *pos < s->n ? memchr(s->p + *pos, 0, s->n - *pos) : NULL;

			if (!end)
				return -1;
			r.kind = R_CSTR;
			r.pos = *pos;
			r.len = end - (s->p + *pos);
			*pos += r.len + 1;
			break;
		}
		case S_BLOCK_ULEB:
		case S_BLOCK_FIXED:
			if (sp->step == S_BLOCK_ULEB ? read_uleb(s, pos, &len)
						      : read_uint(s, *pos, sp->size, u->big, &len))
				return -1;
			if (sp->step == S_BLOCK_FIXED)
				*pos += sp->size;
			if (len > (uint64_t)(s->n - *pos))
				return -1;
			r.kind = R_BLOCK;
			r.pos = *pos;
			r.len = (Py_ssize_t)len;
			*pos += r.len;
			break;
		case S_TRUE:
			r.kind = R_TRUE;
			break;
		case S_IMPLICIT:
			r.kind = R_SINT;
			r.u = (uint64_t)sp->implicit;
			break;
		}
		raws[i] = r;
	}
	return 0;
}

/* Past one DIE's values without decoding them (reader._UnitDecoder.skip). */
static int skip_values(const struct unit *u, const struct abbrev *ab, Py_ssize_t *pos)
{
	const struct section *s = u->info;
	uint64_t len;

	if (ab->fixed_size >= 0) {
		*pos += ab->fixed_size;
		return 0;
	}
	for (Py_ssize_t i = 0; i < ab->count; i++) {
		const struct spec *sp = &u->abbrevs.specs[ab->first + i];

		switch (sp->step) {
		case S_FIXED:
			*pos += sp->size;
			break;
		case S_ULEB:
		case S_SLEB:
			if (skip_leb(s, pos))
				return -1;
			break;
		case S_CSTR: {
			const uint8_t *end = *pos < s->n ? memchr(s->p + *pos, 0, s->n - *pos) : NULL;

			if (!end)
				return -1;
			*pos = end - s->p + 1;
			break;
		}
		case S_BLOCK_ULEB:
			if (read_uleb(s, pos, &len) || len > (uint64_t)(s->n - *pos))
				return -1;
			*pos += (Py_ssize_t)len;
			break;
		case S_BLOCK_FIXED:
			if (read_uint(s, *pos, sp->size, u->big, &len))
				return -1;
			*pos += sp->size;
			if (len > (uint64_t)(s->n - *pos))
				return -1;
			*pos += (Py_ssize_t)len;
			break;
		case S_TRUE:
		case S_IMPLICIT:
			break;
		}
		if (*pos > s->n)
			return -1;
	}
	return 0;
}

/* reader._unit_bases: the unit DIE's raw bases; -1 on one that is no
 * unsigned integer (reader.py takes it as it is). */
static int unit_bases(struct unit *u, const struct abbrev *ab, const struct raw *raws)
{
	for (Py_ssize_t i = 0; i < ab->count; i++) {
		const struct spec *sp = &u->abbrevs.specs[ab->first + i];
		uint64_t *base = sp->attr == AT_STR_OFFSETS_BASE ? &u->str_offsets_base
			       : sp->attr == AT_ADDR_BASE ? &u->addr_base
			       : sp->attr == AT_LOCLISTS_BASE ? &u->loclists_base : NULL;

		if (!base || !sp->wanted)
			continue;
		if (raws[i].kind != R_UINT || raws[i].u > PY_SSIZE_T_MAX / 2)
			return -1;
		*base = raws[i].u;
	}
	return 0;
}

/* Where entry ``index`` of a table of offsets at ``base`` (a unit's
 * DW_AT_*_base, any 64-bit value in hostile DWARF) is; -1 past what a
 * section can hold, where base + index * size would wrap (reader.py's
 * unbounded ints then raise). */
static Py_ssize_t table_entry(uint64_t base, uint64_t index, int size)
{
	uint64_t max = (uint64_t)PY_SSIZE_T_MAX;

	if (base > max || index > (max - base) / (uint64_t)size)
		return -1;
	return (Py_ssize_t)(base + index * (uint64_t)size);
}

/* The string at index ``index`` of the unit's .debug_str_offsets. */
static PyObject *strx(struct unit *u, uint64_t index)
{
	uint64_t off;

	if (read_uint(u->str_offsets, table_entry(u->str_offsets_base, index, u->off_size),
		      u->off_size, u->big, &off))
		return NULL;
	return strp(u->strings, u->str, off);
}

static uint64_t uint3(const struct unit *u, const struct raw *r)
{
	uint64_t v;

	read_uint(u->info, r->pos, 3, u->big, &v);
	return v;
}

/* The value reader.py's converter makes of ``r``, into *cv (a str's
 * reference then the caller's); -1 where this decoder gives up, with an
 * exception set only on a Python error (memory). */
static int cvalue(struct unit *u, const struct spec *sp, const struct raw *r, struct cval *cv)
{
	PyObject *s;
	uint64_t off;

	cv->attr = (uint32_t)sp->attr;
	cv->kind = CV_UINT;
	switch (sp->form) {
	case F_REF1: case F_REF2: case F_REF4: case F_REF8: case F_REF_UDATA:
		if (r->u > UINT64_MAX - u->cu_offset)
			return -1;
		cv->u = u->cu_offset + r->u;
		return 0;
	case F_ADDRX3:
		cv->u = uint3(u, r);
		return 0;
	case F_LOCLISTX:
		if (read_uint(u->loclists, table_entry(u->loclists_base, r->u, u->off_size),
			      u->off_size, u->big, &off) || off > UINT64_MAX - u->loclists_base)
			return -1;
		cv->u = u->loclists_base + off;
		return 0;
	case F_STRP:
		s = strp(u->strings, u->str, r->u);
		break;
	case F_STRING:
		s = PyUnicode_DecodeUTF8((const char *)u->info->p + r->pos, r->len, "replace");
		break;
	case F_LINE_STRP:
		s = cstr(u->line_str, r->u);
		break;
	case F_STRX3:
		s = strx(u, uint3(u, r));
		break;
	case F_STRX: case F_STRX1: case F_STRX2: case F_STRX4: case F_GNU_STR_INDEX:
		s = strx(u, r->u);
		break;
	default:
		switch (r->kind) {
		case R_UINT:
			cv->u = r->u;
			return 0;
		case R_SINT:
			cv->kind = CV_SINT;
			cv->u = r->u;
			return 0;
		case R_TRUE:
			cv->kind = CV_TRUE;
			return 0;
		case R_BYTES: case R_BLOCK:
			cv->kind = r->kind == R_BYTES ? CV_BYTES : CV_EXPR;
			cv->span.pos = r->pos;
			cv->span.len = r->len;
			return 0;
		case R_CSTR:            /* DW_FORM_string, converted above */
			break;
		}
		return -1;
	}
	if (!s)
		return -1;
	cv->kind = CV_STR;
	cv->str = s;
	return 0;
}

/* The attrs dict of a DIE made in Python; NULL, with or without an exception set. */
static PyObject *attributes(struct unit *u, const struct abbrev *ab, const struct raw *raws)
{
	PyObject *attrs = PyDict_New();

	if (!attrs)
		return NULL;
	for (Py_ssize_t i = 0; i < ab->count; i++) {
		const struct spec *sp = &u->abbrevs.specs[ab->first + i];
		struct cval cv;
		PyObject *key, *value;
		int failed;

		if (!sp->wanted)
			continue;
		if (!form_allowed(sp->attr, sp->form) || cvalue(u, sp, &raws[i], &cv)) {
			Py_DECREF(attrs);
			return NULL;
		}
		value = cval_object(u->info->p, &cv, expr_type);
		if (cv.kind == CV_STR)
			Py_DECREF(cv.str);
		key = value ? PyLong_FromUnsignedLongLong(sp->attr) : NULL;
		failed = !key || PyDict_SetItem(attrs, key, value);
		Py_XDECREF(key);
		Py_XDECREF(value);
		if (failed) {
			Py_DECREF(attrs);
			return NULL;
		}
	}
	return attrs;
}

/* A DIE made in Python: a Die, with a list of children if its abbreviation
 * has children (*children gets it, borrowed); NULL on failure. */
static PyObject *make_die(const struct abbrev *ab, Py_ssize_t die_off, PyObject *attrs, int top,
			  PyObject **children)
{
	PyObject *args[5] = {
		PyLong_FromSsize_t(die_off), PyLong_FromUnsignedLongLong(ab->tag), attrs,
		top ? Py_True : Py_False, NULL,
	};
	size_t nargs = ab->has_children ? 5 : 4;
	PyObject *die = NULL;

	if (ab->has_children)
		args[4] = PyList_New(0);
	if (args[0] && args[1] && (nargs < 5 || args[4]))
		die = PyObject_Vectorcall(die_type, args, nargs, NULL);
	*children = die ? args[4] : NULL;
	Py_XDECREF(args[0]);
	Py_XDECREF(args[1]);
	Py_XDECREF(args[4]);            /* the Die holds it */
	return die;
}

/* ---- the arena (_arena.h) ----------------------------------------------------- */

/* The buffers of the last arena freed, for the next one: an object's are
 * hundreds of kilobytes, whose growing and first touch took a tenth of
 * the decoder's time.  Not those of an arena past SPARE_MAX bytes (of
 * vmlinux.o, say), which a resident worker would hold on to. */
#define SPARE_MAX ((Py_ssize_t)16 << 20)
static struct {
	struct entry *e;
	struct cval *v;
	int32_t *dies;
	Py_ssize_t cap, capv, capd;
} spare;

static void arena_dealloc(Arena *a)
{
	for (Py_ssize_t i = 0; i < a->nv; i++)
		if (a->v[i].kind == CV_STR)
			Py_DECREF(a->v[i].str);
	if (a->cap > spare.cap && a->capv > spare.capv && a->capd > spare.capd
	    && a->cap * (Py_ssize_t)sizeof(*a->e) + a->capv * (Py_ssize_t)sizeof(*a->v)
	       + a->capd * (Py_ssize_t)sizeof(*a->dies) <= SPARE_MAX) {
		PyMem_Free(spare.e);
		PyMem_Free(spare.v);
		PyMem_Free(spare.dies);
		spare.e = a->e;
		spare.v = a->v;
		spare.dies = a->dies;
		spare.cap = a->cap;
		spare.capv = a->capv;
		spare.capd = a->capd;
	} else {
		PyMem_Free(a->e);
		PyMem_Free(a->v);
		PyMem_Free(a->dies);
	}
	if (a->info.obj)
		PyBuffer_Release(&a->info);
	Py_XDECREF(a->made);
	Py_TYPE(a)->tp_free((PyObject *)a);
}

/* Room for one more of ``size`` bytes in *array of *cap (doubled); -1 on no memory. */
static int grow(void **array, Py_ssize_t used, Py_ssize_t *cap, size_t size)
{
	Py_ssize_t more;
	void *grown;

	if (used < *cap)
		return 0;
	more = *cap ? 2 * *cap : 1024;
	if (!(grown = PyMem_Realloc(*array, more * size))) {
		PyErr_NoMemory();
		return -1;
	}
	*array = grown;
	*cap = more;
	return 0;
}

/* A new entry for a DIE or item at ``off`` with its wanted values: its
 * index, or -1 where the decoder gives up (an error set only on a Python
 * error). */
static int32_t add_entry(Arena *a, struct unit *u, const struct abbrev *ab,
			 const struct raw *raws, Py_ssize_t off, uint32_t flags)
{
	struct entry *e;

	if (a->n >= INT32_MAX || grow((void **)&a->e, a->n, &a->cap, sizeof(*a->e)))
		return -1;
	e = &a->e[a->n];
	*e = (struct entry){off, (uint32_t)ab->tag, flags, NONE, NONE, NONE, (uint32_t)a->nv, 0};
	for (Py_ssize_t i = 0; i < ab->count; i++) {
		const struct spec *sp = &u->abbrevs.specs[ab->first + i];

		if (!sp->wanted)
			continue;
		if (!form_allowed(sp->attr, sp->form) || a->nv >= UINT32_MAX
		    || grow((void **)&a->v, a->nv, &a->capv, sizeof(*a->v))
		    || cvalue(u, sp, &raws[i], &a->v[a->nv]))
			return -1;
		a->nv++;
		e->nvals++;
	}
	return (int32_t)a->n++;
}

/* An open parent: a kept DIE made in Python (``children``, its list), an
 * entry of the arena (``entry``, and the last of its children and items so
 * far, where the next is linked), or neither (a DIE that is not kept). */
struct open {
	PyObject *children;
	int32_t entry, last_child, last_item;
};

/* Entry ``child`` at the end of the children (or ``item``s) of the open
 * arena entry ``parent``. */
static void link_entry(Arena *a, struct open *parent, int32_t child, int item)
{
	struct entry *p = &a->e[parent->entry];
	int32_t *last = item ? &parent->last_item : &parent->last_child;

	if (*last == NONE)
		*(item ? &p->first_item : &p->first_child) = child;
	else
		a->e[*last].next = child;
	*last = child;
}

static PyObject *materialize(Arena *a, int32_t idx);

/* The Dies of a chain of DIE entries, as a new list. */
static PyObject *chain_list(Arena *a, int32_t first)
{
	PyObject *list = PyList_New(0);

	for (int32_t i = first; list && i != NONE; i = a->e[i].next) {
		PyObject *die = materialize(a, i);

		if (!die || PyList_Append(list, die))
			Py_CLEAR(list);
		Py_XDECREF(die);
	}
	return list;
}

/* The tuple reader.py makes of item entry ``idx``: (tag, each of
 * ITEM_ATTRS' values or None, the Dies under it). */
static PyObject *item_tuple(Arena *a, int32_t idx)
{
	const struct entry *e = &a->e[idx];
	int which = item_of(e->tag), n = which < 0 ? 0 : items[which].count;
	PyObject *out = PyTuple_New(n + 2), *v;

	if (!out)
		return NULL;
	if (!(v = PyLong_FromUnsignedLong(e->tag)))
		goto fail;
	PyTuple_SET_ITEM(out, 0, v);
	for (int k = 0; k < n; k++) {
		const struct cval *cv = arena_attr(a, e, (uint32_t)items[which].attrs[k]);

		if (!(v = cv ? cval_object(a->info.buf, cv, expr_type) : Py_NewRef(Py_None)))
			goto fail;
		PyTuple_SET_ITEM(out, k + 1, v);
	}
	if (!(v = e->flags & E_CHILDREN ? chain_list(a, e->first_child) : Py_NewRef(no_kids)))
		goto fail;
	PyTuple_SET_ITEM(out, n + 1, v);
	return out;
fail:
	Py_DECREF(out);
	return NULL;
}

/* The Die of DIE entry ``idx``, made once (a new reference). */
static PyObject *materialize(Arena *a, int32_t idx)
{
	const struct entry *e = &a->e[idx];
	PyObject *key = PyLong_FromSsize_t(e->offset), *die, *args[6] = {NULL};
	size_t nargs = 4;

	if (!key)
		return NULL;
	if ((die = PyDict_GetItemWithError(a->made, key)) || PyErr_Occurred()) {
		Py_DECREF(key);
		return Py_XNewRef(die);
	}
	args[0] = Py_NewRef(key);
	args[1] = PyLong_FromUnsignedLong(e->tag);
	args[2] = PyDict_New();
	args[3] = Py_NewRef(e->flags & E_TOP ? Py_True : Py_False);
	for (uint32_t i = 0; args[2] && i < e->nvals; i++) {
		const struct cval *cv = &a->v[e->first_val + i];
		PyObject *k = PyLong_FromUnsignedLong(cv->attr), *v = cval_object(a->info.buf, cv, expr_type);

		if (!k || !v || PyDict_SetItem(args[2], k, v))
			Py_CLEAR(args[2]);
		Py_XDECREF(k);
		Py_XDECREF(v);
	}
	if (e->flags & E_CHILDREN) {
		args[4] = chain_list(a, e->first_child);
		nargs = 5;
		if (e->flags & E_ITEM_PARENT) {
			args[5] = PyList_New(0);
			nargs = 6;
			for (int32_t i = e->first_item; args[5] && i != NONE; i = a->e[i].next) {
				PyObject *it = item_tuple(a, i);

				if (!it || PyList_Append(args[5], it))
					Py_CLEAR(args[5]);
				Py_XDECREF(it);
			}
		}
	}
	die = NULL;
	if (args[1] && args[2] && (nargs < 5 || args[4]) && (nargs < 6 || args[5]))
		die = PyObject_Vectorcall(die_type, args, nargs, NULL);
	for (size_t i = 0; i < 6; i++)
		Py_XDECREF(args[i]);
	if (die && PyDict_SetItem(a->made, key, die))
		Py_CLEAR(die);
	Py_DECREF(key);
	return die;
}

static PyObject *arena_die(Arena *a, PyObject *offset)
{
	uint64_t off;
	int32_t idx;

	if (!PyLong_Check(offset))
		Py_RETURN_NONE;
	off = PyLong_AsUnsignedLongLong(offset);
	if (PyErr_Occurred()) {         /* negative, or past 64 bits: no DIE's */
		PyErr_Clear();
		Py_RETURN_NONE;
	}
	if ((idx = arena_find(a, off)) == NONE)
		Py_RETURN_NONE;
	return materialize(a, idx);
}

static PyObject *arena_dies(Arena *a, PyObject *args)
{
	Py_ssize_t first, end;
	PyObject *list;

	if (!PyArg_ParseTuple(args, "nn:dies", &first, &end))
		return NULL;
	if (first < 0 || end > a->ndies || first > end)
		return PyErr_Format(PyExc_IndexError, "dies(%zd, %zd) of %zd", first, end, a->ndies);
	if (!(list = PyList_New(0)))
		return NULL;
	for (Py_ssize_t i = first; i < end; i++) {
		PyObject *die = materialize(a, a->dies[i]);

		if (!die || PyList_Append(list, die)) {
			Py_XDECREF(die);
			Py_DECREF(list);
			return NULL;
		}
		Py_DECREF(die);
	}
	return list;
}

static PyMethodDef arena_methods[] = {
	{"die", (PyCFunction)arena_die, METH_O,
	 "die(offset): the Die of the type DIE (or DIE under one) at offset, as reader.py's "
	 "decoder makes it, made once; None if the arena has no DIE there."},
	{"dies", (PyCFunction)arena_dies, METH_VARARGS,
	 "dies(first, end): the Dies of the arena's DIEs first to end (a unit's first_type and "
	 "end_type), in order."},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject arena_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "objbtf.dwarf._dies.Arena",
	.tp_basicsize = sizeof(Arena),
	.tp_dealloc = (destructor)arena_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "The type DIEs of one object, kept in C (see _arena.h).",
	.tp_methods = arena_methods,
};

/* A new arena, holding .debug_info's buffer ``info`` (taken over). */
static Arena *new_arena(Py_buffer *info)
{
	Arena *a = PyObject_New(Arena, &arena_type);

	if (!a) {
		PyBuffer_Release(info);
		return NULL;
	}
	a->e = spare.e;
	a->v = spare.v;
	a->dies = spare.dies;
	a->cap = spare.cap;
	a->capv = spare.capv;
	a->capd = spare.capd;
	memset(&spare, 0, sizeof(spare));
	a->n = a->nv = a->ndies = 0;
	a->info = *info;
	if (!(a->made = PyDict_New())) {
		Py_DECREF(a);
		return NULL;
	}
	return a;
}

/* ---- one unit (reader._read_unit) ------------------------------------------ */

/* Whether the open entry ``idx`` takes items: a DIE (not an item) whose tag
 * is an item parent's. */
static int takes_items(const Arena *a, int32_t idx)
{
	return (a->e[idx].flags & (E_ITEM_PARENT | E_ITEM)) == E_ITEM_PARENT;
}

static PyObject *read_unit(struct unit *u, Arena *a, Py_ssize_t pos, Py_ssize_t end)
{
	const struct section *s = u->info;
	PyObject *dies = PyList_New(0), *by_offset = PyDict_New(), *root = NULL;
	PyObject *result = NULL;
	struct open *stack = NULL;
	struct raw *raws = NULL;
	Py_ssize_t depth = 0, cap = 0, nraws = 0, first_type = a->ndies;

	if (!dies || !by_offset)
		goto out;
	for (Py_ssize_t c = 0; c < u->abbrevs.codes; c++)
		if (u->abbrevs.by_code[c].count > nraws)
			nraws = u->abbrevs.by_code[c].count;
	if (!(raws = PyMem_Malloc((nraws + 1) * sizeof(*raws)))) {
		PyErr_NoMemory();
		goto out;
	}
	while (pos < end) {
		Py_ssize_t die_off = pos;
		uint64_t code;
		const struct abbrev *ab;
		struct open *parent, opened = {NULL, NONE, NONE, NONE};
		PyObject *attrs, *die, *key;
		int keep, in_arena;
		int32_t idx;

		if (read_uleb(s, &pos, &code))
			goto out;
		if (code == 0) {
			if (depth) {
				depth--;        /* (Py_CLEAR names its argument twice) */
				Py_CLEAR(stack[depth].children);
			}
			continue;
		}
		if (code >= (uint64_t)u->abbrevs.codes || !u->abbrevs.by_code[code].defined)
			goto out;
		ab = &u->abbrevs.by_code[code];
		if (ab->has_children && depth == cap) {
			Py_ssize_t more = cap ? 2 * cap : 64;
			struct open *grown = PyMem_Realloc(stack, more * sizeof(*stack));

			if (!grown) {
				PyErr_NoMemory();
				goto out;
			}
			stack = grown;
			cap = more;
		}
		/* (after the stack grew: ``parent`` points into it) */
		parent = depth && (stack[depth - 1].children || stack[depth - 1].entry != NONE)
			 ? &stack[depth - 1] : NULL;
		in_arena = parent && parent->entry != NONE;
		keep = bit(type_tags, ab->tag) || (parent && bit(child_tags, ab->tag))
		       || (depth == 1 && bit(top_tags, ab->tag)) || !root;
		if (!keep) {
			if (skip_values(u, ab, &pos))
				goto out;
			if (ab->has_children)
				stack[depth++] = (struct open){NULL, NONE, NONE, NONE};
			continue;
		}
		if (decode_values(u, ab, &pos, raws) || (!root && unit_bases(u, ab, raws)))
			goto out;
		if (in_arena && takes_items(a, parent->entry) && item_of(ab->tag) >= 0) {
			/* An item: into its parent's items; the DIEs under it, its own children. */
			if ((idx = add_entry(a, u, ab, raws, die_off,
					     E_ITEM | (ab->has_children ? E_CHILDREN : 0))) < 0)
				goto out;
			link_entry(a, parent, idx, 1);
			if (ab->has_children)
				stack[depth++] = (struct open){NULL, idx, NONE, NONE};
			continue;
		}
		if (root && (in_arena || bit(type_tags, ab->tag))) {
			/* A type DIE, or a DIE under one: into the arena. */
			uint32_t flags = (depth == 1 ? E_TOP : 0) | (ab->has_children ? E_CHILDREN : 0)
					 | (bit(item_parents, ab->tag) ? E_ITEM_PARENT : 0);

			if ((idx = add_entry(a, u, ab, raws, die_off, flags)) < 0
			    || grow((void **)&a->dies, a->ndies, &a->capd, sizeof(*a->dies)))
				goto out;
			a->dies[a->ndies++] = idx;
			if (in_arena)
				link_entry(a, parent, idx, 0);
			if (ab->has_children)
				stack[depth++] = (struct open){NULL, idx, NONE, NONE};
			continue;
		}
		/* A DIE the encoder's Python code walks: a Die; the type DIEs under
		 * it stay in the arena, not among its children. */
		if (!(attrs = attributes(u, ab, raws)))
			goto out;
		die = make_die(ab, die_off, attrs, depth == 1, &opened.children);
		Py_DECREF(attrs);
		if (!die)
			goto out;
		Py_XINCREF(opened.children);
		if (!root) {
			root = die;
		} else {
			key = PyLong_FromSsize_t(die_off);
			if (!key || PyList_Append(dies, die) || PyDict_SetItem(by_offset, key, die)
			    || (parent && parent->children && PyList_Append(parent->children, die))) {
				Py_XDECREF(key);
				Py_DECREF(die);
				Py_XDECREF(opened.children);
				goto out;
			}
			Py_DECREF(key);
			Py_DECREF(die);         /* dies and by_offset hold it */
		}
		if (ab->has_children)
			stack[depth++] = opened;
	}
	if (pos > end || !root)
		goto out;
	result = PyObject_CallFunction(unit_type, "KiiOOOKOOnn", (unsigned long long)u->cu_offset,
				       u->version, u->addr_size, root, dies, by_offset,
				       (unsigned long long)u->addr_base,
				       u->abbrevs.annotated ? Py_True : Py_False, (PyObject *)a,
				       first_type, a->ndies);
out:
	while (depth-- > 0)
		Py_CLEAR(stack[depth].children);
	PyMem_Free(stack);
	PyMem_Free(raws);
	Py_XDECREF(root);
	Py_XDECREF(dies);
	Py_XDECREF(by_offset);
	return result;
}

/* ---- read_units --------------------------------------------------------------- */

/* One unit's header (reader._unit_header); -1 where reader.py would raise. */
static int unit_header(struct unit *u, Py_ssize_t pos, Py_ssize_t *end, int *unit_type,
		       uint64_t *abbrev_off, Py_ssize_t *die_pos)
{
	const struct section *s = u->info;
	uint64_t length, version, v;
	Py_ssize_t hdr = pos + 4;

	if (read_uint(s, pos, 4, u->big, &length))
		return -1;
	u->off_size = 4;
	if (length == 0xffffffff) {
		if (read_uint(s, hdr, 8, u->big, &length))
			return -1;
		u->off_size = 8;
		hdr += 8;
	}
	if (length > (uint64_t)(s->n - hdr))
		return -1;
	*end = hdr + (Py_ssize_t)length;
	if (read_uint(s, hdr, 2, u->big, &version))
		return -1;
	hdr += 2;
	if (version >= 5) {
		if (hdr + 2 > s->n || read_uint(s, hdr + 2, u->off_size, u->big, abbrev_off))
			return -1;
		*unit_type = s->p[hdr];
		u->addr_size = s->p[hdr + 1];
		hdr += 2 + u->off_size;
		if (*unit_type == 2 || *unit_type == 6)
			hdr += 8 + u->off_size;
		else if (*unit_type == 4 || *unit_type == 5)
			hdr += 8;
	} else if (version >= 2) {
		*unit_type = 1;
		if (read_uint(s, hdr, u->off_size, u->big, abbrev_off)
		    || read_uint(s, hdr + u->off_size, 1, u->big, &v))
			return -1;
		u->addr_size = (int)v;
		hdr += u->off_size + 1;
	} else {
		return -1;
	}
	if (u->addr_size != 4 && u->addr_size != 8)
		return -1;
	u->version = (int)version;
	*die_pos = hdr;
	return 0;
}

static PyObject *read_units(PyObject *self, PyObject *args)
{
	Py_buffer b[6];
	struct section sec[6];
	struct strings strings = {0};
	int big, n = 0;
	PyObject *units = NULL;
	Arena *arena = NULL;
	Py_ssize_t pos = 0;

	if (!die_type) {
		PyErr_SetString(PyExc_RuntimeError, "objbtf.dwarf._dies: init() was not called");
		return NULL;
	}
	memset(b, 0, sizeof(b));
	if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*p:read_units", &b[0], &b[1], &b[2], &b[3], &b[4],
			      &b[5], &big))
		return NULL;
	for (n = 0; n < 6; n++)
		sec[n] = (struct section){b[n].buf, b[n].len};
	arena = new_arena(&b[0]);       /* which holds .debug_info's buffer from here on */
	memset(&b[0], 0, sizeof(b[0]));
	if (!arena || !(units = PyList_New(0)))
		goto out;
	while (pos + 11 <= sec[0].n) {
		struct unit u = {.info = &sec[0], .str = &sec[2], .line_str = &sec[3],
				 .str_offsets = &sec[4], .loclists = &sec[5], .big = big,
				 .cu_offset = (uint64_t)pos, .strings = &strings};
		Py_ssize_t end, die_pos;
		uint64_t abbrev_off;
		int unit_type, failed;
		PyObject *unit;

		if (unit_header(&u, pos, &end, &unit_type, &abbrev_off, &die_pos))
			goto give_up;
		if (unit_type == 1 || unit_type == 3) {
			u.str_offsets_base = u.off_size == 4 ? 8 : 16;
			u.addr_base = 8;
			u.loclists_base = u.off_size == 4 ? 12 : 20;
			if (abbrev_off >= (uint64_t)sec[1].n)
				goto give_up;
			failed = parse_abbrevs(&sec[1], (Py_ssize_t)abbrev_off, u.addr_size, u.off_size,
					       u.version, &u.abbrevs);
			unit = failed ? NULL : read_unit(&u, arena, die_pos, end);
			free_abbrevs(&u.abbrevs);
			if (failed == -2) {
				PyErr_NoMemory();
				Py_CLEAR(units);
				goto out;
			}
			if (!unit)
				goto give_up;
			failed = PyList_Append(units, unit);
			Py_DECREF(unit);
			if (failed) {
				Py_CLEAR(units);
				goto out;
			}
		}
		pos = end;
	}
	goto out;
give_up:
	/* A Python error (memory) propagates; anything else is reader.py's to judge. */
	Py_CLEAR(units);
	if (!PyErr_Occurred()) {
		units = Py_None;
		Py_INCREF(units);
	}
out:
	free_strings(&strings);
	Py_XDECREF(arena);              /* the units hold it */
	for (n = 0; n < 6; n++)
		if (b[n].obj)
			PyBuffer_Release(&b[n]);
	return units;
}

static PyMethodDef methods[] = {
	{"init", init, METH_VARARGS,
	 "init(new_die, CompileUnit, Expr, type_tags, child_tags, top_tags, wanted, forms_of, "
	 "annotation_tag, item_attrs, item_parents): what reader.py's decoder keeps and makes "
	 "(new_die makes a Die)."},
	{"read_units", read_units, METH_VARARGS,
	 "read_units(info, abbrev, str, line_str, str_offsets, loclists, big_endian): the "
	 "units reader.read_units gives, or None where reader.py must decide."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "objbtf.dwarf._dies",
	"reader.read_units in C, for the compiled build (see _dies.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__dies(void)
{
	PyObject *m;

	if (PyType_Ready(&arena_type) < 0 || !(m = PyModule_Create(&module)))
		return NULL;
	if (PyModule_AddObjectRef(m, "Arena", (PyObject *)&arena_type) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
