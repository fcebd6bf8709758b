/*
 * collector.store._readback: the rollup read-back's per-message work, in C.
 *
 * After every batch the rollups read each touched message's row back (collector.store.rollup
 * read_parts) and compute its part of its minute. In Python that costs a row key (keys.pack of
 * a BLAKE2b hash and the id) and the decoding of every stored event, all 25 fields of it, where
 * the part reads nine. This file does both:
 *
 *   message_rows(ids)         schema.message_row of each id (a list of str), or None when one is
 *                             not a str or not UTF-8 encodable (the Python path then runs)
 *   sorted_message_rows(ids)  the same rows in key order, and the ids in that order (or None)
 *   part_events(values, cls)  for a message row's stored values (bytes), the fields the part reads
 *                             of each event as cls(time_ms, type, request_id, group, topic,
 *                             store_ms, born_ms, status, retry) (readback.PartEvent), in the order
 *                             of values; None when a value is not exactly what the indexer writes
 *   parts(rows, cls, version, minute_ms)
 *                             for each message row (a dict of its cells): when its events are sends,
 *                             consume attempts with request ids and dead letters (the common shapes: a
 *                             message only sent, consumed by a group or two, retried, failed, dead), what
 *                             rollup._part_values gives for them, {(topic, minute): part value} with
 *                             MOVED in the other minutes (_partof.h); else its part_events
 *
 * It is only a fast path, and gives exactly what the Python path gives: part_events is
 * codec.decode_events (times and hex ids restored, missing fields defaulted) cut down to those
 * fields, and a message's part values are what collector/store/rollup_parts.py encodes for it. A
 * value it does not model (not a 4-array of sender strings and the event array, a
 * needed field of another type, an int beyond 64 bits, a str that is not UTF-8, a map key that
 * is not str or bin, an ext type, trailing bytes...) makes it answer None, and the caller decodes
 * that message in Python (which raises the errors it raises). tests/collector/store/test_readback.py
 * checks both paths against each other.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_blake2b.h"
#include "msgpack_rw.h" /* collector/_c/: mp_next, mp_skip, mp_utf8_valid, mp_put_* */

/* keys.py's element tags, schema.msg_hash's size, schema._sender's [app, host, client_id, raw] header */
enum { KEY_BYTES = 0x01, KEY_STR = 0x02, MSG_HASH_BYTES = 4, VALUE_HEADER = 0x94 };

/* -- message_rows ------------------------------------------------------------------------- */

/* keys.pack_one of a str (tag 0x02) or bytes (0x01): every 0x00 written as 0x00 0xFF, then 0x00. */
static char *key_escaped(char *o, unsigned char tag, const unsigned char *s, Py_ssize_t n) {
    *o++ = (char)tag;
    for (Py_ssize_t i = 0; i < n; i++) {
        *o++ = (char)s[i];
        if (!s[i]) *o++ = (char)0xFF;
    }
    *o++ = 0;
    return o;
}

static PyObject *message_rows(PyObject *module, PyObject *ids) {
    PyObject *seq = PySequence_Fast(ids, "ids must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(count);
    for (Py_ssize_t i = 0; out && i < count; i++) {
        PyObject *id = PySequence_Fast_GET_ITEM(seq, i);
        Py_ssize_t n;
        const char *s = PyUnicode_CheckExact(id) ? PyUnicode_AsUTF8AndSize(id, &n) : NULL;
        if (!s) { /* not a str, or not encodable: the Python path answers (or raises) */
            PyErr_Clear();
            Py_DECREF(out);
            Py_DECREF(seq);
            Py_RETURN_NONE;
        }
        unsigned char hash4[MSG_HASH_BYTES];
        blake2b(hash4, MSG_HASH_BYTES, (const unsigned char *)s, (size_t)n);
        /* (hash4, id): at most 2 * 4 + 2 and 2 * n + 2 bytes */
        PyObject *row = PyBytes_FromStringAndSize(NULL, 2 * n + 12);
        if (!row) {
            Py_CLEAR(out);
            break;
        }
        char *start = PyBytes_AS_STRING(row), *o = key_escaped(start, KEY_BYTES, hash4, MSG_HASH_BYTES);
        o = key_escaped(o, KEY_STR, (const unsigned char *)s, n);
        if (_PyBytes_Resize(&row, o - start) < 0) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, row);
    }
    Py_DECREF(seq);
    return out;
}

