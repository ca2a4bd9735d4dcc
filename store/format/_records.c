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
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

#include "../files/_index_entry.h"

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define HOST_V6_FLAGS 0x30
#define COMPRESSED_FLAG 0x1  /* a body a put must see inflate: declined to Python */
#define QUEUE_OFFSET_POS 20
#define BORN_HOST_POS 48
#define CRC_MASK 0x7FFFFFFFu
#define RECORD_CRC_LEN 20
#define MAX_PROPERTIES_LEN 32767
#define MAX_TOPIC_LEN 127
#define TRANSACTION_MASK 0xC
#define TRANSACTION_ROLLBACK 0xC  /* a rolled-back record's keys are not indexed */
static const char CRC_TRAILER[RECORD_CRC_LEN] = "__CRC32#\x01" "0000000000" "\x02";
static const char RESERVED_NAME[] = "__CRC32#";
/* a batch releases the GIL around its pure memory work from this many bytes (below, the
 * release and the wait to take the GIL back cost more than another thread gains) */
#define RELEASE_MIN (16 << 10)

/* the message fields, in Message's order */
enum { F_TOPIC, F_BODY, F_QUEUE_ID, F_PROPERTIES, F_FLAG, F_SYS_FLAG, F_BORN_TS, F_BORN_HOST,
       F_RECONSUME, F_PREPARED, N_FIELDS };
static const char *FIELD_NAMES[N_FIELDS] = {
    "topic", "body", "queue_id", "properties", "flag", "sys_flag", "born_timestamp",
    "born_host", "reconsume_times", "prepared_transaction_offset"};
static PyObject *field_names[N_FIELDS];
static const char SCHEDULE_TOPIC[] = "SCHEDULE_TOPIC_XXXX";  /* a unit there holds a delivery time */

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
    int64_t batch_now;     /* encode_batch's one clock reading for BORNTIMESTAMP 0, or 0 */
    /* a class whose fields are all object slots (Message): their offsets, valid while the
     * class keeps this version tag (any change to it or a base clears the tag) */
    PyTypeObject *slots_type;
    unsigned int slots_tag;
    Py_ssize_t slot_at[N_FIELDS];
} Codec;

/* One message's parts, read and checked before anything is written. A batch's message has
 * no `props`: its PROPERTIES were written out as they were read (Saved, at props_at), with
 * its unit's tagsCode and its DELAY (kept only there). */
typedef struct {
    PyObject *topic, *body_obj, *part, *born_raw, *props, *delay;  /* owned references */
    Py_ssize_t body_len, props_len, total, props_at;
    int64_t queue_id, flag, sys_flag, born_ts, reconsume, prepared, tags_code;
    char *body_at;  /* a batch's record whose BODYCRC and BODY are still to write (write_body) */
} Parts;

static void parts_clear(Parts *p) {
    Py_CLEAR(p->topic);
    Py_CLEAR(p->body_obj);
    Py_CLEAR(p->part);
    Py_CLEAR(p->born_raw);
    Py_CLEAR(p->props);
    Py_CLEAR(p->delay);
}

/* What a batch keeps of its messages' properties as it reads each dict, once: their
 * PROPERTIES back to back (what the records hold) and their index keys by row (what
 * dispatch indexes), so both come from the same reading and no dict is copied. */
typedef struct {
    char *raw;
    Py_ssize_t len, cap;
    KeyColumns keys;
    /* the last message's topic, born host and int fields (owned), with what was found for
     * them: a batch's messages mostly share these objects (a producer's, a write's lines),
     * and an object the last message had is not looked up or converted again */
    PyObject *topic, *part, *host, *born_raw;
    long bits;
    PyObject *ints[N_FIELDS];
    int64_t values[N_FIELDS];
} Saved;

static void saved_free(Saved *s) {
    PyMem_Free(s->raw);
    PyMem_Free(s->keys.rows);
    PyMem_Free(s->keys.hashes);
    Py_CLEAR(s->topic);
    Py_CLEAR(s->part);
    Py_CLEAR(s->host);
    Py_CLEAR(s->born_raw);
    for (int i = 0; i < N_FIELDS; i++)
        Py_CLEAR(s->ints[i]);
}


/* The flavor's checksum (xx: xxh32, else CRC-32); no Python object is touched, so callers
 * may run it without the GIL on memory they own. */
static uint32_t checksum_of(int xx, const void *data, size_t len) {
    if (xx)
        return (uint32_t)XXH32(data, len, 0);
    return (uint32_t)crc32_z(0, (const Bytef *)data, len);
}

static uint32_t checksum(const Codec *c, const void *data, size_t len) {
    return checksum_of(c->xx, data, len);
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

/* int_field for field `i` of a batch's message, the last message's value when it is the
 * same object (an int is immutable). */
static int saved_int(Saved *s, PyObject *const *f, int i, int bits, int64_t *out) {
    if (s != NULL && f[i] == s->ints[i]) {
        *out = s->values[i];
        return 0;
    }
    if (int_field(f[i], bits, out))
        return -1;
    if (s != NULL) {
        Py_XSETREF(s->ints[i], Py_NewRef(f[i]));
        s->values[i] = *out;
    }
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

/* The tagsCode of a unit (TagsCodes.of for any topic but the delay topic): the flavor's hash
 * of TAGS, 0 without one. */
static long long tags_code(const Codec *c, PyObject *tags) {
    if (tags == NULL || PyUnicode_GET_LENGTH(tags) == 0)
        return 0;
    if (!c->xx)
        return (int32_t)java_hash(0, tags);
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(tags, &n);  /* measured already: cannot fail */
    return s == NULL ? 0 : (long long)(int64_t)XXH64(s, (size_t)n, 0);
}

/* The names whose values dispatch reads, in the order props_save finds them. */
enum { K_KEYS, K_UNIQ, K_TAGS, K_DELAY, N_KEPT };

static int kept_name(const char *ks, Py_ssize_t kl) {
    switch (kl) {
    case 4: return memcmp(ks, "KEYS", 4) == 0 ? K_KEYS : memcmp(ks, "TAGS", 4) == 0 ? K_TAGS : -1;
    case 5: return memcmp(ks, "DELAY", 5) == 0 ? K_DELAY : -1;
    case 8: return memcmp(ks, "UNIQ_KEY", 8) == 0 ? K_UNIQ : -1;
    default: return -1;
    }
}

/* props_length for a batch's message, reading the dict once: its PROPERTIES appended to
 * s->raw (at *at) and the values of KEYS, UNIQ_KEY, TAGS and DELAY in kept[] (new
 * references, NULL when absent). The length with the trailer; -1 to decline, -2 with
 * MemoryError set. The loop runs no Python code (exact str names and values, no object
 * made), so the dict cannot change under it. */
static Py_ssize_t props_save(const Codec *c, PyObject *props, Saved *s, Py_ssize_t *at, PyObject **kept) {
    Py_ssize_t pos = 0, len = 0;
    PyObject *k, *v;
    PyObject *found[N_KEPT] = {NULL};
    *at = s->len;
    while (PyDict_Next(props, &pos, &k, &v)) {
        Py_ssize_t kl, vl;
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v))
            goto decline;
        const char *ks = PyUnicode_AsUTF8AndSize(k, &kl);
        const char *vs = ks == NULL ? NULL : PyUnicode_AsUTF8AndSize(v, &vl);
        if (vs == NULL) {
            PyErr_Clear();
            goto decline;
        }
        if (!property_ok(ks, kl, vs, vl) || (len += kl + vl + 2) > MAX_PROPERTIES_LEN)
            goto decline;
        if (s->len + kl + vl + 2 > s->cap) {
            Py_ssize_t cap = s->cap ? 2 * s->cap : 4096;
            while (cap < s->len + kl + vl + 2)
                cap *= 2;
            char *raw = PyMem_Realloc(s->raw, (size_t)cap);
            if (raw == NULL) {
                PyErr_NoMemory();
                s->len = *at;
                return -2;
            }
            s->raw = raw;
            s->cap = cap;
        }
        char *w = s->raw + s->len;
        memcpy(w, ks, kl);
        w[kl] = 1;
        memcpy(w + kl + 1, vs, vl);
        w[kl + 1 + vl] = 2;
        s->len += kl + vl + 2;
        int kept_at = kept_name(ks, kl);
        if (kept_at >= 0)
            found[kept_at] = v;
    }
    if (c->record_crc)
        len += RECORD_CRC_LEN;
    if (len > MAX_PROPERTIES_LEN)
        goto decline;
    for (int i = 0; i < N_KEPT; i++)
        kept[i] = Py_XNewRef(found[i]);
    return len;
decline:
    s->len = *at;
    return -1;
}

/* Dispatcher.index_keys of a batch's message (UNIQ_KEY, then KEYS cut at spaces, empty
 * tokens dropped), each hashed as the flavor hashes topic#key, added to `out` under `row`.
 * 0, or -1 with an error set. */
