/*
 * collector.store._rowbuild: the index rows of decoded events, built in C.
 *
 * collector.store.indexer.batched_rows turns (header, event) records into the rows of
 * every index table, merged per (table, row key) and handed out batch_size rows at a time.
 * In Python that cost about 15 us per event: a dozen small bytes, tuples and dicts, three
 * hashes and a msgpack call per event. RowBuilder.feed does the same work here.
 *
 * It is only a fast path, and must give exactly what the Python path gives, byte for byte
 * and in the same order: the rows of each event (indexer._event_rows, schema's row keys,
 * keys.pack_one's encoding, codec.encode_event's values and qualifier, BLAKE2b hashes) and
 * batched_rows' merging, batching and over-long-key counting. An event this file does not
 * model (a field of another type, an integer beyond 64 bits, a time that cannot be packed,
 * a str that is not UTF-8) goes through the Python row builder it was given (the fallback),
 * so unusual input is never answered differently, and its errors are the Python path's.
 * The layout's values (table names, shared cells, column prefixes, dead-row tags) come from
 * configure(), called by collector/store/rowbuild.py with schema.py's values; the constants
 * compiled in below (field positions and kinds, key tags, hash sizes, event types, the table
 * slots) are what layout() returns, and rowbuild.py compares them with the Python definitions
 * at import (a difference: the Python path runs; tests/collector/store/test_rowbuild_layout.py fails).
 * tests/collector/store/test_rowbuild.py checks both paths against each other.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_blake2b.h"
#include "msgpack_rw.h" /* collector/_c/: MpBuf and mp_buf_*, msgpack.packb's encodings */

/* wire.Event's fields (tracehook/wire.py), the ones the rows read. */
enum {
    F_TYPE = 0, F_TIME = 1, F_GROUP = 2, F_TOPIC = 3, F_MSG_ID = 4, F_BROKER_MSG_ID = 5, F_KEYS = 6, F_BROKER = 8,
    F_QUEUE = 9, F_OFFSET = 10, F_BORN = 11, F_STORE = 12, F_PROPS = 18, F_REQUEST_ID = 19, F_BODY = 22,
    F_TRACE_ID = 23, F_SPAN_ID = 24, N_FIELDS = 25, MIN_FIELDS = 5
};
/* keys.py's element encoding: a tag, then the bytes with 0x00 written as 0x00 KEY_ESCAPE and KEY_END
   after them, or the int plus KEY_INT_BIAS in 8 big-endian bytes. */
enum { KEY_BYTES = 0x01, KEY_STR = 0x02, KEY_INT = 0x03, KEY_END = 0x00, KEY_ESCAPE = 0xFF };
#define KEY_INT_BIAS 0x8000000000000000ULL
/* BLAKE2b digest sizes: schema.msg_hash, schema.event_id, tracehook.context.trace_id_for's hash */
enum { MSG_HASH_BYTES = 4, EVENT_ID_BYTES = 8, OWN_TRACE_BYTES = 16 };
enum { VALUE_HEADER = 0x94 };    /* schema._sender: a stored value is a 4-array [app, host, client_id, raw] */
enum { POSITION_HEADER = 0x92 }; /* schema.record_columns: the qualifier's msgpack (queue, offset) */
#define KEY_SEPARATOR ' '        /* indexer.KEY_SEPARATOR */
enum { K_INT, K_STR, K_MAP, K_BIN }; /* K_MAP and K_BIN may also be None (their default) */
static const char *const field_names[N_FIELDS] = {
    "type", "time_ms", "group", "topic", "msg_id", "broker_msg_id", "keys", "tags", "broker", "queue",
    "offset", "born_ms", "store_ms", "cost_us", "status", "error", "retry", "body_len", "props",
    "request_id", "tx_id", "tx_state", "body", "trace_id", "span_id"};
static const int field_kind[N_FIELDS] = {
    K_INT, K_INT, K_STR, K_STR, K_STR, K_STR, K_STR, K_STR, K_STR, K_INT, K_INT, K_INT, K_INT,
    K_INT, K_INT, K_STR, K_INT, K_INT, K_MAP, K_STR, K_STR, K_INT, K_BIN, K_STR, K_STR};
static const int64_t int_default[N_FIELDS] = {[F_QUEUE] = -1, [F_OFFSET] = -1}; /* other ints: 0 */
/* schema._HEX_FIELDS */
static const int hex_field[N_FIELDS] = {
    [F_MSG_ID] = 1, [F_BROKER_MSG_ID] = 1, [F_REQUEST_ID] = 1, [F_TRACE_ID] = 1, [F_SPAN_ID] = 1};
enum { PUB = 1, SUB_BEFORE = 2, SUB_AFTER = 3, DEAD = 5 }; /* wire.EventType */

/* The tables, in the order of configure()'s tables argument: schema's constants named by table_slots. */
enum { T_MESSAGES, T_RECORDS, T_KEYIDX, T_TRACEIDX, T_DEAD, T_PENDING, T_QUEUEIDX, T_SEQIDX, T_TIMEIDX,
       T_ROLLUPS, N_TABLES };
static const char *const table_slots[N_TABLES] = {
    "MESSAGES", "RECORDS", "KEYIDX", "TRACEIDX", "DEAD", "PENDING", "QUEUEIDX", "SEQIDX", "TIMEIDX", "ROLLUPS"};

static struct {
    int configured;
    PyObject *event_type;
    PyObject *tables[N_TABLES];
    PyObject *index_cells, *received_cells; /* shared, read-only cells */
    PyObject *send_prefix, *consume_prefix, *received_column, *dead_all, *dead_one, *dirty_msg; /* bytes */
} cfg;

