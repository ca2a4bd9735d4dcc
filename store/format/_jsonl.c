/* JSON lines of the commonest shapes decoded in C: what a mount's append.jsonl spends per
 * line is mostly this, for lines {"body": "text"} and {"body": "text", "keys": ["k", ...]}.
 *
 * The Python decoder (store/format/jsonl.py: decode_line, message_of) is the reference.
 * `decode` either returns exactly the Messages it would make, or declines (returns None) for
 * the whole text, and the Python decoder runs: every refusal keeps its errno and words. It
 * declines anything it does not read itself: other fields, duplicate fields, escaped field
 * names, keys given as one string or an empty list, an empty key or one holding a space,
 * bytes that are not strict UTF-8 (Python's decoder: no surrogates, no overlong forms), lone
 * surrogate escapes, control characters, a body over the limit, blank lines that are not
 * empty, anything after the object.
 *
 * Two passes: the lines are read into spans without the GIL (bytes are immutable and held
 * by the caller), then the objects are made with it, so a put in another thread runs
 * meanwhile; the bodies' bytes are copied into their objects without it too.
 *
 * A Message is made from a prototype (a Message of the default fields): when its class keeps
 * every field in a slot (`__slots__`, no `__dict__`), the new one is the prototype's slots
 * copied with topic, body, queue_id and properties set, as `__init__` would store them, without
 * running it; any other class is called with the four fields. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define GIL_FREE_MIN 65536 /* texts (and bodies together) shorter than this are read (copied) with the GIL held */

typedef struct {
    const unsigned char *body; /* into the text, or into the arena when it had escapes */
    Py_ssize_t body_len;
    const unsigned char *keys; /* the keys joined by spaces (arena), NULL when none */
    Py_ssize_t keys_len;
} Line;

typedef struct {
    const unsigned char *p, *end;
    unsigned char *arena;  /* unescaped strings: never longer than their JSON text */
    Py_ssize_t limit;
} Reader;

static inline void skip_ws(Reader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\r'))
        r->p++;
}

/* one strictly valid UTF-8 sequence of 2-4 bytes at p (lead byte >= 0x80): its length, or 0 */
static inline int utf8_seq(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    Py_ssize_t room = end - p;
    if (c >= 0xC2 && c <= 0xDF)
        return room >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (room < 3 || (p[2] & 0xC0) != 0x80)
            return 0;
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return p[1] >= lo && p[1] <= hi ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (room < 4 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
            return 0;
        unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return p[1] >= lo && p[1] <= hi ? 4 : 0;
    }
    return 0;
}

