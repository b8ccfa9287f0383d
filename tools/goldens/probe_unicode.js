// Probes Hugging Face's own `tokenizers` (npm, Rust core) over the whole Unicode range and writes
// tests/data/tokenizer/hf_unicode_probe.json: what its regex engine (Oniguruma) puts in each
// general category and in \s, and what its NFC normalizer (the `unicode-normalization` crate)
// does to a fixed family of probe strings per code point. tools/unicode/ turns the differences
// from PCRE2/utf8proc into src/moeserve/tokenizer/unicode_compat_table.inc; the C++ test
// unicode_compat_test.cpp replays every probe on our side.
// Usage: cd tools/goldens && npm install && node probe_unicode.js
'use strict';
const fs = require('fs');
const path = require('path');
const tk = require('tokenizers');

const outFile = path.join(__dirname, '..', '..', 'tests', 'data', 'tokenizer', 'hf_unicode_probe.json');
const hfVersion = require('tokenizers/package.json').version;
const kMax = 0x10ffff;
const isSurrogate = (cp) => cp >= 0xd800 && cp <= 0xdfff;  // not representable in a JS string

// The pre-tokenizer of a tokenizer.json whose only step is a Split on `regex`.
function splitPreTokenizer(regex, behavior) {
    const json = {
        version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
        pre_tokenizer: { type: 'Split', pattern: { Regex: regex }, behavior, invert: false },
        post_processor: null, decoder: null,
        model: { type: 'WordLevel', vocab: { '[UNK]': 0 }, unk_token: '[UNK]' },
    };
    return tk.Tokenizer.fromString(JSON.stringify(json)).getPreTokenizer();
}

// "lo-hi,lo-hi,..." in hex for the sorted code points in `set` (an array of booleans).
function toRanges(set) {
    const parts = [];
    for (let cp = 0; cp <= kMax; ++cp) {
        if (!set[cp]) continue;
        let hi = cp;
        while (hi + 1 <= kMax && set[hi + 1]) ++hi;
        parts.push(cp === hi ? cp.toString(16) : `${cp.toString(16)}-${hi.toString(16)}`);
        cp = hi;
    }
    return parts.join(',');
}

// Code points HF's regex matches with `regex` (one code point per match), over the whole range:
// Split with behaviour Removed drops the matches, so what is left are the non-members.
function classMembers(regex) {
    const pre = splitPreTokenizer(regex, 'Removed');
    const member = new Array(kMax + 1).fill(false);
    const kChunk = 8192;
    for (let lo = 0; lo <= kMax; lo += kChunk) {
        let text = '';
        for (let cp = lo; cp < Math.min(lo + kChunk, kMax + 1); ++cp) {
            if (isSurrogate(cp)) continue;
            text += String.fromCodePoint(cp);
            member[cp] = true;
        }
        for (const [piece] of pre.preTokenizeString(text)) {
            for (const ch of piece) member[ch.codePointAt(0)] = false;
        }
    }
    return member;
}

const kCategories = ['Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'Mn', 'Mc', 'Me', 'Nd', 'Nl', 'No', 'Pc', 'Pd',
    'Ps', 'Pe', 'Pi', 'Pf', 'Po', 'Sm', 'Sc', 'Sk', 'So', 'Zs', 'Zl', 'Zp', 'Cc', 'Cf', 'Co', 'Cn'];

// NFC probes: for each code point X, the strings below, each led by '|' (a starter that composes
// with nothing). HF's output is recorded only where it differs from the input. Together they show
// X's decomposition (single), whether X has a combining class above 1 (X before U+0334, class 1),
// between 1 and 6 (U+093C, class 7, before X), its exact class (against one mark per class), and
// every canonical composition (the NFD of X as ICU sees it, which is a newer Unicode).
function nfcProbes(cp) {
    const x = String.fromCodePoint(cp);
    const probes = [['single', '|' + x], ['after_ccc1', '|' + x + '\u0334'], ['before_ccc7', '|\u093c' + x]];
    const nfd = x.normalize('NFD');
    // Hangul syllables compose by arithmetic, not data: a few stand for all 11172.
    const hangul = cp >= 0xac00 && cp <= 0xd7a3 && cp % 97 !== 0;
    if (nfd !== x && !hangul) probes.push(['icu_nfd', '|' + nfd]);
    return probes;
}
// One old, non-composing mark per combining class (from Unicode 14 data): X before each of
// them reorders exactly when X's class is larger.
const kClassMarks = { 1: 0x334, 7: 0x93c, 9: 0x94d, 84: 0xc55, 103: 0xe38, 107: 0xe48, 118: 0xeb8,
    122: 0xec8, 129: 0xf71, 130: 0xf72, 132: 0xf74, 202: 0x321, 214: 0x1dce, 216: 0x31b,
    218: 0x302a, 220: 0x316, 222: 0x59a, 224: 0x302e, 226: 0x1d16d, 228: 0x5ae, 230: 0x30b,
    232: 0x315, 233: 0x35c, 234: 0x35d, 240: 0x345 };

