// Unicode data and NFC for the tokenizer. The tables come from data/tools/gen_unicode_tables.py
// (Python's unicodedata of the reference environment). NFC follows UAX #15 (full canonical
// decomposition, canonical ordering by a stable sort of each run of non-starters, canonical
// composition); on top of that every character carries a `change` count exactly as HuggingFace
// tokenizers' normaliser does, and the alignment of the output is computed from those counts
// (docs/data-text.md, "Offsets").
#include "unicode.h"

#include "tandem/error.h"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace tandem::data::text {
namespace {

struct ClassRange {
    char32_t first;
    char32_t last;
    int value;
};
struct CccRange {
    char32_t first;
    char32_t last;
    int value;
};
struct DecompEntry {
    char32_t cp;
    int offset;
    int length;
};
struct CompositionEntry {
    char32_t first;
    char32_t second;
    char32_t composite;
};

#include "unicode_tables.inc"

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

template <typename Range>
const Range* find_range(const Range* begin, const Range* end, char32_t cp) {
    const Range* it = std::upper_bound(begin, end, cp, [](char32_t c, const Range& r) { return c < r.first; });
    if (it == begin) return nullptr;
    --it;
    return cp <= it->last ? it : nullptr;
}

std::array<CharClass, 128> make_ascii_classes() {
    std::array<CharClass, 128> t{};
    for (int c = 0; c < 128; ++c) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            t[c] = CharClass::Letter;
        else if (c >= '0' && c <= '9')
            t[c] = CharClass::Number;
        else if (c == ' ' || (c >= 0x09 && c <= 0x0D))
            t[c] = CharClass::Space;
        else
            t[c] = CharClass::Other;
    }
    return t;
}
const std::array<CharClass, 128> kAsciiClasses = make_ascii_classes();

// Composition pairs keyed by (first << 21 | second).
const std::unordered_map<uint64_t, char32_t>& composition_map() {
    static const auto* map = [] {
        auto* m = new std::unordered_map<uint64_t, char32_t>();
        m->reserve(std::size(kCompositions) * 2);
        for (const auto& e : kCompositions) m->emplace((uint64_t(e.first) << 21) | e.second, e.composite);
        return m;
    }();
    return *map;
}

bool compose_pair(char32_t a, char32_t b, char32_t& out) {
    if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
        out = kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
        return true;
    }
    if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
        out = a + (b - kTBase);
        return true;
    }
    const auto& m = composition_map();
    auto it = m.find((uint64_t(a) << 21) | b);
    if (it == m.end()) return false;
    out = it->second;
    return true;
}

struct Pending {
    uint8_t ccc;
    char32_t cp;
    int change;
};

}  // namespace

const std::array<CharClass, 128>& ascii_char_classes() {
    static const std::array<CharClass, 128> t = make_ascii_classes();
    return t;
}

CharClass char_class(char32_t cp) {
    if (cp < 128) return kAsciiClasses[cp];
    const ClassRange* r = find_range(std::begin(kClassRanges), std::end(kClassRanges), cp);
    return r ? static_cast<CharClass>(r->value) : CharClass::Other;
}

uint8_t combining_class(char32_t cp) {
    if (cp < 0x300) return 0;
    const CccRange* r = find_range(std::begin(kCccRanges), std::end(kCccRanges), cp);
    return r ? static_cast<uint8_t>(r->value) : 0;
}

bool is_nfc_quick(const char32_t* cps, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        char32_t c = cps[i];
        if (c < 0x300) continue;
        if (find_range(std::begin(kNfcSensitive), std::end(kNfcSensitive), c)) return false;
    }
    return true;
}