/* -- keys.pack_one ------------------------------------------------------------------------ */

/* A str (KEY_STR) or bytes (KEY_BYTES) element: every 0x00 written as 0x00 KEY_ESCAPE, then KEY_END. */
static int key_escaped(MpBuf *b, unsigned char tag, const unsigned char *s, Py_ssize_t n) {
    if (mp_buf_reserve(b, 2 * n + 2) < 0) return -1;
    unsigned char *o = b->p + b->len;
    *o++ = tag;
    for (Py_ssize_t i = 0; i < n; i++) {
        *o++ = s[i];
        if (!s[i]) *o++ = KEY_ESCAPE;
    }
    *o++ = KEY_END;
    b->len = o - b->p;
    return 0;
}

static int key_str(MpBuf *b, const char *s, Py_ssize_t n) { return key_escaped(b, KEY_STR, (const unsigned char *)s, n); }

static void key_int_to(unsigned char out[9], int64_t v) { /* KEY_INT, then v + 2**63 big-endian */
    uint64_t u = (uint64_t)v ^ KEY_INT_BIAS;
    out[0] = KEY_INT;
    for (int i = 0; i < 8; i++) out[1 + i] = (unsigned char)(u >> (56 - 8 * i));
}

/* -- msgpack.packb(..., use_bin_type=True): collector/_c/msgpack_rw.h, and a str object ----------- */

static int mp_pystr(MpBuf *b, PyObject *o) {
    Py_ssize_t n;
    const char *s = PyUnicode_CheckExact(o) ? PyUnicode_AsUTF8AndSize(o, &n) : NULL;
    return s ? mp_buf_str(b, s, n) : -1;
}

/* -- one event ------------------------------------------------------------------------------ */

typedef struct {
    PyObject *obj[N_FIELDS];
    int64_t i[N_FIELDS];     /* K_INT fields */
    const char *s[N_FIELDS]; /* K_STR fields, UTF-8 */
    Py_ssize_t n[N_FIELDS];
} Ev;

/* Every field as this file models it; -1 (maybe with an exception set) when one is not. */
static int read_event(PyObject *event, Ev *ev) {
    if (Py_TYPE(event) != (PyTypeObject *)cfg.event_type || PyTuple_GET_SIZE(event) != N_FIELDS) return -1;
    for (int f = 0; f < N_FIELDS; f++) {
        PyObject *o = ev->obj[f] = PyTuple_GET_ITEM(event, f);
        switch (field_kind[f]) {
        case K_INT: { /* an int or an IntEnum (as msgpack packs them), never a bool */
            int overflow;
            if (!PyLong_Check(o) || PyBool_Check(o)) return -1;
            ev->i[f] = PyLong_AsLongLongAndOverflow(o, &overflow);
            if (overflow || (ev->i[f] == -1 && PyErr_Occurred())) return -1;
            break;
        }
        case K_STR:
            if (!PyUnicode_CheckExact(o) || !(ev->s[f] = PyUnicode_AsUTF8AndSize(o, &ev->n[f]))) return -1;
            break;
        case K_MAP:
            if (o != Py_None && !PyDict_CheckExact(o)) return -1;
            break;
        default:
            if (o != Py_None && !PyBytes_CheckExact(o)) return -1;
        }
    }
    return 0;
}

static int is_default(const Ev *ev, int f) {
    switch (field_kind[f]) {
    case K_INT: return ev->i[f] == int_default[f];
    case K_STR: return ev->n[f] == 0;
    default: return ev->obj[f] == Py_None;
    }
}

/* schema._is_hex: one or more pairs of lower-case hex digits. */
static int is_hex(const char *s, Py_ssize_t n) {
    if (n == 0 || n % 2) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

static unsigned char hex_digit(char c) { return (unsigned char)(c <= '9' ? c - '0' : c - 'a' + 10); }

static void unhex(unsigned char *out, const char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i += 2) *out++ = (unsigned char)(hex_digit(s[i]) << 4 | hex_digit(s[i + 1]));
}

static int put_unhex(MpBuf *b, const char *s, Py_ssize_t n) {
    if (mp_buf_reserve(b, n / 2) < 0) return -1;
    unhex(b->p + b->len, s, n);
    b->len += n / 2;
    return 0;
}

/* Where encode_raw put the array's parts: its item count, the end of its header and the msg_id's bytes. */
typedef struct {
    int n;
    Py_ssize_t head_end, id_start, id_end;
} RawParts;

/* msgpack of wire.trim(event) as codec._stored_raw makes it (the event of a layout 2 value): born and
   store times as their difference from time_ms, lower-case hex ids as the bytes they spell. */
