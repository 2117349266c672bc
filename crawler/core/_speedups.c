/* C paths for the two per-page loops that Python cannot vectorise: the page fingerprint's
 * token counting and vote, and the HTML depth bound. Optional: when this module is not built,
 * crawler.core.extract and crawler.core.bounds run their Python versions, which give the same
 * results (tests check the two against each other).
 *
 * Both functions are pure: bytes in, an int out, no state kept between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* --- CRC-32 (IEEE 802.3, reflected; zlib.crc32's) and MurmurHash3's fmix64 ---------------- */

static uint32_t crc_table[256];

static void
crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        }
        crc_table[i] = c;
    }
}

static uint32_t
crc32_of(const unsigned char *p, Py_ssize_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n-- > 0) {
        c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFu;
}

static uint64_t
fmix64(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xFF51AFD7ED558CCDull;
    key ^= key >> 33;
    key *= 0xC4CEB9FE1A85EC53ull;
    key ^= key >> 33;
    return key;
}

/* --- a table of distinct tokens and their counts --------------------------------------- */

typedef struct {
    const unsigned char *ptr; /* NULL: empty slot */
    Py_ssize_t len;
    uint64_t hash; /* word_hash: cheap, for the table only; the CRC is taken per distinct token */
    uint64_t count;
} Slot;

typedef struct {
    Slot *slots;
    size_t mask;
    size_t used;
} Table;

static int
table_init(Table *t, size_t capacity)
{
    t->slots = PyMem_Calloc(capacity, sizeof(Slot));
    if (t->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->mask = capacity - 1;
    t->used = 0;
    return 0;
}

/* A hash of a token eight bytes at a time (a byte-serial CRC of every occurrence cost more
 * than all the rest of the vote). */
static uint64_t
word_hash(const unsigned char *p, Py_ssize_t n)
{
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ull;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    if (n > 0) {
        uint64_t w = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            w |= (uint64_t)p[i] << (8 * i);
        }
        h = (h ^ w) * 0x94D049BB133111EBull;
        h ^= h >> 29;
    }
    return h;
}

static size_t
slot_of(uint64_t hash, size_t mask)
{
    return (size_t)(hash >> 20) & mask;
}

static int
table_grow(Table *t)
{
    Table bigger;
    if (table_init(&bigger, (t->mask + 1) * 2) < 0) {
        return -1;
    }
    for (size_t i = 0; i <= t->mask; i++) {
        Slot *s = &t->slots[i];
        if (s->ptr == NULL) {
            continue;
        }
        size_t j = slot_of(s->hash, bigger.mask);
        while (bigger.slots[j].ptr != NULL) {
            j = (j + 1) & bigger.mask;
        }
        bigger.slots[j] = *s;
    }
    bigger.used = t->used;
    PyMem_Free(t->slots);
    *t = bigger;
    return 0;
}

static int
table_add(Table *t, const unsigned char *ptr, Py_ssize_t len)
{
    uint64_t hash = word_hash(ptr, len);
    size_t j = slot_of(hash, t->mask);
    for (;;) {
        Slot *s = &t->slots[j];
        if (s->ptr == NULL) {
            s->ptr = ptr;
            s->len = len;
            s->hash = hash;
            s->count = 1;
            t->used++;
            if (t->used * 2 > t->mask + 1) {
                return table_grow(t);
            }
            return 0;
        }
        if (s->hash == hash && s->len == len && memcmp(s->ptr, ptr, (size_t)len) == 0) {
            s->count++;
            return 0;
        }
        j = (j + 1) & t->mask;
    }
}

/* The space-separated parts of ``data``: ``body`` runs for each non-empty one with ``start``,
 * ``len`` and ``high`` (whether it holds a byte >= 0x80) set. ``data`` has had every ASCII
 * non-word byte (whitespace included) turned into a space, so these are ``data.split()``. */
#define FOR_EACH_PART(data, n, start, len, high, body)                                        \
    do {                                                                                       \
        Py_ssize_t _i = 0;                                                                     \
        while (_i < (n)) {                                                                     \
            if ((data)[_i] == ' ') {                                                           \
                _i++;                                                                          \
                continue;                                                                      \
            }                                                                                  \
            Py_ssize_t start = _i;                                                             \
            unsigned char _or = 0;                                                             \
            while (_i < (n) && (data)[_i] != ' ') {                                            \
                _or |= (data)[_i];                                                             \
                _i++;                                                                          \
            }                                                                                  \
            Py_ssize_t len = _i - start;                                                       \
            int high = _or >= 0x80;                                                            \
            body                                                                               \
        }                                                                                      \
    } while (0)

PyDoc_STRVAR(non_ascii_parts_doc,
"non_ascii_parts(data: bytes) -> list[bytes]\n\n"
"The parts of data.split(b' ') that hold a byte >= 0x80, each as often as it occurs.");

