/* IndexFile entries and their bucket heads in C, for a put (its keys hashed here) and a
 * batch (hashes given). Each function writes exactly the bytes IndexFile.put_key, called once
 * per key, writes; IndexFile keeps the header in memory from what they return.
 * tests/store/test_dispatch_c.py and test_put_bytes.py hold them to the Python path. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include "_index_entry.h"

#define PREFETCH_AHEAD 16  /* a batch's keys whose bucket heads are fetched ahead of their entry */
#define UNIT_SIZE 20  /* a ConsumeQueue unit */
#define RELEASE_MIN_ENTRIES 256  /* a batch's entries written without the GIL from this many */

typedef struct {
    Py_buffer buf;
    long long slots, entries, count, begin;
} IndexArgs;

/* The leading (buf, slots, entries, count, begin_ts) every index call takes. */
static int index_args(PyObject *const *args, IndexArgs *ix) {
    ix->slots = PyLong_AsLongLong(args[1]);
    ix->entries = PyLong_AsLongLong(args[2]);
    ix->count = PyLong_AsLongLong(args[3]);
    ix->begin = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return -1;
    if (PyObject_GetBuffer(args[0], &ix->buf, PyBUF_WRITABLE) < 0)
        return -1;
    /* each term bounded by the buffer's length first: a product must not overflow */
    if (ix->slots <= 0 || ix->count < 1 || ix->entries < ix->count
        || ix->slots > ix->buf.len / SLOT_SIZE || ix->entries > ix->buf.len / ENTRY_SIZE
        || ix->buf.len < HEADER_SIZE + ix->slots * SLOT_SIZE + ix->entries * ENTRY_SIZE) {
        PyBuffer_Release(&ix->buf);
        PyErr_SetString(PyExc_ValueError, "IndexFile geometry does not fit its buffer");
        return -1;
    }
    return 0;
}

/* index_keys(buf, slots, entries, count, begin_ts, hash_kind, topic, keys, phy, store_ts)
 * -> (entries written, new chains): put_key for each of a record's keys
 * while they fit, as one call each would leave them. Every key is hashed before the first
 * entry is written, so a key that cannot be hashed leaves the file as it was. */
static PyObject *index_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    IndexArgs ix;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "index_keys takes 10 arguments");
        return NULL;
    }
    long hash_kind = PyLong_AsLong(args[5]);
    PyObject *topic = args[6], *keys = args[7];
    long long phy = PyLong_AsLongLong(args[8]);
    long long store_ts = PyLong_AsLongLong(args[9]);
    if (PyErr_Occurred())
        return NULL;
    if (hash_kind != HASH_JAVA && hash_kind != HASH_XXH32) {  /* not hashed as some other */
        PyErr_Format(PyExc_ValueError, "unknown key hash kind %ld", hash_kind);
        return NULL;
    }
    if (!PyList_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "keys must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys), done = 0;
    long long stack[16], *hashes = n <= 16 ? stack : PyMem_Malloc((size_t)n * sizeof *hashes);
    if (hashes == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        hashes[i] = key_hash((int)hash_kind, topic, PyList_GET_ITEM(keys, i));
        if (hashes[i] < 0)
            goto fail;
    }
    if (index_args(args, &ix) < 0)
        goto fail;
    long long fresh = 0;
    for (; done < n && ix.count < ix.entries; done++) {
        fresh += put_entry(ix.buf.buf, ix.slots, ix.count, ix.begin, hashes[done], phy, store_ts);
        if (ix.count <= 1)
            ix.begin = store_ts;
        ix.count++;
    }
    PyBuffer_Release(&ix.buf);
    if (hashes != stack)
        PyMem_Free(hashes);
    return Py_BuildValue("(nL)", done, fresh);
fail:
    if (hashes != stack)
        PyMem_Free(hashes);
    return NULL;
}

/* index_entries(buf, slots, entries, count, begin_ts, hashes, phys, stamps)
 * -> (entries written, new chains): put_key for each (hash, CommitLog
 * offset, store time) of three int64 buffers while they fit (IndexFile.put_keys). */