static int encode_raw(MpBuf *b, const Ev *ev, RawParts *parts) {
    int n = N_FIELDS;
    while (n > MIN_FIELDS && is_default(ev, n - 1)) n--;
    if (mp_buf_array(b, n) < 0) return -1;
    parts->n = n, parts->head_end = b->len;
    for (int f = 0; f < n; f++) {
        PyObject *o = ev->obj[f];
        if (f == F_MSG_ID) parts->id_start = b->len;
        else if (f == F_MSG_ID + 1) parts->id_end = b->len;
        switch (field_kind[f]) {
        case K_INT: {
            int64_t v = ev->i[f];
            if ((f == F_BORN || f == F_STORE) && __builtin_sub_overflow(v, ev->i[F_TIME], &v)) return -1;
            if (mp_buf_int(b, v) < 0) return -1;
            break;
        }
        case K_STR:
            if (hex_field[f] && is_hex(ev->s[f], ev->n[f])) {
                if (mp_buf_bin_head(b, ev->n[f] / 2) < 0 || put_unhex(b, ev->s[f], ev->n[f]) < 0) return -1;
            } else if (mp_buf_str(b, ev->s[f], ev->n[f]) < 0)
                return -1;
            break;
        case K_MAP: {
            PyObject *k, *v;
            Py_ssize_t pos = 0;
            if (o == Py_None) {
                if (mp_buf_byte(b, 0xc0) < 0) return -1;
                break;
            }
            if (mp_buf_map(b, PyDict_GET_SIZE(o)) < 0) return -1;
            while (PyDict_Next(o, &pos, &k, &v))
                if (mp_pystr(b, k) < 0 || mp_pystr(b, v) < 0) return -1;
            break;
        }
        default:
            if (o == Py_None) {
                if (mp_buf_byte(b, 0xc0) < 0) return -1;
            } else if (mp_buf_bin(b, PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o)) < 0)
                return -1;
        }
    }
    if (n == F_MSG_ID + 1) parts->id_end = b->len;
    return 0;
}

/* -- rows ----------------------------------------------------------------------------------- */

typedef struct {
    const void *p;
    Py_ssize_t n;
} Seg;
#define SEG(buf) ((Seg){(buf).p, (buf).len})
#define SEGB(bytes) ((Seg){PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes)})

static PyObject *cat(const Seg *segs, int count) {
    Py_ssize_t len = 0;
    for (int i = 0; i < count; i++) len += segs[i].n;
    PyObject *out = PyBytes_FromStringAndSize(NULL, len);
    if (!out) return NULL;
    char *o = PyBytes_AS_STRING(out);
    for (int i = 0; i < count; i++) memcpy(o, segs[i].p, segs[i].n), o += segs[i].n;
    return out;
}

/* An event's rows (table index, row key, cells), owned, in indexer._event_rows' order. */
typedef struct {
    int count, cap;
    struct Row {
        int table;
        PyObject *row, *cells;
    } *items, small[16];
} Rows;

static void rows_clear(Rows *r) {
    for (int i = 0; i < r->count; i++) Py_XDECREF(r->items[i].row), Py_XDECREF(r->items[i].cells);
    if (r->items != r->small) PyMem_Free(r->items);
    r->items = r->small, r->count = 0, r->cap = 16;
}

/* Takes both references (even on failure); NULL row or cells means an error is set. */
static int add_row(Rows *r, int table, PyObject *row, PyObject *cells) {
    if (!row || !cells) return Py_XDECREF(row), Py_XDECREF(cells), -1;
    if (r->count == r->cap) {
        struct Row *items = PyMem_Malloc(2 * r->cap * sizeof *items);
        if (!items) return Py_DECREF(row), Py_DECREF(cells), PyErr_NoMemory(), -1;
        memcpy(items, r->items, r->count * sizeof *items);
        if (r->items != r->small) PyMem_Free(r->items);
        r->items = items, r->cap *= 2;
    }
    r->items[r->count++] = (struct Row){table, row, cells};
    return 0;
}

static PyObject *shared(PyObject *cells) { return Py_INCREF(cells), cells; }

static PyObject *one_cell(PyObject *column, PyObject *value) {
    PyObject *d = column ? PyDict_New() : NULL;
    if (d && PyDict_SetItem(d, column, value) < 0) Py_CLEAR(d);
    return d;
}

/* The hashes of a msg id: schema.msg_hash (4 bytes) and tracehook.context.trace_id_for's own trace
   id as the 16 bytes its hex digits spell (the id itself when it is a valid W3C trace id: 32
   lower-case hex digits, not all zero; else BLAKE2b-128 of it). */
typedef struct {
    unsigned char hash4[MSG_HASH_BYTES], own[OWN_TRACE_BYTES];
} IdHashes;

/* Recent ids' hashes, which Python caches too (a message's events come close together):
   direct-mapped by the id's bytes, read and written only under the GIL and never across a call
   that could run Python code (the entry is copied out). */
#define ID_CACHE_SIZE 1024
#define ID_CACHE_MAX 64
static struct {
    int used;
    Py_ssize_t n;
    unsigned char id[ID_CACHE_MAX];
    IdHashes hashes;
} id_cache[ID_CACHE_SIZE];

static IdHashes id_hashes(const char *id, Py_ssize_t n) {
    static const char zeros[32] = "00000000000000000000000000000000";
    IdHashes out;
    uint32_t h = 2166136261u; /* FNV-1a */
    if (n <= ID_CACHE_MAX) {
        for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (unsigned char)id[i]) * 16777619u;
        h %= ID_CACHE_SIZE;
        if (id_cache[h].used && id_cache[h].n == n && memcmp(id_cache[h].id, id, n) == 0) return id_cache[h].hashes;
    }
    blake2b(out.hash4, MSG_HASH_BYTES, (const unsigned char *)id, n);
    if (n == 32 && is_hex(id, 32) && memcmp(id, zeros, 32) != 0)
        unhex(out.own, id, 32);
    else
        blake2b(out.own, OWN_TRACE_BYTES, (const unsigned char *)id, n);
    if (n <= ID_CACHE_MAX) {
        id_cache[h].used = 1, id_cache[h].n = n, id_cache[h].hashes = out;
        memcpy(id_cache[h].id, id, n);
    }
    return out;
}

