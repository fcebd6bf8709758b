/*
 * collector.store._sqlput: a SQLite connection of its own for the embedded store's writes and multi-row
 * reads, with the GIL released while SQLite works.
 *
 * Python's sqlite3 executemany takes the GIL back after every row it steps, so the indexer's writer
 * thread, which writes one batch while the calling thread builds the next, got a row in only when the
 * builder let go of the GIL: the two threads took turns instead of sharing two cores (measured: wall time
 * equal to CPU time with a core idle).  Connection(path, busy_timeout_ms) opens the store file with
 * sqlite3_open_v2 (the system libsqlite3 that Python's sqlite3 module loads too: same_library() says
 * whether it is that very library, which two connections of one process to one file need, or closing one
 * would drop the other's POSIX locks), and:
 *   - upsert() binds and steps one statement for every cell of a put, in the transaction its caller
 *     began, with the GIL released for the whole loop (with sort, in (row, col) key order: a stable merge
 *     sort, also without the GIL);
 *   - select_rows() is LocalStore.get_rows' multi-row read: one lookup per distinct key, in key order, in
 *     one read transaction, with the GIL released while SQLite steps, then the {col: value} dicts built
 *     directly (the Python loop cost ~1.6 µs per row);
 *   - execute() and executemany() run any other statement (PRAGMAs, BEGIN/COMMIT, meta, deletes, purge,
 *     checkpoints), binding bytes/bytearray as BLOB, int, float, str and None, and answering rows.
 *
 * upsert() and select_rows() are only fast paths: executemany over local.py's cells and
 * LocalStore._py_get_rows are the definitions, and tests/collector/store/test_sqlput.py checks that both
 * paths store the same cells and answer the same.  upsert() returns False and select_rows() None, having
 * done nothing, when they cannot take the call: a key, column or value that is not bytes, no transaction
 * begun (upsert), a column or value stored as something else than a BLOB (select_rows).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <sqlite3.h>
#include <string.h>

/* One cell: new references to its bytes (the loop reads them without the GIL), and where it came from.
 * select_rows() keeps the keys it looks up in Cells too (col and value NULL), to share the sort. */
typedef struct {
    PyObject *row, *col, *value;
    Py_ssize_t at;
} Cell;

static int is_blob(PyObject *o) { return PyBytes_CheckExact(o) && PyBytes_GET_SIZE(o) <= INT_MAX; }

static void release(Cell *cells, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_DECREF(cells[i].row);
        Py_XDECREF(cells[i].col);
        Py_XDECREF(cells[i].value);
    }
    PyMem_Free(cells);
}

/* SQLite's BLOB order (memcmp, then the shorter first), which is HBase's row-key order. */
static int blob_cmp(PyObject *a, PyObject *b) {
    Py_ssize_t an = PyBytes_GET_SIZE(a), bn = PyBytes_GET_SIZE(b);
    int c = memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)(an < bn ? an : bn));
    return c != 0 ? c : (an > bn) - (an < bn);
}

static int row_cmp(const Cell *a, const Cell *b) { return blob_cmp(a->row, b->row); }

/* The table's (row, col) key order: a wide row's cells then go in one after the other too. */
static int cell_cmp(const Cell *a, const Cell *b) {
    int c = blob_cmp(a->row, b->row);
    return c != 0 || a->col == NULL ? c : blob_cmp(a->col, b->col);
}

/* Stable merge sort of cells[0, n) by (row, col), or by row for keys without a col (tmp holds n / 2 cells;
 * no GIL needed): cells of one (row, col) keep their order, so of a cell put twice the later value still
 * wins; cells already in order cost n compares. */
static void sort_cells(Cell *cells, Cell *tmp, Py_ssize_t n) {
    if (n < 2) return;
    Py_ssize_t mid = n / 2, i = 0, j = mid, k = 0;
    sort_cells(cells, tmp, mid);
    sort_cells(cells + mid, tmp, n - mid);
    if (cell_cmp(&cells[mid - 1], &cells[mid]) <= 0) return;
    memcpy(tmp, cells, (size_t)mid * sizeof(Cell));
    while (i < mid && j < n) cells[k++] = cell_cmp(&cells[j], &tmp[i]) < 0 ? cells[j++] : tmp[i++];
    while (i < mid) cells[k++] = tmp[i++];
}

