/* C paths for the per-page loops that Python cannot vectorise: the page fingerprint's token
 * counting and vote and the HTML depth bound; and for the arithmetic every fetch, simulated or
 * real, repeats: the change-rate estimator's scalar loops over a short history, the planner's
 * fetch rate for one URL, and the copy of a URL's record with some fields replaced.
 * Optional: when this module is not built, crawler.core.extract, .bounds, .estimate, .plan and
 * .model run their Python versions, which give the same results (tests check the two against
 * each other; the floating-point ones bit for bit).
 *
 * All functions are pure: values in, a value out, no state kept between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
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

/* --- the change-rate estimator's scalar loops (crawler.core.estimate) ------------------------
 *
 * Transliterations of _mode_in_floats, _newton_step and _log_detect_sums_in_floats: the same
 * operations in the same order on the same libm functions that the math module calls, so the
 * results are the Python versions' to the bit (setup.py compiles with -ffp-contract=off: a fused
 * multiply-add would round differently). math's errors are mirrored (an overflowing exp, a
 * logarithm of zero), though the estimator never meets them. */

/* math.exp: OverflowError when a finite argument overflows. */
static int
math_exp(double x, double *out)
{
    double r = exp(x);
    if (isinf(r) && isfinite(x)) {
        PyErr_SetString(PyExc_OverflowError, "math range error");
        return -1;
    }
    *out = r;
    return 0;
}

/* math.expm1: never overflows on the arguments here (u < 700, or a negated product). */
static int
math_expm1(double x, double *out)
{
    double r = expm1(x);
    if (isinf(r) && isfinite(x)) {
        PyErr_SetString(PyExc_OverflowError, "math range error");
        return -1;
    }
    *out = r;
    return 0;
}

/* math.log: ValueError for a finite argument that is not positive (or minus infinity). */
static int
math_log(double x, double *out)
{
    if (isnan(x)) {
        *out = x;
        return 0;
    }
    if (!(x > 0.0)) {
        PyErr_SetString(PyExc_ValueError, "math domain error");
        return -1;
    }
    *out = isinf(x) ? x : log(x);
    return 0;
}

/* Python's min and max of two floats: the first argument unless the second is strictly
 * smaller (larger), which decides a NaN the same way. */
static double
py_min2(double a, double b)
{
    return b < a ? b : a;
}

static double
py_max2(double a, double b)
{
    return b > a ? b : a;
}

/* The builtin sum of a list of floats, as this interpreter adds: left to right before 3.12,
 * with Neumaier's compensation from 3.12 on. The int 0 it starts from adds exactly. */
static double
py_float_sum(const double *terms, Py_ssize_t n)
{
    if (n == 0) {
        return 0.0;
    }
    double total = 0.0 + terms[0];
#if PY_VERSION_HEX >= 0x030C0000
    double compensation = 0.0;
    for (Py_ssize_t i = 1; i < n; i++) {
        double x = terms[i];
        double t = total + x;
        if (fabs(total) >= fabs(x)) {
            compensation += (total - t) + x;
        }
        else {
            compensation += (x - t) + total;
        }
        total = t;
    }
    if (compensation != 0.0 && isfinite(compensation)) {
        total += compensation;
    }
#else
    for (Py_ssize_t i = 1; i < n; i++) {
        total += terms[i];
    }
#endif
    return total;
}