/* indexer._event_rows(header, event): 0, or -1 when the fallback must build them. */
static int event_rows(PyObject *sender, PyObject *event, long long salt_buckets, PyObject *mark, Rows *out) {
    Ev ev;
    MpBuf value, v3, topic, msg_id, msg_row, tmp;
    unsigned char tm[9], rev[9], qk[9], ok[9];
    PyObject *value_b = NULL, *event_col = NULL;
    int rc = -1;
    mp_buf_init(&value), mp_buf_init(&v3), mp_buf_init(&topic), mp_buf_init(&msg_id), mp_buf_init(&msg_row), mp_buf_init(&tmp);
    if (read_event(event, &ev) < 0) goto done;
    int64_t type = ev.i[F_TYPE], queue = ev.i[F_QUEUE], offset = ev.i[F_OFFSET], store = ev.i[F_STORE];
    int consume = type == SUB_BEFORE || type == SUB_AFTER;

    /* codec.encode_event: the layout 2 value (sender: its 0x94 and three strings), whose BLAKE2b-64 is the
       column's qualifier, and the layout 3 value stored: one flat array, the sender then the event without
       its msg_id */
    RawParts raw = {0, 0, 0, 0};
    Py_ssize_t sender_n = PyBytes_GET_SIZE(sender);
    if (mp_buf_put(&value, PyBytes_AS_STRING(sender), sender_n) < 0 || encode_raw(&value, &ev, &raw) < 0) goto done;
    unsigned char digest[EVENT_ID_BYTES];
    blake2b(digest, EVENT_ID_BYTES, value.p, value.len);
    if (mp_buf_array(&v3, raw.n + 2) < 0 || mp_buf_put(&v3, value.p + 1, sender_n - 1) < 0 ||
        mp_buf_put(&v3, value.p + raw.head_end, raw.id_start - raw.head_end) < 0 ||
        mp_buf_put(&v3, value.p + raw.id_end, value.len - raw.id_end) < 0)
        goto done;
    PyObject *prefix = consume ? cfg.consume_prefix : cfg.send_prefix;
    if (!(value_b = PyBytes_FromStringAndSize((const char *)v3.p, v3.len))) goto done;
    if (!(event_col = cat((Seg[]){SEGB(prefix), {digest, EVENT_ID_BYTES}}, 2))) goto done;

    /* schema.message_row: (hash4(msg_id), msg_id); schema.event_key: the shared elements */
    const char *id = ev.s[F_MSG_ID];
    Py_ssize_t id_n = ev.n[F_MSG_ID];
    IdHashes hashes = id_hashes(id, id_n);
    const unsigned char *hash4 = hashes.hash4;
    if (key_escaped(&msg_row, KEY_BYTES, hash4, MSG_HASH_BYTES) < 0 || key_str(&msg_id, id, id_n) < 0 ||
        mp_buf_put(&msg_row, msg_id.p, msg_id.len) < 0 || key_str(&topic, ev.s[F_TOPIC], ev.n[F_TOPIC]) < 0)
        goto done;
    int64_t t = store > 0 ? store : ev.i[F_BORN] > 0 ? ev.i[F_BORN] : ev.i[F_TIME];
    if (t < 0) goto done; /* keys.reverse_int(t) is beyond 64 bits: the Python path raises */
    MpBuf *b = &tmp;
    key_int_to(tm, t), key_int_to(rev, INT64_MAX - t);
    Seg T = SEG(topic), M = SEG(msg_id), TM = {tm, 9}, REV = {rev, 9};

    if (add_row(out, T_MESSAGES, cat((Seg[]){SEG(msg_row)}, 1), one_cell(event_col, value_b)) < 0) goto done;
    if (consume) { /* schema.records_row and record_columns */
        PyObject *cells;
        if (type == SUB_AFTER && queue >= 0 && offset >= 0) { /* msgpack of (queue, offset) */
            b->len = 0;
            if (mp_buf_byte(b, POSITION_HEADER) < 0 || mp_buf_int(b, queue) < 0 || mp_buf_int(b, offset) < 0) goto done;
            PyObject *col = cat((Seg[]){SEGB(cfg.received_column), SEG(*b)}, 2);
            PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
            cells = col && empty ? one_cell(col, empty) : NULL;
            Py_XDECREF(col), Py_XDECREF(empty);
        } else
            cells = shared(cfg.received_cells);
        b->len = 0;
        PyObject *row = key_str(b, ev.s[F_GROUP], ev.n[F_GROUP]) < 0 ? NULL : cat((Seg[]){T, SEG(*b), TM, M}, 4);
        if (add_row(out, T_RECORDS, row, cells) < 0) goto done;
    }
    if (type == PUB || type == SUB_BEFORE || type == DEAD) {
        /* schema.key_row per distinct key: the keys split on spaces only, as a set (same order) */
        const char *k = ev.s[F_KEYS];
        Py_ssize_t kn = ev.n[F_KEYS], parts = 0, first = -1, first_n = 0;
        for (Py_ssize_t i = 0; i < kn;) {
            Py_ssize_t j = i;
            while (j < kn && k[j] != KEY_SEPARATOR) j++;
            if (j > i && parts++ == 0) first = i, first_n = j - i;
            i = j + 1;
        }
        if (parts == 1) {
            b->len = 0;
            if (key_str(b, k + first, first_n) < 0 ||
                add_row(out, T_KEYIDX, cat((Seg[]){T, SEG(*b), REV, M}, 4), shared(cfg.index_cells)) < 0)
                goto done;
        } else if (parts > 1) {
            PyObject *space = PyUnicode_FromOrdinal(KEY_SEPARATOR), *split = NULL, *set = NULL, *it = NULL, *key;
            int bad = !space || !(split = PyUnicode_Split(ev.obj[F_KEYS], space, -1)) || !(set = PySet_New(NULL));
            for (Py_ssize_t i = 0; !bad && i < PyList_GET_SIZE(split); i++) {
                key = PyList_GET_ITEM(split, i);
                bad = PyUnicode_GET_LENGTH(key) && PySet_Add(set, key) < 0;
            }
            bad = bad || !(it = PyObject_GetIter(set));
            while (!bad && (key = PyIter_Next(it))) {
                Py_ssize_t n;
                const char *s = PyUnicode_AsUTF8AndSize(key, &n);
                b->len = 0;
                bad = !s || key_str(b, s, n) < 0 ||
                      add_row(out, T_KEYIDX, cat((Seg[]){T, SEG(*b), REV, M}, 4), shared(cfg.index_cells)) < 0;
                Py_DECREF(key);
            }
            Py_XDECREF(space), Py_XDECREF(split), Py_XDECREF(set), Py_XDECREF(it);
            if (bad || PyErr_Occurred()) goto done;
        }
        /* schema.trace_row: the event's trace id, else tracehook.context.trace_id_for(msg_id) */
        b->len = 0;
        const char *tid = ev.s[F_TRACE_ID];
        Py_ssize_t tid_n = ev.n[F_TRACE_ID];
        if (tid_n && is_hex(tid, tid_n)) { /* a bytes element of the bytes the digits spell */
            MpBuf raw;
            mp_buf_init(&raw);
            int bad = put_unhex(&raw, tid, tid_n) < 0 || key_escaped(b, KEY_BYTES, raw.p, raw.len) < 0;
            mp_buf_free(&raw);
            if (bad) goto done;
        } else if (tid_n) {
            if (key_str(b, tid, tid_n) < 0) goto done;
        } else if (key_escaped(b, KEY_BYTES, hashes.own, OWN_TRACE_BYTES) < 0)
            goto done;
        if (add_row(out, T_TRACEIDX, cat((Seg[]){SEG(*b), M}, 2), shared(cfg.index_cells)) < 0) goto done;

        int placing = type == PUB || store > 0; /* model.could_place */
        if (type == DEAD) { /* schema.dead_rows_of, then the pending row */
            b->len = 0;
            if (key_str(b, ev.s[F_GROUP], ev.n[F_GROUP]) < 0) goto done;
            Seg G = SEG(*b);
            if (add_row(out, T_DEAD, cat((Seg[]){T, SEGB(cfg.dead_all), REV, M, G}, 5), shared(cfg.index_cells)) < 0 ||
                add_row(out, T_DEAD, cat((Seg[]){T, SEGB(cfg.dead_one), G, REV, M}, 5), shared(cfg.index_cells)) < 0 ||
                add_row(out, T_PENDING, cat((Seg[]){SEG(msg_row)}, 1), one_cell(event_col, value_b)) < 0)
                goto done;
        } else if (offset >= 0) {
            key_int_to(qk, queue), key_int_to(ok, offset);
            Seg Q = {qk, 9}, O = {ok, 9};
            if (placing && queue >= 0 &&
                add_row(out, T_QUEUEIDX, cat((Seg[]){T, Q, TM, O}, 4), shared(cfg.index_cells)) < 0)
                goto done;
            if (ev.n[F_BROKER]) {
                b->len = 0;
                if (key_str(b, ev.s[F_BROKER], ev.n[F_BROKER]) < 0 ||
                    add_row(out, T_SEQIDX, cat((Seg[]){T, SEG(*b), O, Q, M}, 5), shared(cfg.index_cells)) < 0)
                    goto done;
            }
        }
        if (placing) { /* schema.time_row under schema.salt(msg_id, salt_buckets) */
            uint32_t h = 0; /* schema.salt: the hash as a big-endian int */
            for (int i = 0; i < MSG_HASH_BYTES; i++) h = h << 8 | hash4[i];
            unsigned char sk[9];
            key_int_to(sk, (int64_t)(h % (unsigned long long)salt_buckets));
            if (add_row(out, T_TIMEIDX, cat((Seg[]){{sk, 9}, T, TM, M}, 4), shared(cfg.index_cells)) < 0)
                goto done;
        }
    }
    if (mark != Py_None &&
        add_row(out, T_ROLLUPS, cat((Seg[]){SEGB(cfg.dirty_msg), SEG(msg_row)}, 2), shared(mark)) < 0)
        goto done;
    rc = 0;
done:
    Py_XDECREF(value_b), Py_XDECREF(event_col);
    mp_buf_free(&value), mp_buf_free(&v3), mp_buf_free(&topic), mp_buf_free(&msg_id), mp_buf_free(&msg_row), mp_buf_free(&tmp);
    return rc;
}