static PyObject *index_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    IndexArgs ix;
    Py_buffer cols[3];
    int got = 0;
    PyObject *result = NULL;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "index_entries takes 8 arguments");
        return NULL;
    }
    if (index_args(args, &ix) < 0)
        return NULL;
    for (; got < 3; got++)
        if (PyObject_GetBuffer(args[5 + got], &cols[got], PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
    Py_ssize_t n = cols[0].len / 8;
    for (int i = 0; i < 3; i++) {
        const char *f = cols[i].format;
        if (cols[i].itemsize != 8 || cols[i].len / 8 != n || f == NULL
            || !(strcmp(f, "q") == 0 || strcmp(f, "l") == 0 || strcmp(f, "<q") == 0 || strcmp(f, "=q") == 0
                 || strcmp(f, "<l") == 0 || strcmp(f, "=l") == 0)) {
            PyErr_SetString(PyExc_TypeError, "index_entries takes three equal native int64 columns");
            goto done;
        }
    }
    const int64_t *hashes = cols[0].buf, *phys = cols[1].buf, *stamps = cols[2].buf;
    Py_ssize_t i = 0;
    long long fresh = 0;
    /* the entries are memory work alone (mostly the page faults of a new file): without the
     * GIL when they are many. The buffers are exported (none can be closed, resized or freed
     * meanwhile); the caller holds the index lock, which IndexService.query takes too, so no
     * reader sees a bucket head before the header counts its entry */
    PyThreadState *released = n >= RELEASE_MIN_ENTRIES ? PyEval_SaveThread() : NULL;
    for (; i < n && ix.count < ix.entries; i++) {
        if (i + PREFETCH_AHEAD < n)  /* slots are far apart: their cache misses overlap */
            __builtin_prefetch(slot_of(ix.buf.buf, ix.slots, hashes[i + PREFETCH_AHEAD]), 1, 0);
        fresh += put_entry(ix.buf.buf, ix.slots, ix.count, ix.begin, hashes[i], phys[i], stamps[i]);
        if (ix.count <= 1)
            ix.begin = stamps[i];
        ix.count++;
    }
    if (released != NULL)
        PyEval_RestoreThread(released);
    result = Py_BuildValue("(nL)", i, fresh);
done:
    while (got-- > 0)
        PyBuffer_Release(&cols[got]);
    PyBuffer_Release(&ix.buf);
    return result;
}

/* key_hash of a batch's key, -1 with an error set also for text UTF-8 cannot hold (a lone
 * surrogate), which Python's hash of either flavor refuses. */
static long long batch_key_hash(int hash_kind, PyObject *topic, PyObject *key) {
    if (hash_kind == HASH_JAVA
        && ((!PyUnicode_IS_ASCII(topic) && PyUnicode_AsUTF8AndSize(topic, NULL) == NULL)
            || (!PyUnicode_IS_ASCII(key) && PyUnicode_AsUTF8AndSize(key, NULL) == NULL)))
        return -1;
    return key_hash(hash_kind, topic, key);
}

/* 1: the message's keys (dispatcher.index_keys: UNIQ_KEY, then KEYS cut at spaces, empty
 * tokens dropped) added when `indexed`; 0: a value that is not text (looked at in every
 * message, as Python's path does), or a key the hash cannot take (Python's path decides
 * then); -1: an error set. */
static int message_keys(KeyColumns *out, Py_ssize_t row, int indexed, int hash_kind, PyObject *topic,
                        PyObject *props, PyObject *keys_name, PyObject *uniq_name) {
    if (!PyDict_Check(props) || !PyUnicode_Check(topic))
        return 0;
    int status = 0;
    PyObject *uniq = PyDict_GetItemWithError(props, uniq_name);
    Py_XINCREF(uniq);  /* owned: a lookup may run Python code (a key's __eq__) */
    if (uniq == NULL && PyErr_Occurred())
        return -1;
    PyObject *text = PyDict_GetItemWithError(props, keys_name);
    Py_XINCREF(text);
    PyObject *parts = NULL;
    if (text == NULL && PyErr_Occurred()) {
        status = -1;
        goto done;
    }
    if ((uniq != NULL && !PyUnicode_Check(uniq)) || (text != NULL && !PyUnicode_Check(text)))
        goto done;
    if (!indexed) {
        status = 1;
        goto done;
    }
    if (uniq != NULL && PyUnicode_GET_LENGTH(uniq) > 0) {
        long long h = batch_key_hash(hash_kind, topic, uniq);
        if (h < 0 || add_key(out, row, h) < 0)
            goto failed;
    }
    if (text == NULL || PyUnicode_GET_LENGTH(text) == 0) {
        status = 1;
        goto done;
    }
    Py_ssize_t space = PyUnicode_FindChar(text, ' ', 0, PyUnicode_GET_LENGTH(text), 1);
    if (space == -2)
        goto failed;
    if (space == -1) {
        long long h = batch_key_hash(hash_kind, topic, text);
        if (h < 0 || add_key(out, row, h) < 0)
            goto failed;
        status = 1;
        goto done;
    }
    PyObject *sep = PyUnicode_FromOrdinal(' ');
    parts = sep == NULL ? NULL : PyUnicode_Split(text, sep, -1);
    Py_XDECREF(sep);
    if (parts == NULL)
        goto failed;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts); i++) {
        PyObject *key = PyList_GET_ITEM(parts, i);  /* a new list of its own: no one else's */
        if (PyUnicode_GET_LENGTH(key) == 0)
            continue;
        long long h = batch_key_hash(hash_kind, topic, key);
        if (h < 0 || add_key(out, row, h) < 0)
            goto failed;
    }
    status = 1;
    goto done;