/* The cells of rows [(row, columns)] into *out (grown as needed); 0 when something is not bytes or not
 * a (row, mapping) pair, -1 on a Python error. */
static int gather(PyObject *rows, Cell **out, Py_ssize_t *n) {
    Py_ssize_t cap = PyList_GET_SIZE(rows) + 16, count = 0;
    Cell *cells = PyMem_Malloc(cap * sizeof(Cell));
    if (cells == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* Index rows share one read-only mapping (a mappingproxy): its items are listed once. */
    PyObject *shared = NULL, *shared_items = NULL;
    int taken = 1;
    for (Py_ssize_t i = 0; taken == 1 && i < PyList_GET_SIZE(rows); i++) {
        PyObject *item = PyList_GET_ITEM(rows, i), *row, *columns, *col, *value;
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2 || !is_blob(PyTuple_GET_ITEM(item, 0))) {
            taken = 0;
            break;
        }
        row = PyTuple_GET_ITEM(item, 0);
        columns = PyTuple_GET_ITEM(item, 1);
        Py_ssize_t pos = 0, k = 0;
        if (!PyDict_CheckExact(columns) && columns != shared) {
            Py_XDECREF(shared_items);
            shared = NULL;
            if ((shared_items = PyMapping_Items(columns)) == NULL) {
                taken = -1;
                break;
            }
            shared = columns;
        }
        for (;;) {
            if (PyDict_CheckExact(columns)) {
                if (!PyDict_Next(columns, &pos, &col, &value)) break;
            } else {
                if (k == PyList_GET_SIZE(shared_items)) break;
                PyObject *pair = PyList_GET_ITEM(shared_items, k++);
                if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
                    taken = 0;
                    break;
                }
                col = PyTuple_GET_ITEM(pair, 0);
                value = PyTuple_GET_ITEM(pair, 1);
            }
            if (!is_blob(col) || !is_blob(value)) {
                taken = 0;
                break;
            }
            if (count == cap) {
                Cell *more = PyMem_Realloc(cells, 2 * cap * sizeof(Cell));
                if (more == NULL) {
                    PyErr_NoMemory();
                    taken = -1;
                    break;
                }
                cells = more;
                cap *= 2;
            }
            Py_INCREF(row);
            Py_INCREF(col);
            Py_INCREF(value);
            cells[count] = (Cell){row, col, value, count};
            count++;
        }
    }
    Py_XDECREF(shared_items);
    if (taken != 1) {
        release(cells, count);
        return taken;
    }
    *out = cells;
    *n = count;
    return 1;
}

/* A blob parameter: the bytes of a bytes object (no GIL needed: its buffer never moves). */
static int bind(sqlite3_stmt *stmt, int i, PyObject *b) {
    return sqlite3_bind_blob(stmt, i, PyBytes_AS_STRING(b), (int)PyBytes_GET_SIZE(b), SQLITE_STATIC);
}

/* The sqlite3 exception for an error code, with SQLite's message (as Python's sqlite3 raises it). */
static void raise_sqlite(int rc, const char *message) {
    PyObject *sqlite3_module = PyImport_ImportModule("sqlite3");
    if (sqlite3_module == NULL) return;
    const char *kind = (rc & 0xff) == SQLITE_CONSTRAINT ? "IntegrityError" : "OperationalError";
    PyObject *type = PyObject_GetAttrString(sqlite3_module, kind);
    Py_DECREF(sqlite3_module);
    if (type == NULL) return;
    PyErr_SetString(type, message);
    Py_DECREF(type);
}

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
} Connection;

static PyTypeObject ConnectionType;

/* The connection's handle, or NULL with ProgrammingError-like ValueError once closed. */
static sqlite3 *open_db(Connection *self) {
    if (self->db == NULL) PyErr_SetString(PyExc_ValueError, "the _sqlput connection is closed");
    return self->db;
}

/* Raises SQLite's current error of db for rc (the message copied before anything else runs on db). */
static void raise_db(sqlite3 *db, int rc) { raise_sqlite(rc, sqlite3_errmsg(db)); }