static int saved_keys(const Codec *c, PyObject *topic, PyObject *uniq, PyObject *text, Py_ssize_t row,
                      KeyColumns *out) {
    int kind = c->xx ? HASH_XXH32 : HASH_JAVA;
    long long h;
    if (uniq != NULL && PyUnicode_GET_LENGTH(uniq) > 0
            && ((h = key_hash(kind, topic, uniq)) < 0 || add_key(out, row, h) < 0))
        return -1;
    if (text == NULL || PyUnicode_GET_LENGTH(text) == 0)
        return 0;
    Py_ssize_t space = PyUnicode_FindChar(text, ' ', 0, PyUnicode_GET_LENGTH(text), 1);
    if (space == -2)
        return -1;
    if (space == -1)
        return (h = key_hash(kind, topic, text)) < 0 || add_key(out, row, h) < 0 ? -1 : 0;
    PyObject *sep = PyUnicode_FromOrdinal(' ');
    PyObject *tokens = sep == NULL ? NULL : PyUnicode_Split(text, sep, -1);
    Py_XDECREF(sep);
    if (tokens == NULL)
        return -1;
    int r = 0;
    for (Py_ssize_t i = 0; r == 0 && i < PyList_GET_SIZE(tokens); i++) {
        PyObject *key = PyList_GET_ITEM(tokens, i);  /* a new list of its own: no one else's */
        if (PyUnicode_GET_LENGTH(key) > 0)
            r = (h = key_hash(kind, topic, key)) < 0 || add_key(out, row, h) < 0 ? -1 : 0;
    }
    Py_DECREF(tokens);
    return r;
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

/* The clock in milliseconds, as the Python codec reads it for a BORNTIMESTAMP of 0. */
static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether msg's class keeps every field in an object slot read as getattr reads it (the
 * generic getattr, each name a member descriptor): the offsets are found once per class
 * and version tag, and a message of any other class (or of its class changed since) is read
 * with getattr. Finds no attribute by running Python code. */
