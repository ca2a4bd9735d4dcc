/* `mqfs dump`'s common record in C: decode, check and print one CommitLog record read through
 * a queue's unit, as a JSON line of the envelope (store/format/jsonl.py, EnvelopeLines.line).
 * What a tag or an hour selection spends per record was three Python steps (decode, verify,
 * the line) of about the same cost each.
 *
 * Python is the reference (fusefs/dump/records.py: `messages`, with codec.decode and verify,
 * Selection.holds and EnvelopeLines): `Lines.line` returns exactly the line Python writes,
 * False for a record Python rules out without a word (not in a queue, out of the time
 * range, without a wanted property's bytes, another tag), or None, declining, for anything
 * else: a record that does not decode or check out (Python names the damage), an inner
 * batch, a compressed body, a unit that is not the record's own, properties that are not
 * UTF-8 or name one property twice. Python then reads that record as it always did.
 * `Lines.lines` does a run of units of one file in one call, declining the whole run when
 * it would decline one of them. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>
#include <zlib.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define HEADER_V4 88          /* TOTALSIZE .. BODYLEN with both hosts IPv4 */
#define BORN_HOST_POS 48
#define MIN_RECORD 91         /* the header, TOPICLEN (v1) and PROPERTIESLEN, a 1-byte topic */
#define CRC_LEN 20            /* "__CRC32#" 0x01, ten digits, 0x02 */
#define CRC_MASK 0x7FFFFFFFu
#define COMPRESSED 0x1
#define PREPARED 0x4          /* a prepared or rolled-back transaction: no unit */
#define BORN_V6 0x10
#define STORE_V6 0x20
#define OWN_HANDLING 0xC1     /* compressed, or either inner-batch bit: Python's `served` */
#define INNER_BATCHES 0xC0
#define MAX_PROPS 64          /* properties of one record C reads; more: declined */

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static const char CRC_NAME[] = "__CRC32#";

typedef struct {
    PyObject_HEAD
    int xx;                    /* xxh32 (the xxhash flavor) or CRC-32 (rocketmq) */
    int record_crc;            /* every record must carry the whole-record checksum */
    int has_since, has_until;
    int64_t since, until;
    PyObject *tags;            /* tuple of bytes, or NULL: no tag wanted */
    PyObject *literals;        /* tuple of tuples of bytes: one of each must be in PROPERTIES */
    PyObject *hosts_of;        /* (born raw, store raw) -> (msgid head, hosts' fields) */
    unsigned char born[20], store[20];
    Py_ssize_t born_len, store_len; /* the hosts of `head`/`fields`; 0: none yet */
    PyObject *head, *fields;   /* bytes, for the hosts above */
    char *out;                 /* the lines being written */
    Py_ssize_t cap;
    int busy;                  /* in a call: hosts_of calling back in would move `out` */
} Lines;

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline int64_t be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)be32(p) << 32) | be32(p + 4));
}

/* Python's strict UTF-8 (no surrogates, no overlong forms, nothing past U+10FFFF) */
static int valid_utf8(const unsigned char *p, Py_ssize_t n) {
    const unsigned char *end = p + n;
    while (p < end) {
#ifdef __SSE2__
        if (end - p >= 16 && !_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)p))) {
            p += 16;
            continue;
        }
#endif
        if (end - p >= 8) {
            uint64_t x;
            memcpy(&x, p, 8);
            if (!(x & HIGHS)) {
                p += 8;
                continue;
            }
        }
        unsigned char c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        Py_ssize_t k, room = end - p;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) k = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            k = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else return 0;
        if (room < k || p[1] < lo || p[1] > hi)
            return 0;
        for (Py_ssize_t i = 2; i < k; i++)
            if ((p[i] & 0xC0) != 0x80)
                return 0;
        p += k;
    }
    return 1;
}

