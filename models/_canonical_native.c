/* The canonical form (models/canonical.py) at C speed: one pass over dict, list, tuple, str, int,
 * float, bool and None (exact types only) that writes RFC 8785 bytes after NFC.
 *
 * It answers only what it can vouch for and returns None for everything else (a subclass, a
 * type the canonical form refuses or reads otherwise, NaN, an unsafe integer, a lone surrogate,
 * a key that is not NFC, nesting beyond MAX_DEPTH): the pure-Python reference then gives the
 * exact bytes or the exact refusal with its path, so the refusals have one implementation.
 * No I/O, no Python code of ours is called (only unicodedata.normalize, for text that may not be
 * NFC). Where the time goes, and why each part is shaped so:
 * - strings: 16 characters at a time (SSE2) are copied and tested for '"', '\\', controls and
 *   non-ASCII in one mask; only flagged characters take the per-character path;
 * - NFC: a character is "stable" (combining class 0, NFC_Quick_Check=Yes, composes with nothing
 *   before it; text of stable characters is NFC) unless the table given by configure() says
 *   otherwise (models.canonical_unicode); Latin-1 text is all stable; text with an unstable
 *   character is written from unicodedata.normalize("NFC", text);
 * - keys: ASCII keys sort by their bytes (UTF-16 order for ASCII), by a radix sort on their
 *   first 8 bytes (7 bits each, packed) when there are many; other keys by UTF-16 code units;
 * - dicts: entries read in place where the layout is known (3.11, checked when the module
 *   loads), else PyDict_Next; the items of the objects being written on a stack of their own;
 * - numbers: ECMAScript's Number::toString; the shortest digits come from exact 128-bit integer
 *   arithmetic for doubles in [1e-10, 2**53) (almost every double a payload holds) and from
 *   Python's repr (PyOS_double_to_string 'r', the reference's source) for the others; digits
 *   are written 8 (scalar) or 16 (SSE2) at a time and trailing zeros stripped without a loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define DECLINE 1 /* not an error: the reference answers */
/* containers deep: as deep as the orjson path answered (deeper, the reference answers or refuses:
 * its limit is Python's recursion limit, which depends on the caller's own depth) */
#define MAX_DEPTH 254
#define SAFE_MAX 9007199254740991.0

/* one bit per BMP code point: not stable; astral ranges apart (sorted, inclusive) */
static uint8_t unstable_bmp[8192];
static uint32_t *astral_ranges; /* pairs */
static Py_ssize_t astral_count;
static PyObject *normalize_fn; /* unicodedata.normalize */
static PyObject *nfc_name;     /* "NFC" */

/* Keys repeat (every event has its "type", every level its "child"): the sort prefix and JSON
 * text of recently written ASCII keys, by object. An entry counts only in the call (generation)
 * that wrote it, and a call starts a new generation after running Python code (normalize), so
 * a key object freed and another one allocated at its address cannot be mistaken for it. */
#define KEY_CACHE 1024
typedef struct {
    PyObject *key;
    uint64_t prefix;
    uint32_t generation;
    uint8_t len;
    char text[19];
} KeyEntry;
static KeyEntry key_cache[KEY_CACHE];
static uint32_t generation;

static inline KeyEntry *key_slot(PyObject *k) { return &key_cache[((uintptr_t)k >> 4) & (KEY_CACHE - 1)]; }

/* The output is written into a buffer kept from call to call (its pages stay mapped and warm:
 * growing a fresh one by doubling costs page faults and copies on every large document) and
 * copied into the bytes object once. A buffer above SCRATCH_KEEP is given back after the call. */
#define SCRATCH_KEEP (8 << 20)
static char *scratch;
static Py_ssize_t scratch_cap;
static int scratch_busy; /* a call made while one runs (from a finalizer) gets its own buffer */

typedef struct {
    char *start, *p, *end;
    int depth, own;
    /* the items of the small dicts being written, one block of SMALL_DICT per open dict (a
     * frame of 384 bytes on the C stack per level made 200-level nesting spill out of L1) */
    struct Item *items;
} Out;