failed:
    /* a key the hash cannot take (UTF-8 of a lone surrogate): Python's path raises its own
     * error for it; running out of memory stays an error */
    status = PyErr_ExceptionMatches(PyExc_MemoryError) ? -1 : 0;
    if (status == 0)
        PyErr_Clear();
done:
    Py_XDECREF(parts);
    Py_XDECREF(text);
    Py_XDECREF(uniq);
    return status;
}

/* batch_keys(hash_kind, topics, props, indexed, keys_name, uniq_name) -> (rows, hashes) as
 * native int64 bytes, or None: Dispatcher._batch_keys for a batch, each indexed message's
 * keys (`indexed`: one byte a message) as (its row, the flavor's key_hash of topic#key), in
 * put order. None when a property value is not text or a key cannot be hashed, so the
 * Python path runs and refuses as it does. */
static PyObject *batch_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "batch_keys takes 6 arguments");
        return NULL;
    }
    long hash_kind = PyLong_AsLong(args[0]);
    if (hash_kind == -1 && PyErr_Occurred())
        return NULL;
    if (hash_kind != HASH_JAVA && hash_kind != HASH_XXH32) {
        PyErr_Format(PyExc_ValueError, "unknown key hash kind %ld", hash_kind);
        return NULL;
    }
    PyObject *topics = args[1], *props = args[2], *keys_name = args[4], *uniq_name = args[5];
    if (!PyList_Check(topics) || !PyList_Check(props) || !PyUnicode_Check(keys_name)
        || !PyUnicode_Check(uniq_name)) {
        PyErr_SetString(PyExc_TypeError, "batch_keys takes lists of topics and properties and two names");
        return NULL;
    }
    Py_buffer indexed;
    if (PyObject_GetBuffer(args[3], &indexed, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    KeyColumns out = {NULL, NULL, 0, 0};
    PyObject *result = NULL;
    if (indexed.itemsize != 1 || indexed.len != PyList_GET_SIZE(topics)
        || indexed.len != PyList_GET_SIZE(props)) {
        PyErr_SetString(PyExc_ValueError, "batch_keys takes one topic, properties and flag a message");
        goto done;
    }
    const unsigned char *flags = indexed.buf;
    for (Py_ssize_t i = 0; i < indexed.len; i++) {
        /* the lists may change while a lookup runs Python code: length checked, items owned */
        if (i >= PyList_GET_SIZE(topics) || i >= PyList_GET_SIZE(props)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        PyObject *topic = Py_NewRef(PyList_GET_ITEM(topics, i));
        PyObject *p = Py_NewRef(PyList_GET_ITEM(props, i));
        int got = message_keys(&out, i, flags[i] != 0, (int)hash_kind, topic, p, keys_name, uniq_name);
        Py_DECREF(topic);
        Py_DECREF(p);
        if (got < 0)
            goto done;
        if (got == 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    result = key_columns_pair(&out);
done:
    PyMem_Free(out.rows);
    PyMem_Free(out.hashes);
    PyBuffer_Release(&indexed);
    return result;
}

static int compare_int64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* group_rows(group, taken) -> (values, counts, rows, ranks) as native int64 bytes: a batch's
 * rows grouped by queue (Dispatcher._group_rows, the numpy reference): the distinct `group`
 * values ascending, how many `taken` rows each has, the taken rows in group order (each
 * group's in row order) and each one's rank within its group. One pass with a hash of the
 * distinct values (a batch has few), then a sort of those alone. */
static PyObject *group_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "group_rows takes 2 arguments");
        return NULL;
    }
    Py_buffer gv, tv;
    if (PyObject_GetBuffer(args[0], &gv, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &tv, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&gv);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = gv.len / 8, cap = 16, k = 0, m = 0;
    const char *f = gv.format;
    if (gv.itemsize != 8 || f == NULL || strchr("qlQL", f[f[0] == '<' || f[0] == '=' || f[0] == '@']) == NULL
            || tv.itemsize != 1 || tv.len != n) {
        PyErr_SetString(PyExc_ValueError, "group_rows takes native int64 groups and a byte a row");
        goto release;
    }
    while (cap < 2 * n)
        cap *= 2;
    const int64_t *group = gv.buf;
    const unsigned char *taken = tv.buf;
    /* slot -> 1 + id of the value (ids in order of first appearance); per id: value, taken
     * count, then its first row in `rows` */
    Py_ssize_t *table = PyMem_Calloc((size_t)cap, sizeof *table);
    Py_ssize_t *id_of = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *id_of);
    int64_t *values = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *values);
    int64_t *sorted = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *sorted);
    int64_t *counts = PyMem_Calloc((size_t)(n ? n : 1), sizeof *counts);
    int64_t *start = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *start);
    PyObject *o_values = NULL, *o_counts = NULL, *o_rows = NULL, *o_ranks = NULL;
    if (!table || !id_of || !values || !sorted || !counts || !start) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t h = (uint64_t)group[i] * 0x9E3779B97F4A7C15ull;
        Py_ssize_t at = (Py_ssize_t)(h >> 32) & (cap - 1);
        while (table[at] && values[table[at] - 1] != group[i])
            at = (at + 1) & (cap - 1);
        if (!table[at]) {
            values[k] = group[i];
            table[at] = ++k;
        }
        id_of[i] = table[at] - 1;
        if (taken[i]) {
            counts[id_of[i]]++;
            m++;
        }
    }
    /* the ids in value order: sorted[j] is the j-th smallest value; start[id] its rows' first
     * place, reached through a search of the sorted values (k log k, k is small) */
    memcpy(sorted, values, (size_t)k * sizeof *sorted);
    qsort(sorted, (size_t)k, sizeof *sorted, compare_int64);
    o_values = PyBytes_FromStringAndSize((const char *)sorted, k * 8);
    o_counts = PyBytes_FromStringAndSize(NULL, k * 8);
    o_rows = PyBytes_FromStringAndSize(NULL, m * 8);
    o_ranks = PyBytes_FromStringAndSize(NULL, m * 8);
    if (!o_values || !o_counts || !o_rows || !o_ranks)
        goto done;
    int64_t *out_counts = (int64_t *)PyBytes_AS_STRING(o_counts);
    Py_ssize_t *pos = table;  /* reused: the sorted place of each id */
    for (Py_ssize_t id = 0; id < k; id++) {
        int64_t *hit = bsearch(&values[id], sorted, (size_t)k, sizeof *sorted, compare_int64);
        pos[id] = hit - sorted;
    }
    for (Py_ssize_t id = 0; id < k; id++)
        out_counts[pos[id]] = counts[id];
    int64_t *first = sorted;  /* (copied out already) each group's first place in `rows` */
    for (Py_ssize_t j = 0, next = 0; j < k; j++) {
        first[j] = start[j] = next;
        next += out_counts[j];
    }
    int64_t *rows = (int64_t *)PyBytes_AS_STRING(o_rows), *ranks = (int64_t *)PyBytes_AS_STRING(o_ranks);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (taken[i]) {
            Py_ssize_t j = pos[id_of[i]];
            int64_t at = start[j]++;
            rows[at] = i;
            ranks[at] = at - first[j];
        }
    }
    result = PyTuple_Pack(4, o_values, o_counts, o_rows, o_ranks);
