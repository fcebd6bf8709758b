/*
 * collector.store._cells: the parameters of LocalStore.put_rows' upsert, built in C.
 *
 * LocalStore binds every blob as a bytearray: Python's sqlite3 looks for an adapter for each
 * bytes parameter (a key tuple, a dict lookup, an AttributeError raised and cleared), never for a
 * bytearray. Making the bytearrays and the (row, col, ts, value) tuples in Python costs about
 * 1.4 us per indexed event; sqlite_cells makes the same ones here, and converts the cells of
 * index rows that share one columns dict once. It is only a fast path: local.py's _py_cells is
 * the definition, and tests/collector/store/test_cells.py checks that both give the same cells.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* A new bytearray holding the bytes of a buffer (bytes, bytearray, memoryview...); TypeError otherwise. */
static PyObject *copy(PyObject *o) {
    if (PyBytes_CheckExact(o)) return PyByteArray_FromStringAndSize(PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o));
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = PyByteArray_FromStringAndSize(view.buf, view.len);
    PyBuffer_Release(&view);
    return out;
}

/* The (column, value) pairs of one row's columns (anything with items()), as bytearrays. */
static PyObject *pairs_of(PyObject *columns) {
    PyObject *items = PyMapping_Items(columns), *out = NULL;
    if (items == NULL) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if ((out = PyList_New(n)) == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i), *col, *value, *pair;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "columns.items() must give (column, value) pairs");
            goto fail;
        }
        if ((col = copy(PyTuple_GET_ITEM(item, 0))) == NULL) goto fail;
        if ((value = copy(PyTuple_GET_ITEM(item, 1))) == NULL) {
            Py_DECREF(col);
            goto fail;
        }
        pair = PyTuple_Pack(2, col, value);
        Py_DECREF(col);
        Py_DECREF(value);
        if (pair == NULL) goto fail;
        PyList_SET_ITEM(out, i, pair);
    }
    Py_DECREF(items);
    return out;
fail:
    Py_DECREF(items);
    Py_XDECREF(out);
    return NULL;
}

/* Appends a (row, col, ts, value) tuple per pair to out. */
static int add_cells(PyObject *out, PyObject *row, PyObject *pairs, PyObject *ts) {
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(pairs); j++) {
        PyObject *pair = PyList_GET_ITEM(pairs, j);
        PyObject *cell = PyTuple_Pack(4, row, PyTuple_GET_ITEM(pair, 0), ts, PyTuple_GET_ITEM(pair, 1));
        if (cell == NULL) return -1;
        int rc = PyList_Append(out, cell);
        Py_DECREF(cell);
        if (rc < 0) return -1;
    }
    return 0;
}

static PyObject *sqlite_cells(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *rows, *ts;
    if (!PyArg_ParseTuple(args, "OO:sqlite_cells", &rows, &ts)) return NULL;
    /* A private list: converting a cell never runs code that could change what is iterated. */
    PyObject *seq = PySequence_List(rows);
    if (seq == NULL) return NULL;
    PyObject *out = PyList_New(0), *last = NULL, *pairs = NULL, *row = NULL;
    if (out == NULL) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(seq); i++) {
        PyObject *item = PyList_GET_ITEM(seq, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "rows must be (row, columns) pairs");
            goto fail;
        }
        PyObject *columns = PyTuple_GET_ITEM(item, 1);
        if (columns != last) { /* index rows share one columns dict (seq keeps it alive): convert it once */
            Py_XDECREF(pairs);
            last = NULL;
            if ((pairs = pairs_of(columns)) == NULL) goto fail;
            last = columns;
        }
        if ((row = copy(PyTuple_GET_ITEM(item, 0))) == NULL) goto fail;
        if (add_cells(out, row, pairs, ts) < 0) goto fail;
        Py_CLEAR(row);
    }
    Py_XDECREF(pairs);
    Py_DECREF(seq);
    return out;
fail:
    Py_XDECREF(row);
    Py_XDECREF(pairs);
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef methods[] = {
    {"sqlite_cells", sqlite_cells, METH_VARARGS,
     "sqlite_cells(rows, ts) -> [(row, col, ts, value)] for each cell of [(row, {col: value})], "
     "the blobs as bytearrays."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_cells", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__cells(void) { return PyModule_Create(&module); }