static int slotted(Codec *c, PyObject *msg) {
    PyTypeObject *type = Py_TYPE(msg);
    if (type == c->slots_type && (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)
            && type->tp_version_tag == c->slots_tag)
        return 1;
    if (type->tp_getattro != PyObject_GenericGetAttr)
        return 0;
    Py_ssize_t at[N_FIELDS];
    for (int i = 0; i < N_FIELDS; i++) {
        PyObject *d = _PyType_Lookup(type, field_names[i]);  /* borrowed; sets no error */
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type))
            return 0;
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type != T_OBJECT_EX || !PyType_IsSubtype(type, ((PyDescrObject *)d)->d_type)
                || m->offset < (Py_ssize_t)sizeof(PyObject) || m->offset + (Py_ssize_t)sizeof(PyObject *) > type->tp_basicsize)
            return 0;
        at[i] = m->offset;
    }
    if (!(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
        return 0;  /* (the lookups give it one; without, nothing would say it changed) */
    Py_XSETREF(c->slots_type, (PyTypeObject *)Py_NewRef(type));
    c->slots_tag = type->tp_version_tag;
    memcpy(c->slot_at, at, sizeof at);
    return 1;
}

/* Read and check one message into `p`: 1 ready, 0 declined, -1 error (MemoryError and
 * the like: a failure of the process, not of the message). With `saved` (a batch's, the
 * message its row `row`), the properties are read once, there: the record's PROPERTIES and
 * what the batch's dispatch reads (index keys, tagsCode, DELAY) come from that one reading,
 * so another thread that changes the message's dict afterwards changes neither. */
static int read_parts(Codec *c, PyObject *msg, Parts *p, Saved *saved, Py_ssize_t row) {
    PyObject *f[N_FIELDS] = {NULL};
    int ok = 0;
    memset(p, 0, sizeof(*p));
    if (slotted(c, msg)) {  /* the slots themselves: what getattr would return, or unset */
        for (int i = 0; i < N_FIELDS; i++)
            if ((f[i] = Py_XNewRef(*(PyObject **)((char *)msg + c->slot_at[i]))) == NULL)
                goto done;
    } else {
        for (int i = 0; i < N_FIELDS; i++) {
            f[i] = PyObject_GetAttr(msg, field_names[i]);
            if (f[i] == NULL) {
                PyErr_Clear();
                goto done;
            }
        }
    }
    /* topic: a validated str (v2 magic when its part has a two-byte length) */
    if (!PyUnicode_CheckExact(f[F_TOPIC]))
        goto done;
    p->topic = Py_NewRef(f[F_TOPIC]);
    if (saved != NULL && f[F_TOPIC] == saved->topic)
        p->part = Py_NewRef(saved->part);
    else {
        p->part = cached(c->topics, c->topic_part, f[F_TOPIC]);
        if (p->part == NULL || !PyBytes_CheckExact(p->part))
            goto done;
        if (saved != NULL) {
            Py_XSETREF(saved->topic, Py_NewRef(f[F_TOPIC]));
            Py_XSETREF(saved->part, Py_NewRef(p->part));
        }
    }
    /* body: bytes or bytearray (Python's path takes any buffer: it handles the rest) */
    if (!PyBytes_CheckExact(f[F_BODY]) && !PyByteArray_CheckExact(f[F_BODY]))
        goto done;
    p->body_len = Py_SIZE(f[F_BODY]);
    if (p->body_len > c->max_message_size)
        goto done;
    p->body_obj = Py_NewRef(f[F_BODY]);
    if (PyBool_Check(f[F_QUEUE_ID]) ||  /* True names queue 1 in the record, "True" on disk */
            saved_int(saved, f, F_QUEUE_ID, 32, &p->queue_id) || p->queue_id < 0 ||
            saved_int(saved, f, F_FLAG, 32, &p->flag) || saved_int(saved, f, F_SYS_FLAG, 32, &p->sys_flag) ||
            saved_int(saved, f, F_BORN_TS, 64, &p->born_ts) || saved_int(saved, f, F_RECONSUME, 32, &p->reconsume) ||
            saved_int(saved, f, F_PREPARED, 64, &p->prepared))
        goto done;
    if (p->sys_flag & COMPRESSED_FLAG)  /* Python checks that the body inflates */
        goto done;
    if (!PyDict_CheckExact(f[F_PROPERTIES]))
        goto done;
    if (saved != NULL) {
        PyObject *kept[N_KEPT];
        p->props_len = props_save(c, f[F_PROPERTIES], saved, &p->props_at, kept);
        if (p->props_len < 0) {
            ok = p->props_len == -2 ? -1 : 0;
            goto done;
        }
        p->tags_code = tags_code(c, kept[K_TAGS]);
        p->delay = kept[K_DELAY];
        int indexed = (p->sys_flag & TRANSACTION_MASK) != TRANSACTION_ROLLBACK;
        int r = indexed ? saved_keys(c, p->topic, kept[K_UNIQ], kept[K_KEYS], row, &saved->keys) : 0;
        Py_XDECREF(kept[K_KEYS]);
        Py_XDECREF(kept[K_UNIQ]);
        Py_XDECREF(kept[K_TAGS]);
        if (r < 0) {
            ok = -1;
            goto done;
        }
    } else {
        p->props = Py_NewRef(f[F_PROPERTIES]);
        p->props_len = props_length(c, p->props);
        if (p->props_len < 0)
            goto done;
    }
    /* born host: (bytes, SYSFLAG bits, ...) from the cache */
    if (!PyTuple_CheckExact(f[F_BORN_HOST]))
        goto done;
    long bits = 0;
    if (saved != NULL && f[F_BORN_HOST] == saved->host) {
        p->born_raw = Py_NewRef(saved->born_raw);
        bits = saved->bits;
    } else {
        PyObject *host = cached(c->born, c->hosts, f[F_BORN_HOST]);
        if (host == NULL)
            goto done;
        if (PyTuple_Check(host) && PyTuple_GET_SIZE(host) >= 2 && PyBytes_CheckExact(PyTuple_GET_ITEM(host, 0))) {
            p->born_raw = Py_NewRef(PyTuple_GET_ITEM(host, 0));
            bits = PyLong_AsLong(PyTuple_GET_ITEM(host, 1));
            if (bits == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                Py_DECREF(host);
                goto done;
            }
        }
        Py_DECREF(host);
        if (p->born_raw == NULL)
            goto done;
        PyObject *t = f[F_BORN_HOST];  /* kept only as (str, int): nothing in it can change */
        if (saved != NULL && PyTuple_GET_SIZE(t) == 2 && PyUnicode_CheckExact(PyTuple_GET_ITEM(t, 0))
                && PyLong_CheckExact(PyTuple_GET_ITEM(t, 1))) {
            Py_XSETREF(saved->host, Py_NewRef(t));
            Py_XSETREF(saved->born_raw, Py_NewRef(p->born_raw));
            saved->bits = bits;
        }
    }
    p->sys_flag = (p->sys_flag & ~HOST_V6_FLAGS) | bits;
    if (p->born_ts == 0)
        p->born_ts = c->batch_now ? c->batch_now : now_ms();
    p->total = 72 + PyBytes_GET_SIZE(p->born_raw) + PyBytes_GET_SIZE(c->store_host) + p->body_len
        + PyBytes_GET_SIZE(p->part) + 2 + p->props_len;
    if (p->total > INT32_MAX)
        goto done;
    ok = 1;
done:
    for (int i = 0; i < N_FIELDS; i++)
        Py_XDECREF(f[i]);
    if (ok != 1)
        parts_clear(p);
    return ok;
}

/* BODYCRC and BODY of a record laid out at `rec` (its body at `at`): the one part of a
 * record that is pure memory work, which a batch does without the GIL for bytes bodies. */
static void write_body(int xx, char *rec, char *at, const char *body, Py_ssize_t len) {
    put32(rec + 8, checksum_of(xx, body, (size_t)len) & CRC_MASK);
    memcpy(at, body, (size_t)len);
}

/* Lay out the record at `out` (p->total bytes): offsets and store time zero, the trailer's
 * digits zero. 0, or -1 when the properties changed since they were measured (declined).
 * A batch's message takes its PROPERTIES from `saved`, where they were written as read.
 * With `body_at` (a bytes body only), BODYCRC and BODY are left for the caller's
 * write_body and *body_at says where the body goes. */
static int write_record(const Codec *c, const Parts *p, const Saved *saved, char *out, char **body_at) {
    Py_ssize_t born_len = PyBytes_GET_SIZE(p->born_raw), store_len = PyBytes_GET_SIZE(c->store_host);
    Py_ssize_t part_len = PyBytes_GET_SIZE(p->part);
    /* a bytearray body may have been resized by another thread since it was measured
     * (Python code ran in between: a validator, a property): its bytes are taken now */
    const char *body = PyBytes_CheckExact(p->body_obj) ? PyBytes_AS_STRING(p->body_obj)
                                                       : PyByteArray_AS_STRING(p->body_obj);
    if (Py_SIZE(p->body_obj) != p->body_len)
        return -1;
    if (body_at != NULL && !PyBytes_CheckExact(p->body_obj))
        body_at = NULL;  /* a bytearray's bytes may move once the GIL is released: copied now */
    char *w = out;
    put32(w, p->total);
    put32(w + 4, part_len > MAX_TOPIC_LEN + 1 ? MAGIC_V2 : MAGIC_V1);
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
    if (body_at != NULL)
        *body_at = w;
    else
        write_body(c->xx, out, w, body, p->body_len);
    w += p->body_len;
    memcpy(w, PyBytes_AS_STRING(p->part), part_len);
    w += part_len;
    w[0] = (char)(p->props_len >> 8);
    w[1] = (char)p->props_len;
    w += 2;
    char *props_end = out + p->total - (c->record_crc ? RECORD_CRC_LEN : 0);
    if (p->props == NULL && props_end > w) {  /* (none saved: no buffer at all) */
        memcpy(w, saved->raw + p->props_at, (size_t)(props_end - w));
        w = props_end;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (p->props != NULL && PyDict_Next(p->props, &pos, &k, &v)) {
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
    int r = read_parts(c, msg, &p, NULL, 0);
    if (r <= 0)
        return r < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *rec = PyByteArray_FromStringAndSize(NULL, p.total);
    PyObject *out = NULL;
    if (rec != NULL) {
        if (write_record(c, &p, NULL, PyByteArray_AS_STRING(rec), NULL) == 0)
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

/* A batch's messages are seldom in the cache (most of reading one was waiting for its
 * object, its body's header and its properties): each is fetched a few messages ahead, its
 * body and properties once it has arrived, their key table after that. Hints alone: a
 * slot is read only from a message of the class whose slots are known (same layout). */
#define AHEAD 12
static inline void prefetch_ahead(const Codec *c, PyObject **items, Py_ssize_t i, Py_ssize_t n) {
    if (i + AHEAD < n)
        __builtin_prefetch(items[i + AHEAD]);
    if (c->slots_type == NULL)
        return;
    if (i + AHEAD / 2 < n && Py_TYPE(items[i + AHEAD / 2]) == c->slots_type) {
        char *m = (char *)items[i + AHEAD / 2];
        __builtin_prefetch(*(PyObject **)(m + c->slot_at[F_BODY]));
        __builtin_prefetch(*(PyObject **)(m + c->slot_at[F_PROPERTIES]));
    }
    if (i + AHEAD / 4 < n && Py_TYPE(items[i + AHEAD / 4]) == c->slots_type) {
        PyObject *props = *(PyObject **)((char *)items[i + AHEAD / 4] + c->slot_at[F_PROPERTIES]);
        if (props != NULL && PyDict_CheckExact(props))
            __builtin_prefetch(((PyDictObject *)props)->ma_keys);
    }
}

/* Codec.encode_batch(msgs) -> None | (buf, layout, topics, queue_ids, sys_flags, tags_codes,
 * key_rows, key_hashes, delays): every record laid out back to back in one bytearray;
 * `layout` packs (start, size, STORETIMESTAMP position) per record and queue_ids/sys_flags/
 * tags_codes one value each, as native int64 (numpy.frombuffer reads them); sys_flags without
 * the host bits, as dispatch wants them. What dispatch needs of the properties comes read
 * with the records: each unit's tagsCode (the flavor's hash of TAGS), the index keys as
 * (row, hash of topic#key) in put order, and for a batch with a record of the delay topic
 * each message's DELAY (None elsewhere: `delays` is None without one). */
static PyObject *Codec_encode_batch(Codec *c, PyObject *arg) {
    /* a tuple of its own: Python code run while a message is read (a property, another
     * thread) may empty the caller's list, which must not free what is being read */
    PyObject *seq = PySequence_Tuple(arg);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    /* one reading for the batch, as the Python codec's (a thread encoding another batch
     * meanwhile may replace or clear it: any reading of the clock is as right) */
    c->batch_now = now_ms();
    Parts *parts = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Parts));
    Saved saved;
    memset(&saved, 0, sizeof saved);
    PyObject *buf = NULL, *layout = NULL, *qids = NULL, *flags = NULL, *topics = NULL, *codes = NULL;
    PyObject *keys = NULL, *delays = NULL;
    PyObject *out = NULL;
    Py_ssize_t got = 0, size = 0;
    if (parts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        prefetch_ahead(c, items, got, n);
        int r = read_parts(c, items[got], &parts[got], &saved, got);
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
    codes = PyBytes_FromStringAndSize(NULL, n * 8);
    topics = PyList_New(n);
    keys = key_columns_pair(&saved.keys);
    if (!buf || !layout || !qids || !flags || !codes || !topics || !keys)
        goto done;
    char *w = PyByteArray_AS_STRING(buf);
    int64_t *lay = (int64_t *)PyBytes_AS_STRING(layout), *code = (int64_t *)PyBytes_AS_STRING(codes);
    int64_t *qid = (int64_t *)PyBytes_AS_STRING(qids), *flag = (int64_t *)PyBytes_AS_STRING(flags);
    Py_ssize_t at = 0, bodies = 0;
    PyObject *plain = NULL;  /* the last topic found not to be the delay topic */
    for (Py_ssize_t i = 0; i < n; i++) {
        Parts *p = &parts[i];
        if (write_record(c, p, &saved, w + at, &p->body_at) < 0) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        if (p->body_at != NULL)
            bodies += p->body_len;
        lay[3 * i] = at;
        lay[3 * i + 1] = p->total;
        lay[3 * i + 2] = ts_pos_of(p);
        qid[i] = p->queue_id;
        flag[i] = p->sys_flag & ~HOST_V6_FLAGS;
        code[i] = p->tags_code;
        at += p->total;
        PyList_SET_ITEM(topics, i, Py_NewRef(p->topic));
        if (p->topic != plain) {
            if (PyUnicode_CompareWithASCIIString(p->topic, SCHEDULE_TOPIC) != 0)
                plain = p->topic;
            else if (delays == NULL && (delays = PyList_New(n)) == NULL)
                goto done;
        }
    }
    for (Py_ssize_t i = 0; delays != NULL && i < n; i++)
        PyList_SET_ITEM(delays, i, Py_NewRef(parts[i].delay != NULL ? parts[i].delay : Py_None));
    /* the bytes bodies' checksums and copies, the bulk of the work, without the GIL when
     * they are many: `parts` owns each body (bytes: immutable) and `buf` is no one else's
     * yet, so no Python object changes or goes meanwhile (another thread may drop or
     * change the messages) */
    int xx = c->xx;
    PyThreadState *released = bodies >= RELEASE_MIN ? PyEval_SaveThread() : NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (parts[i].body_at != NULL)
            write_body(xx, w + lay[3 * i], parts[i].body_at, PyBytes_AS_STRING(parts[i].body_obj),
                       parts[i].body_len);
    if (released != NULL)
        PyEval_RestoreThread(released);
    out = Py_BuildValue("(OOOOOOOOO)", buf, layout, topics, qids, flags, codes, PyTuple_GET_ITEM(keys, 0),
                        PyTuple_GET_ITEM(keys, 1), delays != NULL ? delays : Py_None);
done:
    c->batch_now = 0;  /* single encodes and puts read the clock themselves */
    for (Py_ssize_t i = 0; i < got && parts != NULL; i++)
        parts_clear(&parts[i]);
    PyMem_Free(parts);
    saved_free(&saved);
    Py_XDECREF(buf);
    Py_XDECREF(layout);
    Py_XDECREF(qids);
    Py_XDECREF(flags);
    Py_XDECREF(codes);
    Py_XDECREF(topics);
    Py_XDECREF(keys);
    Py_XDECREF(delays);
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
    /* an export of its own: the buffer can be neither resized nor freed while the GIL is
     * released below (`layout` is bytes, held by the caller) */
    Py_buffer bv;
    if (PyObject_GetBuffer(args[0], &bv, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&qo);
        PyBuffer_Release(&co);
        return NULL;
    }
    const int64_t *lay = (const int64_t *)PyBytes_AS_STRING(args[1]);
    char *buf = bv.buf;
    Py_ssize_t len = bv.len, bytes = 0;
    const int64_t *q = qo.buf, *cl = co.buf;
    PyObject *out = Py_None;
    for (Py_ssize_t i = lo; i < hi; i++) {  /* every record checked before any is stamped */
        int64_t start = lay[3 * i], size = lay[3 * i + 1], ts_pos = lay[3 * i + 2];
        if (start < 0 || size > len - start || !layout_ok(c, size, ts_pos)) {
            PyErr_SetString(PyExc_ValueError, "place_run: layout does not match the buffer");
            out = NULL;
            break;
        }
        bytes += size;
    }
    if (out != NULL) {
        /* stamps and record checksums: memory of the caller's own buffers alone, so without
         * the GIL when there is much of it (the put lock still orders the batches) */
        PyThreadState *released = bytes >= RELEASE_MIN ? PyEval_SaveThread() : NULL;
        for (Py_ssize_t i = lo; i < hi; i++)
            place_record(c, buf + lay[3 * i], lay[3 * i + 1], lay[3 * i + 2], q[i], cl[i], store_ts);
        if (released != NULL)
            PyEval_RestoreThread(released);
    }
    PyBuffer_Release(&bv);
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
    PyObject *size = NULL;  /* the last size's int, shared by the runs of equal sizes */
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        PyObject *t = cls->tp_alloc(cls, 5);
        PyObject *a = PyLong_FromLongLong(cl[i]), *b = PyLong_FromLongLong(q[i]);
        if (size == NULL || i == 0 || lay[3 * i + 1] != lay[3 * i - 2]) {
            Py_XDECREF(size);
            size = PyLong_FromLongLong(lay[3 * i + 1]);
        }
        if (t == NULL || a == NULL || b == NULL || size == NULL) {
            Py_XDECREF(t); Py_XDECREF(a); Py_XDECREF(b);
            Py_CLEAR(list);
            break;
        }
        PyTuple_SET_ITEM(t, 0, a);
        PyTuple_SET_ITEM(t, 1, b);
        PyTuple_SET_ITEM(t, 2, Py_NewRef(args[3]));
        PyTuple_SET_ITEM(t, 3, Py_NewRef(size));
        PyTuple_SET_ITEM(t, 4, Py_NewRef(args[5]));
        /* ints and bytes only: no cycle through it, so no collection need look at it */
        PyObject_GC_UnTrack(t);
        PyList_SET_ITEM(list, i, t);
    }
    Py_XDECREF(size);
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
    Py_VISIT(c->slots_type);
    Py_VISIT(c->topics);
    Py_VISIT(c->born);
    Py_VISIT(c->topic_part);
    Py_VISIT(c->hosts);
    return 0;
}

static int Codec_clear(Codec *c) {
    Py_CLEAR(c->slots_type);
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
     "encode_batch(msgs) -> (buf, layout, topics, queue_ids, sys_flags, properties, tags), or None"},
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

/* ---- The single put whole (StoreWrites.put's common case, in one call) ----------------------
 * Put(...)(msg) encodes a message, stamps and seals it at the end of the CommitLog's current
 * file, adds its ConsumeQueue unit to its queue's tail and its IndexFile entries, and returns
 * its PutResult; or declines (None, having written nothing of the message) whenever the put
 * is not the common case the Python path's `reserve_hot` and `_write` take (a new queue, a
 * roll, an index file without room, a transaction, the delay topic, ...): Python then puts
 * the message exactly as without this module. A queue's full tail is written out first by
 * the queue's own `ensure_room`, the call Python's `reserve` makes at that point (Put.nowait
 * declines it instead: no I/O). The store's positions stay in the Python
 * objects (one source of truth): they are read here and written back as Python writes them.
 * The caller holds the put lock. Every check comes before the store clock is read; after it
 * nothing can refuse. */

#define UNIT_SIZE 20
#define END_FILE_MIN_BLANK 8
#define TRANSACTION_PREPARED 0x4  /* prepared and rolled-back transactions have it */
#define MAX_KEYS 16               /* more index keys than this: Python's path */
#define SCRATCH 4096

enum { A_FILES, A_FILE_SIZE, A_WROTE, A_FROM, A_WRITE_BUFFER, A_ZEROED, A_MM, A_STORE_TIMESTAMP,
       A_END_CHECK, A_OPEN, A_USED, A_TAIL, A_NEXT_OFFSET, A_MAX_PHYSIC, A_ADDED, A_TOUCHED,
       A_INDEX_COUNT, A_END_PHY, A_BEGIN_TS, A_BEGIN_PHY, A_SLOT_COUNT, A_WRITTEN, A_END_TS,
       A_ORDERED, A_NEWEST, A_MF, A_SLOTS, A_ENTRIES, A_CLOCK, A_LAST_TS, A_DISPATCHED_TS,
       A_BORN_HOST, A_CALLS, A_USERS_OPEN, A_IS_OPEN, A_STOPPED, M_ACQUIRE, M_RELEASE, M_REMOVE,
       M_LEAVE, M_FILES_END, M_ENSURE_ROOM, P_KEYS, P_UNIQ, P_TAGS, S_SCHEDULE, S_SPACE, N_NAMES };
static const char *NAMES[N_NAMES] = {
    "files", "file_size", "wrote_position", "file_from_offset", "write_buffer", "zeroed", "mm",
    "store_timestamp", "end_check", "_open", "_used", "_tail", "next_offset", "max_physic_offset",
    "added", "touched", "index_count", "end_phy_offset", "begin_timestamp", "begin_phy_offset",
    "hash_slot_count", "written", "end_timestamp", "_ordered_upto", "_newest_ts", "mf", "slots",
    "entries", "clock", "_last_store_ts", "_dispatched_ts", "born_host", "_calls", "_open", "is_open",
    "stopped", "acquire", "release", "remove", "leave", "_files_end", "ensure_room", "KEYS", "UNIQ_KEY", "TAGS",
    "SCHEDULE_TOPIC_XXXX", " "};
static PyObject *names[N_NAMES];

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Codec *codec;
    PyObject *message;    /* the Message class: the only type taken (no Python code in its reads) */
    PyObject *users;      /* the store's Users: this call is one, as @in_use makes a Python one */
    PyObject *lock;       /* the put lock */
    PyObject *acquire, *release;  /* its methods, looked up once */
    PyObject *compacted;  /* frozenset: compaction topics (never written by mqfs) */
    PyObject *wall_clock; /* the store's default clock (time.time_ns() // 10**6): read in C */
    PyObject *writes;     /* StoreWrites: clock, _last_store_ts, _dispatched_ts */
    PyObject *log;        /* the CommitLog's MappedFileQueue */
    PyObject *registry;   /* QueueRegistry */
    PyObject *units;      /* UnitFlush */
    PyObject *index;      /* IndexService */
    PyObject *result;     /* PutResult (a tuple subclass of five fields) */
    PyTypeObject *ix_type;          /* IndexFile, when its fields are slots (else NULL) */
    Py_ssize_t ix_off[N_NAMES];     /* where an IndexFile keeps each field it has a slot for */
    unsigned int ix_tag;            /* ix_type's version tag then: any change to it clears it */
    PyObject *ahead;      /* None, or ahead(mf, end) -> CommitLog offset: told where the appends
                           * reached once they pass that offset (store/files/prefault.py) */
    long long ahead_at;   /* (a hint, not store state: a new Put starts at 0) */
    int hash_kind;
    long long tail_max, tail_first, buffered_max, pwrite_min;
    Py_ssize_t taken;     /* puts this object wrote (tests see the path ran) */
} Put;

/* An int attribute as a long long; -1 with nothing set when it is missing or not an int. */
static int attr_ll(PyObject *obj, int name, long long *out) {
    PyObject *v = PyObject_GetAttr(obj, names[name]);
    if (v == NULL) {
        PyErr_Clear();
        return -1;
    }
    int overflow = 0;
    *out = PyLong_Check(v) ? PyLong_AsLongLongAndOverflow(v, &overflow) : -1;
    int bad = !PyLong_Check(v) || overflow || (*out == -1 && PyErr_Occurred());
    if (bad)
        PyErr_Clear();
    Py_DECREF(v);
    return bad ? -1 : 0;
}

/* The last item of a list attribute (a new reference), or NULL (nothing set) when there is none. */
static PyObject *last_of(PyObject *obj, int name) {
    PyObject *list = PyObject_GetAttr(obj, names[name]);
    PyObject *last = NULL;
    if (list == NULL)
        PyErr_Clear();
    else if (PyList_CheckExact(list) && PyList_GET_SIZE(list) > 0)
        last = Py_NewRef(PyList_GET_ITEM(list, PyList_GET_SIZE(list) - 1));
    Py_XDECREF(list);
    return last;
}

/* A writable buffer of obj's `mm` (an mmap); 0, or -1 with nothing set. */
static int mapping(PyObject *obj, Py_buffer *view) {
    PyObject *mm = PyObject_GetAttr(obj, names[A_MM]);
    int r = mm == NULL ? -1 : PyObject_GetBuffer(mm, view, PyBUF_WRITABLE);
    Py_XDECREF(mm);
    if (r < 0)
        PyErr_Clear();
    return r;
}

static int set_ll(PyObject *obj, int name, long long v) {
    PyObject *o = PyLong_FromLongLong(v);
    int r = o == NULL ? -1 : PyObject_SetAttr(obj, names[name], o);
    Py_XDECREF(o);
    return r;
}

/* An IndexFile's field `name` where its class keeps it (a slot: the attribute itself, which
 * Python reads and writes there too), or NULL: then it is read and written as an attribute
 * (a file of another class, or of its class changed since the Put was made). */
static PyObject **ix_slot(const Put *s, PyObject *ixf, int name) {
    PyTypeObject *t = s->ix_type;
    return t != NULL && Py_IS_TYPE(ixf, t) && (t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)
        && t->tp_version_tag == s->ix_tag && s->ix_off[name] > 0
        ? (PyObject **)((char *)ixf + s->ix_off[name]) : NULL;
}

/* attr_ll and set_ll for an IndexFile's fields, at their slots. */
static int ix_ll(const Put *s, PyObject *ixf, int name, long long *out) {
    PyObject **at = ix_slot(s, ixf, name);
    if (at == NULL)
        return attr_ll(ixf, name, out);
    int overflow = 0;
    *out = *at != NULL && PyLong_Check(*at) ? PyLong_AsLongLongAndOverflow(*at, &overflow) : -1;
    int bad = *at == NULL || !PyLong_Check(*at) || overflow || (*out == -1 && PyErr_Occurred());
    if (bad)
        PyErr_Clear();
    return bad ? -1 : 0;
}

static int ix_put(const Put *s, PyObject *ixf, int name, PyObject *v) {
    PyObject **at = ix_slot(s, ixf, name);
    if (at == NULL)
        return PyObject_SetAttr(ixf, names[name], v);
    PyObject *old = *at;
    *at = Py_NewRef(v);
    Py_XDECREF(old);
    return 0;
}

static int ix_set(const Put *s, PyObject *ixf, int name, long long v) {
    PyObject *o = PyLong_FromLongLong(v);
    int r = o == NULL ? -1 : ix_put(s, ixf, name, o);
    Py_XDECREF(o);
    return r;
}

/* index_keys(props) hashed (UNIQ_KEY, then the KEYS tokens): how many, or -1 to decline. */
static int key_hashes(const Put *s, PyObject *topic, PyObject *props, long long *out) {
    int n = 0;
    PyObject *uniq = PyDict_GetItemWithError(props, names[P_UNIQ]);
    PyObject *text = uniq == NULL && PyErr_Occurred() ? NULL : PyDict_GetItemWithError(props, names[P_KEYS]);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    /* str when measured, but Python code run since (a born host's validator, a finalizer)
     * may have let another thread put anything there */
    if ((uniq != NULL && !PyUnicode_CheckExact(uniq)) || (text != NULL && !PyUnicode_CheckExact(text)))
        return -1;
    if (uniq != NULL && PyUnicode_GET_LENGTH(uniq) > 0 && (out[n++] = key_hash(s->hash_kind, topic, uniq)) < 0)
        goto fail;
    if (text == NULL || PyUnicode_GET_LENGTH(text) == 0)
        return n;
    if (PyUnicode_FindChar(text, ' ', 0, PyUnicode_GET_LENGTH(text), 1) == -1)
        return (out[n++] = key_hash(s->hash_kind, topic, text)) < 0 ? (PyErr_Clear(), -1) : n;
    PyObject *tokens = PyUnicode_Split(text, names[S_SPACE], -1);
    if (tokens == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tokens); i++) {
        PyObject *k = PyList_GET_ITEM(tokens, i);
        if (PyUnicode_GET_LENGTH(k) == 0)
            continue;
        if (n == MAX_KEYS || (out[n++] = key_hash(s->hash_kind, topic, k)) < 0) {
            Py_DECREF(tokens);
            goto fail;
        }
    }
    Py_DECREF(tokens);
    return n;
fail:
    PyErr_Clear();
    return -1;
}

/* (a, b) or (a, b, c) (c NULL: two), taking the references given; NULL if any is NULL. */
static PyObject *tuple_of(PyObject *a, PyObject *b, PyObject *c) {
    Py_ssize_t n = c == NULL ? 2 : 3;
    PyObject *t = a == NULL || b == NULL ? NULL : PyTuple_New(n);
    if (t == NULL) {
        Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(c);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, a);
    PyTuple_SET_ITEM(t, 1, b);
    if (c != NULL)
        PyTuple_SET_ITEM(t, 2, c);
    return t;
}

/* A queue's tail (start, buffer, used bytes), as a new reference in *tail, with where it
 * starts (an empty one where the files end); 0, or -1 with nothing set. */
static int read_tail(PyObject *cq, PyObject **tail, long long *start, long long *used) {
    *tail = PyObject_GetAttr(cq, names[A_TAIL]);
    if (*tail == NULL || !PyTuple_CheckExact(*tail) || PyTuple_GET_SIZE(*tail) != 3
            || !PyByteArray_CheckExact(PyTuple_GET_ITEM(*tail, 1))) {
        PyErr_Clear();
        return -1;
    }
    *start = PyLong_AsLongLong(PyTuple_GET_ITEM(*tail, 0));
    *used = PyLong_AsLongLong(PyTuple_GET_ITEM(*tail, 2));
    if (!PyErr_Occurred() && *used == 0) {  /* an empty tail starts where the files end */
        PyObject *end = PyObject_CallMethodNoArgs(cq, names[M_FILES_END]);
        *start = end == NULL ? -1 : PyLong_AsLongLong(end);
        Py_XDECREF(end);
    }
    if (PyErr_Occurred() || *used < 0 || *start < 0 || *start > INT64_MAX / 2) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* Tell `ahead` the appends reached `end` in `mf` (a written put's last step): it answers the
 * CommitLog offset past which to tell it again. Its failure is only a hint lost: it is not
 * told again, and the put stands; but a KeyboardInterrupt or SystemExit met meanwhile is
 * kept (-1), raised by the put as by Python code interrupted after its write. */
static int tell_ahead(Put *s, PyObject *mf, long long end) {
    PyObject *e = PyLong_FromLongLong(end);
    PyObject *next = e == NULL ? NULL : PyObject_CallFunctionObjArgs(s->ahead, mf, e, NULL);
    long long at = next != NULL && PyLong_CheckExact(next) ? PyLong_AsLongLong(next) : -1;
    s->ahead_at = at < 0 || PyErr_Occurred() ? LLONG_MAX : at;
    Py_XDECREF(next);
    Py_XDECREF(e);
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyErr_Clear();
    return 0;
}

/* The put with the put lock held: its PutResult, None, or NULL with an exception. */
static PyObject *put_locked(Put *s, PyObject *msg, int wait) {
    Codec *c = s->codec;
    /* the put lock is held: no Python code of the caller's may run in here (a hash or a
     * comparison of its own could put again and wait for the lock forever). A Message's
     * fields are read from its slots (or __dict__) and checked to be exact types; the born host is
     * looked up in the codec's cache by hash and comparison, so it must be (str, int). */
    PyObject *host = slotted(c, msg) ? Py_XNewRef(*(PyObject **)((char *)msg + c->slot_at[F_BORN_HOST]))
        : PyObject_GetAttr(msg, names[A_BORN_HOST]);
    int plain = host != NULL && PyTuple_CheckExact(host) && PyTuple_GET_SIZE(host) == 2
        && PyUnicode_CheckExact(PyTuple_GET_ITEM(host, 0)) && PyLong_CheckExact(PyTuple_GET_ITEM(host, 1));
    Py_XDECREF(host);
    if (!plain) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Parts p;
    int r = read_parts(c, msg, &p, NULL, 0);
    if (r <= 0)
        return r < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *out = Py_None;  /* declined unless everything below holds */
    PyObject *mf = NULL, *cq = NULL, *key = NULL, *tail = NULL, *buf = NULL, *ixf = NULL;
    PyObject *now = NULL, *end_check = NULL, *opened = NULL, *ts_o = NULL, *off_o = NULL;
    Py_buffer log_view = {0}, ix_view = {0};
    char stack[SCRATCH], *rec = stack;
    long long hashes[MAX_KEYS];
    long long size = p.total;

    /* --- the checks: reserve_hot's and _write's common case, from memory --------------- */
    if (p.sys_flag & TRANSACTION_PREPARED || size >= s->pwrite_min)
        goto done;
    if (PyUnicode_Compare(p.topic, names[S_SCHEDULE]) == 0)
        goto done;  /* its units hold delivery times */
    mf = last_of(s->log, A_FILES);
    long long file_size, wrote, from, zeroed;
    if (mf == NULL || attr_ll(mf, A_FILE_SIZE, &file_size) || attr_ll(mf, A_WROTE, &wrote)
            || attr_ll(mf, A_FROM, &from) || attr_ll(mf, A_ZEROED, &zeroed))
        goto done;
    if (size + END_FILE_MIN_BLANK > file_size - wrote || wrote + size > zeroed)
        goto done;  /* a roll (or a record too large: check_fits says so), zeros ahead */
    PyObject *wb = PyObject_GetAttr(mf, names[A_WRITE_BUFFER]);
    int transient = wb == NULL || wb != Py_None;
    Py_XDECREF(wb);
    PyErr_Clear();
    if (transient || mapping(mf, &log_view) < 0)
        goto done;
    if (log_view.len < wrote + size)
        goto done;
    end_check = PyObject_GetAttr(s->registry, names[A_END_CHECK]);
    if (end_check != Py_None)
        goto done;
    opened = PyObject_GetAttr(s->registry, names[A_OPEN]);
    key = tuple_of(Py_NewRef(p.topic), PyLong_FromLongLong(p.queue_id), NULL);
    if (opened == NULL || key == NULL || !PyDict_Check(opened))
        goto done;
    cq = Py_XNewRef(PyDict_GetItemWithError(opened, key));
    if (cq == NULL)
        goto done;  /* not open (or fresh): the registry opens it */
    long long start, used, next_offset, max_physic, added;
    if (attr_ll(s->units, A_ADDED, &added) || added + UNIT_SIZE > s->buffered_max)
        goto done;  /* (reserve would write out every queue's tail first) */
    if (read_tail(cq, &tail, &start, &used) < 0)
        goto done;
    if (used + UNIT_SIZE > s->tail_max) {
        if (!wait)
            goto done;  /* put_nowait: no I/O */
        /* a full tail: written out into the queue's files first, as reserve's ensure_room
         * does (the same call; a failure, ENOSPC, leaves it to Python's path, which meets it
         * again and refuses the put before any byte) */
        PyObject *made = PyObject_CallMethodNoArgs(cq, names[M_ENSURE_ROOM]);
        Py_XDECREF(made);
        Py_CLEAR(tail);
        if (made == NULL && !PyErr_ExceptionMatches(PyExc_Exception)) {
            out = NULL;  /* a KeyboardInterrupt, SystemExit: raised, nothing of the message written */
            goto done;
        }
        if (made == NULL || read_tail(cq, &tail, &start, &used) < 0 || used + UNIT_SIZE > s->tail_max)
            goto done;
    }
    if (attr_ll(cq, A_NEXT_OFFSET, &next_offset) || attr_ll(cq, A_MAX_PHYSIC, &max_physic)
            || next_offset < 0 || next_offset > INT64_MAX / UNIT_SIZE || next_offset * UNIT_SIZE != start + used)
        goto done;  /* a gap */
    long long commitlog_offset = from + wrote;
    if (commitlog_offset + size <= max_physic)
        goto done;
    int n_keys = key_hashes(s, p.topic, p.props, hashes);
    if (n_keys < 0)
        goto done;
    long long first = 0, slots = 0, entries = 0, end_phy = 0, begin_ts = 0;
    if (n_keys > 0) {
        ixf = last_of(s->index, A_FILES);
        PyObject **at = ixf == NULL ? NULL : ix_slot(s, ixf, A_MF);
        PyObject *ixmf = ixf == NULL ? NULL : at != NULL ? Py_XNewRef(*at) : PyObject_GetAttr(ixf, names[A_MF]);
        int ok = ixmf != NULL && mapping(ixmf, &ix_view) == 0;
        Py_XDECREF(ixmf);
        PyErr_Clear();
        if (!ok || ix_ll(s, ixf, A_INDEX_COUNT, &first) || ix_ll(s, ixf, A_END_PHY, &end_phy)
                || ix_ll(s, ixf, A_SLOTS, &slots) || ix_ll(s, ixf, A_ENTRIES, &entries)
                || ix_ll(s, ixf, A_BEGIN_TS, &begin_ts))
            goto done;
        if (entries - first < n_keys || commitlog_offset <= end_phy || first < 1 || slots <= 0
                || slots > ix_view.len / SLOT_SIZE || entries > ix_view.len / ENTRY_SIZE
                || ix_view.len < HEADER_SIZE + slots * SLOT_SIZE + entries * ENTRY_SIZE)
            goto done;
        for (int i = 0; i < n_keys; i++)  /* bucket heads lie far apart: their misses overlap the copy */
            __builtin_prefetch(slot_of(ix_view.buf, slots, hashes[i]), 1, 0);
    }
    PyObject *tags = PyDict_GetItemWithError(p.props, names[P_TAGS]);
    if ((tags == NULL && PyErr_Occurred()) || (tags != NULL && !PyUnicode_CheckExact(tags)))
        goto done;  /* (changed since measured, as the keys above) */
    long long tags_value = tags_code(c, tags);
    /* the tail's buffer: the unit goes past its used bytes, in a grown copy when it has no
     * room (consume_queue._grown: four times the room, up to TAIL_MAX; an empty tail's
     * first buffer has room for TAIL_FIRST bytes) */
    buf = Py_NewRef(PyTuple_GET_ITEM(tail, 1));
    Py_ssize_t room = PyByteArray_GET_SIZE(buf);
    if (used > room)
        goto done;  /* not a tail any put left */
    if (used + UNIT_SIZE > room) {
        Py_ssize_t grown = room == 0 ? (Py_ssize_t)s->tail_first
            : 4 * room < s->tail_max ? 4 * room : (Py_ssize_t)s->tail_max;
        if (grown < used + UNIT_SIZE)
            grown = used + UNIT_SIZE;
        PyObject *bigger = PyByteArray_FromStringAndSize(NULL, grown);
        if (bigger == NULL) {
            out = NULL;
            goto done;
        }
        memcpy(PyByteArray_AS_STRING(bigger), PyByteArray_AS_STRING(buf), used);
        memset(PyByteArray_AS_STRING(bigger) + used, 0, grown - used);
        Py_SETREF(buf, bigger);
    }
    if (size > SCRATCH && (rec = PyMem_Malloc(size)) == NULL) {
        rec = stack;
        out = PyErr_NoMemory();
        goto done;
    }
    if (write_record(c, &p, NULL, rec, NULL) < 0)
        goto done;  /* the properties changed since they were measured */

    /* --- the store time (_store_timestamp), then the writes, nothing refused past here --- */
    PyObject *clock = PyObject_GetAttr(s->writes, names[A_CLOCK]);
    if (clock != NULL && clock == s->wall_clock) {  /* the store's own: time.time_ns() // 10**6 here */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        now = PyLong_FromLongLong(((long long)ts.tv_sec * 1000000000LL + ts.tv_nsec) / 1000000);
    } else {
        now = clock == NULL ? NULL : PyObject_CallNoArgs(clock);  /* a clock a test pinned */
    }
    Py_XDECREF(clock);
    long long last_ts;
    if (now == NULL || attr_ll(s->writes, A_LAST_TS, &last_ts) < 0) {
        out = now == NULL ? NULL : Py_None;  /* the clock's error, as _store_timestamp raises it */
        goto done;
    }
    int overflow = 0;
    long long now_ms = PyLong_CheckExact(now) ? PyLong_AsLongLongAndOverflow(now, &overflow) : 0;
    if (!PyLong_CheckExact(now) || overflow || PyErr_Occurred()) {
        PyErr_Clear();
        goto done;  /* a clock of another kind: Python's path takes what it gives */
    }
    long long store_ts = last_ts;
    if (now_ms > last_ts) {
        store_ts = now_ms;
        if (PyObject_SetAttr(s->writes, names[A_LAST_TS], now) < 0) {
            out = NULL;
            goto done;
        }
    }
    out = NULL;  /* from here a failure is the process's (MemoryError): raised */
    /* the store time and the record's offset, one int each wherever they are kept */
    ts_o = store_ts == now_ms ? Py_NewRef(now) : PyLong_FromLongLong(store_ts);
    off_o = PyLong_FromLongLong(commitlog_offset);
    if (ts_o == NULL || off_o == NULL)
        goto done;
    place_record(c, rec, size, ts_pos_of(&p), next_offset, commitlog_offset, store_ts);
    memcpy((char *)log_view.buf + wrote, rec, size);
    if (set_ll(mf, A_WROTE, wrote + size) < 0 || PyObject_SetAttr(mf, names[A_STORE_TIMESTAMP], ts_o) < 0)
        goto done;
    /* the unit (ConsumeQueue.put_buffered), then the tail published whole */
    unsigned char *u = (unsigned char *)PyByteArray_AS_STRING(buf) + used;
    put_be64(u, (uint64_t)commitlog_offset);
    put_be32(u + 8, (uint32_t)size);
    put_be64(u + 12, (uint64_t)tags_value);
    PyObject *new_tail = tuple_of(PyLong_FromLongLong(start), Py_NewRef(buf), PyLong_FromLongLong(used + UNIT_SIZE));
    if (new_tail == NULL || PyObject_SetAttr(cq, names[A_TAIL], new_tail) < 0) {
        Py_XDECREF(new_tail);
        goto done;
    }
    Py_DECREF(new_tail);
    if (set_ll(cq, A_MAX_PHYSIC, commitlog_offset + size) < 0 || set_ll(cq, A_NEXT_OFFSET, next_offset + 1) < 0)
        goto done;
    /* UnitFlush.add and the registry's note of a queue found open (if_open) */
    PyObject *touched = PyObject_GetAttr(s->units, names[A_TOUCHED]);
    int bad = touched == NULL || PyDict_SetItem(touched, cq, Py_None) < 0 || set_ll(s->units, A_ADDED, added + UNIT_SIZE) < 0;
    Py_XDECREF(touched);
    PyObject *used_map = bad ? NULL : PyObject_GetAttr(s->registry, names[A_USED]);
    bad = used_map == NULL || (PyDict_DelItem(used_map, key) < 0 && (PyErr_ExceptionMatches(PyExc_KeyError) ? (PyErr_Clear(), 0) : 1))
        || PyDict_SetItem(used_map, key, Py_None) < 0;
    Py_XDECREF(used_map);
    if (bad)
        goto done;
    /* the IndexFile entries and the header as IndexFile.add_keys keeps it */
    if (n_keys > 0) {
        long long count = first, begin = begin_ts, fresh = 0, ordered, newest_ts, slot_count;
        for (int i = 0; i < n_keys; i++) {
            fresh += put_entry(ix_view.buf, slots, count, begin, hashes[i], commitlog_offset, store_ts);
            if (count <= 1)
                begin = store_ts;
            count++;
        }
        if (ix_ll(s, ixf, A_ORDERED, &ordered) || ix_ll(s, ixf, A_NEWEST, &newest_ts)
                || ix_ll(s, ixf, A_SLOT_COUNT, &slot_count)) {
            PyErr_SetString(PyExc_SystemError, "IndexFile lost its header fields");
            goto done;
        }
        PyObject *count_o = PyLong_FromLongLong(count);
        int bad = count_o == NULL
            || (first <= 1 && (ix_put(s, ixf, A_BEGIN_PHY, off_o) < 0 || ix_put(s, ixf, A_BEGIN_TS, ts_o) < 0))
            || ix_set(s, ixf, A_SLOT_COUNT, slot_count + fresh) < 0 || ix_put(s, ixf, A_INDEX_COUNT, count_o) < 0
            || ix_put(s, ixf, A_WRITTEN, count_o) < 0 || ix_put(s, ixf, A_END_PHY, off_o) < 0
            || ix_put(s, ixf, A_END_TS, ts_o) < 0
            || (ordered == first && store_ts >= newest_ts
                && (ix_put(s, ixf, A_ORDERED, count_o) < 0 || ix_put(s, ixf, A_NEWEST, ts_o) < 0));
        Py_XDECREF(count_o);
        if (bad)
            goto done;
    }
    if (PyObject_SetAttr(s->writes, names[A_DISPATCHED_TS], ts_o) < 0)
        goto done;
    PyTypeObject *cls = (PyTypeObject *)s->result;
    PyObject *t = cls->tp_alloc(cls, 5);
    PyObject *f0 = Py_NewRef(off_o), *f1 = PyLong_FromLongLong(next_offset);
    PyObject *f2 = Py_NewRef(ts_o), *f3 = PyLong_FromLongLong(size);
    if (t == NULL || f0 == NULL || f1 == NULL || f2 == NULL || f3 == NULL) {
        Py_XDECREF(t); Py_XDECREF(f0); Py_XDECREF(f1); Py_XDECREF(f2); Py_XDECREF(f3);
        goto done;
    }
    PyTuple_SET_ITEM(t, 0, f0);
    PyTuple_SET_ITEM(t, 1, f1);
    PyTuple_SET_ITEM(t, 2, f2);
    PyTuple_SET_ITEM(t, 3, f3);
    PyTuple_SET_ITEM(t, 4, Py_NewRef(c->store_host));
    out = t;
    s->taken++;
    if (s->ahead != Py_None && commitlog_offset + size >= s->ahead_at && tell_ahead(s, mf, wrote + size) < 0)
        Py_CLEAR(out);
done:
    if (out == Py_None) {
        PyErr_Clear();
        Py_INCREF(out);
    }
    if (rec != stack)
        PyMem_Free(rec);
    if (log_view.obj != NULL)
        PyBuffer_Release(&log_view);
    if (ix_view.obj != NULL)
        PyBuffer_Release(&ix_view);
    Py_XDECREF(mf); Py_XDECREF(cq); Py_XDECREF(key); Py_XDECREF(tail); Py_XDECREF(buf);
    Py_XDECREF(ixf); Py_XDECREF(now); Py_XDECREF(end_check); Py_XDECREF(opened);
    Py_XDECREF(ts_o); Py_XDECREF(off_o);
    parts_clear(&p);
    return out;
}

/* A true attribute (is_open, Users._open), or 0. */
static int attr_true(PyObject *obj, int name) {
    PyObject *v = PyObject_GetAttr(obj, names[name]);
    int r = v == Py_True;
    Py_XDECREF(v);
    PyErr_Clear();
    return r;
}

/* Put(msg) -> PutResult | None: StoreWrites.put's common case whole. The call counts itself
 * in and out of the store's users as @in_use does (a close waits for it) and takes the put
 * lock; it declines, before anything, a store that is closing or stopped, a message of
 * another class and a compaction topic's message: `put` then refuses or takes it in Python. */
static PyObject *put_entered(Put *s, PyObject *msg, int wait) {
    if ((PyObject *)Py_TYPE(msg) != s->message)
        Py_RETURN_NONE;
    PyObject *calls = PyObject_GetAttr(s->users, names[A_CALLS]);
    PyObject *me = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    PyObject *out = NULL;
    if (calls == NULL || me == NULL || !PyList_CheckExact(calls) || PyList_Append(calls, me) < 0) {
        Py_XDECREF(calls);
        Py_XDECREF(me);
        return NULL;
    }
    /* in: Users.enter's door, then `put`'s own checks */
    PyObject *stopped = PyObject_GetAttr(s->writes, names[A_STOPPED]);
    PyObject *topic = stopped == NULL ? NULL : slotted(s->codec, msg)
        ? Py_XNewRef(*(PyObject **)((char *)msg + s->codec->slot_at[F_TOPIC])) : PyObject_GetAttr(msg, field_names[F_TOPIC]);
    int go = stopped == Py_None && topic != NULL && attr_true(s->users, A_USERS_OPEN)
        && attr_true(s->writes, A_IS_OPEN) && PyUnicode_CheckExact(topic);
    if (go && PySet_GET_SIZE(s->compacted) > 0) {
        int found = PySet_Contains(s->compacted, topic);
        go = found == 0;
    }
    Py_XDECREF(stopped);
    Py_XDECREF(topic);
    PyErr_Clear();
    if (go) {
        /* waits (the GIL released) unless `wait` is 0: then None when another holds it */
        PyObject *got = PyObject_CallOneArg(s->acquire, wait ? Py_True : Py_False);
        if (got == Py_False)
            out = Py_NewRef(Py_None);
        else if (got != NULL) {
            out = put_locked(s, msg, wait);
            PyObject *exc_type, *exc, *tb;
            PyErr_Fetch(&exc_type, &exc, &tb);  /* put_locked's error, kept across the release */
            PyObject *done = PyObject_CallNoArgs(s->release);
            if (done == NULL) {
                Py_XDECREF(exc_type); Py_XDECREF(exc); Py_XDECREF(tb);
                Py_CLEAR(out);
            } else {
                Py_DECREF(done);
                PyErr_Restore(exc_type, exc, tb);
            }
        }
        Py_XDECREF(got);
    } else {
        out = Py_NewRef(Py_None);
    }
    /* out: Users.leave (which also wakes a close waiting for the calls inside) */
    PyObject *exc_type, *exc, *tb;
    PyErr_Fetch(&exc_type, &exc, &tb);
    PyObject *left = attr_true(s->users, A_USERS_OPEN)
        ? PyObject_CallMethodOneArg(calls, names[M_REMOVE], me)
        : PyObject_CallMethodOneArg(s->users, names[M_LEAVE], me);
    if (left == NULL) {
        Py_XDECREF(exc_type); Py_XDECREF(exc); Py_XDECREF(tb);
        Py_CLEAR(out);
    } else {
        Py_DECREF(left);
        PyErr_Restore(exc_type, exc, tb);
    }
    Py_DECREF(calls);
    Py_DECREF(me);
    return out;
}

static PyObject *Put_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "Put takes one message");
        return NULL;
    }
    return put_entered((Put *)self, args[0], 1);
}