/* A sequence of numbers as doubles (NULL with an exception set); free with PyMem_Free. */
static double *
as_doubles(PyObject *sequence, Py_ssize_t *size)
{
    PyObject *fast = PySequence_Fast(sequence, "expected a sequence of floats");
    if (fast == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    double *values = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (values == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        values[i] = PyFloat_AsDouble(items[i]);
        if (values[i] == -1.0 && PyErr_Occurred()) {
            PyMem_Free(values);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    *size = n;
    return values;
}

PyDoc_STRVAR(posterior_mode_doc,
"posterior_mode(changed: Sequence[float], shape: float, exposure_days: float, x: float,\n"
"               negligible_u: float, tolerance: float, max_steps: int) -> tuple[float, float]\n\n"
"crawler.core.estimate._mode_in_floats: Newton's search for the log posterior's mode from x,\n"
"(mode, curvature there).");

static PyObject *
posterior_mode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "posterior_mode takes 7 arguments");
        return NULL;
    }
    double shape = PyFloat_AsDouble(args[1]);
    double exposure_days = PyFloat_AsDouble(args[2]);
    double x = PyFloat_AsDouble(args[3]);
    double negligible = PyFloat_AsDouble(args[4]);
    double tolerance = PyFloat_AsDouble(args[5]);
    long max_steps = PyLong_AsLong(args[6]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t n;
    double *changed = as_doubles(args[0], &n);
    if (changed == NULL) {
        return NULL;
    }
    double curvature = -1.0;
    for (long step_index = 0; step_index < max_steps; step_index++) {
        double rate;
        if (math_exp(x, &rate) < 0) {
            PyMem_Free(changed);
            return NULL;
        }
        double slope = 0.0, bend = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) {
            double u = rate * changed[i];
            if (u < negligible) {
                double g = 1.0;
                if (u > 1e-12) {
                    double denominator;
                    if (math_expm1(u, &denominator) < 0) {
                        PyMem_Free(changed);
                        return NULL;
                    }
                    g = u / denominator;
                }
                slope += g;
                bend += g - g * (u + g);
            }
        }
        slope += shape - exposure_days * rate;
        curvature = bend - exposure_days * rate;
        /* _newton_step */
        if (!(curvature < 0.0)) {
            break;
        }
        double step = py_max2(-2.0, py_min2(2.0, -slope / curvature));
        x = x + step;
        if (fabs(step) < tolerance) {
            break;
        }
    }
    PyMem_Free(changed);
    return Py_BuildValue("(dd)", x, curvature);
}

PyDoc_STRVAR(log_detect_sums_doc,
"log_detect_sums(node_rates: Sequence[float], changed: Sequence[float], floor: float)\n"
"    -> list[float]\n\n"
"crawler.core.estimate._log_detect_sums_in_floats: sum_i log(1 - e^{-lam t_i}) at each\n"
"node's lam, each product floored at `floor` when one could underflow.");

static PyObject *
log_detect_sums(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "log_detect_sums takes 3 arguments");
        return NULL;
    }
    double floor_u = PyFloat_AsDouble(args[2]);
    if (floor_u == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t nodes, n;
    double *node_rates = as_doubles(args[0], &nodes);
    if (node_rates == NULL) {
        return NULL;
    }
    double *changed = as_doubles(args[1], &n);
    if (changed == NULL) {
        PyMem_Free(node_rates);
        return NULL;
    }
    if (n == 0) {
        PyMem_Free(node_rates);
        PyMem_Free(changed);
        PyErr_SetString(PyExc_ValueError, "min() arg is an empty sequence");
        return NULL;
    }
    double *terms = PyMem_Malloc((size_t)n * sizeof(double));
    PyObject *sums = PyList_New(nodes);
    if (terms == NULL || sums == NULL) {
        PyMem_Free(terms);
        Py_XDECREF(sums);
        PyMem_Free(node_rates);
        PyMem_Free(changed);
        return PyErr_NoMemory();
    }
    double shortest = changed[0];
    for (Py_ssize_t i = 1; i < n; i++) {
        shortest = py_min2(shortest, changed[i]);
    }
    for (Py_ssize_t k = 0; k < nodes; k++) {
        double node_rate = node_rates[k];
        int direct = node_rate * shortest > floor_u;
        for (Py_ssize_t i = 0; i < n; i++) {
            /* direct: log(-expm1(-rate * t)); else _log_detect(rate * t), floored */
            double u = direct ? -node_rate * changed[i] : -py_max2(node_rate * changed[i], floor_u);
            double detected;
            if (math_expm1(u, &detected) < 0 || math_log(-detected, &terms[i]) < 0) {
                goto fail;
            }
        }
        PyObject *value = PyFloat_FromDouble(py_float_sum(terms, n));
        if (value == NULL) {
            goto fail;
        }
        PyList_SET_ITEM(sums, k, value);
    }
    PyMem_Free(terms);
    PyMem_Free(node_rates);
    PyMem_Free(changed);
    return sums;
fail:
    PyMem_Free(terms);
    Py_DECREF(sums);
    PyMem_Free(node_rates);
    PyMem_Free(changed);
    return NULL;
}

