"""Adversarial inputs for the tokenizer (deterministic). Each family targets one part of the
pipeline: NFC (combining marks, reordering, Hangul, exclusions), the split regex's classes and
backtracking (letters, numbers, whitespace runs, CR/LF, contractions in any case), byte-level BPE
(emoji, ZWJ sequences, CJK, rare scripts) and added-token matching (look-alikes, partial tokens)."""
import itertools
import random

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
            "</tool_call>", "<|fim_prefix|>", "<|vision_pad|>", "<tool_response>", "</tool_response>"]

HAND_WRITTEN = [
    "", " ", "  ", "\n", "\r\n", "\r", "\t", "a", "A", "1", "12", "123", "1234567890", "3.14159", "-42",
    "1,000,000", "10^6", "x²", "½ cup", "Ⅻ", "٣٤٥", "१२३", "①②③", "𝟘𝟙𝟚",
    "it's", "It'S", "IT'S", "we'll", "WE'LL", "We'Ll", "they're", "THEY'RE", "I've", "I'VE", "I'm", "I'M",
    "he'd", "HE'D", "don't", "DON'T", "'s", "'S", "'", "''", "'''s", "x'sy", "'ll've'd", "rock'n'roll",
    "it\u2019s", "l'été", "o'clock", "'ſ", "it'ſ", "'\u212a", "'Ǉ", "'ǉ", "'ﬅ",
    "hello world", "hello  world", "hello   world", "hello\tworld", "hello \t world", "hello\n\nworld",
    "hello \n world", "hello\r\n\r\nworld", "  leading", "trailing  ", "trailing \n", " \n \n ", "\n\n\n",
    "a\u00a0b", "a\u3000b", "a\u2028b", "a\u0085b", "a\u1680b", "a\u200bb", "a\u001cb", "a\u001fb", "a\u000bb",
    "a\u000cb", "\u2003\u2003x", "x\u2003\u2003", "\u00a0\u00a0\n", " \u00a0x",
    "!!!", "...", "?!", " ...\n", "--->\n\n", "(a)", "[1]", "{x: 1}", "a.b.c", "e.g.", "i.e.,", "#hashtag",
    "@user", "user@example.com", "https://example.com/a?b=c&d=e#f", "C:\\path\\to\\file", "a/b/c", "$100",
    "100%", "5 mg/kg/day", "pH 7.4", "Na+/K+-ATPase", "CO₂", "H₂O", "β-blocker", "α1-antitrypsin",
    "μg", "µg", "°C", "±2", "≥ 10", "≤5", "→", "⇒", "∑", "∫", "√2", "∞",
    "café", "cafe\u0301", "e\u0301", "e\u0301\u0301", "a\u0323\u0307", "a\u0307\u0323", "\u1e31\u0323",
    "\u0344", "\u0344a", "\u0958", "\u2126", "\u212b", "\u1e9b\u0323", "\u00c5\u030a", "A\u030a",
    "\u0f73", "\u0f77", "\u0340", "\u0341", "\u0343", "\u0374", "\u037e", "\u0387", "\u1f71", "\u2000",
    "\u0301", "\u0301a", "\u0301\u0301", " \u0301", "\n\u0301", "1\u0301", "!\u0301", "\u0915\u093c",
    "\u0627\u0653", "\u05d0\u05b8", "\u0e01\u0e34", "\u0dd9\u0dcf", "\u0b47\u0b3e", "\u1100\u1161",
    "\u1100\u1161\u11a8", "\uac00\u11a8", "\ud55c\uad6d\uc5b4", "\u1100\u1100\u1161", "\u110b\u1175\u11ab",
    "e\u0301<|im_end|>", "<|im_end|>\u0301", "a\u0300<think>\u0301",
    "中文", "中文字符测试", "日本語のテキスト", "ひらがな", "カタカナ", "한국어", "漢字かな交じり文",
    "中 文", "中\n文", "中1文", "Ελληνικά", "Русский текст", "עברית", "العربية", "हिन्दी", "ไทย", "ქართული",
    "😀", "😀😀", "😀 😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇫🇷🇩🇪", "1️⃣", "❤️", "☺", "🧑‍⚕️",
    "x😀y", " 😀", "😀\n", "\U0001f9ec", "\U000e0041", "\U0010fffd", "\ue000", "\ufeff", "\ufeffa",
    "\u200d", "\u200c", "a\u200db", "\u2060", "\u00ad", "\u0000", "a\u0000b", "\u007f", "\u0080",
    "<|im_start|>", "<|im_end|>", "<|im_start|>user\nhi<|im_end|>\n", "<|im_end", "<|im_end|", "|im_end|>",
    "<|im_end |>", "< |im_end|>", "<|IM_END|>", "<|im_end|><|im_end|>", "<<|im_end|>>", "<|im_start|><|im_end|>",
    "<|endoftext|>", "<|endoftext", "<think>", "</think>", "<think", "</think", "<think>\n\n</think>\n\n",
    "<thinking>", "<tool_call>", "<tool_call", "<|fim_prefix|>x<|fim_suffix|>", "<|", "|>", "<|>", "<||>",
    "<|im_start|>assistant\n<think>\n\n</think>\n\nanswer<|im_end|>\n",
    "a" * 1000, "ab" * 500, " " * 1000, "\n" * 300, "\t" * 100, " \n" * 200, "1" * 300, "!" * 400,
    "😀" * 100, "é" * 200, "e\u0301" * 100, "中" * 300, "'s" * 100, "<|im_end|>" * 50, "x " * 400,
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab",
    "The patient, a 45-year-old man, presented with a 3-day history of fever (38.5°C) and cough.",
    "Q: What's the dose?\nA: 500 mg q8h — don't exceed 4 g/day.\n\n",
    "    def f(x):\n        return x ** 2\n",
    "SELECT * FROM t WHERE a='x';",
    "{\"key\": [1, 2.5, null, true]}",
]