/* Put.nowait(msg): the same, but None at once when the put lock is taken (put_nowait). */
static PyObject *Put_nowait(Put *s, PyObject *msg) {
    return put_entered(s, msg, 0);
}

static PyMethodDef Put_methods[] = {
    {"nowait", (PyCFunction)Put_nowait, METH_O,
     "nowait(msg) -> PutResult | None: never waits for the put lock (None when it is taken)"},
    {NULL, NULL, 0, NULL},
};

/* Where `cls` keeps each of the n attributes `attrs`: 1 with out[] set, when each is a slot
 * holding any object (__slots__), which C may read and write in place of the attribute;
 * else 0 (they are read and written as attributes then). */
static int slot_offsets(PyTypeObject *cls, PyObject *const *attrs, int n, Py_ssize_t *out) {
    if (cls->tp_getattro != PyObject_GenericGetAttr)
        return 0;  /* (a __getattr__ or __getattribute__ of its own: attributes are its answer) */
    for (int i = 0; i < n; i++) {
        PyObject *d = _PyType_Lookup(cls, attrs[i]);  /* borrowed */
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type))
            return 0;
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY) || !PyType_IsSubtype(cls, ((PyDescrObject *)d)->d_type)
                || m->offset < (Py_ssize_t)sizeof(PyObject)
                || m->offset + (Py_ssize_t)sizeof(PyObject *) > cls->tp_basicsize)
            return 0;
        out[i] = m->offset;
    }
    return 1;
}