/* A row key and the index of its id, sorted by key (memcmp, shorter first on a tie: bytes order).
   Its first 8 bytes (every message row key has them) as a big-endian int decide most comparisons
   without reading the key: a qsort of 10^5 keys through pointers cost about 0.6 us per key. */
typedef struct {
    uint64_t head;
    const char *p;
    Py_ssize_t n, index;
} Keyed;

static int by_key(const void *a, const void *b) {
    const Keyed *x = a, *y = b;
    if (x->head != y->head) return x->head < y->head ? -1 : 1;
    int c = memcmp(x->p, y->p, (size_t)(x->n < y->n ? x->n : y->n));
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* (rows, ids): message_rows(ids) in key order, and the ids in the same order; None as message_rows. */
static PyObject *sorted_message_rows(PyObject *module, PyObject *ids) {
    PyObject *seq = PySequence_List(ids), *rows = seq ? message_rows(module, seq) : NULL, *out = NULL;
    if (!rows || rows == Py_None) {
        Py_XDECREF(seq);
        return rows;
    }
    Py_ssize_t count = PyList_GET_SIZE(rows);
    Keyed *keyed = PyMem_Malloc((count ? count : 1) * sizeof *keyed);
    PyObject *sorted_rows = PyList_New(count), *sorted_ids = PyList_New(count);
    if (!keyed || !sorted_rows || !sorted_ids) {
        if (!keyed) PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        const unsigned char *key = (const unsigned char *)PyBytes_AS_STRING(row);
        Py_ssize_t n = PyBytes_GET_SIZE(row);
        uint64_t head = 0;
        for (int k = 0; k < 8; k++) head = head << 8 | (k < n ? key[k] : 0); /* shorter keys pad with 0 */
        keyed[i] = (Keyed){head, (const char *)key, n, i};
    }
    qsort(keyed, (size_t)count, sizeof *keyed, by_key); /* equal keys are equal ids: their order cannot show */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyList_SET_ITEM(sorted_rows, i, Py_NewRef(PyList_GET_ITEM(rows, keyed[i].index)));
        PyList_SET_ITEM(sorted_ids, i, Py_NewRef(PyList_GET_ITEM(seq, keyed[i].index)));
    }
    out = PyTuple_Pack(2, sorted_rows, sorted_ids);
done:
    PyMem_Free(keyed);
    Py_XDECREF(sorted_rows), Py_XDECREF(sorted_ids), Py_DECREF(rows), Py_DECREF(seq);
    return out;
}

/* -- a msgpack reader for what codec.encode_event writes (and layout 2's values) ------------------ */

typedef MpReader Reader;

enum { ERR = -1, FALLBACK = -2 }; /* ERR: a Python exception is set; FALLBACK: not modelled here */

/* The kinds of object read_object tells apart. */
enum { O_INT, O_STR, O_BIN, O_OTHER };

typedef struct {
    int kind;
    int64_t i;                /* O_INT */
    const unsigned char *s;   /* O_STR (valid UTF-8) and O_BIN */
    Py_ssize_t n;
} Obj;

/* What msgpack-python decodes without complaint and this file models: ints up to 64 bits signed, str
   of valid UTF-8, no ext (msgpack-python raises or makes an ExtType). 0 when the item is one. */
static inline int modelled(const MpItem *it) {
    switch (it->kind) {
    case MP_INT: return it->neg || it->u <= INT64_MAX ? 0 : FALLBACK;
    case MP_STR: return mp_utf8_valid(it->ptr, it->len) ? 0 : FALLBACK;
    case MP_EXT: return FALLBACK;
    default: return 0;
    }
}