static inline int hex4(const unsigned char *p, const unsigned char *end, uint32_t *out) {
    if (end - p < 4)
        return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static inline unsigned char *put_utf8(unsigned char *o, uint32_t cp) {
    if (cp < 0x80) {
        *o++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *o++ = (unsigned char)(0xC0 | (cp >> 6));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (unsigned char)(0xE0 | (cp >> 12));
        *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (unsigned char)(0xF0 | (cp >> 18));
        *o++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
    return o;
}

#define ONES ((uint64_t)0x0101010101010101ULL)
#define HIGHS ((uint64_t)0x8080808080808080ULL)

/* eight bytes with none that needs a look: no quote, backslash, control byte or non-ASCII */
static inline int plain8(const unsigned char *p) {
    uint64_t x;
    memcpy(&x, p, 8);
    uint64_t q = x ^ (ONES * '"'), b = x ^ (ONES * '\\');
    uint64_t special = ((q - ONES) & ~q) | ((b - ONES) & ~b) | (x - ONES * 0x20) | x;
    return (special & HIGHS) == 0;
}

/* The string whose opening quote r->p is past: its UTF-8 bytes in *s and *n (into the text
 * when it has no escapes, else unescaped into the arena, which advances). 0: not one to take. */
static int read_string(Reader *r, const unsigned char **s, Py_ssize_t *n) {
    const unsigned char *p = r->p, *end = r->end, *start = p;
    for (;;) {
        while (end - p >= 8 && plain8(p))
            p += 8;
        if (p >= end)
            return 0;
        unsigned char c = *p;
        if (c == '"') {
            *s = start;
            *n = p - start;
            r->p = p + 1;
            return 1;
        }
        if (c == '\\')
            break;
        if (c < 0x20)
            return 0;
        if (c >= 0x80) {
            int k = utf8_seq(p, end);
            if (!k)
                return 0;
            p += k;
        } else {
            p++;
        }
    }
    /* escapes: the plain part so far, then the rest unescaped */
    unsigned char *out = r->arena, *o = out;
    memcpy(o, start, (size_t)(p - start));
    o += p - start;
    while (p < end) {
        unsigned char c = *p;
        if (c == '"') {
            *s = out;
            *n = o - out;
            r->arena = o;
            r->p = p + 1;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c >= 0x80) {
            int k = utf8_seq(p, end);
            if (!k)
                return 0;
            memcpy(o, p, (size_t)k);
            o += k;
            p += k;
            continue;
        }
        if (c != '\\') {
            *o++ = c;
            p++;
            continue;
        }
        if (end - p < 2)
            return 0;
        switch (p[1]) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (!hex4(p + 2, end, &cp))
                return 0;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return 0; /* a lone low surrogate */
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 12 || p[6] != '\\' || p[7] != 'u' || !hex4(p + 8, end, &lo)
                        || lo < 0xDC00 || lo > 0xDFFF)
                    return 0; /* a lone high surrogate */
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            o = put_utf8(o, cp);
            p += 6;
            continue;
        }
        default:
            return 0;
        }
        p += 2;
    }
    return 0;
}

/* After an item of an object or array: 1 when a comma and another item follow (the comma
 * passed), 0 when `close` ends it (passed), -1 for anything else. */
static int next_item(Reader *r, unsigned char close) {
    skip_ws(r);
    if (r->p >= r->end)
        return -1;
    if (*r->p == close) {
        r->p++;
        return 0;
    }
    if (*r->p != ',')
        return -1;
    r->p++;
    skip_ws(r);
    return 1;
}

/* "keys": [ ... ] past its '[': the keys joined by spaces, into the arena. 0: not one to take. */
static int read_keys(Reader *r, Line *line) {
    unsigned char *joined = r->arena, *o = joined;
    skip_ws(r);
    if (r->p >= r->end || *r->p == ']')
        return 0; /* an empty list: the Python decoder's */
    for (;;) {
        const unsigned char *s;
        Py_ssize_t n;
        if (r->p >= r->end || *r->p != '"')
            return 0;
        r->p++;
        r->arena = o; /* a key with escapes is unescaped where it is joined */
        if (!read_string(r, &s, &n) || n == 0 || memchr(s, ' ', (size_t)n))
            return 0;
        if (s != o)
            memmove(o, s, (size_t)n);
        o += n;
        int more = next_item(r, ']');
        if (more <= 0) {
            if (more < 0)
                return 0;
            break;
        }
        *o++ = ' '; /* room: the comma's */
    }
    line->keys = joined;
    line->keys_len = o - joined;
    r->arena = o;
    return 1;
}

/* One line (no newline in it): 1 read into *line, 0 not one to take. */
static int read_line(Reader *r, Line *line) {
    int have_body = 0;
    line->keys = NULL;
    line->keys_len = 0;
    skip_ws(r);
    if (r->p >= r->end || *r->p != '{')
        return 0;
    r->p++;
    skip_ws(r);
    for (;;) {
        if (r->end - r->p < 6 || r->p[0] != '"' || r->p[5] != '"')
            return 0;
        const unsigned char *name = r->p + 1;
        r->p += 6;
        skip_ws(r);
        if (r->p >= r->end || *r->p != ':')
            return 0;
        r->p++;
        skip_ws(r);
        if (r->p >= r->end)
            return 0;
        if (memcmp(name, "body", 4) == 0) {
            if (have_body || *r->p != '"')
                return 0;
            r->p++;
            if (!read_string(r, &line->body, &line->body_len) || line->body_len > r->limit)
                return 0;
            have_body = 1;
        } else if (memcmp(name, "keys", 4) == 0) {
            if (line->keys || *r->p != '[')
                return 0;
            r->p++;
            if (!read_keys(r, line))
                return 0;
        } else {
            return 0;
        }
        int more = next_item(r, '}');
        if (more <= 0) {
            if (more < 0)
                return 0;
            break;
        }
    }
    skip_ws(r);
    return have_body && r->p == r->end;
}