/* IndexFile's slots for the fields the put reads and writes (ix_off, by name). */
static void index_slots(Put *s, PyTypeObject *cls) {
    static const int fields[] = {A_MF, A_INDEX_COUNT, A_END_PHY, A_SLOTS, A_ENTRIES, A_BEGIN_TS,
                                 A_BEGIN_PHY, A_SLOT_COUNT, A_WRITTEN, A_END_TS, A_ORDERED, A_NEWEST};
    enum { N = sizeof(fields) / sizeof(fields[0]) };
    PyObject *attrs[N];
    Py_ssize_t off[N];
    for (int i = 0; i < N; i++)
        attrs[i] = names[fields[i]];
    if (!slot_offsets(cls, attrs, N, off) || !(cls->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
        return;  /* (the lookups give it a version tag; without, nothing would say it changed) */
    for (int i = 0; i < N; i++)
        s->ix_off[fields[i]] = off[i];
    s->ix_type = (PyTypeObject *)Py_NewRef(cls);
    s->ix_tag = cls->tp_version_tag;
}

static PyObject *Put_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"codec", "message", "users", "lock", "compacted", "wall_clock", "writes",
                         "log", "registry", "units", "index", "result", "hash_kind", "tail_max",
                         "tail_first", "buffered_max", "pwrite_min", "ahead", "index_file", NULL};
    PyObject *codec, *message, *users, *lock, *compacted, *wall_clock, *writes, *log, *registry, *units;
    PyObject *index, *result, *ahead = Py_None, *index_file = Py_None;
    int hash_kind;
    long long tail_max, tail_first, buffered_max, pwrite_min;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!OOO!OOOOOOO!iLLLL|OO", kw, &CodecType, &codec,
                                     &PyType_Type, &message, &users, &lock, &PyFrozenSet_Type,
                                     &compacted, &wall_clock, &writes, &log, &registry, &units, &index,
                                     &PyType_Type, &result, &hash_kind, &tail_max, &tail_first, &buffered_max,
                                     &pwrite_min, &ahead, &index_file))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)result, &PyTuple_Type)
            || (hash_kind != HASH_JAVA && hash_kind != HASH_XXH32)) {
        PyErr_SetString(PyExc_ValueError, "Put: result must be a tuple subclass, hash_kind known");
        return NULL;
    }
    Put *s = (Put *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    s->vectorcall = Put_vectorcall;
    s->codec = (Codec *)Py_NewRef(codec);
    s->message = Py_NewRef(message);
    s->users = Py_NewRef(users);
    s->lock = Py_NewRef(lock);
    s->acquire = PyObject_GetAttr(lock, names[M_ACQUIRE]);
    s->release = PyObject_GetAttr(lock, names[M_RELEASE]);
    if (s->acquire == NULL || s->release == NULL) {
        Py_DECREF(s);
        return NULL;
    }
    s->compacted = Py_NewRef(compacted);
    s->wall_clock = Py_NewRef(wall_clock);
    s->writes = Py_NewRef(writes);
    s->log = Py_NewRef(log);
    s->registry = Py_NewRef(registry);
    s->units = Py_NewRef(units);
    s->index = Py_NewRef(index);
    s->result = Py_NewRef(result);
    s->ahead = Py_NewRef(ahead);
    if (PyType_Check(index_file))
        index_slots(s, (PyTypeObject *)index_file);
    s->hash_kind = hash_kind;
    s->tail_max = tail_max;
    s->tail_first = tail_first;
    s->buffered_max = buffered_max;
    s->pwrite_min = pwrite_min;
    return (PyObject *)s;
}

