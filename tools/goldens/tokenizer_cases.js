// The tricky strings both tokenizers are checked on (see make_tokenizer_goldens.js).
'use strict';

const paragraphs = [
    'The quick brown fox jumps over the lazy dog, while 12 engineers debug 3,456 lines of code. ',
    'In 2024, mixture-of-experts models (MoE) routed each token to 8 of 256 experts; ',
    "they're fast, aren't they? We'd measured 1.5x speed-ups -- and re-measured twice!\n",
    '混合专家模型把每个词元路由到少数专家。日本語のテキストも少し。한국어 문장도 있습니다. ',
    'Emoji 🚀🔥 and math ∑ x² ≤ π·r²; URLs like https://example.com/a?b=c&d=e#frag. ',
    '\tIndented\tcolumns\tand  double  spaces   end here.\n\n',
];
function longParagraph(targetBytes) {
    let s = '';
    let i = 0;
    while (Buffer.byteLength(s, 'utf8') < targetBytes) {
        s += paragraphs[(i * 7) % paragraphs.length];
        i++;
    }
    return s;
}

const cases = [
    '',
    'Hello world',
    'The quick brown fox jumps over the lazy dog.',
    "don't I'LL we've she'd they're it's He'S YOU'VE",
    '1234567 3.14159 2024-11-29 0.5 1,000,000 ٣٤٥ ①②',
    '12345678901234567890',
    '   leading spaces',
    'trailing spaces   ',
    '\n\n\n',
    ' \t ',
    'a\tb\nc\r\nd\n\n  e  \n',
    '   ',
    ' ',
    'def add(a, b):\n    """Return a + b."""\n    return a + b\n',
    'int main() {\n    std::vector<int> v{1, 2, 3};\n    for (auto& x : v) { x *= 2; }\n    return 0;\n}\n',
    '你好，世界！这是一个测试。',
    'ひらがなとカタカナ、漢字も。',
    '안녕하세요 세계',
    '😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ 🏳️‍🌈',
    'e\u0301 caf\u00e9 cafe\u0301 \u1e9b\u0323 A\u030a \u212b \uac00 \u1100\u1161',
    'Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319a\u0324\u035a\u034e\u0353lgo',
    'مرحبا بالعالم',
    'שלום עולם',
    '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
    '<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>',
    '<｜User｜>What is 2+2?<｜Assistant｜><think>\nsimple</think>4',
    '<|endoftext|><|endoftext|>x<|im_end',
    '<tool_call>{"name": "f"}</tool_call>',
    'pneumonoultramicroscopicsilicovolcanoconiosis',
    'a'.repeat(300),
    'Supercalifragilisticexpialidocious'.repeat(8),
    'MiXeD CaSe WoRdS and camelCaseIdentifiers and SCREAMING_SNAKE_CASE',
    'https://huggingface.co/Qwen/Qwen3-30B-A3B?tab=files#readme',
    'user@example.com; C:\\Windows\\path; /usr/local/bin',
    'nbsp\u00a0here, nel\u0085there, ideographic\u3000space, em\u2003space, zwsp\u200bx',
    'Ω≈ç√∫˜µ≤≥÷ ¡™£¢∞§¶•ªº',
    '!!!??? ... --- *** ((( ))) [[]] {{}}',
    longParagraph(2048),
];

// Deterministic random strings over an alphabet of troublemakers: whitespace variants, digits of
// several scripts, apostrophes, CJK/kana/hangul, emoji parts, combining marks, RTL letters and
// fragments of special tokens. A fixed LCG keeps the list the same on every run.
const alphabet = [
    'a', 'Z', 'q', 'é', 'ß', 'İ', 'ſ', 'K', '0', '7', '٣', '५', '²', '½', 'Ⅻ',
    ' ', ' ', '  ', '\t', '\n', '\r\n', '\r', '\u00a0', '\u0085', '\u3000', '\u2028', '\u200b', '\u000b', '\f',
    "'", "'s", "'LL", "'ve", "'d", '’', '-', '.', ',', '!', '?', '(', ')', '"', '#', '$', '%', '&', '*',
    '+', '/', ':', ';', '<', '>', '=', '@', '[', '\\', ']', '^', '_', '`', '{', '|', '}', '~',
    '中', '文', '字', '龥', '鿿', '〇', 'ひ', 'カ', 'ー', '・', '한', 'ㄱ', '！', '，', '。', '「',
    '😀', '👍', '🏽', '\u200d', '❤', '\ufe0f', '🇫', '🇷', '🫠', '𝔘',
    '\u0301', '\u0308', '\u0323', 'ا', 'ل', 'ע', 'ש', 'ก', '्', 'क',
    '<|im_start|>', '<|im_end|>', '<think>', '<|', '|>', '<｜', '｜>', '▁', '<｜User｜>',
    '<｜begin▁of▁sentence｜>', 'the', 'The', ' of', 'ing', 'http', '://', 'www', 'def', '    ',
];
function randomCases(count, seed) {
    let state = BigInt(seed);
    const next = () => {
        state = (state * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
        return Number(state >> 33n);
    };
    const out = [];
    for (let i = 0; i < count; i++) {
        const length = 1 + (next() % 24);
        let s = '';
        for (let j = 0; j < length; j++) s += alphabet[next() % alphabet.length];
        out.push(s);
    }
    return out;
}
const randomStrings = randomCases(120, 20241129);

// gpt-oss (o200k_harmony): the harmony format's special tokens inside text, the reserved ones, and
// fragments that must stay text. Only the gpt_oss goldens use these.
const harmonyCases = [
    '<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant',
    '<|channel|>analysis<|message|>Think 2+2.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>',
    '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"東京"}<|call|>',
    '<|start|>assistant to=functions.search<|channel|>commentary json<|message|>{"q": "x"}<|call|>',
    '<|start|>functions.search to=assistant<|channel|>commentary<|message|>"ok"<|end|>',
    '<|startoftext|>Hello<|endoftext|><|endofprompt|>',
    '<|reserved_200000|><|reserved_200017|><|reserved_201087|><|reserved_201088|>',
    '<|start|<|end|>>< |message|><|channel |>|<|call|>|',
    'text<|return|>more<|return|><|return|>',
    '  <|message|>  spaced  <|end|>\n\n',
];

module.exports = { cases, randomStrings, harmonyCases };