/* Every line of text into lines (room for one per newline, plus one): their count, or -1. */
static Py_ssize_t read_all(const unsigned char *text, Py_ssize_t len, Py_ssize_t limit,
                           unsigned char *arena, Line *lines) {
    Reader r = {text, text, arena, limit};
    const unsigned char *end = text + len;
    Py_ssize_t count = 0;
    while (r.p < end) {
        const unsigned char *nl = memchr(r.p, '\n', (size_t)(end - r.p));
        const unsigned char *stop = nl ? nl : end;
        if (stop != r.p) { /* an empty line is skipped */
            r.end = stop;
            if (!read_line(&r, &lines[count]))
                return -1;
            count++;
        }
        r.p = nl ? nl + 1 : end;
    }
    return count;
}

/* Where a prototype's class keeps the fields set here: the offsets of its topic, body, queue_id
 * and properties slots, and how many object slots follow the object's header. */
typedef struct {
    Py_ssize_t topic, body, queue, props;
    Py_ssize_t slots;
} Layout;

/* The offset of the slot `name` names in type (a member descriptor of an object slot that may
 * be set), or -1. */
static Py_ssize_t slot_offset(PyTypeObject *type, const char *name) {
    PyObject *d = PyObject_GetAttrString((PyObject *)type, name); /* on a class: the descriptor */
    Py_ssize_t off = -1;
    if (!d) {
        PyErr_Clear();
        return -1;
    }
    if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY)
                && PyType_IsSubtype(type, ((PyDescrObject *)d)->d_type))
            off = m->offset;
    }
    Py_DECREF(d);
    return off;
}

/* 1 with *lay filled when every byte of a `type` object past its header is an object slot its
 * Python classes declare (`__slots__` down to object: no __dict__, no weak references, no C base
 * with fields of its own) and the four fields are such slots; else 0 (the class is called). */
static int plain_slots(PyTypeObject *type, Layout *lay) {
    Py_ssize_t header = (Py_ssize_t)sizeof(PyObject), size = type->tp_basicsize;
    if (type->tp_itemsize || type->tp_dictoffset || type->tp_weaklistoffset
#ifdef Py_TPFLAGS_MANAGED_DICT
            || (type->tp_flags & Py_TPFLAGS_MANAGED_DICT)
#endif
#ifdef Py_TPFLAGS_MANAGED_WEAKREF
            || (type->tp_flags & Py_TPFLAGS_MANAGED_WEAKREF)
#endif
            || !(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type->tp_alloc != PyType_GenericAlloc
            || size <= header || (size - header) % (Py_ssize_t)sizeof(PyObject *))
        return 0;
    Py_ssize_t declared = 0;
    PyObject *mro = type->tp_mro;
    if (!mro || !PyTuple_Check(mro))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *base = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (base == &PyBaseObject_Type)
            continue;
        if (!(base->tp_flags & Py_TPFLAGS_HEAPTYPE) || base->tp_itemsize)
            return 0;
        for (PyMemberDef *m = base->tp_members; m && m->name; m++) {
            if (m->type != T_OBJECT_EX || m->offset < header || m->offset >= size
                    || (m->offset - header) % (Py_ssize_t)sizeof(PyObject *))
                return 0;
            declared++;
        }
    }
    lay->slots = (size - header) / (Py_ssize_t)sizeof(PyObject *);
    if (declared != lay->slots) /* a slot each, each in its own place (no two share one) */
        return 0;
    lay->topic = slot_offset(type, "topic");
    lay->body = slot_offset(type, "body");
    lay->queue = slot_offset(type, "queue_id");
    lay->props = slot_offset(type, "properties");
    return lay->topic >= 0 && lay->body >= 0 && lay->queue >= 0 && lay->props >= 0;
}

