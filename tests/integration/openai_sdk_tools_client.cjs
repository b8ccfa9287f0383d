// The official OpenAI Node SDK driving tool calls against `moeserve serve --enable-auto-tool-choice
// --tool-call-parser hermes` with the tiny model: a two-turn conversation with tool_choice required
// then auto (streamed and not), a named tool choice, and runTools completing a loop with a forced
// call. The random-weight model never writes a call on its own, so the calls come from the forced
// choices (grammar-constrained); auto must still accept the history and answer.
// Usage: node openai_sdk_tools_client.cjs BASE_URL API_KEY MODEL. Prints one JSON line of results.
const OpenAI = require("openai");

const parameters = {
    type: "object",
    properties: { city: { type: "string", enum: ["Paris", "Oslo"] } },
    required: ["city"],
    additionalProperties: false,
};
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city", parameters } }];

async function streamed(client, body) {
    const stream = await client.chat.completions.create({ ...body, stream: true });
    const calls = [];
    let content = "", finish = null;
    for await (const chunk of stream) {
        const choice = chunk.choices[0];
        if (!choice) continue;
        content += choice.delta?.content ?? "";
        for (const d of choice.delta?.tool_calls ?? []) {
            if (!calls[d.index]) calls[d.index] = { id: d.id, name: "", arguments: "" };
            if (d.function?.name) calls[d.index].name += d.function.name;
            calls[d.index].arguments += d.function?.arguments ?? "";
        }
        finish = choice.finish_reason ?? finish;
    }
    return { content, calls, finish };
}

async function main() {
    const [baseURL, apiKey, model] = process.argv.slice(2);
    const client = new OpenAI({ baseURL, apiKey, timeout: 60000, maxRetries: 0 });
    const messages = [{ role: "user", content: "What is the weather in Paris?" }];
    const base = { model, tools, max_tokens: 64, temperature: 0, parallel_tool_calls: false };

    const required = await client.chat.completions.create({ ...base, messages, tool_choice: "required" });
    const msg = required.choices[0].message;
    const requiredStream = await streamed(client, { ...base, messages, tool_choice: "required" });

    // Turn two: the assistant's calls (content null) and the tool's result, then auto.
    const history = [
        ...messages,
        { role: "assistant", content: null, tool_calls: msg.tool_calls },
        { role: "tool", tool_call_id: msg.tool_calls[0].id, content: "sunny, 21 C" },
    ];
    const auto = await client.chat.completions.create({ ...base, messages: history, tool_choice: "auto", max_tokens: 6 });
    const autoStream = await streamed(client, { ...base, messages: history, max_tokens: 6 });

    const named = await client.chat.completions.create({
        ...base, messages, tool_choice: { type: "function", function: { name: "get_weather" } },
    });

    const called = [];
    const runner = client.chat.completions.runTools({
        model, messages, max_tokens: 64, temperature: 0,
        tool_choice: { type: "function", function: { name: "get_weather" } },
        tools: [{
            type: "function",
            function: {
                name: "get_weather", parameters, parse: JSON.parse,
                function: (args) => { called.push(args); return { forecast: "sunny" }; },
            },
        }],
    });
    await runner.done();
    const runnerMessages = runner.messages.map((m) => m.role);

    console.log(JSON.stringify({
        required: { finish: required.choices[0].finish_reason, content: msg.content,
                    calls: msg.tool_calls.map((c) => ({ id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments })) },
        required_stream: requiredStream,
        auto: { finish: auto.choices[0].finish_reason, content: auto.choices[0].message.content,
                calls: auto.choices[0].message.tool_calls ?? [] },
        auto_stream: autoStream,
        named: { finish: named.choices[0].finish_reason, calls: named.choices[0].message.tool_calls.map((c) => c.function) },
        run_tools: { called, roles: runnerMessages },
    }));
}

main().catch((e) => {
    console.error(String(e && e.stack ? e.stack : e));
    process.exit(1);
});
