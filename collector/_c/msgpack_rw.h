/*
 * msgpack read and written: the primitives every C extension of the collector shares.
 *
 * Reading (collector/wirecheck/_wirecheck.c validates batches with it, collector/store/_readback.c
 * reads stored values): mp_next reads one item (its kind, an int's value, a str/bin/ext's payload, a
 * container's count), mp_skip a whole value, mp_utf8_valid is Python's strict UTF-8. They judge nothing
 * but the bytes' bounds: each caller applies its own rules (limits, which kinds it models) to the items.
 * Every read is bounds-checked against the end of the buffer; nesting is walked with an explicit stack.
 *
 * Writing (collector/store/_rowbuild.c and _partof.h), as msgpack.packb(..., use_bin_type=True) writes:
 * the shortest form of each int and length. mp_put_* write into memory the caller sized (an int or a
 * header takes at most MP_HEAD_MAX bytes) and return the bytes written; mp_buf_* append to an MpBuf,
 * a growable buffer, and return 0 or -1 with a Python exception set.
 *
 * Header-only (static functions) and Python.h first, as an extension's source includes it.
 */
#ifndef TRACEHOOK_MSGPACK_RW_H
#define TRACEHOOK_MSGPACK_RW_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

/* -- reading ---------------------------------------------------------------------------------- */

/* msgpack's C unpacker (MSGPACK_EMBED_STACK_SIZE) keeps at most this many containers open. */
#define MP_MAX_DEPTH 1024

typedef enum { MP_NIL, MP_BOOL, MP_INT, MP_FLOAT, MP_STR, MP_BIN, MP_EXT, MP_ARRAY, MP_MAP } MpKind;

typedef struct {
    const unsigned char *p, *end;
} MpReader;

typedef struct {
    MpKind kind;
    int neg;                  /* MP_INT: negative, the value is in i; else it is in u */
    uint64_t u;
    int64_t i;
    const unsigned char *ptr; /* MP_STR, MP_BIN, MP_EXT: the payload */
    uint32_t len;             /* the payload's length, or a container's element (array) or pair (map) count */
    int8_t ext_type;          /* MP_EXT: its type code */
} MpItem;

static inline int mp_has(const MpReader *r, size_t n) { return (size_t)(r->end - r->p) >= n; }

/* A big-endian unsigned integer of n = 1, 2, 4 or 8 bytes (the caller checked the bounds). */
static inline uint64_t mp_be(const unsigned char *s, int n) {
    switch (n) {
    case 1: return s[0];
    case 2: return (uint64_t)s[0] << 8 | s[1];
    case 4: return (uint64_t)s[0] << 24 | (uint64_t)s[1] << 16 | (uint64_t)s[2] << 8 | s[3];
    default:
        return (uint64_t)s[0] << 56 | (uint64_t)s[1] << 48 | (uint64_t)s[2] << 40 | (uint64_t)s[3] << 32 |
               (uint64_t)s[4] << 24 | (uint64_t)s[5] << 16 | (uint64_t)s[6] << 8 | s[7];
    }
}

/* One item; a str, bin or ext's payload is read past, a container's items are left to follow.
   0, or -1 when the bytes end early or the byte is 0xc1 (never used). Inlined into its callers: one
   call per item (the validator reads every item of every batch). */
__attribute__((always_inline)) static inline int mp_next(MpReader *r, MpItem *it) {
    if (!mp_has(r, 1)) return -1;
    unsigned c = *r->p++;
    int width;
    it->neg = 0;
    if (c <= 0x7f) return it->kind = MP_INT, it->u = c, 0;
    if (c >= 0xe0) return it->kind = MP_INT, it->neg = 1, it->i = (int8_t)c, 0;
    if ((c & 0xf0) == 0x80) return it->kind = MP_MAP, it->len = c & 0x0f, 0;
    if ((c & 0xf0) == 0x90) return it->kind = MP_ARRAY, it->len = c & 0x0f, 0;
    if ((c & 0xe0) == 0xa0) {
        it->kind = MP_STR, it->len = c & 0x1f;
        goto payload;
    }
    switch (c) {
    case 0xc0: return it->kind = MP_NIL, 0;
    case 0xc2: case 0xc3: return it->kind = MP_BOOL, it->u = c & 1, 0;
    case 0xca: case 0xcb:
        width = c == 0xca ? 4 : 8;
        if (!mp_has(r, width)) return -1;
        r->p += width;
        return it->kind = MP_FLOAT, 0;
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        width = 1 << (c - 0xcc);
        if (!mp_has(r, width)) return -1;
        it->kind = MP_INT, it->u = mp_be(r->p, width), r->p += width;
        return 0;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        width = 1 << (c - 0xd0);
        if (!mp_has(r, width)) return -1;
        uint64_t raw = mp_be(r->p, width);
        r->p += width;
        if (width < 8 && (raw >> (width * 8 - 1)) & 1) raw |= ~0ULL << (width * 8); /* sign-extend */
        int64_t v;
        memcpy(&v, &raw, sizeof v);
        it->kind = MP_INT;
        if (v < 0) it->neg = 1, it->i = v;
        else it->u = (uint64_t)v;
        return 0;
    }
    case 0xd9: case 0xda: case 0xdb: it->kind = MP_STR, width = 1 << (c - 0xd9); break;
    case 0xc4: case 0xc5: case 0xc6: it->kind = MP_BIN, width = 1 << (c - 0xc4); break;
    case 0xc7: case 0xc8: case 0xc9: it->kind = MP_EXT, width = 1 << (c - 0xc7); break;
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
        it->kind = MP_EXT, it->len = 1u << (c - 0xd4);
        goto payload;
    case 0xdc: case 0xdd: it->kind = MP_ARRAY, width = c == 0xdc ? 2 : 4; break;
    case 0xde: case 0xdf: it->kind = MP_MAP, width = c == 0xde ? 2 : 4; break;
    default: return -1; /* 0xc1 */
    }
    if (!mp_has(r, width)) return -1;
    it->len = (uint32_t)mp_be(r->p, width);
    r->p += width;
    if (it->kind == MP_ARRAY || it->kind == MP_MAP) return 0;
