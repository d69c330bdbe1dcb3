// See fast_json.h. Grammar: RFC 8259 JSON; strings are validated for escapes (\uXXXX surrogate
// pairs combined), numbers are handed to nlohmann for conversion.
#include "fast_json.h"

#include "tandem/error.h"
#include "unicode.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace tandem::data::text {
namespace {

class Reader {
public:
    Reader(std::string_view s, TokenizerJsonModel& model, const std::string& where) : s_(s), model_(model), where_(where) {}

    nlohmann::json document() {
        nlohmann::json v = value(0);
        skip_ws();
        if (p_ != s_.size()) fail("trailing characters after the JSON value");
        return v;
    }

private:
    std::string_view s_;
    size_t p_ = 0;
    TokenizerJsonModel& model_;
    const std::string& where_;
    std::string path1_, path2_;  // keys at depth 1 and 2 ("model", "vocab"/"merges")

    [[noreturn]] void fail(const std::string& why) const {
        throw Error(where_ + ": not valid JSON at byte " + std::to_string(p_) + " (" + why + ")");
    }
    void skip_ws() {
        while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\n' || s_[p_] == '\r' || s_[p_] == '\t')) ++p_;
    }
    void expect(char c) {
        skip_ws();
        if (p_ >= s_.size() || s_[p_] != c) fail(std::string("expected '") + c + "'");
        ++p_;
    }
    bool peek_is(char c) {
        skip_ws();
        return p_ < s_.size() && s_[p_] == c;
    }
    // Consumes c when it comes next (after white space).
    bool take(char c) {
        if (!peek_is(c)) return false;
        ++p_;
        return true;
    }
    // After a member or an element: true after a ',' (another follows), false after `close` (the
    // object or array ends).
    bool another(char close) {
        if (take(',')) return true;
        expect(close);
        return false;
    }

    unsigned hex4() {
        if (p_ + 4 > s_.size()) fail("short \\u escape");
        unsigned v = 0;
        for (int k = 0; k < 4; ++k) {
            char c = s_[p_++];
            v <<= 4;
            if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
            else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
            else fail("bad \\u escape");
        }
        return v;
    }

    void string(std::string& out) {
        expect('"');
        out.clear();
        for (;;) {
            size_t q = p_;
            while (q < s_.size() && s_[q] != '"' && s_[q] != '\\' && static_cast<unsigned char>(s_[q]) >= 0x20) ++q;
            out.append(s_.data() + p_, q - p_);
            p_ = q;
            if (p_ >= s_.size()) fail("unterminated string");
            char c = s_[p_++];
            if (c == '"') return;
            if (c != '\\') fail("control character in string");
            if (p_ >= s_.size()) fail("unterminated escape");
            char e = s_[p_++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    unsigned cp = hex4();
                    if (cp >= 0xD800 && cp < 0xDC00) {
                        if (p_ + 2 > s_.size() || s_[p_] != '\\' || s_[p_ + 1] != 'u') fail("lone surrogate");
                        p_ += 2;
                        unsigned lo = hex4();
                        if (lo < 0xDC00 || lo >= 0xE000) fail("bad surrogate pair");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    } else if (cp >= 0xDC00 && cp < 0xE000) {
                        fail("lone surrogate");
                    }
                    append_utf8(out, cp);
                    break;
                }
                default: fail("bad escape");
            }
        }
    }

    nlohmann::json number() {
        size_t q = p_;
        while (q < s_.size() && std::strchr("+-0123456789.eE", s_[q]) && s_[q] != '\0') ++q;
        if (q == p_) fail("unexpected character");
        nlohmann::json v = nlohmann::json::parse(s_.substr(p_, q - p_), nullptr, false);
        if (v.is_discarded()) fail("bad number");
        p_ = q;
        return v;
    }

    bool literal(const char* word) {
        size_t n = std::strlen(word);
        if (s_.substr(p_, n) == word) {
            p_ += n;
            return true;
        }
        return false;
    }

    void vocab_object() {
        expect('{');
        std::string key;
        if (take('}')) return;
        do {
            skip_ws();
            string(key);
            expect(':');
            skip_ws();
            nlohmann::json id = number();
            if (!id.is_number_integer()) fail("vocab id is not an integer");
            if (id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX || (id.is_number_unsigned() && id.get<uint64_t>() > INT32_MAX))
                fail("vocab id " + id.dump() + " is out of range");
            model_.vocab.emplace_back(key, static_cast<int32_t>(id.get<int64_t>()));
        } while (another('}'));
    }

    void merges_array() {
        expect('[');
        std::string a, b;
        if (take(']')) return;
        do {
            if (take('[')) {
                skip_ws();
                string(a);
                expect(',');
                skip_ws();
                string(b);
                expect(']');
                model_.merges.emplace_back(a, b);
            } else {
                skip_ws();
                string(a);
                size_t sp = a.find(' ', 1);
                if (sp == std::string::npos) fail("merge \"" + a + "\" is not \"left right\"");
                model_.merges.emplace_back(a.substr(0, sp), a.substr(sp + 1));
            }
        } while (another(']'));
    }

    // Nesting deeper than any tokenizer.json needs is refused (the reader recurses per level).
    static constexpr int kMaxDepth = 256;

    nlohmann::json value(int depth) {
        skip_ws();
        if (p_ >= s_.size()) fail("unexpected end");
        if (depth > kMaxDepth) fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
        char c = s_[p_];
        if (c == '{') {
            ++p_;
            nlohmann::json obj = nlohmann::json::object();
            if (take('}')) return obj;
            std::string key;
            do {
                skip_ws();
                string(key);
                expect(':');
                if (depth == 0) path1_ = key;
                if (depth == 1) path2_ = key;
                if (depth == 1 && path1_ == "model" && key == "vocab") {
                    vocab_object();
                    obj[key] = nlohmann::json::object();
                } else if (depth == 1 && path1_ == "model" && key == "merges") {
                    merges_array();
                    obj[key] = nlohmann::json::array();
                } else {
                    obj[key] = value(depth + 1);
                }
            } while (another('}'));
            return obj;
        }
        if (c == '[') {
            ++p_;
            nlohmann::json arr = nlohmann::json::array();
            if (take(']')) return arr;
            do {
                arr.push_back(value(depth + 1));
            } while (another(']'));
            return arr;
        }
        if (c == '"') {
            std::string s;
            string(s);
            return s;
        }
        if (literal("true")) return true;
        if (literal("false")) return false;
        if (literal("null")) return nullptr;
        return number();
    }
};

}  // namespace

nlohmann::json parse_tokenizer_json(std::string_view text, TokenizerJsonModel& model, const std::string& where) {
    // JSON text is UTF-8 (RFC 8259); HF's reader refuses anything else, so must we (an ill-formed
    // byte in a vocab string would otherwise travel into error messages and token texts).
    if (const size_t bad = first_invalid_utf8(text); bad != text.size())
        throw Error(where + ": not valid UTF-8 at byte " + std::to_string(bad));
    // Sized for a real vocabulary (Qwen3: 151,643 entries, 151,387 merges), capped by what the
    // text can hold so that a small input does not pay for a large reservation.
    model.vocab.reserve(std::min<size_t>(160000, text.size() / 6));
    model.merges.reserve(std::min<size_t>(160000, text.size() / 8));
    return Reader(text, model, where).document();
}

}  // namespace tandem::data::text