static inline void set_slot(PyObject *obj, Py_ssize_t offset, PyObject *value) {
    PyObject **slot = (PyObject **)((char *)obj + offset);
    PyObject *old = *slot;
    Py_INCREF(value);
    *slot = value;
    Py_XDECREF(old);
}

/* A Message of these fields: the prototype's slots copied (lay), or its class called. */
static PyObject *new_message(PyObject *proto, const Layout *lay, PyObject *topic, PyObject *body,
                             PyObject *queue, PyObject *props) {
    if (!lay) {
        PyObject *args[4] = {topic, body, queue, props};
        return PyObject_Vectorcall((PyObject *)Py_TYPE(proto), args, 4, NULL);
    }
    PyTypeObject *type = Py_TYPE(proto);
    PyObject *msg = type->tp_alloc(type, 0); /* zeroed slots; tracked by the GC */
    if (!msg)
        return NULL;
    PyObject **from = (PyObject **)((char *)proto + sizeof(PyObject));
    PyObject **to = (PyObject **)((char *)msg + sizeof(PyObject));
    for (Py_ssize_t i = 0; i < lay->slots; i++) {
        Py_XINCREF(from[i]);
        to[i] = from[i];
    }
    set_slot(msg, lay->topic, topic);
    set_slot(msg, lay->body, body);
    set_slot(msg, lay->queue, queue);
    set_slot(msg, lay->props, props);
    return msg;
}

/* The bodies of lines, as bytes objects: made with the GIL, filled without it when they are
 * long together (a mount's 1 MiB write: a megabyte's copy the loop need not hold the GIL
 * for). No other thread can reach them meanwhile: bytes are not tracked by the GC, and
 * nothing refers to them but the array. NULL (an exception set) on failure. */
static PyObject **make_bodies(const Line *lines, Py_ssize_t count) {
    PyObject **bodies = PyMem_Malloc(sizeof(PyObject *) * (size_t)(count ? count : 1));
    if (!bodies) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        bodies[i] = PyBytes_FromStringAndSize(NULL, lines[i].body_len);
        if (!bodies[i]) {
            while (i--)
                Py_DECREF(bodies[i]);
            PyMem_Free(bodies);
            return NULL;
        }
        total += lines[i].body_len;
    }
    if (total >= GIL_FREE_MIN) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < count; i++)
            memcpy(PyBytes_AS_STRING(bodies[i]), lines[i].body, (size_t)lines[i].body_len);
        Py_END_ALLOW_THREADS
    } else {
        for (Py_ssize_t i = 0; i < count; i++)
            memcpy(PyBytes_AS_STRING(bodies[i]), lines[i].body, (size_t)lines[i].body_len);
    }
    return bodies;
}

/* The Messages; *longest_keys and *longest_body: the most characters of a KEYS text and
 * bytes of a body among them (what a mount checks them by), found while they are made. */
static PyObject *make_messages(Line *lines, Py_ssize_t count, PyObject *topic, PyObject *queue,
                               PyObject *proto, PyObject *keys_name,
                               Py_ssize_t *longest_keys, Py_ssize_t *longest_body) {
    Layout layout;
    const Layout *lay = plain_slots(Py_TYPE(proto), &layout) ? &layout : NULL;
    PyObject **bodies = make_bodies(lines, count);
    if (!bodies)
        return NULL;
    PyObject *out = PyList_New(count);
    *longest_keys = *longest_body = 0;
    for (Py_ssize_t i = 0; out && i < count; i++) {
        PyObject *body = bodies[i];
        PyObject *props = PyDict_New();
        PyObject *msg = NULL;
        if (lines[i].body_len > *longest_body)
            *longest_body = lines[i].body_len;
        if (props && lines[i].keys) {
            PyObject *keys = PyUnicode_DecodeUTF8((const char *)lines[i].keys, lines[i].keys_len,
                                                  NULL);
            if (keys && PyUnicode_GET_LENGTH(keys) > *longest_keys)
                *longest_keys = PyUnicode_GET_LENGTH(keys);
            if (!keys || PyDict_SetItem(props, keys_name, keys) < 0)
                Py_CLEAR(props);
            Py_XDECREF(keys);
        }
        if (props)
            msg = new_message(proto, lay, topic, body, queue, props);
        Py_XDECREF(props);
        if (!msg)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, msg);
    }
    for (Py_ssize_t i = 0; i < count; i++) /* each Message holds its own reference */
        Py_DECREF(bodies[i]);
    PyMem_Free(bodies);
    return out;
}

