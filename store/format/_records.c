/* CommitLog records encoded in C: the put path's per-message work (field reads, header,
 * properties, both checksums, stamping, PutResults) without a Python call per field.
 *
 * The Python codec (store/format/codec.py) is the reference. This module either produces
 * exactly its bytes or declines (returns None) and lets it run: it never raises a message's
 * error itself, so a rejected message is described by the one place that describes it.
 * Layout: docs/format.md, "CommitLog record". Checksums come from the system's zlib and
 * libxxhash (linked, never copied). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>
#include <zlib.h>

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define HOST_V6_FLAGS 0x30
#define QUEUE_OFFSET_POS 20
#define BORN_HOST_POS 48
#define CRC_MASK 0x7FFFFFFFu
#define RECORD_CRC_LEN 20
#define MAX_PROPERTIES_LEN 32767
#define MAX_TOPIC_LEN 127
static const char CRC_TRAILER[RECORD_CRC_LEN] = "__CRC32#\x01" "0000000000" "\x02";
static const char RESERVED_NAME[] = "__CRC32#";

/* the message fields, in Message's order */
enum { F_TOPIC, F_BODY, F_QUEUE_ID, F_PROPERTIES, F_FLAG, F_SYS_FLAG, F_BORN_TS, F_BORN_HOST,
       F_RECONSUME, F_PREPARED, N_FIELDS };
static const char *FIELD_NAMES[N_FIELDS] = {
    "topic", "body", "queue_id", "properties", "flag", "sys_flag", "born_timestamp",
    "born_host", "reconsume_times", "prepared_transaction_offset"};
static PyObject *field_names[N_FIELDS];

/* A store's fixed encoding choices plus the Python Encoder's caches of validated topics and
 * hosts (shared: a topic validated by either path is not validated again). */
typedef struct {
    PyObject_HEAD
    PyObject *store_host;  /* bytes, 8 or 20 */
    Py_ssize_t max_message_size;
    int xx;                /* 1: xxh32 checksums (flavor xxhash), 0: CRC-32 (rocketmq) */
    int record_crc;        /* every record ends in the __CRC32# trailer */
    PyObject *topics;      /* dict: topic -> TOPICLEN + TOPIC bytes */
    PyObject *born;        /* dict: born host tuple -> (born bytes, bits, struct, ts pos) */
    PyObject *topic_part;  /* Encoder._topic_part: validates and caches a topic */
    PyObject *hosts;       /* Encoder._hosts: likewise a born host */
} Codec;

/* One message's parts, read and checked before anything is written. */
typedef struct {
    PyObject *topic, *body_obj, *part, *born_raw, *props;  /* owned references */
    Py_ssize_t body_len, props_len, total;
    int64_t queue_id, flag, sys_flag, born_ts, reconsume, prepared;
} Parts;

static void parts_clear(Parts *p) {
    Py_CLEAR(p->topic);
    Py_CLEAR(p->body_obj);
    Py_CLEAR(p->part);
    Py_CLEAR(p->born_raw);
    Py_CLEAR(p->props);
}

static uint32_t checksum(const Codec *c, const void *data, size_t len) {
    if (c->xx)
        return (uint32_t)XXH32(data, len, 0);
    return (uint32_t)crc32_z(0, (const Bytef *)data, len);
}

static inline void put32(char *p, int64_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (char)(u >> 24); p[1] = (char)(u >> 16); p[2] = (char)(u >> 8); p[3] = (char)u;
}

static inline void put64(char *p, int64_t v) {
    put32(p, (int64_t)((uint64_t)v >> 32));
    put32(p + 4, v);
}

/* An int field that fits `bits` signed bits (what struct's i/q accept), else -1. */
static int int_field(PyObject *v, int bits, int64_t *out) {
    if (!PyLong_Check(v))
        return -1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    if (bits == 32 && (x < INT32_MIN || x > INT32_MAX))
        return -1;
    *out = x;
    return 0;
}

/* A property encode_properties takes as it is: no separator byte, not the reserved name. */
static int property_ok(const char *ks, Py_ssize_t kl, const char *vs, Py_ssize_t vl) {
    if (memchr(ks, 1, kl) || memchr(ks, 2, kl) || memchr(vs, 1, vl) || memchr(vs, 2, vl))
        return 0;
    return !(kl == (Py_ssize_t)sizeof(RESERVED_NAME) - 1 && memcmp(ks, RESERVED_NAME, kl) == 0);
}

