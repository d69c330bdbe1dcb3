// Fuzz target: loading a tokenizer.json (Tokenizer::from_json_text: tandem's own strict JSON
// reader, the pipeline checks, vocab / merges / added tokens). Properties: only tandem::Error
// escapes; a tokenizer that loads encodes and decodes a few texts, decode(encode(text)) == text
// (byte-level BPE loses nothing for NFC text), and every id it produces is below vocab_size().
#include "tandem/data/tokenizer.h"
#include "tandem/error.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace tandem;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        const data::Tokenizer tok = data::Tokenizer::from_json_text(text, "fuzz/tokenizer.json");
        for (const std::string sample : {"Hello world 123", "a  b\n\nc's", "<|im_start|>user\nhi<|im_end|>", "\xc3\xa9t\xc3\xa9 \xf0\x9f\x99\x82"}) {
            const auto ids = tok.encode(sample);
            for (int32_t id : ids)
                if (id < 0 || static_cast<size_t>(id) >= tok.vocab_size()) std::abort();
            const std::string back = tok.decode(ids);
            if (back != sample) {
                std::fprintf(stderr, "decode(encode(%s)) = %s\n", sample.c_str(), back.c_str());
                std::abort();
            }
        }
    } catch (const Error&) {
    }
    return 0;
}