/* A list of floats as doubles into `out` (room for `size`), or -1 with an exception set. */
static int
fill_doubles(PyObject *sequence, double *out, Py_ssize_t size, const char *what)
{
    PyObject *fast = PySequence_Fast(sequence, "expected a sequence of floats");
    if (fast == NULL) {
        return -1;
    }
    if (PySequence_Fast_GET_SIZE(fast) != size) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: expected %zd values", what, size);
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < size; i++) {
        out[i] = PyFloat_AsDouble(items[i]);
        if (out[i] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

PyDoc_STRVAR(hermite_rates_doc,
"hermite_rates(x: float, spread: float, offsets: Sequence[float]) -> list[float]\n\n"
"crawler.core.estimate._node_rates_in_floats: e^(x + spread z) at each offset z.");

static PyObject *
hermite_rates(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "hermite_rates takes 3 arguments");
        return NULL;
    }
    double x = PyFloat_AsDouble(args[0]);
    double spread = PyFloat_AsDouble(args[1]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t nodes;
    double *offsets = as_doubles(args[2], &nodes);
    if (offsets == NULL) {
        return NULL;
    }
    PyObject *rates = PyList_New(nodes);
    if (rates == NULL) {
        PyMem_Free(offsets);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < nodes; k++) {
        double rate;
        PyObject *value = NULL;
        if (math_exp(x + spread * offsets[k], &rate) == 0) {
            value = PyFloat_FromDouble(rate);
        }
        if (value == NULL) {
            PyMem_Free(offsets);
            Py_DECREF(rates);
            return NULL;
        }
        PyList_SET_ITEM(rates, k, value);
    }
    PyMem_Free(offsets);
    return rates;
}

PyDoc_STRVAR(hermite_mean_doc,
"hermite_mean(x: float, spread: float, shape: float, exposure_days: float,\n"
"             node_rates: Sequence[float], detects: Sequence[float],\n"
"             offsets: Sequence[float], corrections: Sequence[float]) -> float\n\n"
"crawler.core.estimate._kernel_mean_in_floats: the node rates weighted by the exact kernel.");

#define MAX_HERMITE_NODES 64

static PyObject *
hermite_mean(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "hermite_mean takes 8 arguments");
        return NULL;
    }
    double x = PyFloat_AsDouble(args[0]);
    double spread = PyFloat_AsDouble(args[1]);
    double shape = PyFloat_AsDouble(args[2]);
    double exposure_days = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t nodes = PyObject_Length(args[6]);
    if (nodes < 0) {
        return NULL;
    }
    if (nodes == 0 || nodes > MAX_HERMITE_NODES) {
        PyErr_SetString(PyExc_ValueError, "hermite_mean: 1 to 64 nodes");
        return NULL;
    }
    double rates[MAX_HERMITE_NODES], detects[MAX_HERMITE_NODES];
    double offsets[MAX_HERMITE_NODES], corrections[MAX_HERMITE_NODES];
    double values[MAX_HERMITE_NODES];
    if (fill_doubles(args[4], rates, nodes, "node_rates") < 0
        || fill_doubles(args[5], detects, nodes, "detects") < 0
        || fill_doubles(args[6], offsets, nodes, "offsets") < 0
        || fill_doubles(args[7], corrections, nodes, "corrections") < 0) {
        return NULL;
    }
    double top = 0.0;
    for (Py_ssize_t k = 0; k < nodes; k++) {
        double point = x + spread * offsets[k];
        values[k] = shape * point - exposure_days * rates[k] + detects[k] + corrections[k];
        if (k == 0 || values[k] > top) { /* max(): the first of the largest */
            top = values[k];
        }
    }
    double numerator = 0.0, denominator = 0.0;
    for (Py_ssize_t k = 0; k < nodes; k++) {
        double weight;
        if (math_exp(values[k] - top, &weight) < 0) {
            return NULL;
        }
        numerator += weight * rates[k];
        denominator += weight;
    }
    if (denominator == 0.0) {
        PyErr_SetString(PyExc_ZeroDivisionError, "float division by zero");
        return NULL;
    }
    return PyFloat_FromDouble(numerator / denominator);
}

/* --- the planner's fetch rate for one URL (crawler.core.plan.fetch_rate_for) ------------ */

/* math.sqrt: ValueError below zero (-0.0 is its own root). */
static int
math_sqrt(double x, double *out)
{
    if (x < 0.0) {
        PyErr_SetString(PyExc_ValueError, "math domain error");
        return -1;
    }
    *out = sqrt(x);
    return 0;
}