/* PROPERTIES' length (with the trailer when the store wants it), or -1 to decline: what
 * encode_properties would refuse or format differently (a name or value that is not a str,
 * a separator byte, text that is not UTF-8, the reserved name, too long). */
static Py_ssize_t props_length(const Codec *c, PyObject *props) {
    Py_ssize_t pos = 0, len = 0;
    PyObject *k, *v;
    while (PyDict_Next(props, &pos, &k, &v)) {
        Py_ssize_t kl, vl;
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v))
            return -1;
        const char *ks = PyUnicode_AsUTF8AndSize(k, &kl);
        if (ks == NULL) { PyErr_Clear(); return -1; }
        const char *vs = PyUnicode_AsUTF8AndSize(v, &vl);
        if (vs == NULL) { PyErr_Clear(); return -1; }
        if (!property_ok(ks, kl, vs, vl))
            return -1;
        len += kl + vl + 2;
        if (len > MAX_PROPERTIES_LEN)
            return -1;
    }
    if (c->record_crc)
        len += RECORD_CRC_LEN;
    return len > MAX_PROPERTIES_LEN ? -1 : len;
}

/* A cached part, or the Python validator's (which caches it); NULL with no exception to
 * decline (the validator refused: the Python path raises its error). */
static PyObject *cached(PyObject *cache, PyObject *validate, PyObject *key) {
    PyObject *v = PyDict_GetItemWithError(cache, key);
    if (v != NULL)
        return Py_NewRef(v);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    v = PyObject_CallOneArg(validate, key);
    if (v == NULL)
        PyErr_Clear();
    return v;
}

/* Read and check one message into `p`: 1 ready, 0 declined, -1 error (MemoryError and
 * the like: a failure of the process, not of the message). */
static int read_parts(Codec *c, PyObject *msg, Parts *p) {
    PyObject *f[N_FIELDS] = {NULL};
    int ok = 0;
    memset(p, 0, sizeof(*p));
    for (int i = 0; i < N_FIELDS; i++) {
        f[i] = PyObject_GetAttr(msg, field_names[i]);
        if (f[i] == NULL) {
            PyErr_Clear();
            goto done;
        }
    }
    /* topic: a validated str (v2 magic when its part has a two-byte length) */
    if (!PyUnicode_CheckExact(f[F_TOPIC]))
        goto done;
    p->topic = Py_NewRef(f[F_TOPIC]);
    p->part = cached(c->topics, c->topic_part, f[F_TOPIC]);
    if (p->part == NULL || !PyBytes_CheckExact(p->part))
        goto done;
    /* body: bytes or bytearray (Python's path takes any buffer: it handles the rest) */
    if (!PyBytes_CheckExact(f[F_BODY]) && !PyByteArray_CheckExact(f[F_BODY]))
        goto done;
    p->body_len = Py_SIZE(f[F_BODY]);
    if (p->body_len > c->max_message_size)
        goto done;
    p->body_obj = Py_NewRef(f[F_BODY]);
    if (PyBool_Check(f[F_QUEUE_ID]) ||  /* True names queue 1 in the record, "True" on disk */
            int_field(f[F_QUEUE_ID], 32, &p->queue_id) || p->queue_id < 0 ||
            int_field(f[F_FLAG], 32, &p->flag) || int_field(f[F_SYS_FLAG], 32, &p->sys_flag) ||
            int_field(f[F_BORN_TS], 64, &p->born_ts) || int_field(f[F_RECONSUME], 32, &p->reconsume) ||
            int_field(f[F_PREPARED], 64, &p->prepared))
        goto done;
    if (!PyDict_CheckExact(f[F_PROPERTIES]))
        goto done;
    p->props_len = props_length(c, f[F_PROPERTIES]);
    if (p->props_len < 0)
        goto done;
    p->props = Py_NewRef(f[F_PROPERTIES]);
    /* born host: (bytes, SYSFLAG bits, ...) from the cache */
    if (!PyTuple_CheckExact(f[F_BORN_HOST]))
        goto done;
    PyObject *host = cached(c->born, c->hosts, f[F_BORN_HOST]);
    if (host == NULL)
        goto done;
    if (PyTuple_Check(host) && PyTuple_GET_SIZE(host) >= 2 && PyBytes_CheckExact(PyTuple_GET_ITEM(host, 0))) {
        p->born_raw = Py_NewRef(PyTuple_GET_ITEM(host, 0));
        long bits = PyLong_AsLong(PyTuple_GET_ITEM(host, 1));
        if (bits == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_DECREF(host);
            goto done;
        }
        p->sys_flag = (p->sys_flag & ~HOST_V6_FLAGS) | bits;
    }
    Py_DECREF(host);
    if (p->born_raw == NULL)
        goto done;
    if (p->born_ts == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        p->born_ts = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    }
    p->total = 72 + PyBytes_GET_SIZE(p->born_raw) + PyBytes_GET_SIZE(c->store_host) + p->body_len
        + PyBytes_GET_SIZE(p->part) + 2 + p->props_len;
    if (p->total > INT32_MAX)
        goto done;
    ok = 1;
done:
    for (int i = 0; i < N_FIELDS; i++)
        Py_XDECREF(f[i]);
    if (!ok)
        parts_clear(p);
    return ok;
}

