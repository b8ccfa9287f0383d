// Strings over the code points where Hugging Face's Unicode data and moeserve's libraries
// disagree (src/moeserve/tokenizer/unicode_compat_table.inc, made from probe_unicode.js): marks in
// several orders after base letters, letters/numbers/marks/punctuation/symbols newer than PCRE2's
// Unicode inside words, next to digits, spaces and punctuation; and U+180E/U+0085 around spaces.
// Deterministic (seeded); make_tokenizer_goldens.js encodes them with HF.
'use strict';
const fs = require('fs');
const path = require('path');

const tablePath = path.join(__dirname, '..', '..', 'src', 'moeserve', 'tokenizer', 'unicode_compat_table.inc');
const table = fs.readFileSync(tablePath, 'utf8');

// [[lo, hi], ...] of the PCRE2 class items "\\x{A}-\\x{B}\\x{C}" as the .inc spells them.
function parseItems(items) {
    const out = [];
    const re = /\\\\x\{([0-9A-F]+)\}(?:-\\\\x\{([0-9A-F]+)\})?/g;
    for (const m of items.matchAll(re)) out.push([parseInt(m[1], 16), parseInt(m[2] || m[1], 16)]);
    return out;
}
const added = {};
for (const m of table.matchAll(/\{"(\w+)",\s*"([^"]*)",\s*"([^"]*)"\}/g)) added[m[1]] = parseItems(m[2]);
const nfcUnknown = [];
const unknownBlock = table.slice(table.indexOf('kNormalizerUnknown'));
for (const m of unknownBlock.matchAll(/\{0x([0-9A-F]+), 0x([0-9A-F]+)\}/g)) {
    nfcUnknown.push([parseInt(m[1], 16), parseInt(m[2], 16)]);
}

let state = 20261201n;
function next() {
    state = (state * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
    return Number(state >> 33n);
}
const pick = (list) => list[next() % list.length];
const fromRanges = (ranges) => {
    const [lo, hi] = pick(ranges);
    return String.fromCodePoint(lo + (next() % (hi - lo + 1)));
};
const ch = (...cps) => String.fromCodePoint(...cps);

const bases = ['a', 'e', 'o', 'u', 'A', 'ư', 'ж', 'ب', 'क', 'א', 'ก', '中', '1', ' '];
// Marks HF knows, one or two per combining class.
const knownMarks = [0x301, 0x300, 0x308, 0x323, 0x316, 0x327, 0x31b, 0x334, 0x345, 0x35c, 0x93c,
    0x94d, 0x5b0, 0x5b8, 0x64b, 0xe38, 0x1dce, 0x302a].map((cp) => ch(cp));
const words = ['', 'x', 'ab', 'Hello', 'café', '12', '中文', 'ко'];
const tails = ['', ' ', 'z', '1', '.', ', ok', '\n', 'yz 3'];

function markCases(count) {
    const out = [];
    for (let i = 0; i < count; i++) {
        const marks = [];
        const n = 2 + (next() % 3);
        for (let j = 0; j < n; j++) marks.push(next() % 2 ? fromRanges(nfcUnknown) : pick(knownMarks));
        const head = pick(words) + pick(bases);
        const tail = pick(tails);
        out.push(head + marks.join('') + tail);
        out.push(head + marks.slice().reverse().join('') + tail);  // the same marks, other order
    }
    // Every unknown range once, between marks HF does reorder.
    for (const [lo, hi] of nfcUnknown) out.push('e' + ch(0x316) + ch(lo) + ch(0x301) + ch(hi) + ch(0x323) + 'x');
    out.push(ch(0x11935, 0x11930) + ' ' + ch(0x11938));  // a composition HF does not know
    return out;
}

function contexts(x, y) {
    return [`ab${x}cd`, `${x}${y}${x}`, ` ${x}${y}`, `12${x}34`, `${x}1${y}2`, `(${x}), ${y}!`,
        `word ${x}\n${y}`, `${x}  ${y}`, `中${x}文`, `it's${x}'s`];
}

function classCases() {
    const out = [];
    // Letters: one case per range, then random ones in assorted contexts.
    for (const [lo, hi] of added.L) out.push(`x${ch(lo)}${ch(hi)} ${ch(hi)}9`);
    for (let i = 0; i < 40; i++) out.push(pick(contexts(fromRanges(added.L), fromRanges(added.L))));
    for (const [lo] of added.N) out.push(`a${ch(lo)}${ch(lo)}${ch(lo)}${ch(lo)}b 1${ch(lo)}2`);
    for (let i = 0; i < 15; i++) out.push(pick(contexts(fromRanges(added.N), fromRanges(added.N))));
    for (const [lo] of added.M) out.push(`ab${ch(lo)}c ${ch(lo)}1`);
    for (let i = 0; i < 12; i++) out.push(pick(contexts(fromRanges(added.L) + fromRanges(added.M), fromRanges(added.M))));
    for (let i = 0; i < 25; i++) {
        const p = fromRanges(added.P);
        const s = fromRanges(added.S);
        out.push(pick([`word${p}word`, ` ${s}${s}\n`, `a${p}${s}b`, `${p}abc`, `1${s}2`, `x ${p}${p} y`]));
    }
    out.push(`a${ch(0x180e)}b`, `x ${ch(0x180e)} y`, `${ch(0x180e, 0x180e)} 1`, `a${ch(0x85)}b`,
        `x \u0085 y\n`, `${ch(0x1171e)}a${ch(0x11700, 0x1171e)}`);
    return out;
}

const unicodeCases = [...markCases(60), ...classCases()];
module.exports = { unicodeCases };
