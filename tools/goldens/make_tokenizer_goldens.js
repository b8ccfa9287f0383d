// Writes tests/data/tokenizer/<name>_goldens.json with Hugging Face's own `tokenizers` (Rust core,
// Node bindings), the independent reference for moeserve's C++ tokenizer. Run once, check in.
// Usage: cd tools/goldens && npm install && node make_tokenizer_goldens.js [tokenizer cache dir]
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { Tokenizer, templateProcessing } = require('tokenizers');
const { cases, randomStrings, harmonyCases } = require('./tokenizer_cases');
const { unicodeCases } = require('./unicode_cases');

const cacheDir = process.argv[2] || path.join(os.homedir(), '.cache', 'moeserve', 'tokenizers');
const outDir = path.join(__dirname, '..', '..', 'tests', 'data', 'tokenizer');
const hfVersion = require('tokenizers/package.json').version;

function tokenContent(t) {
    if (t === null || t === undefined) return null;
    return typeof t === 'string' ? t : t.content;
}

// transformers' LlamaTokenizerFast (DeepSeek-V3) rebuilds the post-processor from add_bos_token /
// add_eos_token as a TemplateProcessing; Qwen2TokenizerFast keeps tokenizer.json's. Mirror that.
function applyTransformersPostProcessor(tokenizer, config) {
    if (config.tokenizer_class !== 'LlamaTokenizerFast') return;
    const bos = tokenContent(config.bos_token);
    const eos = tokenContent(config.eos_token);
    const addBos = config.add_bos_token !== false;  // LlamaTokenizerFast defaults to true
    const addEos = config.add_eos_token === true;
    const special = [];
    let single = '$A:0';
    if (addBos) { single = `${bos}:0 ${single}`; special.push([bos, tokenizer.tokenToId(bos)]); }
    if (addEos) { single = `${single} ${eos}:0`; special.push([eos, tokenizer.tokenToId(eos)]); }
    tokenizer.setPostProcessor(templateProcessing(single, null, special));
}

async function makeGoldens(name) {
    const dir = path.join(cacheDir, name);
    const tokenizer = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
    const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
    applyTransformersPostProcessor(tokenizer, config);
    const out = [];
    const runs = cases.flatMap((text) => [[text, true], [text, false]]);
    for (const text of randomStrings) runs.push([text, false]);
    if (name === 'gpt_oss') for (const text of harmonyCases) runs.push([text, true], [text, false]);
    for (const [text, addSpecialTokens] of runs) {
        {
            const enc = await tokenizer.encode(text, null, { addSpecialTokens });
            const ids = Array.from(enc.getIds());
            out.push({
                text,
                add_special_tokens: addSpecialTokens,
                ids,
                decoded: await tokenizer.decode(ids, false),
                decoded_skip_special: await tokenizer.decode(ids, true),
            });
        }
    }
    const doc = {
        generator: `tools/goldens/make_tokenizer_goldens.js with npm tokenizers@${hfVersion}`,
        tokenizer: name,
        vocab_size: tokenizer.getVocabSize(true),
        cases: out,
    };
    writeCases(path.join(outDir, `${name}_goldens.json`), doc);

    // Unicode edge cases (unicode_cases.js, issue #15): text, ids and decode only, no specials.
    const unicodeOut = [];
    for (const text of unicodeCases) {
        const enc = await tokenizer.encode(text, null, { addSpecialTokens: false });
        const ids = Array.from(enc.getIds());
        unicodeOut.push({ text, ids, decoded: await tokenizer.decode(ids, false) });
    }
    writeCases(path.join(outDir, `${name}_unicode_goldens.json`), { ...doc, cases: unicodeOut });
}

function writeCases(file, doc) {
    // One case per line keeps diffs readable and the file small.
    const lines = doc.cases.map((c) => '    ' + JSON.stringify(c));
    const head = JSON.stringify({ generator: doc.generator, tokenizer: doc.tokenizer, vocab_size: doc.vocab_size });
    const text = head.slice(0, -1) + ',\n  "cases": [\n' + lines.join(',\n') + '\n  ]\n}\n';
    JSON.parse(text);  // sanity: the hand-joined document is valid JSON
    fs.writeFileSync(file, text);
    console.log(`${file}: ${doc.cases.length} cases, ${text.length} bytes`);
}

(async () => {
    fs.mkdirSync(outDir, { recursive: true });
    for (const name of ['qwen3', 'deepseek_v3', 'gpt_oss']) await makeGoldens(name);
})().catch((e) => { console.error(e); process.exit(1); });