/* bytes orjson writes for each byte of a string: 0 as it is, else an escape follows */
static const char SHORT_ESCAPE[32] = {
    0, 0, 0, 0, 0, 0, 0, 0, 'b', 't', 'n', 0, 'f', 'r', 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

/* the JSON string of valid UTF-8 text, as orjson.dumps writes it; o has 6n + 2 bytes */
static char *put_string(char *o, const unsigned char *s, Py_ssize_t n) {
    static const char HEX[] = "0123456789abcdef";
    const unsigned char *end = s + n, *run = s;
    *o++ = '"';
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), control = _mm_set1_epi8(0x1F);
#endif
    while (s < end) {
#ifdef __SSE2__
        if (end - s >= 16) { /* sixteen bytes at once: to the first that needs an escape */
            __m128i v = _mm_loadu_si128((const __m128i *)s);
            __m128i special = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                _mm_cmpeq_epi8(_mm_max_epu8(v, control), control));
            int mask = _mm_movemask_epi8(special);
            if (!mask) {
                s += 16;
                continue;
            }
            s += __builtin_ctz((unsigned)mask);
        }
#endif
        if (end - s >= 8) { /* eight bytes at once while none needs an escape */
            uint64_t x;
            memcpy(&x, s, 8);
            uint64_t q = x ^ (ONES * '"'), b = x ^ (ONES * '\\');
            if (!((((x - ONES * 0x20) & ~x) | ((q - ONES) & ~q) | ((b - ONES) & ~b)) & HIGHS)) {
                s += 8;
                continue;
            }
        }
        unsigned char c = *s;
        if (c >= 0x20 && c != '"' && c != '\\') {
            s++;
            continue;
        }
        memcpy(o, run, (size_t)(s - run));
        o += s - run;
        *o++ = '\\';
        if (c == '"' || c == '\\') *o++ = (char)c;
        else if (SHORT_ESCAPE[c]) *o++ = SHORT_ESCAPE[c];
        else {
            memcpy(o, "u00", 3);
            o[3] = HEX[c >> 4];
            o[4] = HEX[c & 15];
            o += 5;
        }
        run = ++s;
    }
    memcpy(o, run, (size_t)(s - run));
    o += s - run;
    *o++ = '"';
    return o;
}

static char *put_lit(char *o, const char *lit) {
    size_t n = strlen(lit);
    memcpy(o, lit, n);
    return o + n;
}

static char *put_int(char *o, int64_t v) {
    char tmp[24];
    int i = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[i++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *o++ = '-';
    while (i) *o++ = tmp[--i];
    return o;
}

static char *put_base64(char *o, const unsigned char *s, Py_ssize_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8) | s[i + 2];
        *o++ = A[v >> 18]; *o++ = A[(v >> 12) & 63]; *o++ = A[(v >> 6) & 63]; *o++ = A[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        *o++ = A[v >> 18]; *o++ = A[(v >> 12) & 63]; *o++ = '='; *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8);
        *o++ = A[v >> 18]; *o++ = A[(v >> 12) & 63]; *o++ = A[(v >> 6) & 63]; *o++ = '=';
    }
    return o;
}

static uint32_t checksum(const Lines *self, const unsigned char *p, Py_ssize_t n) {
    if (self->xx)
        return XXH32(p, (size_t)n, 0) & CRC_MASK;
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) { /* zlib takes a uInt length */
        uInt step = n > (Py_ssize_t)0x40000000 ? 0x40000000u : (uInt)n;
        crc = crc32(crc, p, step);
        p += step;
        n -= step;
    }
    return (uint32_t)crc & CRC_MASK;
}

/* codec.check_record: the trailer's checksum when the record ends in one, else (unless the
 * flavor wants a trailer) the body's */
static int checks_out(const Lines *self, const unsigned char *rec, Py_ssize_t total,
                      const unsigned char *body, Py_ssize_t body_len, int32_t body_crc) {
    const unsigned char *t = rec + total - CRC_LEN;
    if (total >= MIN_RECORD + CRC_LEN && memcmp(t, "__CRC32#\x01", 9) == 0 && t[19] == 2) {
        uint64_t stored = 0, scale = 1;
        int digits = 1;
        for (int i = 0; i < 10; i++) {
            unsigned char d = t[9 + i];
            if (d < '0' || d > '9') {
                digits = 0;
                break;
            }
            stored += (uint64_t)(d - '0') * scale;
            scale *= 10;
        }
        if (digits)
            return checksum(self, rec, total - CRC_LEN) == stored;
    }
    if (self->record_crc)
        return 0;
    return body_crc >= 0 && checksum(self, body, body_len) == (uint32_t)body_crc;
}