static int conn_init(Connection *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"path", "busy_timeout_ms", NULL};
    const char *path;
    int busy_ms;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "si:Connection", names, &path, &busy_ms)) return -1;
    if (self->db != NULL) {
        PyErr_SetString(PyExc_ValueError, "the _sqlput connection is already open");
        return -1;
    }
    sqlite3 *db = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_busy_timeout(db, busy_ms);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_OK) {
        if (db == NULL) PyErr_NoMemory();
        else raise_db(db, rc);
        sqlite3_close_v2(db);
        return -1;
    }
    self->db = db;
    return 0;
}

static void conn_close_db(Connection *self) {
    sqlite3 *db = self->db;
    self->db = NULL;
    if (db != NULL) {
        Py_BEGIN_ALLOW_THREADS
        sqlite3_close_v2(db);
        Py_END_ALLOW_THREADS
    }
}

static void conn_dealloc(Connection *self) {
    conn_close_db(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *conn_close(Connection *self, PyObject *Py_UNUSED(ignored)) {
    conn_close_db(self);
    Py_RETURN_NONE;
}

static PyObject *conn_in_transaction(Connection *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->db != NULL && !sqlite3_get_autocommit(self->db));
}

/* Binds parameter i to a Python value (copied: SQLITE_TRANSIENT); -1 with TypeError for another type. */
static int bind_value(sqlite3_stmt *stmt, int i, PyObject *v) {
    if (v == Py_None) return sqlite3_bind_null(stmt, i);
    if (PyLong_Check(v)) {
        long long x = PyLong_AsLongLong(v);
        return x == -1 && PyErr_Occurred() ? -1 : sqlite3_bind_int64(stmt, i, x);
    }
    if (PyFloat_Check(v)) return sqlite3_bind_double(stmt, i, PyFloat_AS_DOUBLE(v));
    if (PyUnicode_Check(v)) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(v, &n);
        return s == NULL ? -1 : sqlite3_bind_text64(stmt, i, s, (sqlite3_uint64)n, SQLITE_TRANSIENT, SQLITE_UTF8);
    }
    if (PyBytes_Check(v))
        return sqlite3_bind_blob64(stmt, i, PyBytes_AS_STRING(v), (sqlite3_uint64)PyBytes_GET_SIZE(v), SQLITE_TRANSIENT);
    if (PyByteArray_Check(v))
        return sqlite3_bind_blob64(stmt, i, PyByteArray_AS_STRING(v), (sqlite3_uint64)PyByteArray_GET_SIZE(v),
                                   SQLITE_TRANSIENT);
    PyErr_Format(PyExc_TypeError, "parameter %d: unsupported type %.100s", i, Py_TYPE(v)->tp_name);
    return -1;
}

/* Binds a sequence of parameters; 0, -1 with a Python error. */
static int bind_all(sqlite3 *db, sqlite3_stmt *stmt, PyObject *params) {
    PyObject *seq = PySequence_Fast(params, "parameters must be a sequence");
    if (seq == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = SQLITE_OK;
    if (n != sqlite3_bind_parameter_count(stmt)) {
        PyErr_Format(PyExc_ValueError, "%d parameters wanted, %zd given", sqlite3_bind_parameter_count(stmt), n);
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == SQLITE_OK && i < n; i++)
        if ((rc = bind_value(stmt, (int)i + 1, PySequence_Fast_GET_ITEM(seq, i))) > 0) raise_db(db, rc);
    Py_DECREF(seq);
    return rc == SQLITE_OK ? 0 : -1;
}

/* The current row of stmt as a tuple (BLOB -> bytes, as Python's sqlite3 reads them). */
static PyObject *row_tuple(sqlite3_stmt *stmt) {
    int n = sqlite3_column_count(stmt);
    PyObject *row = PyTuple_New(n);
    for (int i = 0; row != NULL && i < n; i++) {
        PyObject *v;
        switch (sqlite3_column_type(stmt, i)) {
        case SQLITE_INTEGER: v = PyLong_FromLongLong(sqlite3_column_int64(stmt, i)); break;
        case SQLITE_FLOAT: v = PyFloat_FromDouble(sqlite3_column_double(stmt, i)); break;
        case SQLITE_TEXT:
            v = PyUnicode_FromStringAndSize((const char *)sqlite3_column_text(stmt, i), sqlite3_column_bytes(stmt, i));
            break;
        case SQLITE_BLOB:
            v = PyBytes_FromStringAndSize(sqlite3_column_blob(stmt, i), sqlite3_column_bytes(stmt, i));
            break;
        default: v = Py_NewRef(Py_None);
        }
        if (v == NULL) Py_CLEAR(row);
        else PyTuple_SET_ITEM(row, i, v);
    }
    return row;
}

/* Steps the bound stmt to its end (GIL released while SQLite steps); rows into out when out is a list.
 * 0, or -1 with an exception. */
static int run(sqlite3 *db, sqlite3_stmt *stmt, PyObject *out) {
    for (;;) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = sqlite3_step(stmt);
        Py_END_ALLOW_THREADS
        if (rc == SQLITE_DONE) return 0;
        if (rc != SQLITE_ROW) {
            raise_db(db, rc);
            return -1;
        }
        if (out == NULL) continue;
        PyObject *row = row_tuple(stmt);
        if (row == NULL || PyList_Append(out, row) < 0) {
            Py_XDECREF(row);
            return -1;
        }
        Py_DECREF(row);
    }
}

