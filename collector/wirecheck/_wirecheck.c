/*
 * collector.wirecheck._wirecheck: validate a msgpack batch by walking its bytes.
 *
 * The collector validates every event it receives. Unpacking a batch into Python
 * objects and checking them costs about 1 us per event; walking the bytes here costs a
 * small fraction of that. This module is only a fast path: collector.wirecheck.validate.check_batch
 * calls check(data) and, when it answers None, runs the Python validator, which stays
 * the definition of the format and the only place that words error messages.
 *
 * check(data) must accept exactly what the Python path accepts:
 *   - everything msgpack.unpackb(raw=False, strict_map_key=True, max_*_len=...) accepts
 *     (valid UTF-8 in every str, str/bin map keys, its length limits, its ext rules and
 *     its 1024-container stack), including in trailing batch fields nobody reads;
 *   - the batch envelope and the per-column event rules of tracehook.wire, which
 *     configure() receives from wire.py at import instead of repeating them here.
 * tests/collector/server/test_wirecheck.py checks the two paths against each other.
 *
 * Every read is bounds-checked against the end of the buffer; nesting is walked with an
 * explicit stack (no recursion), bounded by msgpack's own limit.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "msgpack_rw.h" /* collector/_c/: mp_next, mp_skip, mp_utf8_valid */

#define MAX_COLUMNS 64
#define BATCH_FIELDS 8 /* version, client_id, seq, app, host, sent_ms, client_stats, events */

enum { COL_INT, COL_STR, COL_BIN, COL_MAP, COL_PAIRS };

/* Walk results: a Python exception (memory) is distinct from "not a valid batch". */
#define OK 0
#define REJECT (-1)
#define PYERR (-2)

typedef struct {
    int kind;
    int nullable;
    int nonempty;
    int has_range;
    int64_t lo, hi;
    int has_enum;
    uint64_t enum_bits; /* enum members are 0..63 */
} Column;

/* Set once by configure(); check() refuses to run before that. */
static struct {
    int ready;
    Py_ssize_t max_str_len, max_bin_len, max_array_len, max_map_len, max_ext_len;
    int64_t min_version, max_version, max_int, max_sent_ms;
    Py_ssize_t min_fields, n_columns, max_props, max_pairs, max_pairs_bytes;
    Column columns[MAX_COLUMNS];
} R;

/* -- msgpack items ------------------------------------------------------------------ */

/* A declared length over a limit (limits are >= 0; compared unsigned on every platform). */
static inline int over(uint32_t n, Py_ssize_t limit) { return (size_t)n > (size_t)limit; }

/* The unpacker's per-item rules: its length limits, valid UTF-8 in every str, and ext data as
   ExtType(code, data), which refuses negative codes (code -1 is a timestamp, never valid within
   max_ext_len < 4: configure). 0 when the item passes. */
static inline int item_ok(const MpItem *it)
{
    switch (it->kind) {
    case MP_STR:
        return over(it->len, R.max_str_len) || !mp_utf8_valid(it->ptr, it->len) ? REJECT : OK;
    case MP_BIN:
        return over(it->len, R.max_bin_len) ? REJECT : OK;
    case MP_EXT:
        return over(it->len, R.max_ext_len) || it->ext_type < 0 ? REJECT : OK;
    case MP_ARRAY:
        return over(it->len, R.max_array_len) ? REJECT : OK;
    case MP_MAP:
        return over(it->len, R.max_map_len) ? REJECT : OK;
    default:
        return OK;
    }
}

/* Read one item's header, and the payload of a str/bin/ext; apply the unpacker's per-item
   rules. Containers' contents are left to the caller. */
static int read_item(MpReader *r, MpItem *it) { return mp_next(r, it) == 0 && item_ok(it) == OK ? OK : REJECT; }

/* Skip one value of any shape, ``depth`` containers already open around it. */
static int skip_value(MpReader *r, int depth) { return mp_skip(r, depth, MP_MAX_DEPTH, item_ok) == 0 ? OK : REJECT; }

static int int_in(const MpItem *it, int64_t lo, int64_t hi)
{
    if (it->neg)
        return it->i >= lo && it->i <= hi;
    if (hi < 0 || it->u > (uint64_t)hi)
        return 0;
    return lo <= 0 || it->u >= (uint64_t)lo;
}

