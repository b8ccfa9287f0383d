// The official OpenAI Node SDK as a user's program: chat.completions.parse with a Zod schema
// must return a parsed object (structured outputs), and a plain chat and a stream must work.
// Usage: node openai_sdk_client.cjs BASE_URL API_KEY MODEL. Prints one JSON line of results.
const OpenAI = require("openai");
const { zodResponseFormat } = require("openai/helpers/zod");
const { z } = require("zod");

async function main() {
    const [baseURL, apiKey, model] = process.argv.slice(2);
    const client = new OpenAI({ baseURL, apiKey, timeout: 60000, maxRetries: 0 });
    const Answer = z.object({ ok: z.boolean(), color: z.enum(["red", "green", "blue"]) });
    const messages = [{ role: "user", content: "Is the sky blue? Answer as JSON." }];
    const parsed = [];
    for (const temperature of [0, 1]) {
        const r = await client.chat.completions.parse({
            model, messages, temperature, seed: 3, max_tokens: 64,
            response_format: zodResponseFormat(Answer, "answer"),
        });
        parsed.push(r.choices[0].message.parsed);
    }
    const plain = await client.chat.completions.create({ model, messages, max_tokens: 4 });
    let streamed = "";
    const stream = await client.chat.completions.create({ model, messages, max_tokens: 4, stream: true });
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
    console.log(JSON.stringify({ parsed, plain_finish: plain.choices[0].finish_reason, streamed_chars: streamed.length }));
}

main().catch((e) => {
    console.error(String(e && e.stack ? e.stack : e));
    process.exit(1);
});