/* -- RowBuilder: indexer.batched_rows' merging and batching --------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *pending;  /* {table: {row key: cells}}, as in batched_rows */
    PyObject *fallback; /* fallback(header, event) -> [(table, row key, cells)]: indexer._event_rows */
    long long salt_buckets, too_long;
    Py_ssize_t batch_size, limit;
    PyObject *mark; /* the rollup marker's cells, None for no marker rows */
    PyObject *header, *sender; /* the last header and 0x94 + codec._sender() of it (None: not a str triple) */
} Builder;

/* list(rows.items()). Its (row key, cells) pairs are left out of the cyclic GC when the cells
   cannot reach back to them (a dict of bytes, or a shared read-only cell), as the collector's own
   pass would on the first pair; a batch is thousands of them, and the index job keeps several. */
static PyObject *items_of(PyObject *rows) {
    PyObject *list = PyList_New(PyDict_GET_SIZE(rows)), *key, *cells;
    Py_ssize_t pos = 0, i = 0;
    while (list && PyDict_Next(rows, &pos, &key, &cells)) {
        PyObject *pair = PyTuple_Pack(2, key, cells);
        if (!pair) Py_CLEAR(list);
        else {
            if (PyBytes_CheckExact(key) && (cells == cfg.index_cells || cells == cfg.received_cells ||
                                            (PyDict_CheckExact(cells) && !PyObject_GC_IsTracked(cells))))
                PyObject_GC_UnTrack(pair);
            PyList_SET_ITEM(list, i++, pair);
        }
    }
    return list;
}