/* One statement prepared (GIL released: reading the schema may wait for another connection's lock). */
static sqlite3_stmt *prepare(sqlite3 *db, const char *sql, Py_ssize_t sql_len) {
    sqlite3_stmt *stmt = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_prepare_v2(db, sql, (int)sql_len, &stmt, NULL);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_OK) raise_db(db, rc);
    else if (stmt == NULL) PyErr_SetString(PyExc_ValueError, "no statement");
    return rc == SQLITE_OK ? stmt : NULL;
}

/* execute(sql, params=()) -> [row tuple]: one statement, stepped to its end. */
static PyObject *conn_execute(Connection *self, PyObject *args) {
    const char *sql;
    Py_ssize_t sql_len;
    PyObject *params = NULL;
    if (!PyArg_ParseTuple(args, "s#|O:execute", &sql, &sql_len, &params)) return NULL;
    sqlite3 *db = open_db(self);
    if (db == NULL) return NULL;
    sqlite3_stmt *stmt = prepare(db, sql, sql_len);
    if (stmt == NULL) return NULL;
    PyObject *out = PyList_New(0);
    if (out != NULL && ((params != NULL && bind_all(db, stmt, params) < 0) || run(db, stmt, out) < 0)) Py_CLEAR(out);
    sqlite3_finalize(stmt);
    return out;
}

/* executemany(sql, seq_of_params) -> the rows it changed: one statement stepped once per parameter tuple. */
static PyObject *conn_executemany(Connection *self, PyObject *args) {
    const char *sql;
    Py_ssize_t sql_len;
    PyObject *many;
    if (!PyArg_ParseTuple(args, "s#O:executemany", &sql, &sql_len, &many)) return NULL;
    sqlite3 *db = open_db(self);
    if (db == NULL) return NULL;
    PyObject *it = PyObject_GetIter(many), *params;
    if (it == NULL) return NULL;
    sqlite3_stmt *stmt = prepare(db, sql, sql_len);
    long long changed = 0;
    int failed = stmt == NULL;
    while (!failed && (params = PyIter_Next(it)) != NULL) {
        failed = bind_all(db, stmt, params) < 0 || run(db, stmt, NULL) < 0;
        Py_DECREF(params);
        if (!failed) changed += sqlite3_changes(db);
        sqlite3_reset(stmt);
    }
    Py_DECREF(it);
    sqlite3_finalize(stmt);
    if (failed || PyErr_Occurred()) return NULL;
    return PyLong_FromLongLong(changed);
}

/* upsert(sql, rows, ts, sort=False) -> bool: steps ``sql`` (4 parameters: row, col, ts, value) once per cell
 * of ``rows`` (a list of (row, {col: value}) with bytes everywhere), in order, or with ``sort`` in (row, col)
 * key order (stable: a cell given twice still ends with its later value), inside the caller's transaction. */
