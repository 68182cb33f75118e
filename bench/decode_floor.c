/* What decoding an object's DWARF costs in C: the floor under the first
 * phase of objbtf's per-object step (bench/decode_floor.py runs it).
 *
 * For each object named in the list file (argv[1]), once mapped: parse the
 * unit's abbreviations and decode every DIE's every attribute value, as
 * objbtf/dwarf/reader.py's read_units does before it keeps the DIEs BTF
 * needs.  It builds nothing and applies no relocation (objbtf's relocation
 * of .debug_info is a step of its own, timed apart).  Prints one JSON line:
 * the objects decoded, their DIEs, and the process CPU seconds of the
 * decoding alone (mapping the files is left out).
 *
 * Only what the reference kernel has: ELF64 little-endian, DWARF 4 and 5
 * in 32-bit format.  Anything else is an error naming the file.
 */
#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* DWARF 5, 7.5.6: the forms GCC and gas write. */
enum {
	FORM_addr = 0x01, FORM_block2 = 0x03, FORM_block4 = 0x04, FORM_data2 = 0x05,
	FORM_data4 = 0x06, FORM_data8 = 0x07, FORM_string = 0x08, FORM_block = 0x09,
	FORM_block1 = 0x0a, FORM_data1 = 0x0b, FORM_flag = 0x0c, FORM_sdata = 0x0d,
	FORM_strp = 0x0e, FORM_udata = 0x0f, FORM_ref_addr = 0x10, FORM_ref1 = 0x11,
	FORM_ref2 = 0x12, FORM_ref4 = 0x13, FORM_ref8 = 0x14, FORM_ref_udata = 0x15,
	FORM_sec_offset = 0x17, FORM_exprloc = 0x18, FORM_flag_present = 0x19,
	FORM_strx = 0x1a, FORM_addrx = 0x1b, FORM_data16 = 0x1e, FORM_line_strp = 0x1f,
	FORM_ref_sig8 = 0x20, FORM_implicit_const = 0x21, FORM_loclistx = 0x22,
	FORM_rnglistx = 0x23, FORM_strx1 = 0x25, FORM_strx2 = 0x26, FORM_strx3 = 0x27,
	FORM_strx4 = 0x28, FORM_addrx1 = 0x29, FORM_addrx2 = 0x2a, FORM_addrx3 = 0x2b,
	FORM_addrx4 = 0x2c,
};

struct spec { uint32_t form; int64_t implicit; };
struct abbrev { int defined, n; struct spec *specs; };
struct object { const char *path; const uint8_t *map; size_t size; };

static uint64_t checksum;        /* every value decoded goes in: nothing is optimized away */

static _Noreturn void fail(const char *path, const char *what)
{
	fprintf(stderr, "decode_floor: %s: %s\n", path, what);
	exit(1);
}

static uint64_t uleb(const uint8_t **p)
{
	uint64_t v = 0;
	int shift = 0;
	uint8_t b;

	do {
		b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
	} while (b & 0x80);
	return v;
}

static int64_t sleb(const uint8_t **p)
{
	int64_t v = 0;
	int shift = 0;
	uint8_t b;

	do {
		b = *(*p)++;
		v |= (int64_t)(b & 0x7f) << shift;
		shift += 7;
	} while (b & 0x80);
	if (shift < 64 && (b & 0x40))
		v |= -((int64_t)1 << shift);
	return v;
}

/* The abbreviation table at p, indexed by code; *count is its size. */
static struct abbrev *abbrevs(const uint8_t *p, size_t *count)
{
	struct abbrev *table = NULL;
	size_t size = 0;

	for (;;) {
		uint64_t code = uleb(&p);
		if (!code)
			break;
		if (code >= size) {
			size_t grown = code * 2 + 16;
			table = realloc(table, grown * sizeof *table);
			memset(table + size, 0, (grown - size) * sizeof *table);
			size = grown;
		}
		struct abbrev *ab = &table[code];
		ab->defined = 1;
		uleb(&p);                               /* tag */
		p++;                                    /* children */
		int cap = 0;
		for (;;) {
			uint64_t attr = uleb(&p), form = uleb(&p);
			if (!attr && !form)
				break;
			if (ab->n == cap) {
				cap = cap * 2 + 8;
				ab->specs = realloc(ab->specs, cap * sizeof *ab->specs);
			}
			ab->specs[ab->n].form = form;
			ab->specs[ab->n].implicit = form == FORM_implicit_const ? sleb(&p) : 0;
			ab->n++;
		}
	}
	*count = size;
	return table;
}

static uint32_t u16(const uint8_t *p) { return p[0] | p[1] << 8; }
static uint32_t u32(const uint8_t *p) { return u16(p) | (uint32_t)u16(p + 2) << 16; }
static uint64_t u64(const uint8_t *p) { return u32(p) | (uint64_t)u32(p + 4) << 32; }