done:
    Py_XDECREF(o_values);
    Py_XDECREF(o_counts);
    Py_XDECREF(o_rows);
    Py_XDECREF(o_ranks);
    PyMem_Free(table);
    PyMem_Free(id_of);
    PyMem_Free(values);
    PyMem_Free(sorted);
    PyMem_Free(counts);
    PyMem_Free(start);
release:
    PyBuffer_Release(&gv);
    PyBuffer_Release(&tv);
    return result;
}

/* The native int64 buffer `obj` as `view`; -1 with an error set. */
static int int64_column(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    const char *f = view->format;
    char code = f == NULL ? '\0' : f[f[0] == '<' || f[0] == '=' || f[0] == '@'];
    if (view->itemsize != 8 || code == '\0' || strchr("qlQL", code) == NULL) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "pack_units: %s must be native int64 values", what);
        return -1;
    }
    return 0;
}

/* pack_units(rows, commitlog_offsets, sizes, tags_codes) -> bytes: the ConsumeQueue units
 * (big-endian offset int64, size int32, tagsCode int64: consume_queue.UNIT_DTYPE) of a
 * batch's rows `rows`, in that order, each from its row's values in the three columns
 * (Dispatcher._batch_units' numpy reference, without a structured array). */
static PyObject *pack_units(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "pack_units takes 4 arguments");
        return NULL;
    }
    Py_buffer rv, cols[3];
    int got = 0;
    PyObject *out = NULL;
    if (int64_column(args[0], &rv, "rows") < 0)
        return NULL;
    Py_ssize_t m = rv.len / 8, n = -1;
    static const char *what[3] = {"commitlog_offsets", "sizes", "tags_codes"};
    for (; got < 3; got++) {
        if (int64_column(args[1 + got], &cols[got], what[got]) < 0)
            goto done;
        if (n < 0 || cols[got].len / 8 < n)
            n = cols[got].len / 8;
    }
    const int64_t *rows = rv.buf, *offsets = cols[0].buf, *sizes = cols[1].buf, *tags = cols[2].buf;
    for (Py_ssize_t i = 0; i < m; i++)
        if (rows[i] < 0 || rows[i] >= n) {
            PyErr_SetString(PyExc_IndexError, "pack_units: a row past the columns");
            goto done;
        }
    out = PyBytes_FromStringAndSize(NULL, m * UNIT_SIZE);
    if (out == NULL)
        goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < m; i++, w += UNIT_SIZE) {
        int64_t r = rows[i];
        put_be64(w, (uint64_t)offsets[r]);
        put_be32(w + 8, (uint32_t)sizes[r]);
        put_be64(w + 12, (uint64_t)tags[r]);
    }