/* decode(text, topic, queue_id, limit, prototype, KEYS[, start, end[, measured]]) -> list of
 * Message, or None: the lines of text[start:end], read in place (a mount's 1 MiB write is not
 * copied). The prototype is a Message of the default fields (new_message). With measured
 * true: (list, longest KEYS text in characters, longest body). */
static PyObject *decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 && nargs != 8 && nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "decode(text, topic, queue_id, limit, prototype, KEYS[, start, end[, measured]])");
        return NULL;
    }
    int measured = 0;
    if (nargs == 9 && (measured = PyObject_IsTrue(args[8])) < 0)
        return NULL;
    PyObject *text = args[0];
    if (!PyBytes_CheckExact(text) || !PyUnicode_CheckExact(args[1])
            || !PyLong_CheckExact(args[2]) || !PyUnicode_CheckExact(args[5]))
        Py_RETURN_NONE;
    Py_ssize_t limit = PyLong_AsSsize_t(args[3]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t start = 0, stop = PyBytes_GET_SIZE(text);
    if (nargs >= 8) {
        Py_ssize_t size = stop;
        start = PyLong_AsSsize_t(args[6]);
        if (start == -1 && PyErr_Occurred())
            return NULL;
        stop = PyLong_AsSsize_t(args[7]);
        if (stop == -1 && PyErr_Occurred())
            return NULL;
        if (start < 0 || stop < start || stop > size) {
            PyErr_SetString(PyExc_ValueError, "start and end must be within the text, in order");
            return NULL;
        }
    }
    Py_ssize_t len = stop - start, newlines = 0;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(text) + start;
    for (const unsigned char *p = data; (p = memchr(p, '\n', (size_t)(data + len - p))); p++)
        newlines++;
    if ((size_t)newlines + 1 > PY_SSIZE_T_MAX / sizeof(Line))
        return PyErr_NoMemory();
    unsigned char *arena = PyMem_RawMalloc((size_t)len + 1);
    Line *lines = PyMem_RawMalloc(sizeof(Line) * (size_t)(newlines + 1));
    if (!arena || !lines) {
        PyMem_RawFree(arena);
        PyMem_RawFree(lines);
        return PyErr_NoMemory();
    }
    Py_ssize_t count;
    if (len >= GIL_FREE_MIN) {
        Py_BEGIN_ALLOW_THREADS
        count = read_all(data, len, limit, arena, lines);
        Py_END_ALLOW_THREADS
    } else {
        count = read_all(data, len, limit, arena, lines);
    }
    PyObject *out;
    if (count < 0) {
        out = Py_None;
        Py_INCREF(out);
    } else {
        Py_ssize_t longest_keys, longest_body;
        out = make_messages(lines, count, args[1], args[2], args[4], args[5], &longest_keys,
                            &longest_body);
        if (out && measured) {
            PyObject *list = out;
            out = Py_BuildValue("(Onn)", list, longest_keys, longest_body);
            Py_DECREF(list);
        }
    }
    PyMem_RawFree(arena);
    PyMem_RawFree(lines);
    return out;
}

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL,
     "decode(text, topic, queue_id, limit, prototype, KEYS[, start, end[, measured]]) -> the "
     "Messages of the lines of text[start:end], made like the prototype (measured: with the "
     "most characters of a KEYS text and bytes of a body), or None when a line is not of the "
     "shapes read here (the Python decoder then reads them)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jsonl",
    "JSON lines of the commonest shapes decoded in C (store/format/jsonl.py is the reference)",
    -1, methods,
};

PyMODINIT_FUNC PyInit__jsonl(void) { return PyModule_Create(&module); }