static int Put_traverse(Put *s, visitproc visit, void *arg) {
    Py_VISIT(s->codec);
    Py_VISIT(s->message);
    Py_VISIT(s->users);
    Py_VISIT(s->lock);
    Py_VISIT(s->acquire);
    Py_VISIT(s->release);
    Py_VISIT(s->compacted);
    Py_VISIT(s->wall_clock);
    Py_VISIT(s->writes);
    Py_VISIT(s->log);
    Py_VISIT(s->registry);
    Py_VISIT(s->units);
    Py_VISIT(s->index);
    Py_VISIT(s->result);
    Py_VISIT(s->ahead);
    Py_VISIT(s->ix_type);
    return 0;
}

static int Put_clear(Put *s) {
    Py_CLEAR(s->codec);
    Py_CLEAR(s->message);
    Py_CLEAR(s->users);
    Py_CLEAR(s->lock);
    Py_CLEAR(s->acquire);
    Py_CLEAR(s->release);
    Py_CLEAR(s->compacted);
    Py_CLEAR(s->wall_clock);
    Py_CLEAR(s->writes);
    Py_CLEAR(s->log);
    Py_CLEAR(s->registry);
    Py_CLEAR(s->units);
    Py_CLEAR(s->index);
    Py_CLEAR(s->result);
    Py_CLEAR(s->ahead);
    Py_CLEAR(s->ix_type);
    return 0;
}

