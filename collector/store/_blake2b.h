/*
 * BLAKE2b, unkeyed, one shot (RFC 7693): what hashlib.blake2b(data, digest_size=n).digest()
 * returns, for the row builder (collector/store/_rowbuild.c), which hashes a few short
 * strings per event and would spend more calling hashlib than hashing.
 *
 * Written from RFC 7693's description and reference code (section 3 and appendix C);
 * tests/collector/store/test_rowbuild.py compares it with hashlib.
 */
#ifndef TRACEHOOK_BLAKE2B_H
#define TRACEHOOK_BLAKE2B_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static const uint64_t blake2b_iv[8] = {
    0x6A09E667F3BCC908ULL, 0xBB67AE8584CAA73BULL, 0x3C6EF372FE94F82BULL, 0xA54FF53A5F1D36F1ULL,
    0x510E527FADE682D1ULL, 0x9B05688C2B3E6C1FULL, 0x1F83D9ABFB41BD6BULL, 0x5BE0CD19137E2179ULL,
};

static const uint8_t blake2b_sigma[12][16] = {
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

static inline uint64_t blake2b_rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t blake2b_load64(const uint8_t *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

#define BLAKE2B_G(a, b, c, d, x, y)          \
    do {                                     \
        v[a] = v[a] + v[b] + (x);            \
        v[d] = blake2b_rotr(v[d] ^ v[a], 32); \
        v[c] = v[c] + v[d];                  \
        v[b] = blake2b_rotr(v[b] ^ v[c], 24); \
        v[a] = v[a] + v[b] + (y);            \
        v[d] = blake2b_rotr(v[d] ^ v[a], 16); \
        v[c] = v[c] + v[d];                  \
        v[b] = blake2b_rotr(v[b] ^ v[c], 63); \
    } while (0)

/* One 128-byte block; t is the byte count so far (inputs here stay far below 2**64 bytes). */
static void blake2b_compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last) {
    uint64_t v[16], m[16];
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = blake2b_iv[i];
    }
    v[12] ^= t;
    if (last) v[14] = ~v[14];
    for (int i = 0; i < 16; i++) m[i] = blake2b_load64(block + 8 * i);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 12
#endif
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = blake2b_sigma[r];
        BLAKE2B_G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        BLAKE2B_G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        BLAKE2B_G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        BLAKE2B_G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        BLAKE2B_G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        BLAKE2B_G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        BLAKE2B_G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        BLAKE2B_G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* out[0:outlen] = BLAKE2b-(8 * outlen)(data), 1 <= outlen <= 64, no key. */
static void blake2b(uint8_t *out, size_t outlen, const uint8_t *data, size_t len) {
    uint64_t h[8];
    uint8_t block[128];
    uint64_t t = 0;
    memcpy(h, blake2b_iv, sizeof h);
    h[0] ^= 0x01010000ULL ^ (uint64_t)outlen;
    while (len > 128) {
        t += 128;
        blake2b_compress(h, data, t, 0);
        data += 128;
        len -= 128;
    }
    memset(block, 0, sizeof block);
    if (len) memcpy(block, data, len);
    t += len;
    blake2b_compress(h, block, t, 1);
    for (size_t i = 0; i < outlen; i++) out[i] = (uint8_t)(h[i / 8] >> (8 * (i % 8)));
}

#endif