static int hand_out(PyObject *full, PyObject *table, PyObject *rows) {
    PyObject *items = items_of(rows), *batch = items ? PyTuple_Pack(2, table, items) : NULL;
    int rc = batch ? PyList_Append(full, batch) : -1;
    Py_XDECREF(items), Py_XDECREF(batch);
    return rc;
}

/* One row into pending; a full table goes to `full` as (table, list of (row key, cells)). */
static int merge(Builder *self, PyObject *full, PyObject *table, PyObject *row, PyObject *cells) {
    PyObject *rows = PyDict_GetItemWithError(self->pending, table);
    if (!rows) {
        if (PyErr_Occurred() || !(rows = PyDict_New())) return -1;
        int bad = PyDict_SetItem(self->pending, table, rows) < 0;
        Py_DECREF(rows); /* pending holds it */
        if (bad) return -1;
    }
    if (!PyBytes_Check(row)) return PyErr_SetString(PyExc_TypeError, "row keys must be bytes"), -1;
    PyObject *existing = PyDict_GetItemWithError(rows, row);
    if (!existing) {
        if (PyErr_Occurred()) return -1;
        if (PyBytes_GET_SIZE(row) > self->limit) return self->too_long++, 0;
        if (PyDict_SetItem(rows, row, cells) < 0) return -1;
        if (PyDict_GET_SIZE(rows) >= self->batch_size) {
            if (hand_out(full, table, rows) < 0 || PyDict_DelItem(self->pending, table) < 0) return -1;
        }
    } else if (existing != cells) {
        Py_INCREF(existing);
        if (!PyDict_CheckExact(existing)) { /* a shared read-only cell: copied once the row gets more */
            Py_SETREF(existing, PyObject_CallOneArg((PyObject *)&PyDict_Type, existing));
            if (!existing || PyDict_SetItem(rows, row, existing) < 0) return Py_XDECREF(existing), -1;
        }
        int bad = PyDict_Update(existing, cells) < 0;
        Py_DECREF(existing);
        if (bad) return -1;
    }
    return 0;
}

static PyObject *sender_of(PyObject *header) {
    static const char *const names[3] = {"app", "host", "client_id"};
    MpBuf b;
    mp_buf_init(&b);
    int bad = mp_buf_byte(&b, VALUE_HEADER) < 0;
    for (int i = 0; i < 3 && !bad; i++) {
        PyObject *v = PyObject_GetAttrString(header, names[i]);
        if (!v) return mp_buf_free(&b), NULL;
        bad = mp_pystr(&b, v) < 0;
        Py_DECREF(v);
    }
    PyObject *out = bad ? (PyErr_Clear(), Py_NewRef(Py_None)) : PyBytes_FromStringAndSize((const char *)b.p, b.len);
    mp_buf_free(&b);
    return out;
}

static int add_record(Builder *self, PyObject *full, PyObject *record) {
    PyObject *pair = PySequence_Tuple(record), *header, *event;
    if (!pair) return -1;
    if (PyTuple_GET_SIZE(pair) != 2) {
        PyErr_Format(PyExc_ValueError, "a record is (header, event), not %zd items", PyTuple_GET_SIZE(pair));
        return Py_DECREF(pair), -1;
    }
    header = PyTuple_GET_ITEM(pair, 0), event = PyTuple_GET_ITEM(pair, 1);
    if (header != self->header) { /* a batch's events share their header object: encode it once */
        PyObject *sender = sender_of(header);
        if (!sender) return Py_DECREF(pair), -1;
        Py_XSETREF(self->sender, sender);
        Py_XSETREF(self->header, Py_NewRef(header));
    }
    Rows rows = {.items = rows.small, .count = 0, .cap = 16};
    int rc = 0;
    if (self->sender != Py_None && event_rows(self->sender, event, self->salt_buckets, self->mark, &rows) == 0) {
        for (int i = 0; i < rows.count && rc == 0; i++)
            rc = merge(self, full, cfg.tables[rows.items[i].table], rows.items[i].row, rows.items[i].cells);
    } else { /* not modelled here: the Python path builds this event's rows (and raises its errors) */
        PyErr_Clear();
        PyObject *list = PyObject_CallFunctionObjArgs(self->fallback, header, event, NULL), *seq;
        seq = list ? PySequence_Fast(list, "the fallback must return a list of rows") : NULL;
        for (Py_ssize_t i = 0; seq && rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
            PyObject *r = PySequence_Fast_GET_ITEM(seq, i);
            if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 3)
                rc = (PyErr_SetString(PyExc_TypeError, "a row is (table, row key, cells)"), -1);
            else
                rc = merge(self, full, PyTuple_GET_ITEM(r, 0), PyTuple_GET_ITEM(r, 1), PyTuple_GET_ITEM(r, 2));
        }
        if (!seq) rc = -1;
        Py_XDECREF(list), Py_XDECREF(seq);
    }
    rows_clear(&rows);
    Py_DECREF(pair);
    return rc;
}