/* Lay out the record at `out` (p->total bytes): offsets and store time zero, the trailer's
 * digits zero. 0, or -1 when the properties changed since they were measured (declined). */
static int write_record(const Codec *c, const Parts *p, char *out) {
    Py_ssize_t born_len = PyBytes_GET_SIZE(p->born_raw), store_len = PyBytes_GET_SIZE(c->store_host);
    Py_ssize_t part_len = PyBytes_GET_SIZE(p->part);
    /* a bytearray body may have been resized by another thread since it was measured
     * (Python code ran in between: a validator, a property): its bytes are taken now */
    const char *body = PyBytes_CheckExact(p->body_obj) ? PyBytes_AS_STRING(p->body_obj)
                                                       : PyByteArray_AS_STRING(p->body_obj);
    if (Py_SIZE(p->body_obj) != p->body_len)
        return -1;
    char *w = out;
    put32(w, p->total);
    put32(w + 4, part_len > MAX_TOPIC_LEN + 1 ? MAGIC_V2 : MAGIC_V1);
    put32(w + 8, checksum(c, body, (size_t)p->body_len) & CRC_MASK);
    put32(w + 12, p->queue_id);
    put32(w + 16, p->flag);
    memset(w + 20, 0, 16);
    put32(w + 36, p->sys_flag);
    put64(w + 40, p->born_ts);
    w += BORN_HOST_POS;
    memcpy(w, PyBytes_AS_STRING(p->born_raw), born_len);
    w += born_len;
    memset(w, 0, 8);
    w += 8;
    memcpy(w, PyBytes_AS_STRING(c->store_host), store_len);
    w += store_len;
    put32(w, p->reconsume);
    put64(w + 4, p->prepared);
    put32(w + 12, p->body_len);
    w += 16;
    memcpy(w, body, p->body_len);
    w += p->body_len;
    memcpy(w, PyBytes_AS_STRING(p->part), part_len);
    w += part_len;
    w[0] = (char)(p->props_len >> 8);
    w[1] = (char)p->props_len;
    w += 2;
    char *props_end = out + p->total - (c->record_crc ? RECORD_CRC_LEN : 0);
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(p->props, &pos, &k, &v)) {
        Py_ssize_t kl, vl;
        const char *ks = PyUnicode_CheckExact(k) ? PyUnicode_AsUTF8AndSize(k, &kl) : NULL;
        const char *vs = PyUnicode_CheckExact(v) ? PyUnicode_AsUTF8AndSize(v, &vl) : NULL;
        /* checked again: Python code run after they were measured may have changed them */
        if (ks == NULL || vs == NULL || w + kl + vl + 2 > props_end || !property_ok(ks, kl, vs, vl)) {
            PyErr_Clear();
            return -1;
        }
        memcpy(w, ks, kl);
        w[kl] = 1;
        memcpy(w + kl + 1, vs, vl);
        w[kl + 1 + vl] = 2;
        w += kl + vl + 2;
    }
    if (w != props_end)
        return -1;
    if (c->record_crc)
        memcpy(w, CRC_TRAILER, RECORD_CRC_LEN);
    return 0;
}

/* Stamp QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP, then the trailer's digits. */
/* Whether place_record may stamp a record of `total` bytes with its store timestamp at
 * `ts_pos`: the offsets before it, the timestamp and (with record_crc) the trailer each
 * inside the record and apart. place and place_run both ask this. */
static int layout_ok(const Codec *c, Py_ssize_t total, Py_ssize_t ts_pos) {
    return ts_pos >= QUEUE_OFFSET_POS + 16 && ts_pos + 8 <= total
        && !(c->record_crc && total < ts_pos + 8 + RECORD_CRC_LEN);
}