static PyObject *conn_upsert(Connection *self, PyObject *args) {
    PyObject *rows;
    const char *sql;
    Py_ssize_t sql_len;
    long long ts;
    int sort = 0;
    if (!PyArg_ParseTuple(args, "s#O!L|p:upsert", &sql, &sql_len, &PyList_Type, &rows, &ts, &sort)) return NULL;
    sqlite3 *db = open_db(self);
    if (db == NULL) return NULL;
    if (sqlite3_get_autocommit(db)) Py_RETURN_FALSE; /* only inside the caller's transaction */
    Cell *cells, *tmp = NULL;
    Py_ssize_t n;
    int got = gather(rows, &cells, &n);
    if (got < 0) return NULL;
    if (got == 0) Py_RETURN_FALSE;
    if (sort && (tmp = PyMem_Malloc((size_t)(n / 2 + 1) * sizeof(Cell))) == NULL) {
        release(cells, n);
        return PyErr_NoMemory();
    }
    sqlite3_stmt *stmt = NULL;
    int rc;
    char *message = NULL;
    Py_BEGIN_ALLOW_THREADS
    if (tmp != NULL) sort_cells(cells, tmp, n);
    rc = sqlite3_prepare_v2(db, sql, (int)sql_len, &stmt, NULL);
    for (Py_ssize_t i = 0; rc == SQLITE_OK && i < n; i++) {
        Cell *c = &cells[i];
        if ((rc = bind(stmt, 1, c->row)) != SQLITE_OK || (rc = bind(stmt, 2, c->col)) != SQLITE_OK ||
            (rc = sqlite3_bind_int64(stmt, 3, ts)) != SQLITE_OK || (rc = bind(stmt, 4, c->value)) != SQLITE_OK)
            break;
        rc = sqlite3_step(stmt);
        if (rc == SQLITE_DONE) rc = sqlite3_reset(stmt);
        else {
            rc = rc == SQLITE_ROW ? SQLITE_MISUSE : rc;
            break;
        }
    }
    if (rc != SQLITE_OK) message = sqlite3_mprintf("%s", sqlite3_errmsg(db));
    sqlite3_finalize(stmt);
    Py_END_ALLOW_THREADS
    PyMem_Free(tmp);
    release(cells, n);
    if (rc != SQLITE_OK) {
        raise_sqlite(rc, message ? message : "out of memory");
        sqlite3_free(message);
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* What select_rows() read with the GIL released: each cell's key number and the bytes of its column and
 * value in one buffer (SQLite's own buffers last only until the next step). */
typedef struct {
    Py_ssize_t key;
    size_t at;
    int col_len, value_len;
} Hit;

typedef struct {
    Hit *hits;
    size_t count, cap;
    char *bytes;
    size_t used, room;
} Found;

/* Keeps one cell of key number ``key``; 0 when out of memory (no GIL: raw allocations only). */
static int keep(Found *f, Py_ssize_t key, const void *col, int col_len, const void *value, int value_len) {
    if (f->count == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 1024;
        Hit *more = PyMem_RawRealloc(f->hits, cap * sizeof(Hit));
        if (more == NULL) return 0;
        f->hits = more;
        f->cap = cap;
    }
    size_t need = (size_t)col_len + (size_t)value_len;
    if (f->used + need > f->room) {
        size_t room = f->room ? 2 * f->room : 65536;
        while (room < f->used + need) room *= 2;
        char *more = PyMem_RawRealloc(f->bytes, room);
        if (more == NULL) return 0;
        f->bytes = more;
        f->room = room;
    }
    if (col_len) memcpy(f->bytes + f->used, col, (size_t)col_len);
    if (value_len) memcpy(f->bytes + f->used + col_len, value, (size_t)value_len);
    f->hits[f->count++] = (Hit){key, f->used, col_len, value_len};
    f->used += need;
    return 1;
}

/* Steps ``stmt`` (parameters: row, oldest ts; columns: col, value) for each distinct key of the sorted
 * keys[0, n), numbering them from 0 in key order into key_no[at]; SQLITE_OK, or SQLite's error,
 * SQLITE_NOMEM, or SQLITE_MISMATCH for a column or value that is not a BLOB.  No GIL needed. */
static int step_keys(sqlite3_stmt *stmt, const Cell *keys, Py_ssize_t n, long long oldest, Py_ssize_t *key_no,
                     Found *found) {
    Py_ssize_t distinct = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i > 0 && row_cmp(&keys[i - 1], &keys[i]) == 0) {
            key_no[keys[i].at] = distinct;
            continue;
        }
        key_no[keys[i].at] = ++distinct;
        int rc;
        if ((rc = bind(stmt, 1, keys[i].row)) != SQLITE_OK || (rc = sqlite3_bind_int64(stmt, 2, oldest)) != SQLITE_OK)
            return rc;
        while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
            if (sqlite3_column_type(stmt, 0) != SQLITE_BLOB || sqlite3_column_type(stmt, 1) != SQLITE_BLOB)
                return SQLITE_MISMATCH;
            const void *col = sqlite3_column_blob(stmt, 0);
            int col_len = sqlite3_column_bytes(stmt, 0);
            const void *value = sqlite3_column_blob(stmt, 1);
            int value_len = sqlite3_column_bytes(stmt, 1);
            if (!keep(found, distinct, col, col_len, value, value_len)) return SQLITE_NOMEM;
        }
        if (rc != SQLITE_DONE) return rc;
        if ((rc = sqlite3_reset(stmt)) != SQLITE_OK) return rc;
    }
    return SQLITE_OK;
}