static PyObject *builder_feed(Builder *self, PyObject *iterator) {
    PyObject *full = PyList_New(0), *record;
    if (!full) return NULL;
    while (PyList_GET_SIZE(full) == 0 && (record = PyIter_Next(iterator))) {
        int rc = add_record(self, full, record);
        Py_DECREF(record);
        if (rc < 0) return Py_DECREF(full), NULL;
    }
    if (PyErr_Occurred()) return Py_DECREF(full), NULL;
    return full;
}

static PyObject *builder_drain(Builder *self, PyObject *unused) {
    PyObject *full = PyList_New(0), *table, *rows;
    Py_ssize_t pos = 0;
    while (full && PyDict_Next(self->pending, &pos, &table, &rows))
        if (hand_out(full, table, rows) < 0) Py_CLEAR(full);
    if (full) PyDict_Clear(self->pending);
    return full;
}

static int builder_init(Builder *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"fallback", "salt_buckets", "mark", "batch_size", "limit", NULL};
    PyObject *fallback, *mark;
    if (!cfg.configured) return PyErr_SetString(PyExc_RuntimeError, "configure() first"), -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLOnn", kw, &fallback, &self->salt_buckets, &mark,
                                     &self->batch_size, &self->limit))
        return -1;
    if (self->salt_buckets < 1) return PyErr_SetString(PyExc_ValueError, "salt_buckets must be >= 1"), -1;
    Py_XSETREF(self->fallback, Py_NewRef(fallback));
    Py_XSETREF(self->mark, Py_NewRef(mark));
    Py_XSETREF(self->pending, PyDict_New());
    Py_CLEAR(self->header);
    Py_CLEAR(self->sender);
    self->too_long = 0;
    return self->pending ? 0 : -1;
}

static void builder_dealloc(Builder *self) {
    Py_XDECREF(self->pending), Py_XDECREF(self->fallback), Py_XDECREF(self->mark);
    Py_XDECREF(self->header), Py_XDECREF(self->sender);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *builder_get_pending(Builder *self, void *closure) { return Py_NewRef(self->pending); }
static PyObject *builder_get_too_long(Builder *self, void *closure) { return PyLong_FromLongLong(self->too_long); }

static PyMethodDef builder_methods[] = {
    {"feed", (PyCFunction)builder_feed, METH_O,
     "feed(iterator) -> [(table, rows)]: takes records until a table's rows reach batch_size (those batches)\n"
     "or the iterator ends (an empty list)."},
    {"drain", (PyCFunction)builder_drain, METH_NOARGS,
     "drain() -> [(table, rows)]: every table's rows not handed out yet (pending is empty after)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef builder_getset[] = {
    {"pending", (getter)builder_get_pending, NULL, "{table: {row key: cells}}: the rows not handed out yet", NULL},
    {"too_long", (getter)builder_get_too_long, NULL, "rows left out: their key is over limit bytes", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject BuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "collector.store._rowbuild.RowBuilder",
    .tp_basicsize = sizeof(Builder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RowBuilder(fallback, salt_buckets, mark, batch_size, limit): indexer.batched_rows' state\n"
               "(mark: the rollup marker rows' cells, or None for none).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)builder_init,
    .tp_dealloc = (destructor)builder_dealloc,
    .tp_methods = builder_methods,
    .tp_getset = builder_getset,
};

/* -- configure(): the layout's constants, checked against what this file models ------------ */

static int check_event_type(PyObject *fields, PyObject *defaults) {
    if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) != N_FIELDS || !PyTuple_Check(defaults) ||
        PyTuple_GET_SIZE(defaults) != N_FIELDS)
        return PyErr_SetString(PyExc_ValueError, "wire.Event has other fields than this module models"), -1;
    for (int f = 0; f < N_FIELDS; f++) {
        PyObject *d = PyTuple_GET_ITEM(defaults, f), *want;
        int k = field_kind[f], same;
        if (f < MIN_FIELDS) want = Py_NewRef(Py_None);
        else if (k == K_INT) want = PyLong_FromLongLong(int_default[f]);
        else if (k == K_STR) want = PyUnicode_FromString("");
        else want = Py_NewRef(Py_None);
        if (!want) return -1;
        same = PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(fields, f), field_names[f]) == 0 &&
               (d == Py_None ? want == Py_None : want != Py_None && PyObject_RichCompareBool(d, want, Py_EQ) == 1);
        Py_DECREF(want);
        if (PyErr_Occurred()) return -1;
        if (!same)
            return PyErr_Format(PyExc_ValueError, "wire.Event field %d is not %s as modelled", f, field_names[f]), -1;
    }
    return 0;
}

static PyObject *rowbuild_configure(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"event_type", "fields", "defaults", "tables", "index_cells", "received_cells",
                         "send_prefix", "consume_prefix", "received_column", "dead_all",
                         "dead_one", "dirty_msg", NULL};
    PyObject *event_type, *fields, *defaults, *tables, *cells[2], *bytes[6];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOO!OOSSSSSS", kw, &PyType_Type, &event_type, &fields,
                                     &defaults, &PyTuple_Type, &tables, &cells[0], &cells[1], &bytes[0],
                                     &bytes[1], &bytes[2], &bytes[3], &bytes[4], &bytes[5]))
        return NULL;
    if (check_event_type(fields, defaults) < 0) return NULL;
    if (PyTuple_GET_SIZE(tables) != N_TABLES)
        return PyErr_Format(PyExc_ValueError, "tables: %d names expected", N_TABLES), NULL;
    for (int i = 0; i < N_TABLES; i++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(tables, i)))
            return PyErr_SetString(PyExc_TypeError, "table names are str"), NULL;
    Py_XSETREF(cfg.event_type, Py_NewRef(event_type));
    for (int i = 0; i < N_TABLES; i++) Py_XSETREF(cfg.tables[i], Py_NewRef(PyTuple_GET_ITEM(tables, i)));
    PyObject **c[2] = {&cfg.index_cells, &cfg.received_cells};
    for (int i = 0; i < 2; i++) Py_XSETREF(*c[i], Py_NewRef(cells[i]));
    PyObject **b[6] = {&cfg.send_prefix, &cfg.consume_prefix, &cfg.received_column, &cfg.dead_all, &cfg.dead_one,
                       &cfg.dirty_msg};
    for (int i = 0; i < 6; i++) Py_XSETREF(*b[i], Py_NewRef(bytes[i]));
    cfg.configured = 1;
    Py_RETURN_NONE;
}