payload:
    if (it->kind == MP_EXT) { /* the type code comes before the data */
        if (!mp_has(r, 1)) return -1;
        it->ext_type = (int8_t)*r->p++;
    }
    if (!mp_has(r, it->len)) return -1;
    it->ptr = r->p;
    r->p += it->len;
    return 0;
}

/* A caller's rules for one item: 0 when it accepts it. */
typedef int (*MpCheck)(const MpItem *it);

/* Skip one value of any shape, depth containers already open around it: every item must pass check
   (when not NULL), a map's keys must be str or bin (msgpack's strict_map_key, its default), and at most
   max_open (<= MP_MAX_DEPTH) containers may be open at once, empty ones included. 0, or -1. */
static inline int mp_skip(MpReader *r, int depth, int max_open, MpCheck check) {
    uint32_t left[MP_MAX_DEPTH]; /* items still to read in each open container */
    unsigned char is_map[MP_MAX_DEPTH];
    int top = 0;
    MpItem it = {0};
    for (;;) {
        if (mp_next(r, &it) < 0 || (check && check(&it) != 0)) return -1;
        /* a map's key comes at an even count of items left */
        if (top > 0 && is_map[top - 1] && left[top - 1] % 2 == 0 && it.kind != MP_STR && it.kind != MP_BIN)
            return -1;
        if (it.kind == MP_ARRAY || it.kind == MP_MAP) {
            if (depth + top >= max_open) return -1;
            if (it.len > 0) {
                left[top] = it.kind == MP_MAP ? 2 * it.len : it.len; /* callers bound a map's count below 2**31 */
                is_map[top] = it.kind == MP_MAP;
                top++;
                continue;
            }
        }
        while (top > 0 && --left[top - 1] == 0) top--; /* an item is complete: close what it completes */
        if (top == 0) return 0;
    }
}

/* Most strings are short ASCII: one OR over the bytes settles them. */
static inline int mp_ascii_only(const unsigned char *s, size_t n) {
    uint64_t acc = 0, w;
    if (n >= 8) {
        for (size_t i = 0; i + 8 <= n; i += 8) {
            memcpy(&w, s + i, 8);
            acc |= w;
        }
        memcpy(&w, s + n - 8, 8); /* the tail, overlapping what was read */
        acc |= w;
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        acc = a | b;
    } else {
        for (size_t i = 0; i < n; i++) acc |= s[i];
    }
    return !(acc & 0x8080808080808080ULL);
}