static void place_record(const Codec *c, char *rec, Py_ssize_t total, Py_ssize_t ts_pos,
                         int64_t queue_offset, int64_t commitlog_offset, int64_t store_ts) {
    put64(rec + QUEUE_OFFSET_POS, queue_offset);
    put64(rec + QUEUE_OFFSET_POS + 8, commitlog_offset);
    put64(rec + ts_pos, store_ts);
    if (c->record_crc) {
        uint32_t crc = checksum(c, rec, (size_t)(total - RECORD_CRC_LEN)) & CRC_MASK;
        char *d = rec + total - 11;
        for (int i = 0; i < 10; i++, crc /= 10)
            d[i] = (char)('0' + crc % 10);
    }
}

static Py_ssize_t ts_pos_of(const Parts *p) {
    return BORN_HOST_POS + PyBytes_GET_SIZE(p->born_raw);
}

/* Codec.encode(msg) -> (bytearray, STORETIMESTAMP position) | None */
static PyObject *Codec_encode(Codec *c, PyObject *msg) {
    Parts p;
    int r = read_parts(c, msg, &p);
    if (r <= 0)
        return r < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *rec = PyByteArray_FromStringAndSize(NULL, p.total);
    PyObject *out = NULL;
    if (rec != NULL) {
        if (write_record(c, &p, PyByteArray_AS_STRING(rec)) == 0)
            out = Py_BuildValue("(Nn)", rec, ts_pos_of(&p));
        else {
            Py_DECREF(rec);
            out = Py_NewRef(Py_None);
        }
    }
    parts_clear(&p);
    return out;
}

/* Codec.place(rec, ts_pos, queue_offset, commitlog_offset, store_ts): codec.place in C */
static PyObject *Codec_place(Codec *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyByteArray_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "place(bytearray, ts_pos, queue_offset, commitlog_offset, store_ts)");
        return NULL;
    }
    Py_ssize_t total = PyByteArray_GET_SIZE(args[0]);
    Py_ssize_t ts_pos = PyLong_AsSsize_t(args[1]);
    long long qo = PyLong_AsLongLong(args[2]), co = PyLong_AsLongLong(args[3]), ts = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (!layout_ok(c, total, ts_pos)) {
        PyErr_SetString(PyExc_ValueError, "not an encoded record");
        return NULL;
    }
    place_record(c, PyByteArray_AS_STRING(args[0]), total, ts_pos, qo, co, ts);
    Py_RETURN_NONE;
}

/* Codec.encode_batch(msgs) -> None | (buf, layout, topics, queue_ids, sys_flags, properties):
 * every record laid out back to back in one bytearray; `layout` packs (start, size,
 * STORETIMESTAMP position) per record and queue_ids/sys_flags one value each, as native int64
 * (numpy.frombuffer reads them); sys_flags without the host bits, as dispatch wants them. */
static PyObject *Codec_encode_batch(Codec *c, PyObject *arg) {
    /* a tuple of its own: Python code run while a message is read (a property, another
     * thread) may empty the caller's list, which must not free what is being read */
    PyObject *seq = PySequence_Tuple(arg);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Parts *parts = PyMem_Calloc(n ? n : 1, sizeof(Parts));
    PyObject *buf = NULL, *layout = NULL, *qids = NULL, *flags = NULL, *topics = NULL, *props = NULL;
    PyObject *out = NULL;
    Py_ssize_t got = 0, size = 0;
    if (parts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        int r = read_parts(c, items[got], &parts[got]);
        if (r <= 0) {
            if (r == 0)
                out = Py_NewRef(Py_None);
            goto done;
        }
        size += parts[got].total;
    }
    buf = PyByteArray_FromStringAndSize(NULL, size);
    layout = PyBytes_FromStringAndSize(NULL, n * 3 * 8);
    qids = PyBytes_FromStringAndSize(NULL, n * 8);
    flags = PyBytes_FromStringAndSize(NULL, n * 8);
    topics = PyList_New(n);
    props = PyList_New(n);
    if (!buf || !layout || !qids || !flags || !topics || !props)
        goto done;
    char *w = PyByteArray_AS_STRING(buf);
    int64_t *lay = (int64_t *)PyBytes_AS_STRING(layout);
    int64_t *qid = (int64_t *)PyBytes_AS_STRING(qids), *flag = (int64_t *)PyBytes_AS_STRING(flags);
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Parts *p = &parts[i];
        if (write_record(c, p, w + at) < 0) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        lay[3 * i] = at;
        lay[3 * i + 1] = p->total;
        lay[3 * i + 2] = ts_pos_of(p);
        qid[i] = p->queue_id;
        flag[i] = p->sys_flag & ~HOST_V6_FLAGS;
        at += p->total;
        PyList_SET_ITEM(topics, i, Py_NewRef(p->topic));
        PyList_SET_ITEM(props, i, Py_NewRef(p->props));
    }
    out = PyTuple_Pack(6, buf, layout, topics, qids, flags, props);