done:
    while (got-- > 0)
        PyBuffer_Release(&cols[got]);
    PyBuffer_Release(&rv);
    return out;
}

static PyMethodDef methods[] = {
    {"group_rows", (PyCFunction)(void (*)(void))group_rows, METH_FASTCALL,
     "A batch's rows grouped by queue: (values, counts, rows, ranks), as Dispatcher._group_rows."},
    {"index_keys", (PyCFunction)(void (*)(void))index_keys, METH_FASTCALL,
     "IndexFile entries for one record's keys, hashed here."},
    {"index_entries", (PyCFunction)(void (*)(void))index_entries, METH_FASTCALL,
     "IndexFile entries for columns of hashes, CommitLog offsets and store times."},
    {"batch_keys", (PyCFunction)(void (*)(void))batch_keys, METH_FASTCALL,
     "A batch's index keys as (rows, hashes), or None for Python's path."},
    {"pack_units", (PyCFunction)(void (*)(void))pack_units, METH_FASTCALL,
     "A batch's ConsumeQueue units of the given rows, packed as one bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_dispatch",
    "IndexFile entries and bucket heads in C (store/files/_dispatch.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__dispatch(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "HASH_JAVA", HASH_JAVA) < 0
        || PyModule_AddIntConstant(m, "HASH_XXH32", HASH_XXH32) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