static void Put_dealloc(Put *s) {
    PyObject_GC_UnTrack(s);
    Put_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *Put_taken(Put *s, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(s->taken);
}

static PyGetSetDef Put_getset[] = {
    {"taken", (getter)Put_taken, NULL, "puts this object wrote (the others it declined)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PutType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mqfs.store.format._records.Put",
    .tp_doc = "A store's single put in one call: StoreWrites.put's common case, or None",
    .tp_basicsize = sizeof(Put),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = Put_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Put, vectorcall),
    .tp_dealloc = (destructor)Put_dealloc,
    .tp_traverse = (traverseproc)Put_traverse,
    .tp_clear = (inquiry)Put_clear,
    .tp_getset = Put_getset,
    .tp_methods = Put_methods,
};

/* populate(mm, start, end) -> bool: the pages holding mm's bytes [start, end) read into the
 * page cache and mapped (MADV_POPULATE_READ), so writes there later find them in place rather
 * than each faulting a page in (allocated and zeroed: most of a put's kernel time). Nothing
 * is written or dirtied. The GIL is released around the call alone, on the mapping this
 * call holds exported (a close meanwhile leaves it mapped until the export is given back).
 * False when the kernel does not do it (before 5.14) or the range is not mapped: only speed
 * is lost. */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
static PyObject *populate(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "populate(mm, start, end)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), end = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();  /* closed meanwhile */
        Py_RETURN_FALSE;
    }
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), base = (uintptr_t)view.buf;
    if (start < 0)
        start = 0;
    if (end > view.len)
        end = view.len;
    int r = -1;
    if (start < end && page > 0 && base % page == 0) {
        uintptr_t lo = (base + (uintptr_t)start) & ~(page - 1);
        size_t len = base + (uintptr_t)end - lo;
        Py_BEGIN_ALLOW_THREADS
        r = madvise((void *)lo, len, MADV_POPULATE_READ);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(r == 0);
}

static PyMethodDef module_methods[] = {
    {"populate", (PyCFunction)(void (*)(void))populate, METH_FASTCALL,
     "populate(mm, start, end) -> bool: mm's pages there read in and mapped ahead of writes"},
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
    for (int i = 0; i < N_NAMES; i++) {
        names[i] = PyUnicode_InternFromString(NAMES[i]);
        if (names[i] == NULL)
            return NULL;
    }
    if (PyType_Ready(&CodecType) < 0 || PyType_Ready(&PutType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Codec", (PyObject *)&CodecType) < 0
            || PyModule_AddObjectRef(m, "Put", (PyObject *)&PutType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