done:
    for (Py_ssize_t i = 0; i < got && parts != NULL; i++)
        parts_clear(&parts[i]);
    PyMem_Free(parts);
    Py_XDECREF(buf);
    Py_XDECREF(layout);
    Py_XDECREF(qids);
    Py_XDECREF(flags);
    Py_XDECREF(topics);
    Py_XDECREF(props);
    Py_DECREF(seq);
    return out;
}

static int int64_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t need, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 8 || view->format == NULL || strchr("qlQL", view->format[view->format[0] == '<' || view->format[0] == '=' || view->format[0] == '@']) == NULL
            || view->len < need * 8) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s: need %zd native int64 values", what, need);
        return -1;
    }
    return 0;
}

/* Codec.place_run(buf, layout, lo, hi, queue_offsets, commitlog_offsets, store_ts): stamp and
 * seal records lo..hi-1 of an encode_batch buffer (offsets indexed like the batch) */
static PyObject *Codec_place_run(Codec *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyByteArray_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "place_run(buf, layout, lo, hi, queue_offsets, commitlog_offsets, store_ts)");
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(args[1]) / 24;
    Py_ssize_t lo = PyLong_AsSsize_t(args[2]), hi = PyLong_AsSsize_t(args[3]);
    long long store_ts = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (lo < 0 || hi > n || lo > hi) {
        PyErr_SetString(PyExc_IndexError, "place_run: records out of range");
        return NULL;
    }
    Py_buffer qo, co;
    if (int64_buffer(args[4], &qo, hi, "queue_offsets") < 0)
        return NULL;
    if (int64_buffer(args[5], &co, hi, "commitlog_offsets") < 0) {
        PyBuffer_Release(&qo);
        return NULL;
    }
    const int64_t *lay = (const int64_t *)PyBytes_AS_STRING(args[1]);
    char *buf = PyByteArray_AS_STRING(args[0]);
    Py_ssize_t len = PyByteArray_GET_SIZE(args[0]);
    const int64_t *q = qo.buf, *cl = co.buf;
    PyObject *out = Py_None;
    for (Py_ssize_t i = lo; i < hi; i++) {
        int64_t start = lay[3 * i], size = lay[3 * i + 1], ts_pos = lay[3 * i + 2];
        if (start < 0 || size > len - start || !layout_ok(c, size, ts_pos)) {
            PyErr_SetString(PyExc_ValueError, "place_run: layout does not match the buffer");
            out = NULL;
            break;
        }
        place_record(c, buf + start, size, ts_pos, q[i], cl[i], store_ts);
    }
    PyBuffer_Release(&qo);
    PyBuffer_Release(&co);
    return Py_XNewRef(out);
}

/* results(cls, commitlog_offsets, queue_offsets, store_ts, sizes, host) -> [cls(...), ...]:
 * a batch's PutResults (a tuple subclass of five fields) built without a Python call each;
 * `sizes` is an encode_batch layout or a list of ints. */
static PyObject *results(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "results(tuple subclass, commitlog_offsets, queue_offsets, store_ts, layout, host)");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    if (!PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "results: layout must be an encode_batch layout");
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(args[4]) / 24;
    Py_buffer co, qo;
    if (int64_buffer(args[1], &co, n, "commitlog_offsets") < 0)
        return NULL;
    if (int64_buffer(args[2], &qo, n, "queue_offsets") < 0) {
        PyBuffer_Release(&co);
        return NULL;
    }
    const int64_t *lay = (const int64_t *)PyBytes_AS_STRING(args[4]);
    const int64_t *cl = co.buf, *q = qo.buf;
    /* no cycles among these: a collection triggered by their allocation only walks the
     * caller's objects (all of a batch's messages) and was most of this function's time */
    int gc_was = PyGC_Disable();
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        PyObject *t = cls->tp_alloc(cls, 5);
        PyObject *a = PyLong_FromLongLong(cl[i]), *b = PyLong_FromLongLong(q[i]);
        PyObject *d = PyLong_FromLongLong(lay[3 * i + 1]);
        if (t == NULL || a == NULL || b == NULL || d == NULL) {
            Py_XDECREF(t); Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(d);
            Py_CLEAR(list);
            break;
        }
        PyTuple_SET_ITEM(t, 0, a);
        PyTuple_SET_ITEM(t, 1, b);
        PyTuple_SET_ITEM(t, 2, Py_NewRef(args[3]));
        PyTuple_SET_ITEM(t, 3, d);
        PyTuple_SET_ITEM(t, 4, Py_NewRef(args[5]));
        PyList_SET_ITEM(list, i, t);
    }
    if (gc_was)
        PyGC_Enable();
    PyBuffer_Release(&co);
    PyBuffer_Release(&qo);
    return list;
}

