/*
 * objbtf.elf._relocs: a REL/RELA section's entries read and used in C, for
 * the compiled build.
 *
 * - apply(): relocs.apply_relocations' patching of a section (S + A in
 *   each field, truncated to its width).
 * - by_field(): ElfFile.relocations_by_field's map of field offset to
 *   (symbol index, addend).
 *
 * The encoder relocates an object's .debug_info (thousands of entries)
 * and looks up its variables' addresses there; in Python, reading the
 * entries into tuples and patching took a tenth of an object's encode
 * (bench/RESULTS.md).  Neither explains anything: on what it does not
 * expect (a symbol past the table, a type the caller did not list, a field
 * past the section's end) each returns None, and the Python code, which
 * the caller then runs, raises its own error.  The caller checks the
 * section's header (type, entry size) first.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Relocation types up to this are looked up in a table; others decline. */
#define MAX_TYPE 511

/* One section's entries, as the caller described them. */
struct entries {
	const unsigned char *p;
	Py_ssize_t count;
	int rela, elf64, big;
};

struct entry {
	uint64_t offset, sym, type;
	int64_t addend;		/* RELA's, 0 for REL */
};

/* The ``width``-byte (2, 4 or 8) unsigned value at ``p``. */
static uint64_t load(const unsigned char *p, int width, int big)
{
	uint16_t h;
	uint32_t w;
	uint64_t d;
	int swap = big != PY_BIG_ENDIAN;

	switch (width) {
	case 2:
		memcpy(&h, p, 2);
		return swap ? __builtin_bswap16(h) : h;
	case 4:
		memcpy(&w, p, 4);
		return swap ? __builtin_bswap32(w) : w;
	default:
		memcpy(&d, p, 8);
		return swap ? __builtin_bswap64(d) : d;
	}
}

static void store(unsigned char *p, int width, int big, uint64_t v)
{
	int swap = big != PY_BIG_ENDIAN;
	uint16_t h = (uint16_t)v;
	uint32_t w = (uint32_t)v;

	switch (width) {
	case 2:
		h = swap ? __builtin_bswap16(h) : h;
		memcpy(p, &h, 2);
		break;
	case 4:
		w = swap ? __builtin_bswap32(w) : w;
		memcpy(p, &w, 4);
		break;
	default:
		v = swap ? __builtin_bswap64(v) : v;
		memcpy(p, &v, 8);
	}
}

/* Sets up ``e`` over ``len`` bytes; -1 if they are not whole entries. */
static int entries_init(struct entries *e, const void *p, Py_ssize_t len, int rela,
			int elf64, int big)
{
	Py_ssize_t size = (elf64 ? 8 : 4) * (rela ? 3 : 2);

	if (len % size)
		return -1;
	*e = (struct entries){ p, len / size, rela, elf64, big };
	return 0;
}

/* Entry ``k``: r_info split as the ELF class splits it (reader.Layout). */
static struct entry entry_at(const struct entries *e, Py_ssize_t k)
{
	int w = e->elf64 ? 8 : 4;
	const unsigned char *p = e->p + k * w * (e->rela ? 3 : 2);
	uint64_t info = load(p + w, w, e->big);
	struct entry out = { load(p, w, e->big), 0, 0, 0 };

	if (e->elf64) {
		out.sym = info >> 32;
		out.type = info & 0xffffffffu;
	} else {
		out.sym = info >> 8;
		out.type = info & 0xffu;
	}
	if (e->rela) {
		uint64_t a = load(p + 2 * w, w, e->big);

		out.addend = e->elf64 ? (int64_t)a : (int64_t)(int32_t)(uint32_t)a;
	}
	return out;
}

/* Whether every entry's symbol is below ``nsyms`` (reader._read_relocations). */
static int symbols_in_table(const struct entries *e, uint64_t nsyms)
{
	for (Py_ssize_t k = 0; k < e->count; k++)
		if (entry_at(e, k).sym >= nsyms)
			return 0;
	return 1;
}

/* ``widths`` (type -> field width, 0 for a type that does nothing) as a
 * table by type, -1 where absent; -1 if a type does not fit the table. */
