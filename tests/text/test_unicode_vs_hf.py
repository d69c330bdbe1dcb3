"""Every Unicode code point through tandem's tokenizer and HuggingFace's, in contexts that
exercise each alternative of the split regex (letter, number, whitespace, other; contractions)
and NFC composition. This is what pins the Unicode versions of data/src/text/unicode_tables.inc
(regex classes 16.0, NFC 9.0 — see data/tools/gen_unicode_tables.py). Slow (minutes)."""
import unicodedata

import pytest

import text_oracle as oracle
from test_tokenizer_hf import compare


@pytest.fixture(scope="module")
def hf():
    return oracle.hf_tokenizer()


def test_every_unicode_code_point(hf):
    texts, chunk = [], []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        probe = f"x{c}{c} {c}1\n{c}'s e{c}\u0301{c}"
        if unicodedata.decomposition(c) or unicodedata.combining(c):
            # may be reordered with other marks, composed, or have to be recomposed from NFD
            probe += f" a{c}\u0323{c}\u0301 {unicodedata.normalize('NFD', c)}"
        chunk.append(probe)
        if len(chunk) == 512:
            texts.append("|".join(chunk))
            chunk = []
    if chunk:
        texts.append("|".join(chunk))
    compare(texts, hf, "code point probes")