/* layout(): every constant compiled into this file, for rowbuild.py to compare with its Python definition. */
static PyObject *int_tuple(const int *values, int n) {
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *v = PyLong_FromLong(values[i]);
        if (!v) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *str_tuple(const char *const *values, int n) {
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *v = PyUnicode_FromString(values[i]);
        if (!v) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *rowbuild_layout(PyObject *module, PyObject *unused) {
    static const char *const kind_names[] = {[K_INT] = "int", [K_STR] = "str", [K_MAP] = "map", [K_BIN] = "bin"};
    const char *kinds[N_FIELDS];
    int hex[N_FIELDS], n_hex = 0;
    PyObject *defaults = PyTuple_New(N_FIELDS);
    for (int f = 0; defaults && f < N_FIELDS; f++) {
        kinds[f] = kind_names[field_kind[f]];
        if (hex_field[f]) hex[n_hex++] = f;
        PyObject *d = f >= MIN_FIELDS && field_kind[f] == K_INT ? PyLong_FromLongLong(int_default[f]) : Py_NewRef(Py_None);
        if (!d) Py_CLEAR(defaults);
        else PyTuple_SET_ITEM(defaults, f, d);
    }
    if (!defaults) return NULL;
    return Py_BuildValue(
        "{s:N,s:N,s:N,s:{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i},s:i,s:N,"
        "s:{s:i,s:i,s:i,s:i},s:{s:i,s:i,s:i},s:i,s:i,s:K,s:L,s:i,s:i,s:i,s:i,s:i,s:C,s:N}",
        "fields", str_tuple(field_names, N_FIELDS), "kinds", str_tuple(kinds, N_FIELDS), "int_defaults", defaults,
        "positions", "type", F_TYPE, "time_ms", F_TIME, "group", F_GROUP, "topic", F_TOPIC, "msg_id", F_MSG_ID,
        "broker_msg_id", F_BROKER_MSG_ID, "keys", F_KEYS, "broker", F_BROKER, "queue", F_QUEUE, "offset", F_OFFSET,
        "born_ms", F_BORN, "store_ms", F_STORE, "props", F_PROPS, "request_id", F_REQUEST_ID, "body", F_BODY,
        "trace_id", F_TRACE_ID, "span_id", F_SPAN_ID,
        "min_fields", MIN_FIELDS, "hex_fields", int_tuple(hex, n_hex),
        "event_types", "PUB", PUB, "SUB_BEFORE", SUB_BEFORE, "SUB_AFTER", SUB_AFTER, "DEAD", DEAD,
        "key_tags", "bytes", KEY_BYTES, "str", KEY_STR, "int", KEY_INT, "key_end", KEY_END, "key_escape", KEY_ESCAPE,
        "key_int_bias", (unsigned long long)KEY_INT_BIAS, "reversed_from", (long long)INT64_MAX,
        "msg_hash_bytes", MSG_HASH_BYTES, "event_id_bytes", EVENT_ID_BYTES, "own_trace_bytes", OWN_TRACE_BYTES,
        "value_header", VALUE_HEADER, "position_header", POSITION_HEADER, "key_separator", KEY_SEPARATOR,
        "table_slots", str_tuple(table_slots, N_TABLES));
}

static PyObject *rowbuild_blake2b(PyObject *module, PyObject *args) {
    Py_buffer data;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*n", &data, &size)) return NULL;
    if (size < 1 || size > 64) return PyBuffer_Release(&data), PyErr_SetString(PyExc_ValueError, "size: 1..64"), NULL;
    unsigned char out[64];
    blake2b(out, size, data.buf, data.len);
    PyBuffer_Release(&data);
    return PyBytes_FromStringAndSize((const char *)out, size);
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))rowbuild_configure, METH_VARARGS | METH_KEYWORDS,
     "configure(event_type, fields, defaults, tables, index_cells, received_cells, send_prefix,\n"
     "consume_prefix, received_column, dead_all, dead_one, dirty_msg): the layout, from collector.store.schema."},
    {"layout", rowbuild_layout, METH_NOARGS,
     "layout() -> the constants compiled into this module (field positions and kinds, key tags, hash sizes, ...)."},
    {"blake2b", rowbuild_blake2b, METH_VARARGS,
     "blake2b(data, size) -> the embedded BLAKE2b's digest (hashlib.blake2b(data, digest_size=size)), for tests."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "collector.store._rowbuild",
    "Fast path of collector.store.indexer.batched_rows: index rows built in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__rowbuild(void) {
    if (PyType_Ready(&BuilderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddObjectRef(m, "RowBuilder", (PyObject *)&BuilderType) < 0) Py_CLEAR(m);
    return m;
}