/* The answer of select_rows(): a dict per position of the n keys asked (a key asked twice gets a copy). */
static PyObject *answer(const Found *found, const Py_ssize_t *key_no, Py_ssize_t n) {
    Py_ssize_t distinct = 0;
    for (Py_ssize_t i = 0; i < n; i++) distinct = key_no[i] + 1 > distinct ? key_no[i] + 1 : distinct;
    PyObject **dicts = PyMem_Calloc((size_t)distinct + 1, sizeof(PyObject *));
    char *given = PyMem_Calloc((size_t)distinct + 1, 1);
    PyObject *out = NULL;
    if (dicts == NULL || given == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t h = 0; h < found->count; h++) {
        const Hit *hit = &found->hits[h];
        PyObject **d = &dicts[hit->key];
        if (*d == NULL && (*d = PyDict_New()) == NULL) goto done;
        PyObject *col = PyBytes_FromStringAndSize(found->bytes + hit->at, hit->col_len);
        PyObject *value = col ? PyBytes_FromStringAndSize(found->bytes + hit->at + hit->col_len, hit->value_len) : NULL;
        int bad = value == NULL || PyDict_SetItem(*d, col, value) < 0;
        Py_XDECREF(col);
        Py_XDECREF(value);
        if (bad) goto done;
    }
    if ((out = PyList_New(n)) == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t k = key_no[i];
        PyObject *d;
        if (dicts[k] == NULL) d = PyDict_New();
        else if (!given[k]) {
            given[k] = 1;
            Py_INCREF(dicts[k]);
            d = dicts[k];
        } else d = PyDict_Copy(dicts[k]);
        if (d == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, d);
    }
done:
    if (dicts != NULL)
        for (Py_ssize_t k = 0; k < distinct; k++) Py_XDECREF(dicts[k]);
    PyMem_Free(dicts);
    PyMem_Free(given);
    return out;
}

/* select_rows(sql, rows, oldest) -> [{col: value}] | None: ``sql`` (parameters: row, oldest ts; columns:
 * col, value) run for each distinct key of ``rows`` (a list of bytes) in key order, in one read transaction
 * when the connection is in none, with the GIL released while SQLite steps; the columns of each key asked,
 * in the order asked.  None (nothing done) when it cannot take the call: a key that is not bytes, a column
 * or value stored as something else than a BLOB. */