function hex(s) {
    return Array.from(s, (ch) => ch.codePointAt(0).toString(16)).join(' ');
}

// What `out` records (every probe string is led by '|', which is not stored):
//   single, after_ccc1_other, before_ccc7_other: "in>out" for the probes HF changes, except
//   after_ccc1_swapped / before_ccc7_swapped: ranges of X where HF's output is the plain swap
//   (X has a class above 1, resp. 1..6); the _other probes of an X whose 'single' probe changes
//   are not recorded (X's decomposition is covered by 'single' and by its parts' own probes);
//   icu_nfd: "in>out" for every such probe (ICU's NFD cannot be rebuilt on the C++ side);
//   class_masks: "lo-hi:mask" for every X with a swap above, bit i set when HF changes
//   '|' X kClassMarks[i] (marks in ascending class order).
function probeNfc() {
    const nfc = tk.nfcNormalizer();
    const out = { single: [], after_ccc1_other: [], before_ccc7_other: [], icu_nfd: [] };
    const swapped = { after_ccc1: new Array(kMax + 1).fill(false),
        before_ccc7: new Array(kMax + 1).fill(false) };
    const marks = Object.keys(kClassMarks).map(Number).sort((a, b) => a - b).map((c) => kClassMarks[c]);
    const masks = new Map();
    for (let cp = 0; cp <= kMax; ++cp) {
        if (isSurrogate(cp)) continue;
        const x = String.fromCodePoint(cp);
        let decomposes = false;
        for (const [kind, input] of nfcProbes(cp)) {
            const output = nfc.normalizeString(input);
            const entry = `${hex(input.slice(1))}>${hex(output.slice(1))}`;
            if (kind === 'icu_nfd') {
                out.icu_nfd.push(entry);
            } else if (output === input) {
                continue;
            } else if (kind === 'single') {
                out.single.push(entry);
                decomposes = true;
            } else if (decomposes) {
                continue;  // X's own decomposition is covered by 'single' and its parts' probes
            } else {
                const swap = kind === 'after_ccc1' ? '|\u0334' + x : '|' + x + '\u093c';
                if (output === swap) swapped[kind][cp] = true;
                else out[`${kind}_other`].push(entry);
            }
        }
        if (swapped.after_ccc1[cp] || swapped.before_ccc7[cp]) {
            let mask = 0;
            marks.forEach((mark, i) => {
                const input = '|' + String.fromCodePoint(cp, mark);
                if (nfc.normalizeString(input) !== input) mask |= 1 << i;
            });
            masks.set(cp, mask);
        }
    }
    out.after_ccc1_swapped = toRanges(swapped.after_ccc1);
    out.before_ccc7_swapped = toRanges(swapped.before_ccc7);
    const ranges = [];
    for (const [cp, mask] of masks) {
        const last = ranges[ranges.length - 1];
        if (last && last[1] === cp - 1 && last[2] === mask) last[1] = cp;
        else ranges.push([cp, cp, mask]);
    }
    out.class_masks = ranges.map(([lo, hi, m]) =>
        `${lo === hi ? lo.toString(16) : `${lo.toString(16)}-${hi.toString(16)}`}:${m.toString(16)}`).join(',');
    out.class_marks = marks.map((m) => m.toString(16)).join(' ');
    return out;
}

const doc = {
    generator: `tools/goldens/probe_unicode.js with npm tokenizers@${hfVersion}`,
    note: 'code points in hex; ranges lo-hi; nfc: see probeNfc',
    categories: {},
    white_space: toRanges(classMembers('\\s')),
    nfc: probeNfc(),
};
for (const gc of kCategories) doc.categories[gc] = toRanges(classMembers(`\\p{${gc}}`));
const text = JSON.stringify(doc, null, 1) + '\n';
fs.writeFileSync(outFile, text);
console.log(`${outFile}: ${text.length} bytes`);
for (const [k, v] of Object.entries(doc.nfc)) console.log(`nfc ${k}: ${v.length}`);