/* One object, depth containers open around it; ints, str and bin are read, anything else modelled
   (nil, bools, floats, arrays and maps of at most 33 levels with str or bin keys) is skipped; FALLBACK
   otherwise. */
static int read_object(Reader *r, Obj *o, int depth) {
    const unsigned char *start = r->p;
    MpItem it;
    if (mp_next(r, &it) < 0 || modelled(&it) < 0) return FALLBACK;
    o->kind = O_OTHER;
    switch (it.kind) {
    case MP_INT: return o->kind = O_INT, o->i = it.neg ? it.i : (int64_t)it.u, 0;
    case MP_STR: case MP_BIN:
        return o->kind = it.kind == MP_STR ? O_STR : O_BIN, o->s = it.ptr, o->n = it.len, 0;
    case MP_ARRAY: case MP_MAP:
        r->p = start;
        return mp_skip(r, depth, 33, modelled) < 0 ? FALLBACK : 0;
    default: return 0;
    }
}

static int skip_object(Reader *r, int depth) {
    Obj o;
    return read_object(r, &o, depth);
}

/* An array header: its length; FALLBACK when the next object is not an array. */
static int read_array(Reader *r, uint64_t *n) {
    MpItem it;
    *n = 0;
    if (mp_next(r, &it) < 0 || it.kind != MP_ARRAY) return FALLBACK;
    return *n = it.len, 0;
}

/* -- part_events ---------------------------------------------------------------------------- */

/* wire.Event's fields the part reads (tracehook/wire.py), and their count. */
enum { PUB = 1 }; /* wire.EventType.PUB */
enum { F_TYPE = 0, F_TIME = 1, F_GROUP = 2, F_TOPIC = 3, F_MSG_ID = 4, F_BORN = 11, F_STORE = 12, F_STATUS = 14, F_RETRY = 16,
       F_REQUEST_ID = 19, N_FIELDS = 25, MIN_FIELDS = 5 };

static PyObject *hex_str(const unsigned char *s, Py_ssize_t n) { /* bytes.hex() */
    static const char digits[] = "0123456789abcdef";
    PyObject *out = PyUnicode_New(2 * n, 127);
    if (!out) return NULL;
    Py_UCS1 *o = PyUnicode_1BYTE_DATA(out);
    for (Py_ssize_t i = 0; i < n; i++) *o++ = digits[s[i] >> 4], *o++ = digits[s[i] & 15];
    return out;
}

static PyObject *str_of(const Obj *o) { return PyUnicode_DecodeUTF8((const char *)o->s, o->n, NULL); }

/* The fields of one stored event a part reads. */
typedef struct {
    int64_t type, time, born, store, status, retry;
    Obj group, topic, request;
} Fields;