static int width_table(PyObject *widths, signed char table[MAX_TYPE + 1])
{
	PyObject *key, *value;
	Py_ssize_t pos = 0;

	memset(table, -1, MAX_TYPE + 1);
	while (PyDict_Next(widths, &pos, &key, &value)) {
		long type = PyLong_AsLong(key), width = PyLong_AsLong(value);

		if (PyErr_Occurred())
			return -1;
		if (type < 0 || type > MAX_TYPE || !(width == 0 || width == 2 || width == 4
						    || width == 8))
			return -1;
		table[type] = (signed char)width;
	}
	return 0;
}

/* Patches ``buf`` as relocs._patch does; 0, or -1 where it would raise. */
static int patch(unsigned char *buf, Py_ssize_t len, const struct entries *e,
		 PyObject *values, const signed char *widths)
{
	Py_ssize_t nvalues = PyList_GET_SIZE(values);

	for (Py_ssize_t k = 0; k < e->count; k++) {
		struct entry r = entry_at(e, k);
		int width = r.type <= MAX_TYPE ? widths[r.type] : -1;
		uint64_t value, sum;

		if (width < 0)
			return -1;
		if (width == 0)
			continue;
		if (r.offset > (uint64_t)len || (uint64_t)width > (uint64_t)len - r.offset)
			return -1;
		if (r.sym >= (uint64_t)nvalues)
			return -1;
		value = PyLong_AsUnsignedLongLongMask(PyList_GET_ITEM(values, r.sym));
		if (value == (uint64_t)-1 && PyErr_Occurred())
			return -1;
		sum = value + (uint64_t)r.addend;
		if (!e->rela)
			sum += load(buf + r.offset, width, e->big);
		store(buf + r.offset, width, e->big, sum);
	}
	return 0;
}

static PyObject *apply(PyObject *self, PyObject *args)
{
	Py_buffer data, rels;
	int rela, elf64, big;
	unsigned long long nsyms;
	PyObject *values, *widths, *out = NULL;
	signed char table[MAX_TYPE + 1];
	struct entries e;

	(void)self;
	if (!PyArg_ParseTuple(args, "y*y*pppKO!O!", &data, &rels, &rela, &elf64, &big, &nsyms,
			      &PyList_Type, &values, &PyDict_Type, &widths))
		return NULL;
	if (entries_init(&e, rels.buf, rels.len, rela, elf64, big) == 0
	    && symbols_in_table(&e, nsyms) && width_table(widths, table) == 0) {
		out = PyBytes_FromStringAndSize(data.buf, data.len);
		if (out && patch((unsigned char *)PyBytes_AS_STRING(out), data.len, &e, values,
				 table) < 0)
			Py_CLEAR(out);
	}
	PyBuffer_Release(&data);
	PyBuffer_Release(&rels);
	PyErr_Clear();		/* a value that is not an int: Python says what */
	return out ? out : Py_NewRef(Py_None);
}

/* ``types`` (a set of ints, or None for all) as a table by type: 1 in
 * it, 0 not, -1 to ask the set (a type past the table); -1 on an error. */
static int type_table(PyObject *types, signed char table[MAX_TYPE + 1])
{
	PyObject *iter, *item;

	memset(table, types == Py_None, MAX_TYPE + 1);
	if (types == Py_None)
		return 0;
	iter = PyObject_GetIter(types);
	if (!iter)
		return -1;
	while ((item = PyIter_Next(iter))) {
		long type = PyLong_AsLong(item);

		Py_DECREF(item);
		if (type >= 0 && type <= MAX_TYPE)
			table[type] = 1;
		PyErr_Clear();		/* not a type of the table: never wanted */
	}
	Py_DECREF(iter);
	return PyErr_Occurred() ? -1 : 0;
}