static PyObject *
non_ascii_parts(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *data = view.buf;
    Py_ssize_t n = view.len;
    PyObject *parts = PyList_New(0);
    if (parts == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    FOR_EACH_PART(data, n, start, len, high, {
        if (high) {
            PyObject *part = PyBytes_FromStringAndSize((const char *)data + start, len);
            if (part == NULL || PyList_Append(parts, part) < 0) {
                Py_XDECREF(part);
                Py_DECREF(parts);
                PyBuffer_Release(&view);
                return NULL;
            }
            Py_DECREF(part);
        }
    });
    PyBuffer_Release(&view);
    return parts;
}

PyDoc_STRVAR(ascii_simhash_doc,
"ascii_simhash(data: bytes, extra: list[bytes]) -> int\n\n"
"Charikar's 64-bit simhash of the tokens: the all-ASCII parts of data.split(b' ') plus\n"
"every token of extra, each distinct token weighted count.bit_length() and hashed with\n"
"crc32_fmix64. 0 when there is no token.");

static PyObject *
ascii_simhash(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "ascii_simhash takes 2 arguments");
        return NULL;
    }
    if (!PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "extra must be a list of bytes");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *extra = args[1];
    const unsigned char *data = view.buf;
    Py_ssize_t n = view.len;
    Table table;
    if (table_init(&table, 512) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int failed = 0;
    FOR_EACH_PART(data, n, start, len, high, {
        if (!failed && !high &&
            table_add(&table, data + start, len) < 0) {
            failed = 1;
        }
    });
    /* The list is not changed during the call (no Python code runs), so its items and their
     * buffers stay alive while the table points into them. */
    Py_ssize_t n_extra = failed ? 0 : PyList_GET_SIZE(extra);
    for (Py_ssize_t k = 0; k < n_extra; k++) {
        PyObject *item = PyList_GET_ITEM(extra, k);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "extra must be a list of bytes");
            failed = 1;
            break;
        }
        if (table_add(&table, (const unsigned char *)PyBytes_AS_STRING(item),
                      PyBytes_GET_SIZE(item)) < 0) {
            failed = 1;
            break;
        }
    }
    if (failed) {
        PyBuffer_Release(&view);
        PyMem_Free(table.slots);
        return NULL;
    }
    uint64_t votes[64] = {0};
    uint64_t total = 0;
    for (size_t i = 0; i <= table.mask; i++) {
        Slot *s = &table.slots[i];
        if (s->ptr == NULL) {
            continue;
        }
        uint64_t weight = 64 - (uint64_t)__builtin_clzll(s->count); /* count.bit_length() */
        uint64_t digest = fmix64((uint64_t)crc32_of(s->ptr, s->len));
        total += weight;
        for (int bit = 0; bit < 64; bit++) {
            votes[bit] += weight & (0 - ((digest >> bit) & 1));
        }
    }
    PyBuffer_Release(&view); /* the slots pointed into it until here */
    PyMem_Free(table.slots);
    uint64_t result = 0;
    for (int bit = 0; bit < 64; bit++) {
        if (votes[bit] * 2 > total) {
            result |= 1ull << bit;
        }
    }
    return PyLong_FromUnsignedLongLong(result);
}

PyDoc_STRVAR(depth_upper_bound_doc,
"depth_upper_bound(data: bytes) -> int\n\n"
"The nesting depth counting every '<' + letter as an open and every '</' as a close, never\n"
"below 0: crawler.core.bounds._depth_upper_bound's.");

static PyObject *
depth_upper_bound(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *data = view.buf;
    Py_ssize_t last = view.len - 1; /* a '<' as the last byte is followed by nothing */
    long long running = 0, lowest = 0, best = 0;
    Py_ssize_t i = 0;
    while (i < last) {
        const unsigned char *lt = memchr(data + i, '<', (size_t)(last - i));
        if (lt == NULL) {
            break;
        }
        i = (Py_ssize_t)(lt - data) + 1;
        unsigned char following = data[i];
        unsigned char letter = following | 0x20;
        if (letter >= 'a' && letter <= 'z') {
            running++;
            if (running - lowest > best) {
                best = running - lowest;
            }
        }
        else if (following == '/') {
            running--;
            if (running < lowest) {
                lowest = running;
            }
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(best);
}

static PyMethodDef methods[] = {
    {"non_ascii_parts", non_ascii_parts, METH_O, non_ascii_parts_doc},
    {"ascii_simhash", (PyCFunction)(void (*)(void))ascii_simhash, METH_FASTCALL,
     ascii_simhash_doc},
    {"depth_upper_bound", depth_upper_bound, METH_O, depth_upper_bound_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "crawler.core._speedups",
    "C paths of the page fingerprint and the HTML depth bound.", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    crc_table_init();
    return PyModule_Create(&module_def);
}