/* -- the schema ----------------------------------------------------------------------- */

/* A map's value: 1 when it is a str, 0 when it is anything else (skipped). */
static int read_map_value(MpReader *r, int depth, int *is_str)
{
    const unsigned char *start = r->p;
    MpItem it;
    if (read_item(r, &it) != OK)
        return REJECT;
    *is_str = it.kind == MP_STR;
    if (it.kind == MP_ARRAY || it.kind == MP_MAP) {
        r->p = start;
        return skip_value(r, depth);
    }
    return OK;
}

/* props: a map of at most max_props str keys to str values *as a dict*: a repeated key
   keeps its last value and counts once, so the rare maps that are not plainly valid are
   replayed into a dict of key bytes (UTF-8 is canonical: equal bytes, equal str). */
static int check_props(MpReader *r, uint32_t n, int depth)
{
    const unsigned char *start = r->p;
    int plain = 1;
    for (uint32_t i = 0; i < n; i++) {
        MpItem key;
        int is_str;
        if (read_item(r, &key) != OK || key.kind != MP_STR) /* a bin key stays a bytes key */
            return REJECT;
        if (read_map_value(r, depth, &is_str) != OK)
            return REJECT;
        plain &= is_str;
    }
    if (plain && !over(n, R.max_props))
        return OK;
    const unsigned char *end = r->p;
    r->p = start;
    PyObject *last = PyDict_New();
    if (last == NULL)
        return PYERR;
    int result = OK;
    for (uint32_t i = 0; i < n && result == OK; i++) {
        MpItem key;
        int is_str = 0;
        /* The loop above read the same bytes, so this cannot fail; checked all the same. */
        if (read_item(r, &key) != OK || key.kind != MP_STR || read_map_value(r, depth, &is_str) != OK) {
            result = REJECT;
            break;
        }
        PyObject *k = PyBytes_FromStringAndSize((const char *)key.ptr, key.len);
        if (k == NULL || PyDict_SetItem(last, k, is_str ? Py_True : Py_False) < 0)
            result = PYERR;
        Py_XDECREF(k);
    }
    if (result == OK) {
        if (PyDict_GET_SIZE(last) > R.max_props)
            result = REJECT;
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (result == OK && PyDict_Next(last, &pos, &k, &v))
            if (v != Py_True)
                result = REJECT;
    }
    Py_DECREF(last);
    r->p = end;
    return result;
}

/* raw_headers: at most max_pairs [str, bin] arrays, names and values max_pairs_bytes in all. */
static int check_pairs(MpReader *r, uint32_t n)
{
    if (over(n, R.max_pairs))
        return REJECT;
    size_t size = 0;
    for (uint32_t i = 0; i < n; i++) {
        MpItem pair, name, value;
        if (read_item(r, &pair) != OK || pair.kind != MP_ARRAY || pair.len != 2)
            return REJECT;
        if (read_item(r, &name) != OK || name.kind != MP_STR || read_item(r, &value) != OK || value.kind != MP_BIN)
            return REJECT;
        size += (size_t)name.len + value.len;
    }
    return size > (size_t)R.max_pairs_bytes ? REJECT : OK;
}