/* plan._scalar_unbounded_rate for the objectives other than "age". */
static int
unbounded_rate(double change_rate, double weight, double mu, int harmonic, int beta_currency,
               double beta_days, long newton_steps, double *out)
{
    if (mu <= 0.0) {
        *out = Py_HUGE_VAL;
        return 0;
    }
    if (change_rate <= 0.0 || weight <= 0.0) {
        *out = 0.0;
        return 0;
    }
    if (harmonic) {
        double ratio = 4.0 * weight * change_rate / mu;
        double root;
        if (math_sqrt(change_rate * change_rate + ratio, &root) < 0) {
            return -1;
        }
        *out = (ratio / 2.0) / (change_rate + root);
        return 0;
    }
    double marginal = mu * change_rate / weight;
    double b = beta_currency ? change_rate * beta_days : 0.0;
    double headroom = 1.0 + b - marginal;
    if (headroom <= 1e-300) {
        *out = 0.0;
        return 0;
    }
    double log_headroom, decay;
    if (math_log(headroom, &log_headroom) < 0 || math_exp(-b, &decay) < 0) {
        return -1;
    }
    double z = b - log_headroom;
    double q;
    if (math_sqrt(py_max2(2.0 * (1.0 - headroom * decay), 0.0), &q) < 0) {
        return -1;
    }
    double s;
    if (q < 1.2) {
        s = q * (1.0 + q * (1.0 / 3.0 + q * (11.0 / 72.0 + q * (43.0 / 540.0
            + q * (769.0 / 17280.0 + q * (221.0 / 8505.0))))));
    }
    else {
        double inner, outer;
        if (math_log(1.0 + z, &inner) < 0
            || math_log(1.0 + z + inner, &outer) < 0) {
            return -1;
        }
        s = z + outer;
    }
    for (long step = 0; step < newton_steps + 1; step++) {
        if (s <= 1e-3) {
            break;
        }
        double log_s;
        if (math_log(1.0 + s, &log_s) < 0) {
            return -1;
        }
        s -= (s - log_s - z) * (1.0 + s) / s;
    }
    *out = s > 0.0 ? change_rate / s : 0.0;
    return 0;
}

PyDoc_STRVAR(fetch_rate_doc,
"fetch_rate(change_rate_per_day: float, weight: float, mu: float, objective: str,\n"
"           min_interval_days: float, max_interval_days: float, beta_days: float,\n"
"           newton_steps: int) -> float\n\n"
"crawler.core.plan.fetch_rate_for for any objective but \"age\" (ValueError): one URL's\n"
"fetch rate from mu, within its interval bounds.");

static PyObject *
fetch_rate(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "fetch_rate takes 8 arguments");
        return NULL;
    }
    double change_rate = PyFloat_AsDouble(args[0]);
    double weight = PyFloat_AsDouble(args[1]);
    double mu = PyFloat_AsDouble(args[2]);
    double min_interval = PyFloat_AsDouble(args[4]);
    double max_interval = PyFloat_AsDouble(args[5]);
    double beta_days = PyFloat_AsDouble(args[6]);
    long newton_steps = PyLong_AsLong(args[7]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (!PyUnicode_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "fetch_rate: the objective is a str");
        return NULL;
    }
    if (PyUnicode_CompareWithASCIIString(args[3], "age") == 0) {
        PyErr_SetString(PyExc_ValueError, "fetch_rate: the age objective is solved in numpy");
        return NULL;
    }
    int harmonic = PyUnicode_CompareWithASCIIString(args[3], "harmonic") == 0;
    int beta_currency = PyUnicode_CompareWithASCIIString(args[3], "beta_currency") == 0;
    double rate;
    if (unbounded_rate(change_rate, weight, mu, harmonic, beta_currency, beta_days,
                       newton_steps, &rate) < 0) {
        return NULL;
    }
    /* min(max(rate, low), high), as Python's min and max choose */
    double low = max_interval > 0.0 ? 1.0 / max_interval : Py_HUGE_VAL;
    double high = min_interval > 0.0 ? 1.0 / min_interval : Py_HUGE_VAL;
    return PyFloat_FromDouble(py_min2(py_max2(rate, low), high));
}