static PyObject *Codec_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"store_host", "max_message_size", "xx", "record_crc", "topics", "born",
                         "topic_part", "hosts", NULL};
    PyObject *store_host, *topics, *born, *topic_part, *hosts;
    Py_ssize_t max_size;
    int xx, record_crc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "SnppO!O!OO", kw, &store_host, &max_size, &xx,
                                     &record_crc, &PyDict_Type, &topics, &PyDict_Type, &born,
                                     &topic_part, &hosts))
        return NULL;
    if (PyBytes_GET_SIZE(store_host) != 8 && PyBytes_GET_SIZE(store_host) != 20) {
        PyErr_SetString(PyExc_ValueError, "store_host is 8 or 20 bytes");
        return NULL;
    }
    Codec *c = (Codec *)type->tp_alloc(type, 0);
    if (c == NULL)
        return NULL;
    c->store_host = Py_NewRef(store_host);
    c->max_message_size = max_size;
    c->xx = xx;
    c->record_crc = record_crc;
    c->topics = Py_NewRef(topics);
    c->born = Py_NewRef(born);
    c->topic_part = Py_NewRef(topic_part);
    c->hosts = Py_NewRef(hosts);
    return (PyObject *)c;
}

static int Codec_traverse(Codec *c, visitproc visit, void *arg) {
    Py_VISIT(c->topics);
    Py_VISIT(c->born);
    Py_VISIT(c->topic_part);
    Py_VISIT(c->hosts);
    return 0;
}

static int Codec_clear(Codec *c) {
    Py_CLEAR(c->store_host);
    Py_CLEAR(c->topics);
    Py_CLEAR(c->born);
    Py_CLEAR(c->topic_part);
    Py_CLEAR(c->hosts);
    return 0;
}

static void Codec_dealloc(Codec *c) {
    PyObject_GC_UnTrack(c);
    Codec_clear(c);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyMethodDef Codec_methods[] = {
    {"encode", (PyCFunction)Codec_encode, METH_O,
     "encode(msg) -> (bytearray, STORETIMESTAMP position), or None to leave msg to codec.Encoder"},
    {"encode_batch", (PyCFunction)Codec_encode_batch, METH_O,
     "encode_batch(msgs) -> (buf, layout, topics, queue_ids, sys_flags, properties), or None"},
    {"place", (PyCFunction)(void (*)(void))Codec_place, METH_FASTCALL,
     "place(rec, ts_pos, queue_offset, commitlog_offset, store_ts): stamp and seal one record"},
    {"place_run", (PyCFunction)(void (*)(void))Codec_place_run, METH_FASTCALL,
     "place_run(buf, layout, lo, hi, queue_offsets, commitlog_offsets, store_ts)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CodecType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mqfs.store.format._records.Codec",
    .tp_doc = "A store's record encoder: the compiled twin of codec.Encoder",
    .tp_basicsize = sizeof(Codec),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Codec_new,
    .tp_dealloc = (destructor)Codec_dealloc,
    .tp_traverse = (traverseproc)Codec_traverse,
    .tp_clear = (inquiry)Codec_clear,
    .tp_methods = Codec_methods,
};

static PyMethodDef module_methods[] = {
    {"results", (PyCFunction)(void (*)(void))results, METH_FASTCALL,
     "results(cls, commitlog_offsets, queue_offsets, store_ts, layout, host) -> list of cls"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_records",
    .m_doc = "CommitLog records encoded in C (see codec.py: the reference)",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__records(void) {
    for (int i = 0; i < N_FIELDS; i++) {
        field_names[i] = PyUnicode_InternFromString(FIELD_NAMES[i]);
        if (field_names[i] == NULL)
            return NULL;
    }
    if (PyType_Ready(&CodecType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Codec", (PyObject *)&CodecType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