/* One event; *bins counts its non-nil values of bin columns (captured bodies, raw keys) and raw header pairs. */
static int check_event(MpReader *r, uint32_t *bins)
{
    MpItem ev;
    if (read_item(r, &ev) != OK || ev.kind != MP_ARRAY)
        return REJECT;
    if ((size_t)ev.len < (size_t)R.min_fields || over(ev.len, R.n_columns))
        return REJECT;
    for (uint32_t i = 0; i < ev.len; i++) {
        const Column *col = &R.columns[i];
        MpItem it;
        /* The usual encodings of the usual values first (this loop runs for every field
           of every event); anything else takes the general reader. */
        unsigned c = mp_has(r, 1) ? *r->p : 0xc1;
        if (col->kind == COL_INT && c <= 0x7f) {
            it.kind = MP_INT;
            it.neg = 0;
            it.u = c;
            r->p++;
        } else if (col->kind == COL_STR && (c & 0xe0) == 0xa0 && mp_has(r, 1 + (c & 0x1f)) &&
                   !over(c & 0x1f, R.max_str_len) && mp_ascii_only(r->p + 1, c & 0x1f)) {
            it.kind = MP_STR;
            it.len = c & 0x1f;
            it.ptr = r->p + 1;
            r->p += 1 + it.len;
        } else if (read_item(r, &it) != OK) {
            return REJECT;
        }
        if (it.kind == MP_NIL && col->nullable)
            continue;
        switch (col->kind) {
        case COL_INT:
            if (it.kind != MP_INT || (col->has_range && !int_in(&it, col->lo, col->hi)))
                return REJECT;
            if (col->has_enum && (it.neg || it.u > 63 || !((col->enum_bits >> it.u) & 1)))
                return REJECT;
            break;
        case COL_STR:
            if (it.kind != MP_STR || (col->nonempty && it.len == 0))
                return REJECT;
            break;
        case COL_BIN:
            if (it.kind != MP_BIN)
                return REJECT;
            (*bins)++;
            break;
        case COL_MAP: {
            if (it.kind != MP_MAP)
                return REJECT;
            /* batch, events, this event and the map are open: far below the stack limit */
            int rc = check_props(r, it.len, 4);
            if (rc != OK)
                return rc;
            break;
        }
        case COL_PAIRS:
            if (it.kind != MP_ARRAY || check_pairs(r, it.len) != OK)
                return REJECT;
            *bins += it.len; /* each pair's value is a bin: a kept record ingest may strip */
            break;
        default:
            return REJECT;
        }
    }
    return OK;
}

/* client_stats becomes part of the returned header, so it is built as the unpacker would
   (later duplicates win); values that are not non-negative 64-bit ints become None and
   fail the check at the end, unless a later duplicate replaced them. */
static int read_stats(MpReader *r, uint32_t n, PyObject **out)
{
    PyObject *stats = PyDict_New();
    if (stats == NULL)
        return PYERR;
    int result = OK;
    for (uint32_t i = 0; i < n && result == OK; i++) {
        MpItem key, val;
        if (read_item(r, &key) != OK || key.kind != MP_STR) {
            result = REJECT;
            break;
        }
        const unsigned char *start = r->p;
        if (read_item(r, &val) != OK) {
            result = REJECT;
            break;
        }
        PyObject *v;
        if (val.kind == MP_INT && int_in(&val, 0, R.max_int)) {
            v = PyLong_FromUnsignedLongLong(val.u);
        } else {
            if (val.kind == MP_ARRAY || val.kind == MP_MAP) {
                r->p = start;
                if (skip_value(r, 2) != OK) { /* batch and stats are open */
                    result = REJECT;
                    break;
                }
            }
            v = Py_NewRef(Py_None);
        }
        PyObject *k = PyUnicode_DecodeUTF8((const char *)key.ptr, key.len, "strict");
        if (k != NULL)
            PyUnicode_InternInPlace(&k); /* as the unpacker does for str keys */
        if (k == NULL || v == NULL || PyDict_SetItem(stats, k, v) < 0)
            result = PYERR;
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    if (result == OK) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (result == OK && PyDict_Next(stats, &pos, &k, &v))
            if (v == Py_None)
                result = REJECT;
    }
    if (result != OK) {
        Py_DECREF(stats);
        return result;
    }
    *out = stats;
    return OK;
}

static PyObject *decode_str(const MpItem *it)
{
    return PyUnicode_DecodeUTF8((const char *)it->ptr, it->len, "strict");
}

