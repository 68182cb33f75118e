/*
 * BLAKE2b (RFC 7693) with an 8-byte digest and no key, as Python's
 * hashlib.blake2b(digest_size=8) computes it: for the C client's socket
 * digests (client.c) and the type hashes of a written blob (btf/_blob.c).
 * Functions are static: each file that includes this has its own copy.
 */
#ifndef OBJBTF_BLAKE2B_H
#define OBJBTF_BLAKE2B_H

#include <stdint.h>
#include <string.h>

struct blake2b {
	uint64_t h[8], t;
	uint8_t block[128];
	size_t fill;
};

static const uint64_t B2_IV[8] = {
	0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
	0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
	0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

/* The message schedule of the 12 rounds (rounds 10 and 11 repeat 0 and 1). */
static const uint8_t B2_SIGMA[12][16] = {
	{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
	{14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
	{11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
	{7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
	{9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
	{2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
	{12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
	{13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
	{6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
	{10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
	{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
	{14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static inline uint64_t b2_rotr(uint64_t x, int n)
{
	return x >> n | x << (64 - n);
}

static inline uint64_t b2_load(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

#define B2_G(a, b, c, d, x, y) do {                                         \
	v[a] += v[b] + (x); v[d] = b2_rotr(v[d] ^ v[a], 32);                \
	v[c] += v[d];       v[b] = b2_rotr(v[b] ^ v[c], 24);                \
	v[a] += v[b] + (y); v[d] = b2_rotr(v[d] ^ v[a], 16);                \
	v[c] += v[d];       v[b] = b2_rotr(v[b] ^ v[c], 63);                \
} while (0)

static void b2_compress(struct blake2b *s, int last)
{
	uint64_t m[16], v[16];

	for (int i = 0; i < 16; i++)
		m[i] = b2_load(s->block + 8 * i);
	for (int i = 0; i < 8; i++) {
		v[i] = s->h[i];
		v[i + 8] = B2_IV[i];
	}
	v[12] ^= s->t;          /* the high word of the 128-bit counter stays 0 */
	if (last)
		v[14] = ~v[14];
	/* Unrolled, so that every message word's index is a constant. */
#pragma GCC unroll 12
	for (int r = 0; r < 12; r++) {
		const uint8_t *z = B2_SIGMA[r];
		B2_G(0, 4, 8, 12, m[z[0]], m[z[1]]);
		B2_G(1, 5, 9, 13, m[z[2]], m[z[3]]);
		B2_G(2, 6, 10, 14, m[z[4]], m[z[5]]);
		B2_G(3, 7, 11, 15, m[z[6]], m[z[7]]);
		B2_G(0, 5, 10, 15, m[z[8]], m[z[9]]);
		B2_G(1, 6, 11, 12, m[z[10]], m[z[11]]);
		B2_G(2, 7, 8, 13, m[z[12]], m[z[13]]);
		B2_G(3, 4, 9, 14, m[z[14]], m[z[15]]);
	}
	for (int i = 0; i < 8; i++)
		s->h[i] ^= v[i] ^ v[i + 8];
}

static void b2_init(struct blake2b *s)
{
	memcpy(s->h, B2_IV, sizeof(B2_IV));
	s->h[0] ^= 0x01010000 ^ 8;     /* depth 1, fanout 1, no key, 8-byte digest */
	s->t = 0;
	s->fill = 0;
}

static void b2_update(struct blake2b *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	while (len) {
		if (s->fill == sizeof(s->block)) {     /* full, and more follows */
			s->t += sizeof(s->block);
			b2_compress(s, 0);
			s->fill = 0;
		}
		size_t n = sizeof(s->block) - s->fill;
		if (n > len)
			n = len;
		memcpy(s->block + s->fill, p, n);
		s->fill += n;
		p += n;
		len -= n;
	}
}

/* The digest as the number int.from_bytes(digest, 'little') makes of it. */
static uint64_t b2_final(struct blake2b *s)
{
	s->t += s->fill;
	memset(s->block + s->fill, 0, sizeof(s->block) - s->fill);
	b2_compress(s, 1);
	return s->h[0];
}

#endif