typedef struct {
    const unsigned char *name, *value;
    Py_ssize_t name_len, value_len;
} Prop;

/* message.decode_properties over UTF-8 text: items split at 0x02, each name 0x01 value (at
 * the first 0x01), those with an empty name or value dropped, `__CRC32#` left out (however
 * often it comes). -1 when another name comes twice (a dict keeps the first place and the
 * last value: Python decides) or there are more than MAX_PROPS. */
static int properties(const unsigned char *p, Py_ssize_t n, Prop *props) {
    const unsigned char *end = p + n;
    int count = 0, last = 0;
    while (!last) { /* (split: an item after every 0x02, the last up to the end) */
        const unsigned char *stop = memchr(p, 2, (size_t)(end - p));
        if (!stop) {
            stop = end;
            last = 1;
        }
        const unsigned char *sep = memchr(p, 1, (size_t)(stop - p));
        Py_ssize_t name_len = sep ? sep - p : 0;
        if (sep && sep > p && sep + 1 < stop && !(name_len == 8 && memcmp(p, CRC_NAME, 8) == 0)) {
            for (int i = 0; i < count; i++)
                if (props[i].name_len == name_len && memcmp(props[i].name, p, (size_t)name_len) == 0)
                    return -1;
            if (count == MAX_PROPS)
                return -1;
            props[count].name = p;
            props[count].name_len = name_len;
            props[count].value = sep + 1;
            props[count].value_len = stop - sep - 1;
            count++;
        }
        if (!last)
            p = stop + 1;
    }
    return count;
}

static const Prop *prop_named(const Prop *props, int n, const char *name, Py_ssize_t len) {
    for (int i = 0; i < n; i++)
        if (props[i].name_len == len && memcmp(props[i].name, name, (size_t)len) == 0)
            return &props[i];
    return NULL;
}

/* whether `hay` holds one of the bytes objects of `wanted` (a tuple) */
static int holds_one(const unsigned char *hay, Py_ssize_t n, PyObject *wanted) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(wanted); i++) {
        PyObject *w = PyTuple_GET_ITEM(wanted, i);
        Py_ssize_t k = PyBytes_GET_SIZE(w);
        if (k == 0 || (k <= n && memmem(hay, (size_t)n, PyBytes_AS_STRING(w), (size_t)k)))
            return 1;
    }
    return 0;
}

static int reserve(Lines *self, Py_ssize_t need) {
    if (need <= self->cap)
        return 0;
    Py_ssize_t cap = need + need / 4 + 4096;
    char *grown = PyMem_Realloc(self->out, (size_t)cap);
    if (!grown) {
        PyErr_NoMemory();
        return -1;
    }
    self->out = grown;
    self->cap = cap;
    return 0;
}

/* the hosts' parts of the line, from the cache or from Python (IPv6 text is ipaddress's) */
static int hosts(Lines *self, const unsigned char *born, Py_ssize_t bl, const unsigned char *store,
                 Py_ssize_t sl) {
    if (self->head && self->born_len == bl && self->store_len == sl
            && memcmp(self->born, born, (size_t)bl) == 0 && memcmp(self->store, store, (size_t)sl) == 0)
        return 0;
    PyObject *got = PyObject_CallFunction(self->hosts_of, "y#y#", born, bl, store, sl);
    if (!got)
        return -1;
    if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(got, 0))
            || !PyBytes_Check(PyTuple_GET_ITEM(got, 1))) {
        Py_DECREF(got);
        PyErr_SetString(PyExc_TypeError, "hosts_of must return two bytes");
        return -1;
    }
    Py_XSETREF(self->head, Py_NewRef(PyTuple_GET_ITEM(got, 0)));
    Py_XSETREF(self->fields, Py_NewRef(PyTuple_GET_ITEM(got, 1)));
    Py_DECREF(got);
    memcpy(self->born, born, (size_t)bl);
    memcpy(self->store, store, (size_t)sl);
    self->born_len = bl;
    self->store_len = sl;
    return 0;
}