/* One stored value's Fields; FALLBACK when the value is not exactly what the indexer writes. */
static int read_fields(PyObject *value, Fields *ev) {
    Reader r = {(const unsigned char *)PyBytes_AS_STRING(value),
                (const unsigned char *)PyBytes_AS_STRING(value) + PyBytes_GET_SIZE(value)};
    uint64_t n;
    Obj o;
    *ev = (Fields){.request = {O_STR, 0, (const unsigned char *)"", 0}};
    if (r.p >= r.end) return FALLBACK;
    int v2 = *r.p == VALUE_HEADER; /* layout 2: [app, host, client_id, raw]; layout 3: [app, host, client_id, *raw without msg_id] */
    if (v2) r.p++;
    else if (read_array(&r, &n) < 0 || n < 3 + MIN_FIELDS - 1 || n > 3 + N_FIELDS - 1) return FALLBACK;
    for (int i = 0; i < 3; i++)
        if (skip_object(&r, 0) < 0) return FALLBACK;
    if (!v2) n = n - 3 + 1; /* the event's field count, msg_id included */
    else if (read_array(&r, &n) < 0 || n < MIN_FIELDS || n > N_FIELDS) return FALLBACK;
    for (int f = 0; f < (int)n; f++) {
        if (f == F_MSG_ID && !v2) continue;
        if (read_object(&r, &o, 1) < 0) return FALLBACK;
        switch (f) {
        case F_TYPE: case F_TIME: case F_BORN: case F_STORE: case F_STATUS: case F_RETRY:
            if (o.kind != O_INT) return FALLBACK;
            *(f == F_TYPE ? &ev->type : f == F_TIME ? &ev->time : f == F_BORN ? &ev->born : f == F_STORE ? &ev->store
              : f == F_STATUS ? &ev->status : &ev->retry) = o.i;
            break;
        case F_GROUP: case F_TOPIC:
            if (o.kind != O_STR) return FALLBACK;
            *(f == F_GROUP ? &ev->group : &ev->topic) = o;
            break;
        case F_REQUEST_ID: /* str, or bin: hex digits kept as the bytes they spell */
            if (o.kind != O_STR && o.kind != O_BIN) return FALLBACK;
            ev->request = o;
            break;
        }
    }
    if (r.p != r.end) return FALLBACK;
    /* schema._restored: born and store times are kept as their difference from time_ms */
    if (n > F_BORN && __builtin_add_overflow(ev->born, ev->time, &ev->born)) return FALLBACK;
    if (n > F_STORE && __builtin_add_overflow(ev->store, ev->time, &ev->store)) return FALLBACK;
    return 0;
}

/* cls(time_ms, type, request_id, group, topic, store_ms, born_ms, status, retry), or NULL. */
static PyObject *part_event(const Fields *ev, PyTypeObject *cls) {
    PyObject *obj = cls->tp_alloc(cls, 9);
    if (!obj) return NULL;
    PyObject *items[9] = {
        PyLong_FromLongLong(ev->time), PyLong_FromLongLong(ev->type),
        ev->request.kind == O_BIN ? hex_str(ev->request.s, ev->request.n) : str_of(&ev->request),
        str_of(&ev->group), str_of(&ev->topic), PyLong_FromLongLong(ev->store), PyLong_FromLongLong(ev->born),
        PyLong_FromLongLong(ev->status), PyLong_FromLongLong(ev->retry)};
    int bad = 0;
    for (int i = 0; i < 9; i++) {
        bad |= items[i] == NULL;
        PyTuple_SET_ITEM(obj, i, items[i]); /* NULL items are fine to dealloc */
    }
    if (bad) Py_CLEAR(obj);
    return obj;
}

/* The PartEvents of a sequence of values; None (a new reference) when one is not modelled. */
static PyObject *events_of(PyObject *values, PyTypeObject *cls) {
    PyObject *seq = PySequence_List(values); /* a private list: values may be a dict's values() */
    if (!seq) return NULL;
    Py_ssize_t count = PyList_GET_SIZE(seq);
    PyObject *out = PyList_New(count);
    for (Py_ssize_t i = 0; out && i < count; i++) {
        PyObject *value = PyList_GET_ITEM(seq, i), *event;
        Fields ev;
        if (!PyBytes_CheckExact(value) || read_fields(value, &ev) < 0) {
            Py_SETREF(out, Py_NewRef(Py_None));
            break;
        }
        if (!(event = part_event(&ev, cls))) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, event);
    }
    Py_DECREF(seq);
    return out;
}

static PyObject *part_events(PyObject *module, PyObject *args) {
    PyObject *values, *cls;
    if (!PyArg_ParseTuple(args, "OO!", &values, &PyType_Type, &cls)) return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type))
        return PyErr_SetString(PyExc_TypeError, "cls must be a tuple type"), NULL;
    return events_of(values, (PyTypeObject *)cls);
}

/* -- the part values of a message of sends, paired consumes and dead letters ------------------- */

