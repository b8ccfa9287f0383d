// Reference speed of Hugging Face tokenizers (Rust core via Node) on the exact texts of
// benchmarks/tokenizer_bench.cpp (same paragraphs, same LCG), single encode calls, no batching.
// Usage: node hf_encode_speed.js [tokenizer cache dir]
'use strict';
const os = require('os');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const kEnglish = [
    "The scheduler admits a request only when its prompt fits in the free KV blocks; otherwise it waits, and the oldest running request may be preempted by recomputation. ",
    "Mixture-of-experts layers route each token to 8 of 128 experts, so the all-to-all exchange dominates decode latency on 4 nodes with 25 Gb/s links. ",
    "\"Don't tune what you haven't measured,\" she said; we'd run 3 trials at 1,024 tokens each and the p99 was 41.7 ms (down from 58.2 ms). ",
    "def route(x, k=8):\n    scores = softmax(x @ W)\n    return topk(scores, k)\n\n",
    "In 2024 the cluster served 12.5 million requests per day across 64 GPUs and 512 CPU cores, with a median time-to-first-token of 180 ms. ",
    "Whitespace   runs,\ttabs\tand trailing spaces   \nare common in code and logs. "
];
const kChinese = [
    "混合专家模型在每一层中只激活少量专家，因此推理时的计算量远小于参数量。",
    "调度器只有在空闲缓存块足够容纳提示词时才接纳新的请求，否则请求需要排队等待。",
    "我们在四台机器上测试了吞吐量，每台机器有六十四个核心，延迟的中位数是一百八十毫秒。",
    "自然语言处理的研究者常常使用分词器把文本切分成词元，然后再送入神经网络。",
    "今天天气很好，我们去公园散步，看到很多人在跑步、打太极拳和放风筝。",
    "在2024年，这个系统每天处理一千二百五十万个请求，错误率低于0.1%。"
];

function makeText(paragraphs, targetBytes) {
    let text = '';
    let bytes = 0;
    let state = 0x2545F4914F6CDD1Dn;
    while (bytes < targetBytes) {
        state = (state * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
        const p = paragraphs[Number((state >> 33n) % BigInt(paragraphs.length))];
        text += p;
        bytes += Buffer.byteLength(p, 'utf8');
    }
    return text;
}

(async () => {
    const cacheDir = process.argv[2] || path.join(os.homedir(), '.cache', 'moeserve', 'tokenizers');
    for (const name of ['qwen3', 'deepseek_v3']) {
        const tokenizer = Tokenizer.fromFile(path.join(cacheDir, name, 'tokenizer.json'));
        for (const [label, paragraphs] of [['english', kEnglish], ['chinese', kChinese]]) {
            const text = makeText(paragraphs, 100 * 1024);
            const bytes = Buffer.byteLength(text, 'utf8');
            let ids = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
            const runs = 20;
            const start = process.hrtime.bigint();
            for (let i = 0; i < runs; i++) await tokenizer.encode(text, null, { addSpecialTokens: false });
            const seconds = Number(process.hrtime.bigint() - start) / 1e9 / runs;
            console.log(`${name} ${label}: ${bytes} bytes, ${ids.length} tokens, ` +
                        `${(bytes / seconds / 1048576).toFixed(1)} MiB/s`);
        }
    }
})();