enum { FAILED = -2, DECLINED = -1, RULED_OUT = 0, WRITTEN = 1 };

/* The record at `pos` of buf[0:len] (at CommitLog offset `at`), read through unit `qo` of
 * queue (want_topic, qid): WRITTEN (its line appended at self->out + *used, *used moved on),
 * RULED_OUT, DECLINED, or FAILED (an exception is set). */
static int one(Lines *self, const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos, int64_t at,
               const char *want_topic, Py_ssize_t want_topic_len, long qid, int64_t qo,
               Py_ssize_t *used) {
    /* codec.decode's checks: a whole, well-formed v1/v2 record */
    if (pos < 0 || pos > len || len - pos < BORN_HOST_POS)
        return DECLINED;
    const unsigned char *rec = buf + pos;
    int32_t total = (int32_t)be32(rec), magic = (int32_t)be32(rec + 4);
    if ((magic != MAGIC_V1 && magic != MAGIC_V2) || total < MIN_RECORD || total > len - pos)
        return DECLINED;
    int32_t body_crc = (int32_t)be32(rec + 8), queue_id = (int32_t)be32(rec + 12);
    int32_t flag = (int32_t)be32(rec + 16);
    int64_t queue_offset = be64(rec + 20), commitlog_offset = be64(rec + 28);
    int32_t sys_flag = (int32_t)be32(rec + 36);
    int64_t born_ts = be64(rec + 40);
    Py_ssize_t bl = sys_flag & BORN_V6 ? 20 : 8, sl = sys_flag & STORE_V6 ? 20 : 8;
    Py_ssize_t p = BORN_HOST_POS;
    const unsigned char *born = rec + p;
    p += bl;
    Py_ssize_t fixed_end = p + 8 + sl + 16;
    if (fixed_end > total)
        return DECLINED;
    int64_t store_ts = be64(rec + p);
    p += 8;
    const unsigned char *store = rec + p;
    p += sl;
    int32_t reconsume = (int32_t)be32(rec + p);
    int32_t body_len = (int32_t)be32(rec + p + 12);
    p += 16;
    if (body_len < 0 || p + body_len > total)
        return DECLINED;
    const unsigned char *body = rec + p;
    p += body_len;
    Py_ssize_t topic_len;
    if (magic == MAGIC_V2) {
        if (p + 2 > total) return DECLINED;
        topic_len = (int16_t)((rec[p] << 8) | rec[p + 1]);
        p += 2;
    } else {
        if (p + 1 > total) return DECLINED;
        topic_len = rec[p];
        p += 1;
    }
    if (topic_len <= 0 || p + topic_len > total)
        return DECLINED;
    const unsigned char *topic = rec + p;
    for (Py_ssize_t i = 0; i < topic_len; i++)
        if (topic[i] >= 0x80)
            return DECLINED;
    p += topic_len;
    if (p + 2 > total)
        return DECLINED;
    Py_ssize_t props_len = (int16_t)((rec[p] << 8) | rec[p + 1]);
    p += 2;
    if (props_len < 0 || p + props_len != total)
        return DECLINED;
    const unsigned char *raw_props = rec + p;
    if (commitlog_offset != at)
        return DECLINED;
    /* records._kept: what rules a record out before it is checked */
    if (sys_flag & PREPARED)
        return RULED_OUT;
    if ((self->has_since && store_ts < self->since) || (self->has_until && store_ts > self->until))
        return RULED_OUT;
    if ((sys_flag & INNER_BATCHES) == INNER_BATCHES)
        return DECLINED;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->literals); i++)
        if (!holds_one(raw_props, props_len, PyTuple_GET_ITEM(self->literals, i)))
            return RULED_OUT;
    /* codec.verify, then the record as its unit's own queue's message */
    if (!checks_out(self, rec, total, body, body_len, body_crc) || !valid_utf8(raw_props, props_len))
        return DECLINED;
    if (sys_flag & OWN_HANDLING || queue_offset != qo || queue_id != qid
            || topic_len != want_topic_len || memcmp(topic, want_topic, (size_t)topic_len) != 0)
        return DECLINED;
    Prop props[MAX_PROPS];
    int n_props = properties(raw_props, props_len, props);
    if (n_props < 0)
        return DECLINED;
    const Prop *tags = prop_named(props, n_props, "TAGS", 4);
    if (self->tags) { /* Selection.holds: the record's TAGS (or "") is one of them */
        const unsigned char *t = tags ? tags->value : (const unsigned char *)"";
        Py_ssize_t tl = tags ? tags->value_len : 0;
        int found = 0;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->tags) && !found; i++) {
            PyObject *w = PyTuple_GET_ITEM(self->tags, i);
            found = PyBytes_GET_SIZE(w) == tl && memcmp(PyBytes_AS_STRING(w), t, (size_t)tl) == 0;
        }
        if (!found)
            return RULED_OUT;
    }
    const Prop *keys = prop_named(props, n_props, "KEYS", 4);
    int text = valid_utf8(body, body_len);
    if (hosts(self, born, bl, store, sl) < 0)
        return FAILED;
    /* EnvelopeLines.line */
    Py_ssize_t need = 1024 + PyBytes_GET_SIZE(self->head) + PyBytes_GET_SIZE(self->fields)
                      + 6 * (topic_len + props_len) + 12 * n_props
                      + (text ? 6 * (Py_ssize_t)body_len : 4 * ((Py_ssize_t)body_len / 3 + 1));
    if (keys)
        need += 6 * keys->value_len + 3 * keys->value_len;
    if (tags)
        need += 6 * tags->value_len;
    if (reserve(self, *used + need) < 0)
        return FAILED;
    char *o = self->out + *used;
    o = put_lit(o, "{\"topic\":");
    o = put_string(o, topic, topic_len);
    o = put_lit(o, ",\"queue_id\":");
    o = put_int(o, queue_id);
    o = put_lit(o, ",\"queue_offset\":");
    o = put_int(o, queue_offset);
    o = put_lit(o, ",\"msgid\":\"");
    memcpy(o, PyBytes_AS_STRING(self->head), (size_t)PyBytes_GET_SIZE(self->head));
    o += PyBytes_GET_SIZE(self->head);
    for (int shift = 60; shift >= 0; shift -= 4)
        *o++ = "0123456789ABCDEF"[((uint64_t)commitlog_offset >> shift) & 15];
    o = put_lit(o, "\",\"keys\":");
    *o++ = '[';
    if (keys) {
        const unsigned char *k = keys->value, *kend = k + keys->value_len;
        int first = 1;
        while (k < kend) {
            const unsigned char *sp = memchr(k, ' ', (size_t)(kend - k));
            if (!sp) sp = kend;
            if (sp > k) {
                if (!first) *o++ = ',';
                o = put_string(o, k, sp - k);
                first = 0;
            }
            k = sp + 1;
        }
    }
    *o++ = ']';
    o = put_lit(o, ",\"tags\":");
    if (tags) o = put_string(o, tags->value, tags->value_len);
    else o = put_lit(o, "null");
    o = put_lit(o, ",\"born_timestamp\":");
    o = put_int(o, born_ts);
    o = put_lit(o, ",\"store_timestamp\":");
    o = put_int(o, store_ts);
    o = put_lit(o, ",\"born_host\":");
    memcpy(o, PyBytes_AS_STRING(self->fields), (size_t)PyBytes_GET_SIZE(self->fields));
    o += PyBytes_GET_SIZE(self->fields);
    o = put_lit(o, ",\"commitlog_offset\":");
    o = put_int(o, commitlog_offset);
    o = put_lit(o, ",\"record_size\":");
    o = put_int(o, total);
    o = put_lit(o, ",\"flag\":");
    o = put_int(o, flag);
    o = put_lit(o, ",\"sys_flag\":");
    o = put_int(o, sys_flag);
    o = put_lit(o, ",\"reconsume_times\":");
    o = put_int(o, reconsume);
    o = put_lit(o, ",\"properties\":{");
    for (int i = 0; i < n_props; i++) {
        if (i) *o++ = ',';
        o = put_string(o, props[i].name, props[i].name_len);
        *o++ = ':';
        o = put_string(o, props[i].value, props[i].value_len);
    }
    *o++ = '}';
    if (text) {
        o = put_lit(o, ",\"body\":");
        o = put_string(o, body, body_len);
    } else {
        o = put_lit(o, ",\"body_b64\":\"");
        o = put_base64(o, body, body_len);
        *o++ = '"';
    }
    o = put_lit(o, "}\n");
    *used = o - self->out;
    return WRITTEN;
}