/* Whether relocation type ``type`` is in ``types``: 1, 0, or -1 on an error. */
static int wanted(PyObject *types, const signed char *table, uint64_t type)
{
	PyObject *key;
	int in;

	if (type <= MAX_TYPE)
		return table[type];
	if (types == Py_None)
		return 1;
	key = PyLong_FromUnsignedLongLong(type);
	in = key ? PySet_Contains(types, key) : -1;
	Py_XDECREF(key);
	return in;
}

/* A dict entry offset -> (sym, addend); -1 on a Python error. */
static int put(PyObject *map, uint64_t offset, uint64_t sym, PyObject *addend)
{
	PyObject *key = PyLong_FromUnsignedLongLong(offset);
	PyObject *value = PyTuple_New(2);
	PyObject *index = PyLong_FromUnsignedLongLong(sym);
	int err = -1;

	if (key && value && index && addend) {
		PyTuple_SET_ITEM(value, 0, index);
		PyTuple_SET_ITEM(value, 1, Py_NewRef(addend));
		index = NULL;
		err = PyDict_SetItem(map, key, value);
	}
	Py_XDECREF(key);
	Py_XDECREF(value);
	Py_XDECREF(index);
	return err;
}

/* The map relocations_by_field gives: a REL entry's addend is the field's
 * value, read unsigned; ``types`` (a set, or None for all) filters. */
static PyObject *field_map(const struct entries *e, const unsigned char *data,
			   Py_ssize_t len, int width, PyObject *types)
{
	signed char table[MAX_TYPE + 1];
	PyObject *map = type_table(types, table) < 0 ? NULL : PyDict_New();

	for (Py_ssize_t k = 0; map && k < e->count; k++) {
		struct entry r = entry_at(e, k);
		int in = wanted(types, table, r.type);
		PyObject *addend;
		int err;

		if (in <= 0) {
			if (in < 0)
				Py_CLEAR(map);
			continue;
		}
		if (!e->rela && (r.offset > (uint64_t)len || (uint64_t)width > (uint64_t)len - r.offset)) {
			Py_DECREF(map);
			return Py_NewRef(Py_None);	/* past the end: Python says so */
		}
		addend = e->rela ? PyLong_FromLongLong(r.addend)
				 : PyLong_FromUnsignedLongLong(load(data + r.offset, width, e->big));
		err = put(map, r.offset, r.sym, addend);
		Py_XDECREF(addend);
		if (err < 0)
			Py_CLEAR(map);
	}
	return map;
}

static PyObject *by_field(PyObject *self, PyObject *args)
{
	Py_buffer data, rels;
	int rela, elf64, big, width;
	unsigned long long nsyms;
	PyObject *types, *out;
	struct entries e;

	(void)self;
	if (!PyArg_ParseTuple(args, "y*y*pppKiO", &data, &rels, &rela, &elf64, &big, &nsyms,
			      &width, &types))
		return NULL;
	if (types != Py_None && !PyAnySet_Check(types)) {
		PyErr_SetString(PyExc_TypeError, "types must be a set or None");
		out = NULL;
	} else if ((width == 2 || width == 4 || width == 8)
		   && entries_init(&e, rels.buf, rels.len, rela, elf64, big) == 0
		   && symbols_in_table(&e, nsyms)) {
		out = field_map(&e, data.buf, data.len, width, types);
	} else {
		out = Py_NewRef(Py_None);
	}
	PyBuffer_Release(&data);
	PyBuffer_Release(&rels);
	return out;
}

static PyMethodDef methods[] = {
	{"apply", apply, METH_VARARGS,
	 "apply(data, rels, rela, elf64, big_endian, nsyms, values, widths) -> data with "
	 "the entries of rels applied (values: st_value by symbol; widths: type -> field "
	 "width, 0 for none), or None: let relocs.py decide."},
	{"by_field", by_field, METH_VARARGS,
	 "by_field(data, rels, rela, elf64, big_endian, nsyms, width, types) -> {offset: "
	 "(symbol, addend)} of the entries of types (a set, or None for all), or None: "
	 "let reader.py decide."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "objbtf.elf._relocs",
	"An ELF relocation section's entries applied and mapped, in C.", -1, methods,
	NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__relocs(void)
{
	return PyModule_Create(&module);
}