/* --- a slotted record with some fields replaced ---------------------------------------- */

PyDoc_STRVAR(replace_slots_doc,
"replace_slots(record, /, **changes) -> a new record\n\n"
"dataclasses.replace for an instance whose class keeps its fields in __slots__ of its own and\n"
"whose __init__ only stores them (a frozen slots dataclass without __post_init__ or\n"
"init=False fields: the caller checks): a copy with `changes` stored over the copied values,\n"
"made without calling __init__ (which sets every field through object.__setattr__).");

/* The offset of `name`'s slot in instances of `type`, or -1 with TypeError set. */
static Py_ssize_t
slot_offset(PyTypeObject *type, PyObject *name)
{
    PyObject *descriptor = PyDict_GetItemWithError(type->tp_dict, name); /* borrowed */
    if (descriptor == NULL && PyErr_Occurred()) {
        return -1;
    }
    if (descriptor != NULL && Py_IS_TYPE(descriptor, &PyMemberDescr_Type)) {
        PyMemberDef *member = ((PyMemberDescrObject *)descriptor)->d_member;
        if (member->type == T_OBJECT_EX && !(member->flags & READONLY)
            && ((PyDescrObject *)descriptor)->d_type == type) {
            return member->offset;
        }
    }
    PyErr_Format(PyExc_TypeError, "%s has no field %R", type->tp_name, name);
    return -1;
}

static PyObject *
replace_slots(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "replace_slots takes one positional argument");
        return NULL;
    }
    PyObject *record = args[0];
    PyTypeObject *type = Py_TYPE(record);
    if (type->tp_base != &PyBaseObject_Type || type->tp_dictoffset != 0
        || type->tp_itemsize != 0 || type->tp_members == NULL) {
        PyErr_Format(PyExc_TypeError, "%s is not a class of slots only", type->tp_name);
        return NULL;
    }
    for (PyMemberDef *member = type->tp_members; member->name != NULL; member++) {
        if (member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "%s has a slot that is not an object: %s",
                         type->tp_name, member->name);
            return NULL;
        }
    }
    PyObject *copy = type->tp_alloc(type, 0);
    if (copy == NULL) {
        return NULL;
    }
    for (PyMemberDef *member = type->tp_members; member->name != NULL; member++) {
        PyObject *value = *(PyObject **)((char *)record + member->offset);
        Py_XINCREF(value);
        *(PyObject **)((char *)copy + member->offset) = value;
    }
    Py_ssize_t changes = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < changes; i++) {
        Py_ssize_t offset = slot_offset(type, PyTuple_GET_ITEM(kwnames, i));
        if (offset < 0) {
            Py_DECREF(copy);
            return NULL;
        }
        PyObject **slot = (PyObject **)((char *)copy + offset);
        PyObject *value = args[nargs + i];
        Py_INCREF(value);
        Py_XSETREF(*slot, value);
    }
    return copy;
}

static PyMethodDef methods[] = {
    {"non_ascii_parts", non_ascii_parts, METH_O, non_ascii_parts_doc},
    {"ascii_simhash", (PyCFunction)(void (*)(void))ascii_simhash, METH_FASTCALL,
     ascii_simhash_doc},
    {"depth_upper_bound", depth_upper_bound, METH_O, depth_upper_bound_doc},
    {"posterior_mode", (PyCFunction)(void (*)(void))posterior_mode, METH_FASTCALL,
     posterior_mode_doc},
    {"log_detect_sums", (PyCFunction)(void (*)(void))log_detect_sums, METH_FASTCALL,
     log_detect_sums_doc},
    {"hermite_rates", (PyCFunction)(void (*)(void))hermite_rates, METH_FASTCALL,
     hermite_rates_doc},
    {"hermite_mean", (PyCFunction)(void (*)(void))hermite_mean, METH_FASTCALL, hermite_mean_doc},
    {"fetch_rate", (PyCFunction)(void (*)(void))fetch_rate, METH_FASTCALL, fetch_rate_doc},
    {"replace_slots", (PyCFunction)(void (*)(void))replace_slots, METH_FASTCALL | METH_KEYWORDS,
     replace_slots_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "crawler.core._speedups",
    "C paths of the page fingerprint, the HTML depth bound and the change-rate estimator.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    crc_table_init();
    return PyModule_Create(&module_def);
}
