/*
 * collector.store._sqlput: LocalStore.put_rows' upsert run over its cells with the GIL released.
 *
 * Python's sqlite3 executemany takes the GIL back after every row it steps, so the indexer's
 * writer thread, which writes one batch while the calling thread builds the next, got a row in
 * only when the builder let go of the GIL: the two threads took turns instead of sharing two
 * cores (measured: wall time equal to CPU time with a core idle).  upsert() binds and steps the
 * same statement over the same connection (the sqlite3* of the Python sqlite3.Connection, in the
 * transaction its caller began) for every cell, with the GIL released for the whole loop.
 *
 * It is only a fast path: executemany over local.py's cells is the definition (the same values,
 * blobs as BLOBs, the time as an INTEGER), and tests/collector/store/test_sqlput.py checks that both
 * store the same cells.  upsert() returns False, having done nothing, when it cannot take the call:
 * a connection whose handle it cannot find (another Python, another SQLite library: check() says
 * which connections it can take), or a row, column or value that is not bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <string.h>

/* CPython's sqlite3.Connection starts with the sqlite3* after its object header (3.10 to 3.13). */
#if PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030E0000
typedef struct {
    PyObject_HEAD
    sqlite3 *db;
} ConnectionHead;
#define HAVE_HEAD 1
#else
#define HAVE_HEAD 0
#endif

static sqlite3 *handle_of(PyObject *conn) {
#if HAVE_HEAD
    if (strcmp(Py_TYPE(conn)->tp_name, "sqlite3.Connection") != 0) return NULL;
    return ((ConnectionHead *)conn)->db;
#else
    (void)conn;
    return NULL;
#endif
}

/* check(conn, path, version) -> bool: whether upsert() can use this connection: its handle was found,
 * SQLite here is the version Python's sqlite3 reports and the handle has ``path`` open as "main". */
static PyObject *check(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *conn;
    const char *path;
    int version;
    if (!PyArg_ParseTuple(args, "Osi:check", &conn, &path, &version)) return NULL;
    if (version != sqlite3_libversion_number()) Py_RETURN_FALSE;
    sqlite3 *db = handle_of(conn);
    if (db == NULL) Py_RETURN_FALSE;
    const char *name = sqlite3_db_filename(db, "main");
    if (name == NULL || strcmp(name, path) != 0) Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

/* One cell: new references to its bytes (the loop reads them without the GIL). */
typedef struct {
    PyObject *row, *col, *value;
} Cell;

static int is_blob(PyObject *o) { return PyBytes_CheckExact(o) && PyBytes_GET_SIZE(o) <= INT_MAX; }

static void release(Cell *cells, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_DECREF(cells[i].row);
        Py_DECREF(cells[i].col);
        Py_DECREF(cells[i].value);
    }
    PyMem_Free(cells);
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
            cells[count++] = (Cell){row, col, value};
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

/* upsert(conn, sql, rows, ts) -> bool: steps ``sql`` (4 parameters: row, col, ts, value) once per cell
 * of ``rows`` (a list of (row, {col: value}) with bytes everywhere) on conn's handle, in order. */
static PyObject *upsert(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *conn, *rows;
    const char *sql;
    Py_ssize_t sql_len;
    long long ts;
    if (!PyArg_ParseTuple(args, "Os#O!L:upsert", &conn, &sql, &sql_len, &PyList_Type, &rows, &ts)) return NULL;
    sqlite3 *db = handle_of(conn);
    if (db == NULL || sqlite3_get_autocommit(db)) Py_RETURN_FALSE; /* only inside the caller's transaction */
    Cell *cells;
    Py_ssize_t n;
    int got = gather(rows, &cells, &n);
    if (got < 0) return NULL;
    if (got == 0) Py_RETURN_FALSE;
    sqlite3_stmt *stmt = NULL;
    int rc;
    char *message = NULL;
    Py_BEGIN_ALLOW_THREADS
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
    release(cells, n);
    if (rc != SQLITE_OK) {
        raise_sqlite(rc, message ? message : "out of memory");
        sqlite3_free(message);
        return NULL;
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"check", check, METH_VARARGS,
     "check(conn, path, version) -> whether upsert() can use this sqlite3.Connection of the file at path."},
    {"upsert", upsert, METH_VARARGS,
     "upsert(conn, sql, rows, ts) -> True once sql ran for every cell of [(row, {col: value})], "
     "with the GIL released; False (nothing done) when it cannot take them."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_sqlput", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__sqlput(void) { return PyModule_Create(&module); }