/* The walk; on OK, *result is (client_id, seq, app, host, sent_ms, client_stats, count, bins). */
static int check_batch(MpReader *r, PyObject **result)
{
    MpItem batch, f[BATCH_FIELDS - 1];
    if (read_item(r, &batch) != OK || batch.kind != MP_ARRAY || batch.len < BATCH_FIELDS)
        return REJECT;
    for (int i = 0; i < 6; i++) /* version .. sent_ms */
        if (read_item(r, &f[i]) != OK)
            return REJECT;
    if (f[0].kind != MP_INT || !int_in(&f[0], R.min_version, R.max_version))
        return REJECT;
    if (f[1].kind != MP_STR || f[1].len == 0 || f[3].kind != MP_STR || f[4].kind != MP_STR)
        return REJECT;
    if (f[2].kind != MP_INT || !int_in(&f[2], 0, R.max_int) || f[5].kind != MP_INT ||
        !int_in(&f[5], 0, R.max_sent_ms))
        return REJECT;
    MpItem it;
    if (read_item(r, &it) != OK || it.kind != MP_MAP)
        return REJECT;
    PyObject *stats = NULL;
    int rc = read_stats(r, it.len, &stats);
    if (rc != OK)
        return rc;
    MpItem events;
    uint32_t bins = 0;
    rc = REJECT;
    if (read_item(r, &events) != OK || events.kind != MP_ARRAY)
        goto fail;
    for (uint32_t i = 0; i < events.len; i++)
        if ((rc = check_event(r, &bins)) != OK)
            goto fail;
    rc = REJECT;
    for (uint32_t i = BATCH_FIELDS; i < batch.len; i++) /* fields of a newer version: unread */
        if (skip_value(r, 1) != OK)
            goto fail;
    if (r->p != r->end) /* trailing bytes */
        goto fail;
    *result = Py_BuildValue("(NKNNKNII)", decode_str(&f[1]), (unsigned long long)f[2].u,
                            decode_str(&f[3]), decode_str(&f[4]), (unsigned long long)f[5].u,
                            stats, (unsigned int)events.len, (unsigned int)bins);
    return *result == NULL ? PYERR : OK; /* Py_BuildValue's N consumed stats either way */
fail:
    Py_DECREF(stats);
    return rc;
}

/* -- Python interface ----------------------------------------------------------------- */

static PyObject *wirecheck_check(PyObject *self, PyObject *arg)
{
    if (!R.ready) {
        PyErr_SetString(PyExc_RuntimeError, "_wirecheck.configure() has not been called");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* not bytes-like: the Python path produces the error */
        Py_RETURN_NONE;
    }
    MpReader r = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len};
    PyObject *result = NULL;
    int rc = check_batch(&r, &result);
    PyBuffer_Release(&view);
    if (rc == PYERR)
        return NULL;
    if (rc != OK)
        Py_RETURN_NONE;
    return result;
}

static int get_ssize(PyObject *dict, const char *name, Py_ssize_t *out)
{
    PyObject *v = PyDict_GetItemString(dict, name); /* borrowed */
    if (v == NULL) {
        PyErr_Format(PyExc_ValueError, "limits: missing %s", name);
        return -1;
    }
    *out = PyLong_AsSsize_t(v);
    if (*out == -1 && PyErr_Occurred())
        return -1;
    if (*out < 0) {
        PyErr_Format(PyExc_ValueError, "limits: %s is negative", name);
        return -1;
    }
    return 0;
}

static int get_int64(PyObject *v, int64_t *out)
{
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *out = x;
    return 0;
}

static int parse_column(PyObject *spec, Column *col)
{
    const char *kind;
    int nullable, nonempty;
    PyObject *range, *members;
    if (!PyArg_ParseTuple(spec, "sppOO;a column is (kind, nullable, nonempty, range, enum)", &kind,
                          &nullable, &nonempty, &range, &members))
        return -1;
    memset(col, 0, sizeof *col);
    if (strcmp(kind, "int") == 0)
        col->kind = COL_INT;
    else if (strcmp(kind, "str") == 0)
        col->kind = COL_STR;
    else if (strcmp(kind, "bin") == 0)
        col->kind = COL_BIN;
    else if (strcmp(kind, "map") == 0)
        col->kind = COL_MAP;
    else if (strcmp(kind, "pairs") == 0)
        col->kind = COL_PAIRS;
    else {
        PyErr_Format(PyExc_ValueError, "unknown column kind %s", kind);
        return -1;
    }
    col->nullable = nullable;
    col->nonempty = nonempty;
    if (range != Py_None) {
        PyObject *lo, *hi;
        if (!PyArg_ParseTuple(range, "OO;a range is (lo, hi)", &lo, &hi) || get_int64(lo, &col->lo) < 0 ||
            get_int64(hi, &col->hi) < 0)
            return -1;
        col->has_range = 1;
    }
    if (members != Py_None) {
        PyObject *it = PyObject_GetIter(members), *m;
        if (it == NULL)
            return -1;
        while ((m = PyIter_Next(it)) != NULL) {
            long v = PyLong_AsLong(m);
            Py_DECREF(m);
            if (v == -1 && PyErr_Occurred())
                break;
            if (v < 0 || v > 63) {
                PyErr_Format(PyExc_ValueError, "enum member %ld is outside 0..63", v);
                break;
            }
            col->enum_bits |= 1ULL << v;
        }
        Py_DECREF(it);
        if (PyErr_Occurred())
            return -1;
        col->has_enum = 1;
    }
    return 0;
}