/* Decode one DIE's values at p; where they end, or NULL for a form not read. */
static const uint8_t *values(const uint8_t *p, const struct abbrev *ab, int addr_size)
{
	for (int i = 0; i < ab->n; i++) {
		uint64_t v;

		switch (ab->specs[i].form) {
		case FORM_addr:
			v = addr_size == 8 ? u64(p) : u32(p);
			p += addr_size;
			break;
		case FORM_data1: case FORM_flag: case FORM_ref1: case FORM_strx1: case FORM_addrx1:
			v = *p++;
			break;
		case FORM_data2: case FORM_ref2: case FORM_strx2: case FORM_addrx2:
			v = u16(p);
			p += 2;
			break;
		case FORM_strx3: case FORM_addrx3:
			v = u16(p) | (uint32_t)p[2] << 16;
			p += 3;
			break;
		case FORM_data4: case FORM_ref4: case FORM_strp: case FORM_sec_offset:
		case FORM_line_strp: case FORM_ref_addr: case FORM_strx4: case FORM_addrx4:
			v = u32(p);
			p += 4;
			break;
		case FORM_data8: case FORM_ref8: case FORM_ref_sig8:
			v = u64(p);
			p += 8;
			break;
		case FORM_data16:
			v = u64(p) ^ u64(p + 8);
			p += 16;
			break;
		case FORM_udata: case FORM_ref_udata: case FORM_strx: case FORM_addrx:
		case FORM_loclistx: case FORM_rnglistx:
			v = uleb(&p);
			break;
		case FORM_sdata:
			v = sleb(&p);
			break;
		case FORM_string:
			v = strlen((const char *)p);
			p += v + 1;
			break;
		case FORM_block: case FORM_exprloc:
			v = uleb(&p);
			p += v;
			break;
		case FORM_block1:
			v = *p++;
			p += v;
			break;
		case FORM_block2:
			v = u16(p);
			p += 2 + v;
			break;
		case FORM_block4:
			v = u32(p);
			p += 4 + v;
			break;
		case FORM_flag_present:
			v = 1;
			break;
		case FORM_implicit_const:
			v = ab->specs[i].implicit;
			break;
		default:
			return NULL;
		}
		checksum = checksum * 31 + v;
	}
	return p;
}

/* Every DIE of .debug_info, with .debug_abbrev: how many there are. */
static long decode(const struct object *o, const uint8_t *info, size_t info_size,
		   const uint8_t *abbrev, size_t abbrev_size)
{
	long dies = 0;
	const uint8_t *p = info, *end_info = info + info_size;

	while (p + 11 <= end_info) {
		uint32_t length = u32(p);
		if (length >= 0xfffffff0 || length > (size_t)(end_info - p - 4))
			fail(o->path, "a unit in 64-bit DWARF or past the end of .debug_info");
		const uint8_t *end = p + 4 + length;
		unsigned version = u16(p + 4);
		uint64_t abbrev_offset;
		int addr_size;

		if (version == 5) {
			addr_size = p[7];
			abbrev_offset = u32(p + 8);
			p += 12;
		} else if (version == 4) {
			abbrev_offset = u32(p + 6);
			addr_size = p[10];
			p += 11;
		} else {
			fail(o->path, "DWARF other than 4 and 5");
		}
		if (abbrev_offset >= abbrev_size)
			fail(o->path, "an abbreviation offset past .debug_abbrev");
		size_t count;
		struct abbrev *table = abbrevs(abbrev + abbrev_offset, &count);
		while (p < end) {
			uint64_t code = uleb(&p);
			if (!code)
				continue;
			if (code >= count || !table[code].defined)
				fail(o->path, "a DIE with an unknown abbreviation");
			p = values(p, &table[code], addr_size);
			if (!p)
				fail(o->path, "a form this decoder does not read");
			dies++;
		}
		for (size_t i = 0; i < count; i++)
			free(table[i].specs);
		free(table);
		p = end;
	}
	return dies;
}

static const Elf64_Shdr *section(const struct object *o, const char *name)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)o->map;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(o->map + eh->e_shoff);
	const char *names = (const char *)o->map + sh[eh->e_shstrndx].sh_offset;

	for (int i = 0; i < eh->e_shnum; i++)
		if (!strcmp(names + sh[i].sh_name, name))
			return &sh[i];
	return NULL;
}

static int map(struct object *o)
{
	struct stat st;
	int fd = open(o->path, O_RDONLY);

	if (fd < 0 || fstat(fd, &st))
		fail(o->path, "cannot open it");
	o->size = st.st_size;
	o->map = mmap(NULL, o->size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
	close(fd);
	if (o->map == MAP_FAILED)
		fail(o->path, "cannot map it");
	return o->size >= sizeof(Elf64_Ehdr) && !memcmp(o->map, ELFMAG, SELFMAG)
	       && o->map[EI_CLASS] == ELFCLASS64 && o->map[EI_DATA] == ELFDATA2LSB;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: decode_floor LIST  (a file with one object path a line)\n");
		return 2;
	}
	FILE *list = fopen(argv[1], "r");
	if (!list)
		fail(argv[1], "cannot open it");
	struct object *objs = NULL;
	size_t n = 0, cap = 0;
	char line[4096];

	while (fgets(line, sizeof line, list)) {
		line[strcspn(line, "\n")] = 0;
		if (!*line)
			continue;
		if (n == cap) {
			cap = cap * 2 + 64;
			objs = realloc(objs, cap * sizeof *objs);
		}
		objs[n].path = strdup(line);
		if (!map(&objs[n]))
			fail(line, "not an ELF64 little-endian file");
		n++;
	}
	fclose(list);

	struct timespec t0, t1;
	long dies = 0;
	size_t decoded = 0;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
	for (size_t k = 0; k < n; k++) {
		const Elf64_Shdr *info = section(&objs[k], ".debug_info");
		const Elf64_Shdr *abbrev = section(&objs[k], ".debug_abbrev");
		if (!info || !abbrev || !info->sh_size)
			continue;
		dies += decode(&objs[k], objs[k].map + info->sh_offset, info->sh_size,
			       objs[k].map + abbrev->sh_offset, abbrev->sh_size);
		decoded++;
	}
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
	printf("{\"objects\": %zu, \"dies\": %ld, \"cpu\": %.9f, \"checksum\": %llu}\n",
	       decoded, dies, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
	       (unsigned long long)checksum);
	return 0;
}
