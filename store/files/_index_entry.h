/* An IndexFile entry and its key hash, shared by the C modules that write entries:
 * _dispatch.c (a put's keys, a batch's hashes) and format/_records.c (the single put whole,
 * a batch's keys found as it is encoded).
 * Static functions only: each module gets its own copy from this one source. */
#ifndef MQFS_INDEX_ENTRY_H
#define MQFS_INDEX_ENTRY_H
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#define HEADER_SIZE 40
#define SLOT_SIZE 4
#define ENTRY_SIZE 20
#define KEY_MASK 0x7FFFFFFFu  /* both flavors keep 31 bits of a key hash */
#define INT_MAX32 0x7FFFFFFFLL

enum { HASH_JAVA = 0, HASH_XXH32 = 1 };  /* a flavor's index key hash */

static inline void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

static inline void put_be64(unsigned char *p, uint64_t v) {
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

static inline int32_t get_be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* Java's String.hashCode over the UTF-16 code units of a str, continued from h. */
static inline uint32_t java_hash(uint32_t h, PyObject *text) {
    Py_ssize_t len = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    for (Py_ssize_t i = 0; i < len; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0x10000) {  /* a surrogate pair in UTF-16 */
            c -= 0x10000;
            h = 31u * h + (uint32_t)(0xD800 + (c >> 10));
            h = 31u * h + (uint32_t)(0xDC00 + (c & 0x3FF));
        } else {
            h = 31u * h + (uint32_t)c;
        }
    }
    return h;
}

/* The flavor's key_hash of build_key(topic, key) ("topic#key"); -1 with an exception set. */
static inline long long key_hash(int hash_kind, PyObject *topic, PyObject *key) {
    if (!PyUnicode_Check(topic) || !PyUnicode_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "topic and keys must be str");
        return -1;
    }
    if (hash_kind == HASH_JAVA) {
        uint32_t h = java_hash(java_hash(0, topic) * 31u + '#', key);
        int32_t s = (int32_t)h;
        return s == INT32_MIN ? 0 : (s < 0 ? -(long long)s : s);
    }
    Py_ssize_t tn, kn;
    const char *t = PyUnicode_AsUTF8AndSize(topic, &tn);
    if (t == NULL)
        return -1;
    const char *k = PyUnicode_AsUTF8AndSize(key, &kn);
    if (k == NULL)
        return -1;
    char stack[512];
    size_t total = (size_t)tn + 1 + (size_t)kn;
    char *text = total <= sizeof stack ? stack : PyMem_Malloc(total);
    if (text == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(text, t, (size_t)tn);
    text[tn] = '#';
    memcpy(text + tn + 1, k, (size_t)kn);
    uint32_t h = XXH32(text, total, 0) & KEY_MASK;
    if (text != stack)
        PyMem_Free(text);
    return h;
}

/* Where a hash's bucket head is (a Java hash of Integer.MIN_VALUE's kind is negative). */
static inline unsigned char *slot_of(unsigned char *buf, long long slots, long long hash) {
    long long slot = hash % slots;
    if (slot < 0)
        slot += slots;
    return buf + HEADER_SIZE + slot * SLOT_SIZE;
}

/* One IndexFile entry as IndexFile.put_key writes it (the caller checked count < entries);
 * returns 1 when the key's slot had no live head (a new chain). */
static inline int put_entry(unsigned char *buf, long long slots, long long count, long long begin,
                     long long hash, long long phy, long long store_ts) {
    unsigned char *slot_at = slot_of(buf, slots, hash);
    long long prev = get_be32(slot_at);
    int fresh = 0;
    if (prev <= 0 || prev > count) {
        prev = 0;
        fresh = 1;
    }
    long long diff = 0;
    if (begin > 0) {
        long long d = store_ts - begin;
        diff = d < 0 ? 0 : (d / 1000 > INT_MAX32 ? INT_MAX32 : d / 1000);
    }
    unsigned char *e = buf + HEADER_SIZE + slots * SLOT_SIZE + count * ENTRY_SIZE;
    put_be32(e, (uint32_t)hash);
    put_be64(e + 4, (uint64_t)phy);
    put_be32(e + 12, (uint32_t)diff);
    put_be32(e + 16, (uint32_t)prev);
    put_be32(slot_at, (uint32_t)count);
    return fresh;
}

/* A batch's index keys as growing columns: the row of each key's message and its hash. */
typedef struct {
    int64_t *rows, *hashes;
    Py_ssize_t n, cap;
} KeyColumns;

/* Append (row, hash) of one index key to the columns; -1 with MemoryError set. */
static inline int add_key(KeyColumns *out, Py_ssize_t row, long long hash) {
    if (out->n == out->cap) {
        Py_ssize_t cap = out->cap ? 2 * out->cap : 1024;
        int64_t *rows = PyMem_Realloc(out->rows, (size_t)cap * sizeof *rows);
        if (rows == NULL)
            goto nomem;
        out->rows = rows;
        int64_t *hashes = PyMem_Realloc(out->hashes, (size_t)cap * sizeof *hashes);
        if (hashes == NULL)
            goto nomem;
        out->hashes = hashes;
        out->cap = cap;
    }
    out->rows[out->n] = row;
    out->hashes[out->n++] = hash;
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}

/* The columns as (rows, hashes), native int64 bytes each (numpy.frombuffer reads them); NULL
 * with an error set. The columns stay the caller's to free. */
static inline PyObject *key_columns_pair(const KeyColumns *k) {
    PyObject *rows = PyBytes_FromStringAndSize((const char *)k->rows, k->n * 8);
    PyObject *hashes = rows == NULL ? NULL : PyBytes_FromStringAndSize((const char *)k->hashes, k->n * 8);
    PyObject *pair = hashes == NULL ? NULL : PyTuple_Pack(2, rows, hashes);
    Py_XDECREF(rows);
    Py_XDECREF(hashes);
    return pair;
}

#endif