size_t first_invalid_utf8(std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    size_t i = 0;
    while (i < n) {
        const unsigned char c = p[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        size_t len;
        char32_t cp;
        if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
        else return i;
        if (i + len > n) return i;
        for (size_t k = 1; k < len; ++k) {
            if ((p[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp < 0xE000))
            return i;
        i += len;
    }
    return n;
}

void decode_utf8(std::string_view s, std::vector<char32_t>& cps, std::vector<uint32_t>& byte_offsets) {
    cps.clear();
    byte_offsets.clear();
    cps.reserve(s.size());
    byte_offsets.reserve(s.size() + 1);
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    size_t n = s.size(), i = 0;
    auto bad = [&](size_t at) {
        throw Error("invalid UTF-8 in tokenizer input at byte " + std::to_string(at));
    };
    while (i < n) {
        unsigned char c = p[i];
        char32_t cp;
        size_t len;
        if (c < 0x80) {
            cp = c;
            len = 1;
        } else if ((c & 0xE0) == 0xC0) {
            cp = c & 0x1F;
            len = 2;
        } else if ((c & 0xF0) == 0xE0) {
            cp = c & 0x0F;
            len = 3;
        } else if ((c & 0xF8) == 0xF0) {
            cp = c & 0x07;
            len = 4;
        } else {
            bad(i);
        }
        if (i + len > n) bad(i);
        for (size_t k = 1; k < len; ++k) {
            if ((p[i + k] & 0xC0) != 0x80) bad(i);
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp < 0xE000))
            bad(i);
        cps.push_back(cp);
        byte_offsets.push_back(static_cast<uint32_t>(i));
        i += len;
    }
    byte_offsets.push_back(static_cast<uint32_t>(n));
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

namespace {

// Canonical decomposition followed by canonical ordering. Each produced character carries the
// change count HuggingFace uses: 0 for the first character of an input character, +1 for each
// further one.
void decompose_ordered(const char32_t* cps, size_t n, std::vector<Pending>& out) {
    size_t ready_end = 0;  // out[ready_end..] is the run not yet sorted
    auto push = [&](char32_t c, bool first) {
        uint8_t ccc = combining_class(c);
        if (ccc == 0) {
            std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(ready_end), out.end(),
                             [](const Pending& a, const Pending& b) { return a.ccc < b.ccc; });
            ready_end = out.size();
        }
        out.push_back({ccc, c, first ? 0 : 1});
    };
    for (size_t i = 0; i < n; ++i) {
        char32_t c = cps[i];
        if (c >= kSBase && c < kSBase + kSCount) {
            char32_t s = c - kSBase;
            push(kLBase + s / kNCount, true);
            push(kVBase + (s % kNCount) / kTCount, false);
            if (s % kTCount != 0) push(kTBase + s % kTCount, false);
            continue;
        }
        const DecompEntry* d = nullptr;
        if (c >= 0xC0) {
            const DecompEntry* it = std::lower_bound(std::begin(kDecompIndex), std::end(kDecompIndex), c,
                                                     [](const DecompEntry& e, char32_t v) { return e.cp < v; });
            if (it != std::end(kDecompIndex) && it->cp == c) d = it;
        }
        if (!d) {
            push(c, true);
            continue;
        }
        for (int k = 0; k < d->length; ++k) push(kDecompData[d->offset + k], k == 0);
    }
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(ready_end), out.end(),
                     [](const Pending& a, const Pending& b) { return a.ccc < b.ccc; });
}

// Canonical composition over the ordered decomposition; a composite's change is
// starter.change + mark.change - 1 (the mark is "removed" after it).
void compose(const std::vector<Pending>& in, std::vector<std::pair<char32_t, int>>& out) {
    bool have_composee = false;
    std::pair<char32_t, int> composee{};
    int last_ccc = -1;  // -1: no blocked/uncomposed mark since the composee
    std::vector<std::pair<char32_t, int>> buffer;
    auto flush = [&]() {
        out.push_back(composee);
        out.insert(out.end(), buffer.begin(), buffer.end());
        buffer.clear();
    };
    for (const Pending& p : in) {
        int ccc = p.ccc;
        if (!have_composee) {
            if (ccc != 0) {
                out.emplace_back(p.cp, p.change);
                continue;
            }
            composee = {p.cp, p.change};
            have_composee = true;
            continue;
        }
        char32_t composed;
        if (last_ccc < 0) {
            if (compose_pair(composee.first, p.cp, composed)) {
                composee = {composed, composee.second + p.change - 1};
                continue;
            }
            if (ccc == 0) {
                out.push_back(composee);
                composee = {p.cp, p.change};
                continue;
            }
            buffer.emplace_back(p.cp, p.change);
            last_ccc = ccc;
        } else {
            if (last_ccc >= ccc) {
                if (ccc == 0) {
                    flush();
                    composee = {p.cp, p.change};
                    last_ccc = -1;
                    continue;
                }
                buffer.emplace_back(p.cp, p.change);
                last_ccc = ccc;
                continue;
            }
            if (compose_pair(composee.first, p.cp, composed)) {
                composee = {composed, composee.second + p.change - 1};
                continue;
            }
            buffer.emplace_back(p.cp, p.change);
            last_ccc = ccc;
        }
    }
    if (have_composee) {
        flush();
    } else {
        out.insert(out.end(), buffer.begin(), buffer.end());
    }
}

}  // namespace

void nfc_aligned(const char32_t* cps, const uint32_t* byte_offsets, size_t n, std::vector<AlignedChar>& out) {
    if (is_nfc_quick(cps, n)) {
        for (size_t i = 0; i < n; ++i) out.push_back({cps[i], byte_offsets[i], byte_offsets[i + 1]});
        return;
    }
    thread_local std::vector<Pending> decomposed;
    thread_local std::vector<std::pair<char32_t, int>> composed;
    decomposed.clear();
    composed.clear();
    decompose_ordered(cps, n, decomposed);
    compose(decomposed, composed);
    // Walk the original characters as HuggingFace's NormalizedString::transform does: a character
    // with change <= 0 takes the alignment of the original character at the cursor and moves the
    // cursor past it and past -change removed ones; a character with change > 0 is "inserted" and
    // shares the alignment of the original character just before the cursor.
    size_t cursor = 0;
    for (const auto& [cp, change] : composed) {
        uint32_t b, e;
        if (change > 0) {
            if (cursor == 0) {
                b = e = byte_offsets[0];
            } else {
                b = byte_offsets[cursor - 1];
                e = byte_offsets[cursor];
            }
        } else {
            size_t at = std::min(cursor, n - 1);
            b = byte_offsets[at];
            e = byte_offsets[at + 1];
            cursor += 1 + static_cast<size_t>(-change);
            cursor = std::min(cursor, n);
        }
        out.push_back({cp, b, e});
    }
}

}  // namespace tandem::data::text