#include "_partof.h"

static PyObject *parts(PyObject *module, PyObject *args) {
    PyObject *rows, *cls;
    long long version, minute_ms;
    if (!PyArg_ParseTuple(args, "OO!LL", &rows, &PyType_Type, &cls, &version, &minute_ms)) return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type))
        return PyErr_SetString(PyExc_TypeError, "cls must be a tuple type"), NULL;
    if (minute_ms < 1) return PyErr_SetString(PyExc_ValueError, "minute_ms must be >= 1"), NULL;
    PyObject *seq = PySequence_Fast(rows, "rows must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(count);
    for (Py_ssize_t i = 0; out && i < count; i++) {
        PyObject *columns = PySequence_Fast_GET_ITEM(seq, i), *item = NULL;
        if (!PyDict_CheckExact(columns)) {
            item = Py_NewRef(Py_None);
        } else {
            Py_ssize_t pos = 0, n = PyDict_GET_SIZE(columns);
            PyObject *col, *value;
            Fields evs[PART_MAX_EVENTS];
            int rc = n >= 1 && n <= PART_MAX_EVENTS ? 0 : FALLBACK;
            for (int k = 0; rc == 0 && PyDict_Next(columns, &pos, &col, &value); k++)
                rc = PyBytes_CheckExact(value) ? read_fields(value, &evs[k]) : FALLBACK;
            if (rc == 0) rc = part_values(evs, (int)n, version, minute_ms, &item);
            if (rc == FALLBACK) {
                PyObject *values = PyDict_Values(columns);
                item = values ? events_of(values, (PyTypeObject *)cls) : NULL;
                Py_XDECREF(values);
            }
        }
        if (!item) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, item);
    }
    Py_DECREF(seq);
    return out;
}

/* layout(): the constants compiled into this file and _partof.h, for tests/collector/store/test_readback_layout.py. */
static PyObject *layout(PyObject *module, PyObject *unused) {
    PyObject *d = Py_BuildValue(
        "{s:{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i},s:i,s:i,s:i,s:i,s:i,s:i,s:i}",
        "positions", "type", F_TYPE, "time_ms", F_TIME, "group", F_GROUP, "topic", F_TOPIC, "born_ms", F_BORN,
        "store_ms", F_STORE, "status", F_STATUS, "retry", F_RETRY, "request_id", F_REQUEST_ID,
        "fields", N_FIELDS, "min_fields", MIN_FIELDS, "pub", PUB, "value_header", VALUE_HEADER,
        "key_bytes", KEY_BYTES, "key_str", KEY_STR, "msg_hash_bytes", MSG_HASH_BYTES);
    if (d && partof_layout(d) < 0) Py_CLEAR(d);
    return d;
}

static PyMethodDef methods[] = {
    {"layout", layout, METH_NOARGS, "layout() -> the constants compiled into this module."},
    {"message_rows", message_rows, METH_O,
     "message_rows(ids) -> [schema.message_row(id) for id in ids], or None when an id is not a UTF-8 str."},
    {"sorted_message_rows", sorted_message_rows, METH_O,
     "sorted_message_rows(ids) -> (message_rows(ids) in key order, the ids in that order), or None as message_rows."},
    {"parts", parts, METH_VARARGS,
     "parts(rows, cls, version, minute_ms) -> for each message row ({column: value}): its part values as\n"
     "rollup._part_values gives them when its events are sends, paired consumes and dead letters, else its\n"
     "part_events, else None."},
    {"part_events", part_events, METH_VARARGS,
     "part_events(values, cls) -> [cls(time_ms, type, request_id, group, topic, store_ms, born_ms, status,\n"
     "retry)] of stored event values as codec.decode_events reads them, or None when one is not modelled."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "collector.store._readback",
    "Fast path of collector.store.rollup.read_parts: message row keys and the events' part fields, in C.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__readback(void) { return PyModule_Create(&module); }