static PyObject *conn_select_rows(Connection *self, PyObject *args) {
    PyObject *rows;
    const char *sql;
    Py_ssize_t sql_len;
    long long oldest;
    if (!PyArg_ParseTuple(args, "s#O!L:select_rows", &sql, &sql_len, &PyList_Type, &rows, &oldest)) return NULL;
    sqlite3 *db = open_db(self);
    if (db == NULL) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(rows);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!is_blob(PyList_GET_ITEM(rows, i))) Py_RETURN_NONE;
    Cell *keys = PyMem_Malloc((size_t)n * sizeof(Cell) + 1), *tmp = PyMem_Malloc((size_t)(n / 2 + 1) * sizeof(Cell));
    Py_ssize_t *key_no = PyMem_Malloc((size_t)n * sizeof(Py_ssize_t) + 1);
    if (keys == NULL || tmp == NULL || key_no == NULL) {
        PyMem_Free(keys);
        PyMem_Free(tmp);
        PyMem_Free(key_no);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* our own references: the list may change while the GIL is free */
        PyObject *row = PyList_GET_ITEM(rows, i);
        Py_INCREF(row);
        keys[i] = (Cell){row, NULL, NULL, i};
    }
    Found found = {0};
    sqlite3_stmt *stmt = NULL;
    int rc, began = 0;
    char *message = NULL;
    Py_BEGIN_ALLOW_THREADS
    sort_cells(keys, tmp, n); /* in key order, neighbouring lookups share pages */
    if (sqlite3_get_autocommit(db)) { /* one snapshot for all keys, and one read lock instead of one per key */
        rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
        began = rc == SQLITE_OK;
    } else rc = SQLITE_OK;
    if (rc == SQLITE_OK) rc = sqlite3_prepare_v2(db, sql, (int)sql_len, &stmt, NULL);
    if (rc == SQLITE_OK) rc = step_keys(stmt, keys, n, oldest, key_no, &found);
    if (rc != SQLITE_OK && rc != SQLITE_MISMATCH && rc != SQLITE_NOMEM)
        message = sqlite3_mprintf("%s", sqlite3_errmsg(db));
    sqlite3_finalize(stmt);
    if (began) sqlite3_exec(db, rc == SQLITE_OK ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
    Py_END_ALLOW_THREADS
    PyMem_Free(tmp);
    release(keys, n);
    PyObject *out = NULL;
    if (rc == SQLITE_OK) out = answer(&found, key_no, n);
    else if (rc == SQLITE_MISMATCH) out = Py_NewRef(Py_None);
    else if (rc == SQLITE_NOMEM && message == NULL) PyErr_NoMemory();
    else raise_sqlite(rc, message ? message : "out of memory");
    sqlite3_free(message);
    PyMem_RawFree(found.hits);
    PyMem_RawFree(found.bytes);
    PyMem_Free(key_no);
    return out;
}

/* same_library(path) -> bool: whether the shared object at path (Python's _sqlite3 module) resolves
 * sqlite3_libversion to the very library this module is linked with.  Two connections of one process to
 * one file must share one SQLite library: each keeps its own table of the POSIX locks it holds, and a
 * close in one would drop the other's (https://www.sqlite.org/howtocorrupt.html, 2.2.1). */
static PyObject *same_library(PyObject *Py_UNUSED(module), PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s:same_library", &path)) return NULL;
    void *handle = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == NULL) Py_RETURN_FALSE;
    void *theirs = dlsym(handle, "sqlite3_libversion");
    dlclose(handle);
    return PyBool_FromLong(theirs != NULL && theirs == (void *)sqlite3_libversion);
}

static PyMethodDef conn_methods[] = {
    {"execute", (PyCFunction)conn_execute, METH_VARARGS, "execute(sql, params=()) -> the rows of one statement."},
    {"executemany", (PyCFunction)conn_executemany, METH_VARARGS,
     "executemany(sql, seq_of_params) -> the rows changed by running sql once per parameter tuple."},
    {"upsert", (PyCFunction)conn_upsert, METH_VARARGS,
     "upsert(sql, rows, ts, sort=False) -> True once sql ran for every cell of [(row, {col: value})] (sort: in "
     "key order) inside the caller's transaction, with the GIL released; False (nothing done) when it cannot."},
    {"select_rows", (PyCFunction)conn_select_rows, METH_VARARGS,
     "select_rows(sql, rows, oldest) -> the {col: value} of each row key asked, read with the GIL released; "
     "None (nothing done) when it cannot take them."},
    {"close", (PyCFunction)conn_close, METH_NOARGS, "close() -> None: closes the connection (again: nothing)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef conn_getset[] = {
    {"in_transaction", (getter)conn_in_transaction, NULL, "Whether a transaction is open.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject ConnectionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "collector.store._sqlput.Connection",
    .tp_basicsize = sizeof(Connection),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Connection(path, busy_timeout_ms): a SQLite connection opened with sqlite3_open_v2; "
              "one caller at a time (LocalStore holds a lock around every call).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)conn_init,
    .tp_dealloc = (destructor)conn_dealloc,
    .tp_methods = conn_methods,
    .tp_getset = conn_getset,
};

static PyMethodDef methods[] = {
    {"same_library", same_library, METH_VARARGS,
     "same_library(path) -> whether the shared object at path uses this module's SQLite library."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_sqlput", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__sqlput(void) {
    if (PyType_Ready(&ConnectionType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "SQLITE_VERSION_NUMBER", sqlite3_libversion_number()) < 0 ||
        PyModule_AddObjectRef(m, "Connection", (PyObject *)&ConnectionType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
