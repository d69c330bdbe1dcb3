// Hand-written matcher for the Qwen2/Qwen3 split regex (see pretokenize.h).
#include "pretokenize.h"


namespace tandem::data::text {
namespace {

// The text the matchers read: normalised characters, or (AsciiCursor) the bytes of an ASCII run.
struct Cursor {
    const AlignedChar* c;
    size_t n;
    char32_t cp(size_t i) const { return c[i].cp; }
    CharClass cls(size_t i) const { return char_class(c[i].cp); }
    bool is_space(size_t i) const { return cls(i) == CharClass::Space; }
    bool is_letter(size_t i) const { return cls(i) == CharClass::Letter; }
    bool is_crlf(size_t i) const { return c[i].cp == '\r' || c[i].cp == '\n'; }
    // [^\s\p{L}\p{N}]
    bool is_other(size_t i) const { return cls(i) == CharClass::Other; }
};

struct AsciiCursor {
    const unsigned char* c;
    size_t n;
    const CharClass* ascii;  // ascii_char_classes(): the table char_class reads for cp < 128
    char32_t cp(size_t i) const { return c[i]; }
    CharClass cls(size_t i) const { return ascii[c[i]]; }
    bool is_space(size_t i) const { return cls(i) == CharClass::Space; }
    bool is_letter(size_t i) const { return cls(i) == CharClass::Letter; }
    bool is_crlf(size_t i) const { return c[i] == '\r' || c[i] == '\n'; }
    bool is_other(size_t i) const { return cls(i) == CharClass::Other; }
};

// Case-insensitive ASCII letter test that also accepts what Oniguruma's case folding maps to it:
// U+017F LATIN SMALL LETTER LONG S folds to 's' (U+212A KELVIN SIGN folds to 'k', not used here).
bool folds_to(char32_t c, char lower) {
    if (c < 128) return (c | 0x20) == static_cast<char32_t>(lower);
    return lower == 's' && c == 0x17F;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)
template <class Text>
size_t match_contraction(const Text& s, size_t i) {
    if (s.cp(i) != '\'' || i + 1 >= s.n) return 0;
    char32_t a = s.cp(i + 1);
    if (folds_to(a, 's') || folds_to(a, 't') || folds_to(a, 'm') || folds_to(a, 'd')) return 2;
    if (i + 2 < s.n) {
        char32_t b = s.cp(i + 2);
        if ((folds_to(a, 'r') && folds_to(b, 'e')) || (folds_to(a, 'v') && folds_to(b, 'e')) ||
            (folds_to(a, 'l') && folds_to(b, 'l')))
            return 3;
    }
    return 0;
}

// [^\r\n\p{L}\p{N}]?\p{L}+
template <class Text>
size_t match_word(const Text& s, size_t i) {
    size_t j = i;
    CharClass k = s.cls(i);
    if (k != CharClass::Letter) {
        if (k == CharClass::Number || s.is_crlf(i)) return 0;
        j = i + 1;  // the optional prefix; \p{L}+ must follow
        if (j >= s.n || !s.is_letter(j)) return 0;
    }
    while (j < s.n && s.is_letter(j)) ++j;
    return j - i;
}

//  ?[^\s\p{L}\p{N}]+[\r\n]*
template <class Text>
size_t match_punct(const Text& s, size_t i) {
    size_t j = i;
    if (s.cp(i) == ' ' && i + 1 < s.n && s.is_other(i + 1)) j = i + 1;
    if (!s.is_other(j)) return 0;
    while (j < s.n && s.is_other(j)) ++j;
    while (j < s.n && s.is_crlf(j)) ++j;
    return j - i;
}

// \s*[\r\n]+ | \s+(?!\S) | \s+   (i is a whitespace character)
template <class Text>
size_t match_space(const Text& s, size_t i) {
    size_t run_end = i;
    while (run_end < s.n && s.is_space(run_end)) ++run_end;
    // \s*[\r\n]+: \s* backs off from the end of the run to the last CR/LF in it.
    for (size_t k = run_end; k > i; --k)
        if (s.is_crlf(k - 1)) return k - i;
    // \s+(?!\S): the whole run at the end of the text, else the run minus its last character.
    if (run_end == s.n) return run_end - i;
    if (run_end - i >= 2) return run_end - 1 - i;
    // \s+
    return run_end - i;
}

template <class Text>
void split(const Text& s, size_t n, std::vector<std::pair<size_t, size_t>>& pieces) {
    size_t i = 0;
    while (i < n) {
        size_t len = match_contraction(s, i);
        if (!len) len = match_word(s, i);
        if (!len && s.cls(i) == CharClass::Number) len = 1;
        if (!len) len = match_punct(s, i);
        if (!len && s.is_space(i)) len = match_space(s, i);
        if (!len) len = 1;  // unreachable: every character matches some alternative
        pieces.emplace_back(i, i + len);
        i += len;
    }
}

}  // namespace

void split_pretokens(const AlignedChar* chars, size_t n, std::vector<std::pair<size_t, size_t>>& pieces) {
    split(Cursor{chars, n}, n, pieces);
}

void split_pretokens_ascii(std::string_view ascii, std::vector<std::pair<size_t, size_t>>& pieces) {
    split(AsciiCursor{reinterpret_cast<const unsigned char*>(ascii.data()), ascii.size(), ascii_char_classes().data()},
          ascii.size(), pieces);
}

}  // namespace tandem::data::text
