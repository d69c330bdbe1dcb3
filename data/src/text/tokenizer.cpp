// tandem's own byte-level BPE tokenizer for Qwen3's tokenizer.json (see tokenizer.h and
// docs/data-text.md). Independent of HuggingFace's code; tests/text compares it with
// HuggingFace tokenizers on every corpus text and on adversarial strings.
#include "tandem/data/tokenizer.h"

#include "fast_json.h"
#include "pretokenize.h"
#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "unicode.h"

#include "tandem/strict_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <queue>
#include <unordered_map>

namespace tandem::data {
namespace {

using text::AlignedChar;

// GPT-2's reversible byte -> printable character table: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100 + n in byte order.
std::array<char32_t, 256> make_byte_to_char() {
    std::array<char32_t, 256> table{};
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int n = 0;
    for (int b = 0; b < 256; ++b) table[b] = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    return table;
}
const std::array<char32_t, 256> kByteToChar = make_byte_to_char();

// Byte-level character (U+0000..U+0143) -> byte, -1 outside the alphabet.
std::array<int16_t, 324> make_char_to_byte() {
    std::array<int16_t, 324> table;
    table.fill(-1);
    for (int b = 0; b < 256; ++b) table[kByteToChar[b]] = static_cast<int16_t>(b);
    return table;
}
const std::array<int16_t, 324> kCharToByte = make_char_to_byte();

// Maps a vocab string in byte-level form back to bytes; false if a character is outside the alphabet.
bool byte_level_to_bytes(std::string_view token, std::string& out) {
    out.clear();
    const auto* p = reinterpret_cast<const unsigned char*>(token.data());
    for (size_t i = 0; i < token.size();) {
        char32_t c;
        if (p[i] < 0x80) {
            c = p[i];
            i += 1;
        } else if ((p[i] & 0xE0) == 0xC0 && i + 1 < token.size()) {
            c = (static_cast<char32_t>(p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F);
            i += 2;
        } else {
            return false;  // every byte-level character is below U+0800
        }
        if (c >= kCharToByte.size() || kCharToByte[c] < 0) return false;
        out.push_back(static_cast<char>(kCharToByte[c]));
    }
    return true;
}

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

struct MergeInfo {
    int32_t rank;
    int32_t new_id;
};

// One BPE token inside a pre-token word: its id and how many bytes of the word it covers.
struct WordPiece {
    int32_t id;
    uint32_t bytes;
};

std::atomic<uint64_t> g_next_tokenizer_serial{1};

inline uint64_t mix_hash(uint64_t x) {  // SplitMix64's finaliser: every key bit reaches every slot bit
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

// (left id, right id) -> MergeInfo, open addressing in one array (Qwen3: 151k merges in 512k slots,
// 8 MB): a lookup is one or two cache lines, where std::unordered_map walked a node list — the BPE
// loop is mostly these lookups.
class MergeTable {
public:
    void reserve(size_t n) {  // room for n keys at most half full
        size_t cap = 16;
        while (cap < 2 * n) cap *= 2;
        if (cap > slots_.size()) rehash(cap);
    }
    void insert_or_assign(uint64_t key, MergeInfo info) {
        if (key == kEmpty) throw Error("tokenizer: merge key collides with the empty marker");
        if (2 * (count_ + 1) > slots_.size()) grow();
        Slot& s = probe(key);
        if (s.key == kEmpty) ++count_;
        s = Slot{key, info};
    }
    const MergeInfo* find(uint64_t key) const {
        const Slot& s = const_cast<MergeTable*>(this)->probe(key);
        return s.key == key ? &s.info : nullptr;
    }

private:
    static constexpr uint64_t kEmpty = ~0ULL;  // ids are non-negative int32: never (~0, ~0)
    struct Slot {
        uint64_t key;
        MergeInfo info;
    };
    Slot& probe(uint64_t key) {
        for (size_t i = mix_hash(key) & mask_;; i = (i + 1) & mask_)
            if (slots_[i].key == key || slots_[i].key == kEmpty) return slots_[i];
    }
    void grow() { rehash(2 * slots_.size()); }
    void rehash(size_t cap) {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(cap, Slot{kEmpty, {0, 0}});
        mask_ = cap - 1;
        count_ = 0;
        for (const Slot& s : old)
            if (s.key != kEmpty) insert_or_assign(s.key, s.info);
    }
    std::vector<Slot> slots_ = std::vector<Slot>(16, Slot{kEmpty, {0, 0}});
    size_t mask_ = 15, count_ = 0;
};

// word -> its merged pieces, looked up by string_view: no key string built per lookup.
struct StringViewHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using WordMap = std::unordered_map<std::string, std::vector<WordPiece>, StringViewHash, std::equal_to<>>;

// The merged pieces of the words a tokenizer has seen, shared by the threads that encode with it
// (HuggingFace's BPE keeps one cache per tokenizer too). Threads look in their own copy first
// (no lock) and in this one on a miss, so a word is merged once per tokenizer, not once per thread.
class SharedWordCache {
public:
    bool find(std::string_view word, std::vector<WordPiece>& out) const {
        std::shared_lock<std::shared_mutex> lock(m_);  // readers in parallel: most misses of a thread's cache hit here
        auto it = words_.find(word);
        if (it == words_.end()) return false;
        out = it->second;
        return true;
    }
    void insert(std::string_view word, const std::vector<WordPiece>& pieces) {
        std::unique_lock<std::shared_mutex> lock(m_);
        if (words_.size() >= kMaxWords) return;  // a bounded cache: beyond it, threads keep their own
        words_.emplace(std::string(word), pieces);
    }

private:
    static constexpr size_t kMaxWords = 1 << 20;
    mutable std::shared_mutex m_;
    WordMap words_;
};

}  // namespace

struct Tokenizer::Impl {
    std::filesystem::path dir;
    uint64_t serial = g_next_tokenizer_serial.fetch_add(1);
    std::unordered_map<std::string, int32_t> vocab;  // byte-level string -> id (model vocab + added)
    std::vector<std::string> id_to_token;            // id -> byte-level string / added content
    std::vector<std::string> id_to_bytes;            // id -> decoded bytes
    std::array<int32_t, 256> byte_id{};              // single byte -> id
    MergeTable merges;                               // (left id, right id) -> rank, merged id
    mutable SharedWordCache shared_words;
    std::vector<AddedToken> added;
    std::array<std::vector<int>, 256> added_by_first_byte;  // indices into `added`, longest first
    std::array<bool, 256> added_first{};

    void bpe_word(std::string_view word, std::vector<WordPiece>& out) const;
    const std::vector<WordPiece>& cached_word(std::string_view word) const;
    void encode_segment(std::string_view text, size_t begin, size_t end, std::vector<Token>& out) const;
    void encode_general(std::string_view text, size_t begin, size_t end, std::vector<Token>& out) const;
    void encode_ascii(std::string_view text, size_t begin, size_t end, std::vector<Token>& out) const;
    void encode(std::string_view text, std::vector<Token>& out) const;
};

namespace {

// Symbols of a word being merged: a doubly linked list over the initial byte symbols.
struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t bytes;  // 0 once merged into its left neighbour
};
struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

// Merges by rank: always the lowest-ranked adjacent pair, the leftmost one on ties (a min-heap of
// candidates, stale entries skipped when popped) — the same order as HuggingFace's BPE.
void Tokenizer::Impl::bpe_word(std::string_view word, std::vector<WordPiece>& out) const {
    thread_local std::vector<Symbol> symbols;
    thread_local std::vector<Candidate> heap_storage;
    symbols.clear();
    const int32_t n = static_cast<int32_t>(word.size());
    for (int32_t i = 0; i < n; ++i)
        symbols.push_back({byte_id[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, 1});
    heap_storage.clear();
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap(std::greater<Candidate>{},
                                                                                          std::move(heap_storage));
    auto consider = [&](int32_t left) {
        int32_t right = symbols[left].next;
        if (right < 0) return;
        if (const MergeInfo* m = merges.find(pair_key(symbols[left].id, symbols[right].id)))
            heap.push({m->rank, left, m->new_id});
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i);
    while (!heap.empty()) {
        Candidate top = heap.top();
        heap.pop();
        Symbol& left = symbols[top.pos];
        if (left.bytes == 0 || left.next < 0) continue;
        Symbol& right = symbols[left.next];
        const MergeInfo* m = merges.find(pair_key(left.id, right.id));
        if (!m || m->new_id != top.new_id) continue;  // stale entry
        left.id = top.new_id;
        left.bytes += right.bytes;
        right.bytes = 0;
        left.next = right.next;
        if (left.next >= 0) symbols[left.next].prev = top.pos;
        if (left.prev >= 0) consider(left.prev);
        consider(top.pos);
    }
    for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) out.push_back({symbols[i].id, symbols[i].bytes});
}

// Words repeat a lot (" the", " patient"): a per-thread cache of each word's merged pieces.
const std::vector<WordPiece>& Tokenizer::Impl::cached_word(std::string_view word) const {
    struct Cache {
        uint64_t owner = 0;
        WordMap words;
    };
    thread_local Cache cache;
    thread_local std::vector<WordPiece> uncached;
    constexpr size_t kMaxCachedWordBytes = 128;
    constexpr size_t kMaxCachedWords = 200000;
    if (word.size() > kMaxCachedWordBytes) {
        uncached.clear();
        bpe_word(word, uncached);
        return uncached;
    }
    if (cache.owner != serial) {
        cache.words.clear();
        cache.owner = serial;
    }
    auto it = cache.words.find(word);
    if (it != cache.words.end()) return it->second;
    if (cache.words.size() >= kMaxCachedWords) cache.words.clear();
    std::vector<WordPiece> pieces;
    if (!shared_words.find(word, pieces)) {
        bpe_word(word, pieces);
        shared_words.insert(word, pieces);
    }
    return cache.words.emplace(std::string(word), std::move(pieces)).first->second;
}

// One stretch of text between added tokens. Runs of ASCII take encode_ascii (NFC leaves ASCII as it
// is, and a byte is a character), the rest encode_general. The stretch is cut only before a space
// that follows a non-space ASCII character: there every pre-token piece ends (no alternative of
// the split regex runs from a non-space character into a following space) and NFC composes nothing
// across (a space is never the second character of a composition), so the pieces, ids and
// offsets are those of the whole stretch (tests/text compares every corpus text with HF).
void Tokenizer::Impl::encode_segment(std::string_view text, size_t begin, size_t end, std::vector<Token>& out) const {
    const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
    const auto& ascii = text::ascii_char_classes();
    auto cut_before = [&](size_t i) {  // a safe cut between i - 1 and i
        return bytes[i] == ' ' && bytes[i - 1] < 0x80 && ascii[bytes[i - 1]] != text::CharClass::Space;
    };
    size_t b = begin;
    while (b < end) {
        size_t q = b;
        while (q < end && bytes[q] < 0x80) ++q;  // the first non-ASCII byte
        if (q == end) {
            encode_ascii(text, b, end, out);
            return;
        }
        size_t p = q;
        while (p > b && !cut_before(p)) --p;
        if (p > b) encode_ascii(text, b, p, out);
        size_t r = q + 1;
        while (r < end && !cut_before(r)) ++r;
        encode_general(text, p, r, out);
        b = r;
    }
}

void Tokenizer::Impl::encode_ascii(std::string_view text, size_t begin, size_t end, std::vector<Token>& out) const {
    thread_local std::vector<std::pair<size_t, size_t>> pieces;
    pieces.clear();
    text::split_pretokens_ascii(text.substr(begin, end - begin), pieces);
    for (const auto& [pb, pe] : pieces) {
        size_t at = begin + pb;
        for (const WordPiece& p : cached_word(text.substr(at, pe - pb))) {
            out.push_back({p.id, at, at + p.bytes});
            at += p.bytes;
        }
    }
}

// NFC, split, byte-level BPE, offsets.
void Tokenizer::Impl::encode_general(std::string_view text, size_t begin, size_t end, std::vector<Token>& out) const {
    if (begin == end) return;
    thread_local std::vector<char32_t> cps;
    thread_local std::vector<uint32_t> offsets;
    thread_local std::vector<AlignedChar> chars;
    thread_local std::vector<std::pair<size_t, size_t>> pieces;
    thread_local std::string word;
    thread_local std::vector<uint32_t> byte_to_char;
    text::decode_utf8(text.substr(begin, end - begin), cps, offsets);
    for (auto& o : offsets) o += static_cast<uint32_t>(begin);
    chars.clear();
    text::nfc_aligned(cps.data(), offsets.data(), cps.size(), chars);
    pieces.clear();
    text::split_pretokens(chars.data(), chars.size(), pieces);
    for (const auto& [pb, pe] : pieces) {
        word.clear();
        byte_to_char.clear();
        for (size_t c = pb; c < pe; ++c) {
            size_t before = word.size();
            text::append_utf8(word, chars[c].cp);
            byte_to_char.insert(byte_to_char.end(), word.size() - before, static_cast<uint32_t>(c));
        }
        const std::vector<WordPiece>& wp = cached_word(word);
        size_t at = 0;
        for (const WordPiece& p : wp) {
            uint32_t c0 = byte_to_char[at], c1 = byte_to_char[at + p.bytes - 1];
            uint32_t b = chars[c0].orig_begin, e = chars[c0].orig_end;
            for (uint32_t c = c0 + 1; c <= c1; ++c) {
                b = std::min(b, chars[c].orig_begin);
                e = std::max(e, chars[c].orig_end);
            }
            out.push_back({p.id, b, e});
            at += p.bytes;
        }
    }
}

// Added tokens first (leftmost, longest at a position), then the text between them.
void Tokenizer::Impl::encode(std::string_view text, std::vector<Token>& out) const {
    size_t segment_begin = 0;
    size_t i = 0;
    const size_t n = text.size();
    while (i < n) {
        unsigned char c = static_cast<unsigned char>(text[i]);
        if (!added_first[c]) {
            ++i;
            continue;
        }
        const AddedToken* hit = nullptr;
        for (int idx : added_by_first_byte[c]) {
            const std::string& s = added[static_cast<size_t>(idx)].content;
            if (s.size() <= n - i && std::memcmp(text.data() + i, s.data(), s.size()) == 0) {
                hit = &added[static_cast<size_t>(idx)];
                break;
            }
        }
        if (!hit) {
            ++i;
            continue;
        }
        encode_segment(text, segment_begin, i, out);
        out.push_back({hit->id, i, i + hit->content.size()});
        i += hit->content.size();
        segment_begin = i;
    }
    encode_segment(text, segment_begin, n, out);
}

namespace {

// Token ids index dense tables (id -> text, id -> bytes); a larger id in a hostile file would make
// the loader allocate gigabytes. Real vocabularies are below 300k (Qwen3: 151,669).
constexpr int32_t kMaxTokenId = 1 << 21;

// A JSON value quoted for an error message, whatever bytes it holds.
std::string shown(const nlohmann::json& v) { return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

const nlohmann::json& require(const nlohmann::json& j, const char* key, const std::string& where) {
    auto it = j.find(key);
    if (it == j.end()) throw Error(where + ": missing field '" + key + "'");
    return *it;
}

void check_string_field(const nlohmann::json& j, const char* key, const std::string& expected, const std::string& where) {
    const auto& v = require(j, key, where);
    if (!v.is_string() || v.get<std::string>() != expected)
        throw Error(where + ": field '" + key + "' is " + shown(v) + ", tandem's tokenizer supports only \"" + expected + "\"");
}

void check_bool_field(const nlohmann::json& j, const char* key, bool expected, const std::string& where) {
    auto it = j.find(key);
    if (it == j.end()) return;
    if (!it->is_boolean() || it->get<bool>() != expected)
        throw Error(where + ": field '" + key + "' is " + shown(*it) + ", tandem's tokenizer supports only " +
                    (expected ? "true" : "false"));
}

// tandem implements exactly the pipeline Qwen2/Qwen3 tokenizers use; anything else is refused
// loudly rather than tokenised differently.
void check_pipeline(const nlohmann::json& j, const std::string& file) {
    const auto& norm = require(j, "normalizer", file);
    if (!norm.is_object()) throw Error(file + ": field 'normalizer' must be {\"type\": \"NFC\"}");
    check_string_field(norm, "type", "NFC", file + " normalizer");

    const auto& pre = require(j, "pre_tokenizer", file);
    check_string_field(pre, "type", "Sequence", file + " pre_tokenizer");
    const auto& steps = require(pre, "pretokenizers", file + " pre_tokenizer");
    if (!steps.is_array() || steps.size() != 2)
        throw Error(file + ": pre_tokenizer.pretokenizers must be [Split, ByteLevel]");
    const std::string split_where = file + " pre_tokenizer.pretokenizers[0]";
    check_string_field(steps[0], "type", "Split", split_where);
    const auto& pattern = require(steps[0], "pattern", split_where);
    if (!pattern.is_object() || !pattern.contains("Regex") || pattern["Regex"] != std::string(text::kQwenSplitPattern))
        throw Error(split_where + ": pattern " + shown(pattern) + " is not the Qwen2/Qwen3 split regex tandem implements");
    check_string_field(steps[0], "behavior", "Isolated", split_where);
    check_bool_field(steps[0], "invert", false, split_where);
    const std::string bl_where = file + " pre_tokenizer.pretokenizers[1]";
    check_string_field(steps[1], "type", "ByteLevel", bl_where);
    check_bool_field(steps[1], "add_prefix_space", false, bl_where);
    check_bool_field(steps[1], "use_regex", false, bl_where);

    const auto& model = require(j, "model", file);
    check_string_field(model, "type", "BPE", file + " model");
    check_bool_field(model, "byte_fallback", false, file + " model");
    check_bool_field(model, "ignore_merges", false, file + " model");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        auto it = model.find(key);
        if (it != model.end() && !it->is_null() && *it != "")
            throw Error(file + " model: field '" + key + "' is " + shown(*it) + ", tandem supports only \"\"");
    }
    auto dropout = model.find("dropout");
    if (dropout != model.end() && !dropout->is_null() && (!dropout->is_number() || dropout->get<double>() != 0.0))
        throw Error(file + " model: BPE dropout " + shown(*dropout) + " is not supported");
}


}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
    const std::filesystem::path file = dir / "tokenizer.json";
    Tokenizer tok = from_json_text(read_file(file), file.string());
    tok.impl_->dir = dir;
    const std::filesystem::path config = dir / "tokenizer_config.json";
    if (std::filesystem::exists(config)) {
        try {
            // Only checked here (the template is read by data/template): a broken file is named where the
            // tokenizer is loaded, before anything renders with it.
            [[maybe_unused]] const auto parsed = nlohmann::json::parse(read_file(config));
        } catch (const nlohmann::json::exception& e) {
            throw Error(config.string() + ": not valid JSON (" + json_error_text(e) + ")");
        }
    }
    return tok;
}

Tokenizer Tokenizer::from_json_text(std::string_view tokenizer_json, const std::string& where) {
    auto impl = std::make_unique<Impl>();
    text::TokenizerJsonModel raw;
    const nlohmann::json j = text::parse_tokenizer_json(tokenizer_json, raw, where);
    if (!j.is_object()) throw Error(where + ": must be a JSON object (a HuggingFace tokenizer.json)");
    check_pipeline(j, where);
    if (raw.vocab.empty()) throw Error(where + ": model.vocab is missing or empty");
    impl->vocab.reserve(raw.vocab.size() * 2);
    int32_t max_id = -1;
    std::unordered_map<int32_t, const std::string*> owner;  // id -> its vocab token
    for (const auto& [token, id] : raw.vocab) {
        if (id < 0) throw Error(where + ": model.vocab entry " + shown(token) + " has a negative id");
        if (id >= kMaxTokenId)
            throw Error(where + ": model.vocab entry " + shown(token) + " has id " + std::to_string(id) +
                        ", beyond the limit of " + std::to_string(kMaxTokenId) + " ids");
        // One id per token and one token per id: otherwise decode(encode(text)) != text, and the
        // file means different things to readers that keep the first or the last entry.
        if (!impl->vocab.emplace(token, id).second)
            throw Error(where + ": model.vocab entry " + shown(token) + " appears twice");
        if (auto [it, fresh] = owner.emplace(id, &token); !fresh)
            throw Error(where + ": model.vocab id " + std::to_string(id) + " is given to both " + shown(*it->second) +
                        " and " + shown(token));
        max_id = std::max(max_id, id);
    }
    const auto& added = require(j, "added_tokens", where);
    if (!added.is_array()) throw Error(where + ": field 'added_tokens' must be a list of {id, content, ...} objects");
    for (size_t k = 0; k < added.size(); ++k) {
        const auto& a = added[k];
        const std::string at = where + ": added_tokens[" + std::to_string(k) + "]";
        if (!a.is_object()) throw Error(at + " must be an object");
        const auto id = a.find("id");
        if (id == a.end() || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() >= kMaxTokenId)
            throw Error(at + ": field 'id' must be an integer in [0, " + std::to_string(kMaxTokenId) + ")");
        const auto content = a.find("content");
        if (content == a.end() || !content->is_string()) throw Error(at + ": field 'content' must be a string");
        const auto special = a.find("special");
        if (special != a.end() && !special->is_boolean()) throw Error(at + ": field 'special' must be true or false");
        AddedToken t{static_cast<int32_t>(id->get<int64_t>()), content->get<std::string>(), a.value("special", false)};
        const std::string aw = where + " added token " + content->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        check_bool_field(a, "lstrip", false, aw);
        check_bool_field(a, "rstrip", false, aw);
        check_bool_field(a, "single_word", false, aw);
        check_bool_field(a, "normalized", false, aw);
        if (t.content.empty()) throw Error(aw + ": empty content");
        if (auto it = owner.find(t.id); it != owner.end() && *it->second != t.content)
            throw Error(aw + ": id " + std::to_string(t.id) + " is the vocab entry " + shown(*it->second));
        for (const auto& other : impl->added)
            if (other.id == t.id || other.content == t.content)
                throw Error(aw + ": its id or content repeats added token " + shown(other.content));
        impl->vocab[t.content] = t.id;
        max_id = std::max(max_id, t.id);
        impl->added.push_back(std::move(t));
    }
    impl->id_to_token.assign(static_cast<size_t>(max_id + 1), std::string());
    impl->id_to_bytes.assign(static_cast<size_t>(max_id + 1), std::string());
    for (const auto& [s, id] : impl->vocab) impl->id_to_token[static_cast<size_t>(id)] = s;
    std::string bytes;
    for (const auto& [token, id] : raw.vocab) {
        if (!byte_level_to_bytes(token, bytes))
            throw Error(where + ": vocab entry " + shown(token) + " is not in the byte-level alphabet");
        impl->id_to_bytes[static_cast<size_t>(id)] = bytes;
    }
    for (const auto& t : impl->added) impl->id_to_bytes[static_cast<size_t>(t.id)] = t.content;

    for (int b = 0; b < 256; ++b) {
        std::string s;
        text::append_utf8(s, kByteToChar[b]);
        auto it = impl->vocab.find(s);
        if (it == impl->vocab.end()) throw Error(where + ": byte-level symbol for byte " + std::to_string(b) + " missing from vocab");
        impl->byte_id[b] = it->second;
    }

    impl->merges.reserve(raw.merges.size());
    int32_t rank = 0;
    std::string joined;
    for (const auto& [left, right] : raw.merges) {
        auto li = impl->vocab.find(left), ri = impl->vocab.find(right);
        joined.assign(left).append(right);
        auto mi = impl->vocab.find(joined);
        if (li == impl->vocab.end() || ri == impl->vocab.end() || mi == impl->vocab.end())
            throw Error(where + ": merge #" + std::to_string(rank) + " [" + shown(left) + ", " +
                        shown(right) + "] uses a token missing from the vocab");
        // A pair listed twice keeps its last rank, as a map built from the list in order does (HF).
        impl->merges.insert_or_assign(pair_key(li->second, ri->second), MergeInfo{rank, mi->second});
        ++rank;
    }

    for (size_t k = 0; k < impl->added.size(); ++k) {
        unsigned char first = static_cast<unsigned char>(impl->added[k].content[0]);
        impl->added_first[first] = true;
        impl->added_by_first_byte[first].push_back(static_cast<int>(k));
    }
    for (auto& list : impl->added_by_first_byte)
        std::stable_sort(list.begin(), list.end(), [&](int a, int b) {
            return impl->added[static_cast<size_t>(a)].content.size() > impl->added[static_cast<size_t>(b)].content.size();
        });
    return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<Token> Tokenizer::encode_with_offsets(std::string_view text) const {
    std::vector<Token> out;
    out.reserve(text.size() / 3 + 4);
    impl_->encode(text, out);
    return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
    thread_local std::vector<Token> tokens;
    tokens.clear();
    impl_->encode(text, tokens);
    std::vector<int32_t> ids;
    ids.reserve(tokens.size());
    for (const Token& t : tokens) ids.push_back(t.id);
    return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    std::string out;
    for (int32_t id : ids) {
        if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_bytes.size())
            throw Error("decode: token id " + std::to_string(id) + " is outside the vocabulary (size " +
                        std::to_string(impl_->id_to_bytes.size()) + ")");
        out += impl_->id_to_bytes[static_cast<size_t>(id)];
    }
    return out;
}

std::string Tokenizer::token_text(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size())
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary");
    return impl_->id_to_token[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
    auto it = impl_->vocab.find(std::string(token));
    if (it == impl_->vocab.end()) return std::nullopt;
    return it->second;
}

size_t Tokenizer::vocab_size() const { return impl_->id_to_token.size(); }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
const std::filesystem::path& Tokenizer::directory() const { return impl_->dir; }

}  // namespace tandem::data