static int unit_args(PyObject *topic_obj, PyObject *q_obj, const char **topic, Py_ssize_t *topic_len,
                     long *qid) {
    *qid = PyLong_AsLong(q_obj);
    if (*qid == -1 && PyErr_Occurred())
        return -1;
    *topic = PyUnicode_AsUTF8AndSize(topic_obj, topic_len);
    return *topic ? 0 : -1;
}

/* The output buffer is the object's own: a call from within a call (the hosts callback) would
 * move it under the outer one. `enter` takes the mapping's buffer and marks the object busy;
 * `leave` undoes both and gives the result: NULL (an error), None (declined), False (ruled
 * out, where `ruled_out_false`), else the lines written. */
static int enter(Lines *self, PyObject *buf, Py_buffer *view) {
    if (PyObject_GetBuffer(buf, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (self->busy) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_RuntimeError, "Lines called from within itself");
        return -1;
    }
    self->busy = 1;
    return 0;
}

static PyObject *leave(Lines *self, Py_buffer *view, int got, Py_ssize_t used, int ruled_out_false) {
    self->busy = 0;
    PyBuffer_Release(view);
    if (got == FAILED)
        return NULL;
    if (got == DECLINED)
        Py_RETURN_NONE;
    if (got == RULED_OUT && ruled_out_false)
        Py_RETURN_FALSE;
    return PyBytes_FromStringAndSize(self->out, used);
}