static PyObject *wirecheck_configure(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"limits", "versions", "max_int", "min_fields", "columns", "max_props", "max_sent_ms",
                             "max_pairs", "max_pairs_bytes", NULL};
    PyObject *limits, *columns;
    long long min_version, max_version, max_int, max_sent_ms = -1;
    Py_ssize_t min_fields, max_props, max_pairs = 0, max_pairs_bytes = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!(LL)LnOn|Lnn", kwlist, &PyDict_Type, &limits, &min_version,
                                     &max_version, &max_int, &min_fields, &columns, &max_props, &max_sent_ms,
                                     &max_pairs, &max_pairs_bytes))
        return NULL;
    if (max_sent_ms < 0) /* not given: any non-negative 64-bit value, as seq */
        max_sent_ms = max_int;
    R.ready = 0; /* stays off unless everything below parses */
    if (get_ssize(limits, "max_str_len", &R.max_str_len) < 0 || get_ssize(limits, "max_bin_len", &R.max_bin_len) < 0 ||
        get_ssize(limits, "max_array_len", &R.max_array_len) < 0 ||
        get_ssize(limits, "max_map_len", &R.max_map_len) < 0 || get_ssize(limits, "max_ext_len", &R.max_ext_len) < 0)
        return NULL;
    /* Timestamps (ext -1 of 4, 8 or 12 bytes) have validity rules of their own that this
       module does not model; below 4 bytes none can occur. 2 * max_map_len must fit. */
    if (R.max_ext_len >= 4 || R.max_map_len > 0x7fffffff) {
        PyErr_SetString(PyExc_ValueError, "limits outside what _wirecheck models");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(columns, "columns must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > MAX_COLUMNS || min_fields < 1 || min_fields > n || max_props < 0 || max_int < 0 ||
        max_sent_ms > max_int || min_version > max_version || max_pairs < 0 || max_pairs_bytes < 0) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "inconsistent rules");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (parse_column(PySequence_Fast_GET_ITEM(seq, i), &R.columns[i]) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    R.min_version = min_version;
    R.max_version = max_version;
    R.max_int = max_int;
    R.max_sent_ms = max_sent_ms;
    R.min_fields = min_fields;
    R.n_columns = n;
    R.max_props = max_props;
    R.max_pairs = max_pairs;
    R.max_pairs_bytes = max_pairs_bytes;
    R.ready = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"check", wirecheck_check, METH_O,
     "check(data) -> (client_id, seq, app, host, sent_ms, client_stats, event_count, bins) for a valid\n"
     "batch (bins: its non-nil values of bin columns, i.e. captured bodies), None otherwise (tracehook.wire\n"
     "then names the problem)."},
    {"configure", (PyCFunction)(void (*)(void))wirecheck_configure, METH_VARARGS | METH_KEYWORDS,
     "configure(limits, versions, max_int, min_fields, columns, max_props, max_sent_ms=max_int, max_pairs=0,\n"
     "max_pairs_bytes=0): the rules, from "
     "tracehook.wire."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "collector.wirecheck._wirecheck",
    "Fast path of collector.wirecheck.validate.check_batch: validates a batch by walking its msgpack bytes.", -1, methods,
};

PyMODINIT_FUNC PyInit__wirecheck(void) { return PyModule_Create(&module); }