/* Python's strict UTF-8 decoder: no overlong forms, no surrogates, nothing above U+10FFFF. */
static inline int mp_utf8_valid(const unsigned char *s, size_t n) {
    if (mp_ascii_only(s, n)) return 1;
    size_t i = 0;
    while (i < n) {
        while (i + 8 <= n) { /* ASCII runs, a word at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c < 0xC2) {
            return 0;
        } else if (c < 0xE0) {
            if (n - i < 2 || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c < 0xF0) {
            if (n - i < 3 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0)) return 0; /* overlong, surrogate */
            i += 3;
        } else if (c < 0xF5) {
            if (n - i < 4 || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] >= 0x90)) return 0; /* overlong, > U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* -- writing ---------------------------------------------------------------------------------- */

enum { MP_HEAD_MAX = 9 }; /* the most bytes an int or a length header takes */

static inline int mp_put_be(unsigned char *o, uint64_t v, int width) {
    for (int i = 0; i < width; i++) o[i] = (unsigned char)(v >> (8 * (width - 1 - i)));
    return width;
}

/* An int: a fixint, else the narrowest uint (v >= 0) or int (v < 0) form. */
static inline int mp_put_int(unsigned char *o, int64_t v) {
    if (v >= 0 && v < 128) return o[0] = (unsigned char)v, 1;
    if (v < 0 && v >= -32) return o[0] = (unsigned char)(int8_t)v, 1;
    int step = v >= 0 ? (v < 256 ? 0 : v < 65536 ? 1 : v < 4294967296LL ? 2 : 3)
                      : (v >= -128 ? 0 : v >= -32768 ? 1 : v >= -2147483648LL ? 2 : 3);
    o[0] = (unsigned char)((v >= 0 ? 0xcc : 0xd0) + step);
    return 1 + mp_put_be(o + 1, (uint64_t)v, 1 << step);
}

/* A length: the fix form (fix_tag | n) below fix_max, else 8 (when tag8), 16 or 32 bits; -1 beyond 32 bits. */
static inline int mp_put_len(unsigned char *o, uint64_t n, int fix_tag, uint64_t fix_max, int tag8, int tag16,
                             int tag32) {
    if (n < fix_max) return o[0] = (unsigned char)(fix_tag | n), 1;
    if (tag8 && n < 256) return o[0] = (unsigned char)tag8, 1 + mp_put_be(o + 1, n, 1);
    if (n < 65536) return o[0] = (unsigned char)tag16, 1 + mp_put_be(o + 1, n, 2);
    if (n > 0xFFFFFFFFULL) return -1;
    return o[0] = (unsigned char)tag32, 1 + mp_put_be(o + 1, n, 4);
}

static inline int mp_put_array(unsigned char *o, uint64_t n) { return mp_put_len(o, n, 0x90, 16, 0, 0xdc, 0xdd); }
static inline int mp_put_map(unsigned char *o, uint64_t n) { return mp_put_len(o, n, 0x80, 16, 0, 0xde, 0xdf); }
static inline int mp_put_str_head(unsigned char *o, uint64_t n) { return mp_put_len(o, n, 0xa0, 32, 0xd9, 0xda, 0xdb); }
static inline int mp_put_bin_head(unsigned char *o, uint64_t n) { return mp_put_len(o, n, 0, 0, 0xc4, 0xc5, 0xc6); }

/* A str (n < 2**32): its header and bytes. */
static inline Py_ssize_t mp_put_str(unsigned char *o, const void *s, Py_ssize_t n) {
    int head = mp_put_str_head(o, (uint64_t)n);
    if (n) memcpy(o + head, s, (size_t)n);
    return head + n;
}

/* A growable byte buffer; its first 512 bytes are inline. */
typedef struct {
    unsigned char *p;
    Py_ssize_t len, cap;
    unsigned char small[512];
} MpBuf;

static inline void mp_buf_init(MpBuf *b) { b->p = b->small, b->len = 0, b->cap = sizeof b->small; }
static inline void mp_buf_free(MpBuf *b) {
    if (b->p != b->small) PyMem_Free(b->p);
}

/* Room for extra more bytes at b->p + b->len. */
static inline int mp_buf_reserve(MpBuf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap;
    while (cap < b->len + extra) cap *= 2;
    unsigned char *p = PyMem_Malloc(cap);
    if (!p) return PyErr_NoMemory(), -1;
    memcpy(p, b->p, b->len);
    mp_buf_free(b);
    b->p = p, b->cap = cap;
    return 0;
}

static inline int mp_buf_put(MpBuf *b, const void *data, Py_ssize_t n) {
    if (mp_buf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

static inline int mp_buf_byte(MpBuf *b, unsigned char c) { return mp_buf_put(b, &c, 1); }

static inline int mp_buf_int(MpBuf *b, int64_t v) {
    if (mp_buf_reserve(b, MP_HEAD_MAX) < 0) return -1;
    b->len += mp_put_int(b->p + b->len, v);
    return 0;
}

/* A header written by put (mp_put_array, ...); -1 beyond 32 bits, with no exception set (the caller's
   fallback answers). */
static inline int mp_buf_head(MpBuf *b, int (*put)(unsigned char *, uint64_t), uint64_t n) {
    if (mp_buf_reserve(b, MP_HEAD_MAX) < 0) return -1;
    int head = put(b->p + b->len, n);
    if (head < 0) return -1;
    b->len += head;
    return 0;
}

static inline int mp_buf_array(MpBuf *b, uint64_t n) { return mp_buf_head(b, mp_put_array, n); }
static inline int mp_buf_map(MpBuf *b, uint64_t n) { return mp_buf_head(b, mp_put_map, n); }
static inline int mp_buf_bin_head(MpBuf *b, uint64_t n) { return mp_buf_head(b, mp_put_bin_head, n); }

static inline int mp_buf_str(MpBuf *b, const void *s, Py_ssize_t n) {
    return mp_buf_head(b, mp_put_str_head, (uint64_t)n) < 0 ? -1 : mp_buf_put(b, s, n);
}

static inline int mp_buf_bin(MpBuf *b, const void *s, Py_ssize_t n) {
    return mp_buf_head(b, mp_put_bin_head, (uint64_t)n) < 0 ? -1 : mp_buf_put(b, s, n);
}

#endif