/* line(buf, pos, at, topic, queue_id, queue_offset): the record at `pos` of `buf` (the
 * CommitLog file mapped), at CommitLog offset `at`, read through unit `queue_offset` of queue
 * (topic, queue_id): its JSON line (bytes), False, or None (see the top of this file). */
static PyObject *Lines_line(Lines *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "line takes 6 arguments");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long long at = PyLong_AsLongLong(args[2]);
    long long qo = PyLong_AsLongLong(args[5]);
    const char *topic;
    Py_ssize_t topic_len, used = 0;
    long qid;
    if (PyErr_Occurred() || unit_args(args[3], args[4], &topic, &topic_len, &qid) < 0)
        return NULL;
    Py_buffer view;
    if (enter(self, args[0], &view) < 0)
        return NULL;
    int got = one(self, view.buf, view.len, pos, at, topic, topic_len, qid, qo, &used);
    return leave(self, &view, got, used, 1);
}

/* lines(buf, base, units, topic, queue_id): `line` for each unit (queue offset, CommitLog
 * offset) of a list, the records in the file mapped as `buf` starting at CommitLog offset
 * `base`: the lines of those selected, joined (bytes), or None as soon as one is declined
 * (the caller reads the units one by one then: Python names damage in its own order). */
static PyObject *Lines_lines(Lines *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "lines(buf, base, units: list, topic, queue_id)");
        return NULL;
    }
    long long base = PyLong_AsLongLong(args[1]);
    const char *topic;
    Py_ssize_t topic_len, used = 0;
    long qid;
    if ((base == -1 && PyErr_Occurred()) || unit_args(args[3], args[4], &topic, &topic_len, &qid) < 0)
        return NULL;
    Py_buffer view;
    if (enter(self, args[0], &view) < 0)
        return NULL;
    PyObject *units = args[2];
    int got = RULED_OUT;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(units); i++) {
        PyObject *unit = PyList_GET_ITEM(units, i);
        long long qo, at;
        if (!PyTuple_Check(unit) || PyTuple_GET_SIZE(unit) != 2) {
            got = DECLINED;
            break;
        }
        qo = PyLong_AsLongLong(PyTuple_GET_ITEM(unit, 0));
        at = PyLong_AsLongLong(PyTuple_GET_ITEM(unit, 1));
        if (PyErr_Occurred()) {
            got = FAILED;
            break;
        }
        if (at < base || at - base > (long long)PY_SSIZE_T_MAX) {
            got = DECLINED;
            break;
        }
        got = one(self, view.buf, view.len, (Py_ssize_t)(at - base), at, topic, topic_len, qid, qo, &used);
        if (got < 0)
            break;
    }
    return leave(self, &view, got, used, 0);
}