static int grow(Out *w, Py_ssize_t need) {
    Py_ssize_t used = w->p - w->start, cap = w->end - w->start;
    Py_ssize_t want = used + need, next = cap * 2;
    if (next < want) next = want + want / 2;
    char *bigger = PyMem_RawRealloc(w->start, next);
    if (bigger == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->start = bigger;
    w->p = bigger + used;
    w->end = bigger + next;
    return 0;
}

#define RESERVE(w, n) (((w)->end - (w)->p >= (Py_ssize_t)(n)) ? 0 : grow((w), (n)))

static inline int is_unstable(uint32_t c) {
    if (c < 0x10000) return (unstable_bmp[c >> 3] >> (c & 7)) & 1;
    Py_ssize_t lo = 0, hi = astral_count - 1;
    while (lo <= hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (c < astral_ranges[2 * mid]) hi = mid - 1;
        else if (c > astral_ranges[2 * mid + 1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* strings                                                                                    */

static const char HEX[] = "0123456789abcdef";

/* an ASCII character that needs escaping (RFC 8785 3.2.2.2: \b \t \n \f \r short forms) */
static inline char *write_escape(char *p, unsigned c) {
    *p++ = '\\';
    switch (c) {
    case '"': *p++ = '"'; break;
    case '\\': *p++ = '\\'; break;
    case '\b': *p++ = 'b'; break;
    case '\t': *p++ = 't'; break;
    case '\n': *p++ = 'n'; break;
    case '\f': *p++ = 'f'; break;
    case '\r': *p++ = 'r'; break;
    default:
        *p++ = 'u'; *p++ = '0'; *p++ = '0';
        *p++ = HEX[c >> 4]; *p++ = HEX[c & 15];
    }
    return p;
}

#if defined(__SSE2__)
/* bit i set: byte i is '"', '\\', below 0x20 or (as a signed byte) negative, i.e. not ASCII */
static inline int special_mask(__m128i x) {
    const __m128i q = _mm_set1_epi8('"'), b = _mm_set1_epi8('\\'), sp = _mm_set1_epi8(0x20);
    __m128i m = _mm_or_si128(_mm_cmpeq_epi8(x, q), _mm_cmpeq_epi8(x, b));
    return _mm_movemask_epi8(_mm_or_si128(m, _mm_cmplt_epi8(x, sp)));
}
#endif

static int emit_str(Out *w, PyObject *s, int check_nfc);

/* The text of a string whose characters are `kind` bytes wide (0: ASCII); budget: the UTF-8
 * bytes a character may take (escapes reserve their extra). 0, -1 (exception), DECLINE or 2: not
 * NFC. */
static int write_text(Out *w, int kind, const void *data, Py_ssize_t n, int check_nfc) {
    Py_ssize_t budget = kind == 0 ? 1 : kind == PyUnicode_1BYTE_KIND ? 2 : kind == 2 ? 3 : 4;
    if (kind == 0) kind = PyUnicode_1BYTE_KIND;
    if (RESERVE(w, n * budget + 2 + 64) < 0) return -1;
    char *p = w->p;
    const uint8_t *s1 = data;
    const uint16_t *s2 = data;
    const uint32_t *s4 = data;
    Py_ssize_t i = 0;
    *p++ = '"';
#if defined(__SSE2__)
    /* a short 1-byte text in one load, when reading 16 bytes cannot cross into another page
     * (the bytes past the text are copied but not counted, and masked out) */
    if (kind == PyUnicode_1BYTE_KIND && n < 16 && ((uintptr_t)s1 & 4095) <= 4096 - 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)s1);
        _mm_storeu_si128((__m128i *)p, x);
        if ((special_mask(x) & ((1 << n) - 1)) == 0) {
            p += n;
            *p++ = '"';
            w->p = p;
            return 0;
        }
    }
#endif
    for (;;) {
#if defined(__SSE2__)
        int mask = 0;
        while (i + 16 <= n) {
            __m128i x;
            if (kind == PyUnicode_1BYTE_KIND) {
                x = _mm_loadu_si128((const __m128i *)(s1 + i));
            } else if (kind == PyUnicode_2BYTE_KIND) {
                /* unsigned saturation of signed words: above 0xFF -> 0xFF, above 0x7FFF -> 0;
                 * both flagged, as every non-ASCII byte is */
                x = _mm_packus_epi16(_mm_loadu_si128((const __m128i *)(s2 + i)),
                                     _mm_loadu_si128((const __m128i *)(s2 + i + 8)));
            } else {
                __m128i a = _mm_packs_epi32(_mm_loadu_si128((const __m128i *)(s4 + i)),
                                            _mm_loadu_si128((const __m128i *)(s4 + i + 4)));
                __m128i b = _mm_packs_epi32(_mm_loadu_si128((const __m128i *)(s4 + i + 8)),
                                            _mm_loadu_si128((const __m128i *)(s4 + i + 12)));
                x = _mm_packus_epi16(a, b);
            }
            _mm_storeu_si128((__m128i *)p, x);
            mask = special_mask(x);
            if (mask) break;
            i += 16;
            p += 16;
        }
        if (mask) {
            int z = __builtin_ctz(mask);
            i += z;
            p += z;
        } else
#endif
        {
            /* the tail (or every character without SSE2): copy the plain ASCII run */
            while (i < n) {
                uint32_t c = kind == 1 ? s1[i] : kind == 2 ? s2[i] : s4[i];
                if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') break;
                *p++ = (char)c;
                i++;
            }
            if (i >= n) break;
        }
        uint32_t c = kind == 1 ? s1[i] : kind == 2 ? s2[i] : s4[i];
        i++;
        if (c < 0x80) {
            w->p = p;
            if (RESERVE(w, 6 + (n - i) * budget + 2 + 64) < 0) return -1;
            p = write_escape(w->p, c);
        } else if (c < 0x800) {
            if (check_nfc && c >= 0x300 && is_unstable(c)) return 2;
            *p++ = (char)(0xC0 | (c >> 6));
            *p++ = (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            if (c >= 0xD800 && c <= 0xDFFF) return DECLINE; /* lone surrogate: refused */
            if (check_nfc && is_unstable(c)) return 2;
            *p++ = (char)(0xE0 | (c >> 12));
            *p++ = (char)(0x80 | ((c >> 6) & 0x3F));
            *p++ = (char)(0x80 | (c & 0x3F));
        } else {
            if (check_nfc && is_unstable(c)) return 2;
            *p++ = (char)(0xF0 | (c >> 18));
            *p++ = (char)(0x80 | ((c >> 12) & 0x3F));
            *p++ = (char)(0x80 | ((c >> 6) & 0x3F));
            *p++ = (char)(0x80 | (c & 0x3F));
        }
    }
    *p++ = '"';
    w->p = p;
    return 0;
}

static int emit_str(Out *w, PyObject *s, int check_nfc) {
    if (PyUnicode_READY(s) < 0) return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    if (kind == PyUnicode_1BYTE_KIND) check_nfc = 0; /* Latin-1: every character is stable */
    Py_ssize_t mark = w->p - w->start; /* an offset: the buffer may move */
    int r = write_text(w, PyUnicode_IS_ASCII(s) ? 0 : kind, PyUnicode_DATA(s), n, check_nfc);
    if (r != 2) return r;
    /* not stable: write the NFC form (unicodedata returns the text itself when it is NFC) */
    w->p = w->start + mark;
    PyObject *t = PyObject_CallFunctionObjArgs(normalize_fn, nfc_name, s, NULL);
    generation++; /* see key_cache */
    if (t == NULL) return -1;
    r = PyUnicode_CheckExact(t) ? emit_str(w, t, 0) : DECLINE;
    Py_DECREF(t);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* numbers                                                                                    */

/* The 8 digits of v < 10**8, zero-padded, as the 8 bytes of a word in memory order (first digit
 * in the low byte): the halves, quarters and digits split in parallel lanes by multiplications
 * (x * 10486 >> 20 is x / 100 below 10**4, x * 103 >> 10 is x / 10 below 100), stored at once.
 * A table of digit pairs took four dependent divisions and four 2-byte stores per 8 digits. */
static inline uint64_t ascii8(uint32_t v) {
    uint64_t x = (uint64_t)(v / 10000) | ((uint64_t)(v % 10000) << 32);
    uint64_t h = ((x * 10486) >> 20) & 0x0000007F0000007FULL;
    x = h | ((x - h * 100) << 16);
    uint64_t t = ((x * 103) >> 10) & 0x000F000F000F000FULL;
    x = t | ((x - t * 10) << 8);
    return x + 0x3030303030303030ULL;
}

static inline void store8(char *p, uint64_t x) { memcpy(p, &x, 8); }

#if defined(__SSE2__)
/* The 8 digits of v < 10**8 in the 16-bit lanes of a vector (W. Mula's SSE2 conversion: the
 * halves by a multiplication, each half divided by 1000, 100, 10 and 1 in parallel lanes) */
static inline __m128i digits8_sse2(uint32_t v) {
    __m128i x = _mm_cvtsi32_si128((int)v);
    __m128i abcd = _mm_srli_epi64(_mm_mul_epu32(x, _mm_set1_epi32((int)0xd1b71759)), 45);
    __m128i efgh = _mm_sub_epi32(x, _mm_mul_epu32(abcd, _mm_set1_epi32(10000)));
    __m128i v1 = _mm_slli_epi64(_mm_unpacklo_epi16(abcd, efgh), 2);
    __m128i v2 = _mm_unpacklo_epi16(v1, v1);
    v2 = _mm_unpacklo_epi32(v2, v2); /* abcd * 4 four times, then efgh * 4 four times */
    __m128i v3 = _mm_mulhi_epu16(
        v2, _mm_setr_epi16(8389, 5243, 13108, (short)32768, 8389, 5243, 13108, (short)32768));
    __m128i v4 = _mm_mulhi_epu16(
        v3, _mm_setr_epi16(128, 2048, 8192, (short)32768, 128, 2048, 8192, (short)32768));
    /* a, ab, abc, abcd, ... minus 10 times the lane before: a, b, c, d, ... */
    return _mm_sub_epi16(v4, _mm_slli_epi64(_mm_mullo_epi16(v4, _mm_set1_epi16(10)), 16));
}

/* the 16 digits of hi * 10**8 + lo (each < 10**8), zero-padded, as text in memory order */
static inline __m128i ascii16(uint32_t hi, uint32_t lo) {
    __m128i d = _mm_packus_epi16(digits8_sse2(hi), digits8_sse2(lo));
    return _mm_add_epi8(d, _mm_set1_epi8('0'));
}
#endif

/* the number of decimal digits of v > 0 */
static const uint64_t P10[20] = {
    1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
    100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL,
    10000000000000ULL, 100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL,
    100000000000000000ULL, 1000000000000000000ULL, 10000000000000000000ULL};

static inline int digit_count(uint64_t v) {
    int k = ((64 - __builtin_clzll(v)) * 1233) >> 12; /* floor(log10(2**bits)) */
    return k + (k < 20 && v >= P10[k]);
}

/* exactly the k digits of v (v < 10**k, 1 <= k <= 20), in 8-byte stores: the first group's
 * leading zeros shifted out, the groups after it overlapping its tail. Up to 8 bytes past p + k
 * are overwritten (with NULs): every caller has room there and writes what follows afterwards. */
static inline void write_digits(char *p, uint64_t v, int k) {
    if (k == 1) { /* the integer part of most doubles in a payload */
        *p = (char)('0' + v);
        return;
    }
    if (k <= 8) {
        store8(p, ascii8((uint32_t)v) >> (8 * (8 - k)));
        return;
    }
    uint64_t top = v / 100000000;
    uint32_t low = (uint32_t)(v - top * 100000000);
#if defined(__SSE2__)
    /* 16 digits at once (a double's 17 are one digit and these): 10-15 ns less per double */
    if (k <= 16) {
        __m128i x = ascii16((uint32_t)top, low);
        unsigned __int128 t = (unsigned __int128)(uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(x, x)) << 64 |
                              (uint64_t)_mm_cvtsi128_si64(x);
        t >>= 8 * (16 - k); /* the leading zeros out */
        memcpy(p, &t, 16);
    } else if (k == 17) { /* most doubles' significands: one digit, then the 16 */
        uint64_t first = top / 100000000;
        *p = (char)('0' + first);
        _mm_storeu_si128((__m128i *)(p + 1), ascii16((uint32_t)(top - first * 100000000), low));
    } else {
        uint64_t first = top / 100000000;
        store8(p, ascii8((uint32_t)first) >> (8 * (24 - k)));
        _mm_storeu_si128((__m128i *)(p + k - 16),
                         ascii16((uint32_t)(top - first * 100000000), low));
    }
#else
    if (k <= 16) {
        store8(p, ascii8((uint32_t)top) >> (8 * (16 - k)));
    } else {
        uint64_t first = top / 100000000;
        store8(p, ascii8((uint32_t)first) >> (8 * (24 - k)));
        store8(p + k - 16, ascii8((uint32_t)(top - first * 100000000)));
    }
    store8(p + k - 8, ascii8(low));
#endif
}

/* v / 10**j (1 <= j <= 19) by a multiplication: a 64-bit division by a variable is 15-45
 * cycles. For v < 2**57 (every 17-digit significand), m = ceil(2**(57+l) / 10**j) with
 * 2**l >= 10**j gives the exact quotient (Granlund-Montgomery; the error term is below 1/10**j) */
static uint64_t p10_magic[20];
static uint8_t p10_shift[20];

static void p10_magic_init(void) {
    for (int j = 1; j < 20; j++) {
        int l = 64 - __builtin_clzll(P10[j] - 1);
        unsigned __int128 top = (unsigned __int128)1 << (57 + l);
        unsigned __int128 m = (top + P10[j] - 1) / P10[j];
        p10_shift[j] = (uint8_t)(57 + l);
        p10_magic[j] = m >> 64 ? 0 : (uint64_t)m; /* 0: too wide, divide (j > 17) */
    }
}

static inline uint64_t div_p10(uint64_t v, int j) {
    if (v >> 57 || p10_magic[j] == 0) return v / P10[j];
    return (uint64_t)(((unsigned __int128)v * p10_magic[j]) >> p10_shift[j]);
}

/* the decimal digits of v */
static char *write_u64(char *p, uint64_t v) {
    if (v < 10) {
        *p = (char)('0' + v);
        return p + 1;
    }
    if (v < 1000) { /* counters, levels, ranks: without ascii8's chain of products */
        uint32_t u = (uint32_t)v, t = u / 10;
        p[2] = (char)('0' + u - 10 * t);
        if (u < 100) {
            p[0] = (char)('0' + t);
            p[1] = p[2];
            return p + 2;
        }
        p[0] = (char)('0' + t / 10);
        p[1] = (char)('0' + t % 10);
        return p + 3;
    }
    int k = digit_count(v);
    write_digits(p, v, k);
    return p + k;
}

static const uint64_t POW5[28] = {
    1ULL, 5ULL, 25ULL, 125ULL, 625ULL, 3125ULL, 15625ULL, 78125ULL, 390625ULL, 1953125ULL,
    9765625ULL, 48828125ULL, 244140625ULL, 1220703125ULL, 6103515625ULL, 30517578125ULL,
    152587890625ULL, 762939453125ULL, 3814697265625ULL, 19073486328125ULL, 95367431640625ULL,
    476837158203125ULL, 2384185791015625ULL, 11920928955078125ULL, 59604644775390625ULL,
    298023223876953125ULL, 1490116119384765625ULL, 7450580596923828125ULL};

/* 5**-k mod 2**64 (k <= 16): 5 is odd, so it has an inverse modulo a power of two */
static uint64_t INV5[17];

static void inv5_init(void) {
    uint64_t inv = 0xCCCCCCCCCCCCCCCDULL; /* 5 * inv == 1 mod 2**64 */
    INV5[0] = 1;
    for (int k = 1; k <= 16; k++) INV5[k] = INV5[k - 1] * inv;
}

static inline uint64_t rotr64(uint64_t x, int r) { return (x >> r) | (x << ((64 - r) & 63)); }

/* The shortest digits D and exponent q (x = D * 10**q as read back, round half even), closest
 * to x among the shortest, for a double in about [1e-10, 2**53). 0: outside that range.
 * Scaled by 10**s, where 10**-s <= ulp(x) < 10**(1-s), over 2**(E+2) where x = m * 2**-E, the
 * value and the ends of its rounding interval are N * 5**s / 2**sh with N = 4m and 4m +- 2 (4m - 1
 * below a power of two): exact in 128 bits for s <= 27. The interval is 1 to 10 units wide, so
 * the integers [lo, hi] in it are the 17-digit (or so) candidates: a multiple of 10 among them is
 * the only one (and its trailing zeros are dropped: x = 0.25 is "25" * 10**-2), else the one
 * nearest to x is the answer. No division by a variable: this runs per double. */
static int shortest(double x, uint64_t *digits, int *q) {
    uint64_t bits;
    memcpy(&bits, &x, 8);
    int be = (int)((bits >> 52) & 0x7FF);
    uint64_t frac = bits & ((1ULL << 52) - 1);
    if (be == 0) return 0;
    uint64_t m = frac | (1ULL << 52);
    int E = 1075 - be; /* x = m * 2**-E, ulp(x) = 2**-E */
    if (E < 0) return 0;
    int s = -((-E * 78913) >> 18); /* -floor(log10(2**-E)), exact for |E| < 1650 */
    int sh = E + 2 - s;
    if (s > 27 || sh < 1 || sh > 120) return 0;
    typedef unsigned __int128 u128;
    uint64_t pow5 = POW5[s];
    u128 mask = (((u128)1) << sh) - 1;
    u128 pv = (u128)(4 * m) * pow5, step = (u128)pow5 << 1;
    u128 plo = pv - ((frac == 0 && be > 1) ? step >> 1 : step);
    u128 phi = pv + step;
    uint64_t v = (uint64_t)(pv >> sh), lo = (uint64_t)(plo >> sh), hi = (uint64_t)(phi >> sh);
    int inclusive = (m & 1) == 0;
    if (!(inclusive && (plo & mask) == 0)) lo += 1;
    if (!inclusive && (phi & mask) == 0) hi -= 1;
    if (lo > hi) return 0; /* below a power of two the interval can hold no integer */
    /* both candidates, then a select: which one it is is a coin toss (no branch to mispredict) */
    uint64_t c10 = (lo + 9) / 10;
    u128 f = pv & mask, half = ((u128)1) << (sh - 1);
    uint64_t near = v + ((f > half) | ((f == half) & (v & 1)));
    near = near < lo ? lo : near;
    near = near > hi ? hi : near;
    int J = c10 * 10 <= hi;
    uint64_t c = J ? c10 : near;
    /* the trailing zeros, 16, 8, 4, 2 and 1 at a time without a branch: n is a multiple of 10**k
     * exactly when rotr(n * 5**-k mod 2**64, k) <= (2**64 - 1) / 10**k, and that is then n / 10**k
     * (Granlund-Montgomery). Dividing by 10 until it does not divide took a mispredicted exit
     * and a division per zero, half the time of a document of rounded figures (0.25, 12.5). */
    if (rotr64(c * INV5[1], 1) <= UINT64_MAX / 10) {
        for (int b = 4; b >= 0; b--) {
            int z = 1 << b;
            uint64_t t = rotr64(c * INV5[z], z);
            int take = t <= UINT64_MAX / P10[z];
            c = take ? t : c;
            J += take ? z : 0;
        }
    }
    *digits = c;
    *q = J - s;
    return 1;
}

/* ECMAScript Number::toString of digits (value = 0.DIGITS * 10**n), as format_number lays out */
static char *layout(char *p, const char *d, int k, int n) {
    /* fixed-size copies (d has 48 bytes, p 64 bytes of room): no call per number */
    if (k <= n && n <= 21) {
        memcpy(p, d, 24);
        memset(p + k, '0', 24);
        return p + n;
    }
    if (0 < n && n <= 21) {
        memcpy(p, d, 24);
        p[n] = '.';
        memcpy(p + n + 1, d + n, 24);
        return p + k + 1;
    }
    if (-6 < n && n <= 0) {
        *p++ = '0';
        *p++ = '.';
        memset(p, '0', 8);
        p += -n;
        memcpy(p, d, 24);
        return p + k;
    }
    *p++ = d[0];
    if (k > 1) {
        *p++ = '.';
        memcpy(p, d + 1, 24);
        p += k - 1;
    }
    *p++ = 'e';
    *p++ = n - 1 >= 0 ? '+' : '-';
    return write_u64(p, (uint64_t)abs(n - 1));
}

/* layout() of the k digits of an integer (value = 0.DIGITS * 10**n), each written where it goes:
 * writing them into a buffer first and copying it (wide loads of the narrow stores just made)
 * stalled on store forwarding, a sixth of the time of a float-heavy document */
static char *layout_digits(char *p, uint64_t digits, int k, int n) {
    if (k <= n && n <= 21) {
        write_digits(p, digits, k);
        memset(p + k, '0', 24);
        return p + n;
    }
    if (0 < n && n <= 21) {
        /* the integer part, then the k - n fraction digits */
        uint64_t whole = div_p10(digits, k - n);
        write_digits(p, whole, n);
        p[n] = '.';
        write_digits(p + n + 1, digits - whole * P10[k - n], k - n);
        return p + k + 1;
    }
    if (-6 < n && n <= 0) {
        memset(p, '0', 8);
        p[1] = '.';
        write_digits(p + 2 - n, digits, k);
        return p + 2 - n + k;
    }
    write_digits(p + 1, digits, k); /* then the first digit moves before the point */
    p[0] = p[1];
    if (k > 1) {
        p[1] = '.';
        p += k + 1;
    } else {
        p += 1;
    }
    *p++ = 'e';
    *p++ = n - 1 >= 0 ? '+' : '-';
    return write_u64(p, (uint64_t)abs(n - 1));
}

/* the number text of a finite double into p (at least 32 bytes); NULL: exception set */
static char *write_number(char *p, double x) {
    if (x == 0) {
        *p++ = '0'; /* also -0 */
        return p;
    }
    /* the sign without a branch: it is a coin toss in measurements and embeddings */
    uint64_t bits;
    memcpy(&bits, &x, 8);
    *p = '-';
    p += bits >> 63;
    x = fabs(x);
    if (x <= SAFE_MAX && x == (double)(int64_t)x) return write_u64(p, (uint64_t)x);
    char d[48]; /* repr: up to 17 digits after up to 4 zeros ("0.0001..."); room for copies */
    int k, n;
    uint64_t digits;
    int q;
    if (shortest(x, &digits, &q)) {
        k = digit_count(digits);
        return layout_digits(p, digits, k, k + q);
    } else {
        /* repr's shortest digits, e.g. "5e-324", "1.7976931348623157e+308", "1e+16" */
        char *r = PyOS_double_to_string(x, 'r', 0, 0, NULL);
        if (r == NULL) return NULL;
        int point = -1, exp10 = 0;
        k = 0;
        for (const char *c = r; *c; c++) {
            if (*c == '.') point = k;
            else if (*c == 'e') {
                exp10 = atoi(c + 1);
                break;
            } else if (k < 30) d[k++] = *c;
        }
        PyMem_Free(r);
        if (point < 0) point = k;
        int lead = 0;
        while (lead < k - 1 && d[lead] == '0') lead++;
        memmove(d, d + lead, k - lead);
        k -= lead;
        n = point - lead + exp10;
        while (k > 1 && d[k - 1] == '0') k--;
    }
    return layout(p, d, k, n);
}

static int emit_float(Out *w, double x) {
    if (!isfinite(x)) return DECLINE;
    if (RESERVE(w, 64) < 0) return -1;
    char *p = write_number(w->p, x);
    if (p == NULL) return -1;
    w->p = p;
    return 0;
}

static int emit_int(Out *w, PyObject *v) {
    long long x;
#if PY_VERSION_HEX < 0x030C0000
    Py_ssize_t size = Py_SIZE(v); /* 3.11: sign * number of 30-bit digits */
    if (size >= -1 && size <= 1) {
        x = (long long)size * ((PyLongObject *)v)->ob_digit[0];
    } else
#endif
    {
        int overflow;
        x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || x > 9007199254740991LL || x < -9007199254740991LL) return DECLINE;
        if (x == -1 && PyErr_Occurred()) return -1;
    }
    if (RESERVE(w, 32) < 0) return -1;
    char *p = w->p;
    if (x < 0) {
        *p++ = '-';
        x = -x;
    }
    w->p = write_u64(p, (uint64_t)x);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* containers                                                                                 */

typedef struct Item {
    uint64_t prefix; /* first 8 bytes, big-endian, zero-padded (ASCII keys) */
    PyObject *key, *value;
} Item;

/* at most this many entries: a dict's items go to Out.items, sorted by insertion */
#define SMALL_DICT 16
#define ITEM_STACK ((MAX_DEPTH + 1) * SMALL_DICT)
static Item item_stack[ITEM_STACK]; /* the kept buffer's call uses it; a nested call its own */


static inline __attribute__((always_inline)) int emit(Out *w, PyObject *v);

/* the sort prefix of an ASCII text: its first 8 bytes, big-endian, zero-padded. One load (past
 * a short text's end, but never into another page: the bytes past it are masked off) instead of
 * byte copies followed by a wide read of them, which stall on store forwarding. */
static inline uint64_t ascii_prefix(const char *data, Py_ssize_t len) {
    uint64_t x = 0;
    if (len >= 8 || ((uintptr_t)data & 4095) <= 4096 - 8) {
        memcpy(&x, data, 8);
        x = __builtin_bswap64(x);
        if (len < 8) x = len ? x & (~0ULL << (8 * (8 - len))) : 0;
    } else {
        for (Py_ssize_t b = 0; b < 8; b++) x = (x << 8) | (b < len ? (uint8_t)data[b] : 0);
    }
    return x;
}

static inline int ascii_cmp(const Item *a, const Item *b) {
    if (a->prefix != b->prefix) return a->prefix < b->prefix ? -1 : 1;
    Py_ssize_t la = PyUnicode_GET_LENGTH(a->key), lb = PyUnicode_GET_LENGTH(b->key);
    int r = memcmp(PyUnicode_DATA(a->key), PyUnicode_DATA(b->key), la < lb ? la : lb);
    return r ? r : (la > lb) - (la < lb);
}

/* UTF-16 code unit order from code points: U+E000-U+FFFF after the astral planes (whose
 * surrogates are D800-DFFF) */
static inline uint32_t utf16_rank(uint32_t c) { return c >= 0xE000 && c <= 0xFFFF ? c + 0x200000 : c; }

static int general_cmp(const void *pa, const void *pb) {
    PyObject *a = ((const Item *)pa)->key, *b = ((const Item *)pb)->key;
    Py_ssize_t la = PyUnicode_GET_LENGTH(a), lb = PyUnicode_GET_LENGTH(b);
    int ka = PyUnicode_KIND(a), kb = PyUnicode_KIND(b);
    const void *da = PyUnicode_DATA(a), *db = PyUnicode_DATA(b);
    for (Py_ssize_t i = 0; i < la && i < lb; i++) {
        uint32_t ca = PyUnicode_READ(ka, da, i), cb = PyUnicode_READ(kb, db, i);
        if (ca != cb) return utf16_rank(ca) < utf16_rank(cb) ? -1 : 1;
    }
    return (la > lb) - (la < lb);
}

static int ascii_qcmp(const void *a, const void *b) { return ascii_cmp(a, b); }

static void insertion_sort(Item *it, Py_ssize_t n) {
    for (Py_ssize_t i = 1; i < n; i++) {
        Item x = it[i];
        Py_ssize_t j = i;
        while (j > 0 && ascii_cmp(&x, &it[j - 1]) < 0) {
            it[j] = it[j - 1];
            j--;
        }
        it[j] = x;
    }
}

/* LSD radix sort on the 8-byte prefixes (a byte that is the same in every key is skipped), then
 * keys that share their first 8 bytes are ordered by a comparison sort */
static int radix_sort(Item *it, Py_ssize_t n) {
    Item *tmp = PyMem_Malloc(n * sizeof(Item));
    if (tmp == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    uint32_t (*counts)[256] = PyMem_Calloc(8, sizeof(*counts));
    if (counts == NULL) {
        PyMem_Free(tmp);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t p = it[i].prefix;
        for (int b = 0; b < 8; b++) counts[b][(p >> (8 * b)) & 255]++;
    }
    Item *src = it, *dst = tmp;
    for (int b = 0; b < 8; b++) {
        uint32_t *c = counts[b];
        if (c[(it[0].prefix >> (8 * b)) & 255] == (uint32_t)n) continue;
        uint32_t sum = 0;
        for (int v = 0; v < 256; v++) {
            uint32_t t = c[v];
            c[v] = sum;
            sum += t;
        }
        for (Py_ssize_t i = 0; i < n; i++) dst[c[(src[i].prefix >> (8 * b)) & 255]++] = src[i];
        Item *t = src;
        src = dst;
        dst = t;
    }
    if (src != it) memcpy(it, src, n * sizeof(Item));
    PyMem_Free(tmp);
    PyMem_Free(counts);
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t j = i + 1;
        while (j < n && it[j].prefix == it[i].prefix) j++;
        if (j - i > 16) qsort(it + i, j - i, sizeof(Item), ascii_qcmp);
        else if (j - i > 1) insertion_sort(it + i, j - i);
        i = j;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* reading a dict's entries                                                                   */

/* A dict's entries are read in place where this build knows CPython's layout (3.11: a combined
 * table is a PyDictKeysObject whose entry array follows its index table), instead of a
 * PyDict_Next call per entry: on documents of small objects (an event log, deep nesting) those
 * calls were 15-30% of the time. The layout is mirrored from Include/internal/pycore_dict.h of
 * 3.11 (the internal header needs Py_BUILD_CORE); the module checks it against PyDict_Next when
 * it loads (entries_selfcheck) and uses PyDict_Next if they disagree, on a split table (an
 * instance's __dict__) and on every other version. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define DIRECT_ENTRIES 1
typedef struct {
    Py_ssize_t dk_refcnt;
    uint8_t dk_log2_size;
    uint8_t dk_log2_index_bytes;
    uint8_t dk_kind; /* 0: entries of (hash, key, value); 1: of (key, value); 2: split */
    uint32_t dk_version;
    Py_ssize_t dk_usable;
    Py_ssize_t dk_nentries;
    char dk_indices[];
} KeysLayout;
static int direct_entries; /* the self-check passed */
#endif

typedef struct {
    PyObject **e, **end; /* in place: the next entry's key slot (the value follows it) */
    int stride;          /* pointers per entry */
    PyObject *d;         /* else PyDict_Next */
    Py_ssize_t pos;
} Entries;

/* where the entries start (NULL: read them with PyDict_Next) */
static inline void entries_start(Entries *it, PyObject *d) {
    it->e = NULL;
    it->d = d;
    it->pos = 0;
#ifdef DIRECT_ENTRIES
    PyDictObject *o = (PyDictObject *)d;
    if (direct_entries && o->ma_values == NULL) {
        KeysLayout *k = (KeysLayout *)o->ma_keys;
        if (k->dk_kind <= 1) {
            it->stride = k->dk_kind == 0 ? 3 : 2;
            char *first = k->dk_indices + ((size_t)1 << k->dk_log2_index_bytes);
            it->e = (PyObject **)first + (it->stride == 3); /* past me_hash */
            it->end = it->e + it->stride * k->dk_nentries;
        }
    }
#endif
}

/* the next (key, value); 0 at the end. A deleted entry has no value (as PyDict_Next skips it) */
static inline int entries_next(Entries *it, PyObject **k, PyObject **v) {
    if (it->e == NULL) return PyDict_Next(it->d, &it->pos, k, v);
    while (it->e < it->end) {
        PyObject **x = it->e;
        it->e += it->stride;
        if (x[1] != NULL) {
            *k = x[0];
            *v = x[1];
            return 1;
        }
    }
    return 0;
}

/* Whether reading in place gives what PyDict_Next gives, on both kinds of combined table with a
 * deleted entry; the layout is used only then. */
static int entries_selfcheck(void) {
#ifdef DIRECT_ENTRIES
    direct_entries = 1;
    int ok = 1;
    for (int general = 0; general < 2 && ok; general++) {
        PyObject *d = PyDict_New();
        if (d == NULL) return -1;
        for (long i = 0; i < 12 && ok; i++) {
            PyObject *k = general && i == 5 ? PyLong_FromLong(i) : PyUnicode_FromFormat("k%ld", i);
            PyObject *v = PyLong_FromLong(i * 7);
            ok = k && v && PyDict_SetItem(d, k, v) == 0;
            if (ok && i == 3) ok = PyDict_DelItem(d, k) == 0;
            Py_XDECREF(k);
            Py_XDECREF(v);
        }
        if (!ok) {
            Py_DECREF(d);
            return -1;
        }
        Entries it;
        entries_start(&it, d);
        Py_ssize_t pos = 0, seen = 0;
        PyObject *k1, *v1, *k2, *v2;
        ok = it.e != NULL && it.stride == (general ? 3 : 2);
        while (ok && PyDict_Next(d, &pos, &k1, &v1)) {
            ok = entries_next(&it, &k2, &v2) && k1 == k2 && v1 == v2;
            seen++;
        }
        ok = ok && seen == 11 && !entries_next(&it, &k2, &v2);
        Py_DECREF(d);
    }
    direct_entries = ok;
#endif
    return 0;
}

/* Whether a key's text is one the native path writes as it is: no lone surrogate, stable. */
static int key_is_plain(PyObject *k) {
    int kind = PyUnicode_KIND(k);
    if (kind == PyUnicode_1BYTE_KIND) return 1;
    const void *d = PyUnicode_DATA(k);
    Py_ssize_t n = PyUnicode_GET_LENGTH(k);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t c = PyUnicode_READ(kind, d, i);
        if (c >= 0x300 && ((c >= 0xD800 && c <= 0xDFFF) || is_unstable(c))) return 0;
    }
    return 1;
}

/* Many ASCII keys (feature maps, headers): a radix sort of (prefix, index) pairs, and each key's
 * text (up to 16 bytes, when it needs no escape) copied while the keys are read in the dict's
 * order, so writing them in sorted order does not visit the key objects again (a cache miss
 * each in a large document). 2: a key is not ASCII text, the general path answers. */
typedef struct {
    uint64_t prefix;
    uint64_t index;
} SortKey;

typedef struct {
    PyObject *key, *value;
    uint32_t len, plain;
    char text[16];
} BigItem;

/* The packed 56-bit prefixes sort in 6 passes of (at most) 10-bit digits: a byte of key text has
 * few values (letters, a separator, hex digits), one of them in most keys, and each key of a
 * byte pass waited on the count the key before it had just stored (the same bucket) */
#define DIGITS 6
#define DIGIT_VALUES 1024
static const uint8_t DIGIT_SHIFT[DIGITS] = {0, 10, 20, 29, 38, 47};
static const uint16_t DIGIT_MASK[DIGITS] = {1023, 1023, 511, 511, 511, 511};

static inline unsigned radix_digit(uint64_t prefix, int b) {
    return (unsigned)(prefix >> DIGIT_SHIFT[b]) & DIGIT_MASK[b];
}

static const BigItem *tie_items; /* for the comparison sort of keys sharing 8 bytes */

static int big_cmp(const void *pa, const void *pb) {
    const SortKey *a = pa, *b = pb;
    if (a->prefix != b->prefix) return a->prefix < b->prefix ? -1 : 1;
    PyObject *x = tie_items[a->index].key, *y = tie_items[b->index].key;
    Py_ssize_t la = PyUnicode_GET_LENGTH(x), lb = PyUnicode_GET_LENGTH(y);
    int r = memcmp(PyUnicode_DATA(x), PyUnicode_DATA(y), la < lb ? la : lb);
    return r ? r : (la > lb) - (la < lb);
}

static int emit_big_dict(Out *w, PyObject *d, Py_ssize_t n) {
    BigItem *it = PyMem_Malloc(n * sizeof(BigItem));
    SortKey *keys = PyMem_Malloc(2 * n * sizeof(SortKey));
    uint32_t(*counts)[DIGIT_VALUES] = PyMem_Calloc(DIGITS, sizeof(*counts));
    int r = 0;
    if (it == NULL || keys == NULL || counts == NULL) {
        PyErr_NoMemory();
        r = -1;
        goto done;
    }
    Py_ssize_t i = 0;
    PyObject *k, *v;
    Entries entries;
    entries_start(&entries, d);
    while (entries_next(&entries, &k, &v)) {
        /* a large dict's key objects are spread over memory: ask for one 8 entries ahead */
        if (entries.e != NULL && entries.e + 8 * entries.stride < entries.end)
            __builtin_prefetch(entries.e[8 * entries.stride]);
        if (!PyUnicode_CheckExact(k) || PyUnicode_READY(k) < 0 || !PyUnicode_IS_ASCII(k)) {
            PyErr_Clear();
            r = 2;
            goto done;
        }
        BigItem *e = &it[i];
        const char *data = PyUnicode_DATA(k);
        Py_ssize_t len = PyUnicode_GET_LENGTH(k);
        e->key = k;
        e->value = v;
        e->len = (uint32_t)len;
        e->plain = 0;
        uint64_t prefix;
#if defined(__SSE2__)
        /* one 16-byte load (when it cannot cross a page) and one store: byte copies followed
         * by a wide load of them would stall on store forwarding */
        if (len >= 16 || ((uintptr_t)data & 4095) <= 4096 - 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)data);
            _mm_storeu_si128((__m128i *)e->text, x);
            if (len <= 16) e->plain = (special_mask(x) & ((1 << len) - 1)) == 0;
            prefix = __builtin_bswap64((uint64_t)_mm_cvtsi128_si64(x));
            if (len < 8) prefix = len ? prefix & (~0ULL << (8 * (8 - len))) : 0;
        } else
#endif
        {
            memset(e->text, 0, 16);
            memcpy(e->text, data, len); /* len < 16 */
            memcpy(&prefix, e->text, 8);
            prefix = __builtin_bswap64(prefix);
            e->plain = 0; /* written from the key object */
        }
        /* ASCII bytes have a zero top bit: the 8 bytes' 7 bits packed into 56 (in order), one
         * radix pass fewer */
        prefix = (prefix & 0x007F007F007F007FULL) | ((prefix & 0x7F007F007F007F00ULL) >> 1);
        prefix = (prefix & 0x00003FFF00003FFFULL) | ((prefix & 0x3FFF00003FFF0000ULL) >> 2);
        prefix = (prefix & 0x000000000FFFFFFFULL) | ((prefix & 0x0FFFFFFF00000000ULL) >> 4);
        keys[i].prefix = prefix;
        keys[i].index = (uint64_t)i;
        for (int b = 0; b < DIGITS; b++) counts[b][radix_digit(prefix, b)]++;
        i++;
    }
    SortKey *src = keys, *dst = keys + n;
    for (int b = 0; b < DIGITS; b++) {
        uint32_t *c = counts[b];
        if (c[radix_digit(keys[0].prefix, b)] == (uint32_t)n) continue;
        uint32_t sum = 0;
        for (int x = 0; x < DIGIT_VALUES; x++) {
            uint32_t t = c[x];
            c[x] = sum;
            sum += t;
        }
        for (Py_ssize_t j = 0; j < n; j++) dst[c[radix_digit(src[j].prefix, b)]++] = src[j];
        SortKey *t = src;
        src = dst;
        dst = t;
    }
    tie_items = it;
    for (Py_ssize_t j = 0; j < n;) {
        Py_ssize_t e = j + 1;
        while (e < n && src[e].prefix == src[j].prefix) e++;
        if (e - j > 1) qsort(src + j, e - j, sizeof(SortKey), big_cmp);
        j = e;
    }
    for (Py_ssize_t j = 0; j < n && r == 0; j++) {
        BigItem *e = &it[src[j].index];
        if (j + 8 < n) { /* the items are read in key order, scattered over the array: ask early */
            const char *ahead = (const char *)&it[src[j + 8].index];
            __builtin_prefetch(ahead);
            __builtin_prefetch(ahead + sizeof(BigItem) - 1);
        }
        if ((r = RESERVE(w, 24)) != 0) break;
        char *p = w->p;
        *p++ = j ? ',' : '{';
        if (e->plain) {
            *p++ = '"';
            memcpy(p, e->text, 16);
            p += e->len;
            *p++ = '"';
            *p++ = ':';
            w->p = p;
        } else {
            w->p = p;
            r = emit_str(w, e->key, 0);
            if (r == 0 && (r = RESERVE(w, 1)) == 0) *w->p++ = ':';
        }
        if (r == 0) r = emit(w, e->value);
    }
    if (r == 0 && (r = RESERVE(w, 1)) == 0) *w->p++ = '}';
done:
    PyMem_Free(it);
    PyMem_Free(keys);
    PyMem_Free(counts);
    return r;
}

/* The next cache miss inside a container, started early: a dict's keys object (its entries,
 * which are read first, follow it) or a list's item array. Without it an event log's writing
 * waited on each nested object's keys object in turn (a third of the dict time: the first load
 * of dk_kind). v's header has been prefetched a little earlier (reading it may still wait). */
static inline void prefetch_inside(PyObject *v) {
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyDict_Type) {
        const char *keys = (const char *)((PyDictObject *)v)->ma_keys;
        __builtin_prefetch(keys);
        __builtin_prefetch(keys + 64);
    } else if (t == &PyList_Type) {
        __builtin_prefetch(((PyListObject *)v)->ob_item);
    }
}

/* The key order of small objects seen in this call, by their keys: an event log, a chat or a
 * chain of nested objects repeats the same keys (the same str objects, in the same insertion
 * order) from one object to the next, and their order is the order found the first time. An
 * entry counts only in the generation that wrote it (see key_cache): its key objects are then
 * alive and unchanged (the document is, while no Python code runs). */
#define ORDER_CACHE 32
typedef struct {
    uint32_t generation;
    uint8_t n;
    uint8_t place[SMALL_DICT]; /* by insertion index: the place in key order */
    PyObject *keys[SMALL_DICT];  /* in insertion order */
    uint64_t prefix[SMALL_DICT];
} OrderEntry;
static OrderEntry order_cache[ORDER_CACHE];

static inline OrderEntry *order_slot(PyObject *first_key, Py_ssize_t n) {
    return &order_cache[(((uintptr_t)first_key >> 4) ^ (uintptr_t)n) & (ORDER_CACHE - 1)];
}

/* The entries of d, placed in key order from a cached order; 0: not cached (nothing placed) */
static inline int place_from_cache(PyObject *d, Py_ssize_t n, Item *it) {
    Entries entries;
    entries_start(&entries, d);
    if (entries.e == NULL || n < 3 || entries.e[1] == NULL) return 0;
    OrderEntry *o = order_slot(entries.e[0], n);
    if (o->generation != generation || o->n != n) return 0;
    PyObject *k, *v;
    Py_ssize_t i = 0;
    while (entries_next(&entries, &k, &v)) {
        if (k != o->keys[i]) return 0; /* the items placed so far are overwritten */
        Item *x = &it[o->place[i]];
        x->prefix = o->prefix[i];
        x->key = k;
        x->value = v;
        __builtin_prefetch(v);
        i++;
    }
    return 1;
}

/* after a small dict's items were sorted: its order, for the next object with its keys */
static void remember_order(PyObject *d, Py_ssize_t n, const Item *it) {
    Entries entries;
    entries_start(&entries, d);
    if (entries.e == NULL || n < 3 || entries.e[1] == NULL) return;
    OrderEntry *o = order_slot(entries.e[0], n);
    PyObject *k, *v;
    Py_ssize_t i = 0;
    while (entries_next(&entries, &k, &v)) {
        Py_ssize_t j = 0;
        while (it[j].key != k) j++; /* every key is among the items */
        o->keys[i] = k;
        o->prefix[i] = it[j].prefix;
        o->place[i] = (uint8_t)j;
        i++;
    }
    o->n = (uint8_t)n;
    o->generation = generation;
}

static int emit_dict(Out *w, PyObject *d) {
    Py_ssize_t n = PyDict_GET_SIZE(d);
    if (n > SMALL_DICT) {
        char *mark = w->p;
        int r = emit_big_dict(w, d, n);
        if (r != 2) return r;
        w->p = mark; /* nothing was written */
    }
    if (n == 0) {
        if (RESERVE(w, 2) < 0) return -1;
        *w->p++ = '{';
        *w->p++ = '}';
        return 0;
    }
    /* a small dict's items: its block of the item stack (emit counted this dict in depth) */
    Item *it = n <= SMALL_DICT ? w->items + (w->depth - 1) * SMALL_DICT
                               : PyMem_Malloc(n * sizeof(Item));
    if (it == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int r = 0, ascii = 1;
    Py_ssize_t i = 0;
    PyObject *k, *v;
    if (n >= 3 && n <= SMALL_DICT && place_from_cache(d, n, it)) goto sorted;
    Entries entries;
    entries_start(&entries, d);
    while (entries_next(&entries, &k, &v)) {
        if (!PyUnicode_CheckExact(k)) {
            r = DECLINE; /* the reference names it, or reads a str subclass as its text */
            goto done;
        }
        if (PyUnicode_READY(k) < 0) {
            r = -1;
            goto done;
        }
        it[i].key = k;
        it[i].value = v;
        __builtin_prefetch(v); /* its misses overlap the sort and the keys' text */
        KeyEntry *e = key_slot(k);
        if (e->key == k && e->generation == generation) {
            it[i].prefix = e->prefix;
        } else if (PyUnicode_IS_ASCII(k)) {
            it[i].prefix = ascii_prefix(PyUnicode_DATA(k), PyUnicode_GET_LENGTH(k));
            /* cached now, its text when it is first written: in nested objects (a "child" key
             * and a "level" key) the inner ones are read before the outer ones are written */
            e->key = k;
            e->generation = generation;
            e->prefix = it[i].prefix;
            e->len = 0;
        } else if (key_is_plain(k)) {
            ascii = 0;
        } else {
            r = DECLINE;
            goto done;
        }
        i++;
    }
    if (!ascii) qsort(it, n, sizeof(Item), general_cmp);
    else if (n == 2) { /* a message's role and content, a level and its child: one comparison */
        if (ascii_cmp(&it[1], &it[0]) < 0) {
            Item first = it[1];
            it[1] = it[0];
            it[0] = first;
        }
    } else if (n <= SMALL_DICT) {
        insertion_sort(it, n);
        if (n >= 3) remember_order(d, n, it);
    } else if (radix_sort(it, n) < 0) {
        r = -1;
        goto done;
    }
sorted:
    for (i = 0; i < n; i++) prefetch_inside(it[i].value); /* the values' own misses, together */
    for (i = 0; i < n && r == 0; i++) {
        /* room for ',' or '{', a cached key's text (a fixed 19-byte copy) and ':' */
        if (RESERVE(w, 21) < 0) {
            r = -1;
            break;
        }
        *w->p++ = i ? ',' : '{';
        PyObject *key = it[i].key;
        KeyEntry *e = key_slot(key);
        if (e->key == key && e->generation == generation && e->len) {
            memcpy(w->p, e->text, 19);
            w->p += e->len;
        } else {
            Py_ssize_t mark = w->p - w->start;
            r = emit_str(w, key, 0); /* checked above */
            Py_ssize_t len = (w->p - w->start) - mark;
            if (r == 0 && len <= 19 && PyUnicode_IS_ASCII(key)) {
                e->key = key;
                e->generation = generation;
                e->prefix = it[i].prefix;
                e->len = (uint8_t)len;
                memcpy(e->text, w->start + mark, len);
            }
            if (r != 0 || (r = RESERVE(w, 1)) != 0) break;
        }
        *w->p++ = ':';
        r = emit(w, it[i].value);
    }
    if (r == 0 && (r = RESERVE(w, 1)) == 0) *w->p++ = '}';
done:
    if (n > SMALL_DICT) PyMem_Free(it);
    return r;
}

static int emit_items(Out *w, PyObject **items, Py_ssize_t n) {
    if (RESERVE(w, 2) < 0) return -1;
    *w->p++ = '[';
    for (Py_ssize_t i = 0; i < 8 && i < n; i++) __builtin_prefetch(items[i]);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + 8 < n) __builtin_prefetch(items[i + 8]); /* overlap the items' cache misses */
        if (i + 4 < n) prefetch_inside(items[i + 4]);    /* its header was asked for 4 items ago */
        if (i) {
            if (RESERVE(w, 1) < 0) return -1;
            *w->p++ = ',';
        }
        int r = emit(w, items[i]);
        if (r) return r;
    }
    if (RESERVE(w, 1) < 0) return -1;
    *w->p++ = ']';
    return 0;
}

/* Inlined into its callers: one call per nesting level instead of two (a 200-level document
 * unwinds 400 returns, past the CPU's return-address predictor, and each frame costs stack). */
static inline __attribute__((always_inline)) int emit(Out *w, PyObject *v) {
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyUnicode_Type) return emit_str(w, v, 1);
    if (t == &PyLong_Type) return emit_int(w, v);
    if (t == &PyFloat_Type) return emit_float(w, PyFloat_AS_DOUBLE(v));
    if (v == Py_True || v == Py_False || v == Py_None) {
        if (RESERVE(w, 5) < 0) return -1;
        const char *text = v == Py_True ? "true" : v == Py_False ? "false" : "null";
        size_t len = strlen(text);
        memcpy(w->p, text, len);
        w->p += len;
        return 0;
    }
    if (t != &PyDict_Type && t != &PyList_Type && t != &PyTuple_Type) return DECLINE;
    if (++w->depth > MAX_DEPTH) return DECLINE; /* the reference tells deep from cyclic */
    int r;
    if (t == &PyDict_Type) r = emit_dict(w, v);
    else if (t == &PyList_Type) r = emit_items(w, PySequence_Fast_ITEMS(v), PyList_GET_SIZE(v));
    else r = emit_items(w, PySequence_Fast_ITEMS(v), PyTuple_GET_SIZE(v));
    w->depth--;
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* module                                                                                     */

/* Writes value into the kept buffer (or one of its own); 0, -1 or DECLINE. The caller reads the
 * bytes, then calls release(). */
static int write_value(Out *w, PyObject *value) {
    w->own = scratch_busy;
    w->items = NULL;
    if (w->own || scratch == NULL) {
        Py_ssize_t cap = w->own ? 1024 : 65536;
        w->start = w->p = w->end = PyMem_RawMalloc(cap);
        if (w->start == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        w->end = w->start + cap;
    } else {
        w->start = scratch;
        w->end = scratch + scratch_cap;
    }
    if (!w->own) {
        scratch = NULL; /* held by this call until it ends */
        scratch_busy = 1;
    }
    w->items = w->own ? PyMem_Malloc(ITEM_STACK * sizeof(Item)) : item_stack;
    if (w->items == NULL) {
        PyErr_NoMemory();
        w->p = w->start;
        return -1;
    }
    w->p = w->start;
    w->depth = 0;
    generation++;
    return emit(w, value);
}

/* keep: whether the buffer may be written again (no view of it outlives the call) */
static void release(Out *w, int keep) {
    if (!keep) {
        /* a view of it is still alive: leave the memory to it (never seen with hashlib) */
    } else if (w->own || w->end - w->start > SCRATCH_KEEP) {
        PyMem_RawFree(w->start);
    } else {
        scratch = w->start;
        scratch_cap = w->end - w->start;
    }
    if (w->own) PyMem_Free(w->items);
    if (!w->own) scratch_busy = 0;
}

static PyObject *sha256_fn; /* hashlib.sha256 */

/* the hex SHA-256 of the canonical bytes, hashed where they were written (no bytes object of
 * their size is made): canonical_hash's path */
static PyObject *py_hexdigest(PyObject *self, PyObject *value) {
    Out w;
    int r = write_value(&w, value);
    int keep = 1;
    PyObject *out = NULL;
    if (r == 0) {
        PyObject *view = PyMemoryView_FromMemory(w.start, w.p - w.start, PyBUF_READ);
        PyObject *h = view ? PyObject_CallOneArg(sha256_fn, view) : NULL;
        if (view) {
            keep = Py_REFCNT(view) == 1;
            Py_DECREF(view);
        }
        if (h) {
            out = PyObject_CallMethod(h, "hexdigest", NULL);
            Py_DECREF(h);
        }
    }
    release(&w, keep);
    if (r > 0) Py_RETURN_NONE;
    return out;
}

static PyObject *py_canonicalize(PyObject *self, PyObject *value) {
    Out w;
    int r = write_value(&w, value);
    PyObject *out = r == 0 ? PyBytes_FromStringAndSize(w.start, w.p - w.start) : NULL;
    release(&w, 1);
    if (r > 0) Py_RETURN_NONE;
    return out;
}

static PyObject *number_text(PyObject *self, PyObject *arg) {
    double x = PyFloat_AsDouble(arg);
    if (x == -1.0 && PyErr_Occurred()) return NULL;
    if (!isfinite(x)) {
        PyErr_SetString(PyExc_ValueError, "no JSON form");
        return NULL;
    }
    char buf[64];
    char *p = write_number(buf, x);
    if (p == NULL) return NULL;
    return PyUnicode_FromStringAndSize(buf, p - buf);
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *ranges, *normalize;
    if (!PyArg_ParseTuple(args, "OO", &ranges, &normalize)) return NULL;
    PyObject *seq = PySequence_Fast(ranges, "ranges must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), count = 0;
    uint32_t *astral = PyMem_Malloc((n ? n : 1) * 2 * sizeof(uint32_t));
    uint8_t bmp[8192] = {0};
    if (astral == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long a, b;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "kk", &a, &b)) {
            PyMem_Free(astral);
            Py_DECREF(seq);
            return NULL;
        }
        for (unsigned long c = a; c <= b && c < 0x10000; c++) bmp[c >> 3] |= (uint8_t)(1 << (c & 7));
        if (b >= 0x10000) {
            astral[2 * count] = (uint32_t)(a < 0x10000 ? 0x10000 : a);
            astral[2 * count + 1] = (uint32_t)b;
            count++;
        }
    }
    Py_DECREF(seq);
    memcpy(unstable_bmp, bmp, sizeof(bmp));
    PyMem_Free(astral_ranges);
    astral_ranges = astral;
    astral_count = count;
    Py_INCREF(normalize);
    Py_XSETREF(normalize_fn, normalize);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"canonicalize", py_canonicalize, METH_O,
     "canonicalize(value) -> bytes | None: the canonical bytes, or None (the reference answers)"},
    {"canonical_hexdigest", py_hexdigest, METH_O,
     "canonical_hexdigest(value) -> str | None: hex SHA-256 of the canonical bytes, or None"},
    {"number_text", number_text, METH_O, "number_text(x) -> str: ECMAScript text of a double"},
    {"configure", configure, METH_VARARGS,
     "configure(ranges, normalize): the unstable characters (inclusive code point ranges, "
     "sorted) and unicodedata.normalize"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_canonical_native", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__canonical_native(void) {
    /* until configure(): every character from U+0300 on counts as unstable (always right) */
    p10_magic_init();
    inv5_init();
    memset(unstable_bmp + (0x300 >> 3), 0xFF, sizeof(unstable_bmp) - (0x300 >> 3));
    astral_ranges = PyMem_Malloc(2 * sizeof(uint32_t));
    if (astral_ranges == NULL) return PyErr_NoMemory();
    astral_ranges[0] = 0x10000;
    astral_ranges[1] = 0x10FFFF;
    astral_count = 1;
    nfc_name = PyUnicode_InternFromString("NFC");
    PyObject *unicodedata = PyImport_ImportModule("unicodedata");
    if (nfc_name == NULL || unicodedata == NULL) return NULL;
    normalize_fn = PyObject_GetAttrString(unicodedata, "normalize");
    Py_DECREF(unicodedata);
    if (normalize_fn == NULL) return NULL;
    PyObject *hashlib = PyImport_ImportModule("hashlib");
    if (hashlib == NULL) return NULL;
    sha256_fn = PyObject_GetAttrString(hashlib, "sha256");
    Py_DECREF(hashlib);
    if (sha256_fn == NULL || entries_selfcheck() < 0) return NULL;
    return PyModule_Create(&module);
}