CLASS_SAMPLES = {
    "letter": ["a", "Z", "é", "ß", "ǅ", "ʰ", "中", "あ", "ア", "한", "Ω", "ж", "א", "ب", "क", "ก", "ᄀ", "𝔸", "𐐀"],
    "mark": ["\u0301", "\u0323", "\u0903", "\u093c", "\u20dd", "\u0e34", "\u302a", "\U0001d167"],
    "number": ["0", "7", "²", "½", "Ⅻ", "٣", "१", "①", "〇", "𝟘", "𐄇", "\u2070"],
    "space": [" ", "\t", "\n", "\r", "\u000b", "\u000c", "\u0085", "\u00a0", "\u2003", "\u3000", "\u2028", "\u2029", "\u202f"],
    "punct": ["!", ".", ",", "'", "\"", "-", "(", "_", "¿", "。", "、", "«", "—", "…", "§"],
    "symbol": ["$", "+", "<", "|", "^", "`", "~", "©", "°", "€", "→", "∑", "😀", "♥", "\u00ad"],
    "control": ["\u0000", "\u0001", "\u001c", "\u001f", "\u007f", "\u0090", "\u200b", "\u200d", "\ufeff", "\ue000"],
}


def pair_strings():
    """Every ordered pair of class samples, with and without a separating space: the regex
    alternatives' boundaries (optional prefix, ' ?' before punctuation, \\s+(?!\\S) back-off)."""
    reps = {k: v[:4] for k, v in CLASS_SAMPLES.items()}
    out = []
    for (ka, va), (kb, vb) in itertools.product(reps.items(), repeat=2):
        for a, b in zip(va, vb):
            out.append(a + b)
            out.append(a + " " + b)
            out.append(a + "  " + b + "\n")
    return out


def random_strings(count=600, seed=20261129):
    rng = random.Random(seed)
    pool = [c for v in CLASS_SAMPLES.values() for c in v] + ["'", "'s", "'LL", "<|im_end|>", "<think>", "<|",
                                                            "|>", "\r\n", "  ", "e\u0301", "👨‍👩‍👧"]
    out = []
    for _ in range(count):
        n = rng.randint(1, 40)
        out.append("".join(rng.choice(pool) for _ in range(n)))
    return out


def contraction_cases():
    out = []
    for suffix in ["s", "t", "re", "ve", "m", "ll", "d"]:
        for variant in {suffix.lower(), suffix.upper(), suffix.capitalize(), suffix[::-1]}:
            out += ["it'" + variant, "'" + variant + "x", " '" + variant, "x '" + variant + " y", "1'" + variant]
    return out


def adversarial_strings():
    seen, out = set(), []
    for s in HAND_WRITTEN + pair_strings() + contraction_cases() + random_strings():
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


if __name__ == "__main__":
    print(len(adversarial_strings()))