static int tuple_of_bytes(PyObject *t) {
    if (!PyTuple_Check(t))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(t, i)))
            return 0;
    return 1;
}

static int Lines_init(Lines *self, PyObject *args, PyObject *kw) {
    int xx, record_crc;
    PyObject *since, *until, *tags, *literals, *hosts_of;
    static char *names[] = {"xx", "record_crc", "since", "until", "tags", "literals", "hosts_of", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ppOOOOO", names, &xx, &record_crc, &since, &until,
                                     &tags, &literals, &hosts_of))
        return -1;
    if ((tags != Py_None && !tuple_of_bytes(tags)) || !PyTuple_Check(literals) || !PyCallable_Check(hosts_of)) {
        PyErr_SetString(PyExc_TypeError, "tags: a tuple of bytes or None; literals: a tuple of "
                                         "tuples of bytes; hosts_of: callable");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(literals); i++)
        if (!tuple_of_bytes(PyTuple_GET_ITEM(literals, i))) {
            PyErr_SetString(PyExc_TypeError, "literals: a tuple of tuples of bytes");
            return -1;
        }
    self->xx = xx;
    self->record_crc = record_crc;
    self->has_since = since != Py_None;
    self->has_until = until != Py_None;
    self->since = self->has_since ? PyLong_AsLongLong(since) : 0;
    self->until = self->has_until ? PyLong_AsLongLong(until) : 0;
    if (PyErr_Occurred())
        return -1;
    Py_XSETREF(self->tags, tags == Py_None ? NULL : Py_NewRef(tags));
    Py_XSETREF(self->literals, Py_NewRef(literals));
    Py_XSETREF(self->hosts_of, Py_NewRef(hosts_of));
    Py_CLEAR(self->head);
    Py_CLEAR(self->fields);
    return 0;
}

static int Lines_traverse(Lines *self, visitproc visit, void *arg) {
    Py_VISIT(self->tags);
    Py_VISIT(self->literals);
    Py_VISIT(self->hosts_of);
    return 0;
}

static int Lines_clear(Lines *self) {
    Py_CLEAR(self->tags);
    Py_CLEAR(self->literals);
    Py_CLEAR(self->hosts_of);
    Py_CLEAR(self->head);
    Py_CLEAR(self->fields);
    return 0;
}

static void Lines_dealloc(Lines *self) {
    PyObject_GC_UnTrack(self);
    Lines_clear(self);
    PyMem_Free(self->out);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Lines_methods[] = {
    {"line", (PyCFunction)(void (*)(void))Lines_line, METH_FASTCALL,
     "line(buf, pos, at, topic, queue_id, queue_offset): the record's JSON line, False (not "
     "selected) or None (declined: Python reads it)"},
    {"lines", (PyCFunction)(void (*)(void))Lines_lines, METH_FASTCALL,
     "lines(buf, base, units, topic, queue_id): the selected units' lines joined, or None "
     "when one is declined"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject LinesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mqfs.store.offline._dump.Lines",
    .tp_basicsize = sizeof(Lines),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Lines(xx, record_crc, since, until, tags, literals, hosts_of): a dump's JSON "
              "lines of common records",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Lines_init,
    .tp_dealloc = (destructor)Lines_dealloc,
    .tp_traverse = (traverseproc)Lines_traverse,
    .tp_clear = (inquiry)Lines_clear,
    .tp_methods = Lines_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_dump", "mqfs dump's common record decoded, checked and printed in C",
    -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__dump(void) {
    if (PyType_Ready(&LinesType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Lines", (PyObject *)&LinesType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
