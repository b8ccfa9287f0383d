// The official OpenAI Node SDK's responses.create against `moeserve serve` with the tiny model
// (issue 34 item 6): a plain response, the same streamed (events in order, the deltas adding up to
// the completed response's text), a forced function call and its output sent back with
// previous_response_id, a JSON schema through text.format, and an evicted id (a 404).
// Usage: node openai_sdk_responses_client.cjs BASE_URL API_KEY MODEL. Prints one JSON line of results.
const OpenAI = require("openai");

const parameters = {
    type: "object",
    properties: { city: { type: "string", enum: ["Paris", "Oslo"] } },
    required: ["city"],
    additionalProperties: false,
};
const tools = [{ type: "function", name: "get_weather", description: "Weather of a city", parameters, strict: true }];

async function streamed(client, body) {
    const stream = await client.responses.create({ ...body, stream: true });
    const types = [], sequence = [];
    let deltas = "", completed = null;
    for await (const event of stream) {
        types.push(event.type);
        sequence.push(event.sequence_number);
        if (event.type === "response.output_text.delta") deltas += event.delta;
        if (event.type === "response.completed" || event.type === "response.incomplete") completed = event.response;
    }
    const text = completed.output.filter((o) => o.type === "message").flatMap((o) => o.content).map((c) => c.text).join("");
    return { types, sequence, deltas, text, status: completed.status, usage: completed.usage };
}

async function main() {
    const [baseURL, apiKey, model] = process.argv.slice(2);
    const client = new OpenAI({ baseURL, apiKey, timeout: 60000, maxRetries: 0 });
    const out = {};
    const plain = await client.responses.create({ model, input: "Hello", instructions: "Answer briefly.",
                                                  max_output_tokens: 6, temperature: 0 });
    out.plain = { id: plain.id, text: plain.output_text, status: plain.status, usage: plain.usage,
                  object: plain.object };
    out.stream = await streamed(client, { model, input: "Hello", instructions: "Answer briefly.",
                                          max_output_tokens: 6, temperature: 0 });
    const call = await client.responses.create({ model, input: "What is the weather in Paris?", tools,
                                                 tool_choice: { type: "function", name: "get_weather" },
                                                 max_output_tokens: 40, temperature: 0 });
    const fc = call.output.find((o) => o.type === "function_call");
    out.call = { id: call.id, name: fc?.name, arguments: fc?.arguments, call_id: fc?.call_id };
    const second = await client.responses.create({ model, previous_response_id: call.id, tools,
        input: [{ type: "function_call_output", call_id: fc.call_id, output: JSON.stringify({ sky: "sunny" }) }],
        max_output_tokens: 5, temperature: 0 });
    out.second = { status: second.status, text: second.output_text, previous: second.previous_response_id,
                   input_tokens: second.usage.input_tokens, call_input_tokens: call.usage.input_tokens };
    const schema = await client.responses.create({ model, input: "Pick a color.", max_output_tokens: 60,
        text: { format: { type: "json_schema", name: "color", strict: true, schema: { type: "object",
            properties: { color: { type: "string", enum: ["red", "green"] } }, required: ["color"],
            additionalProperties: false } } } });
    out.schema = { text: schema.output_text, status: schema.status };
    try {
        await client.responses.create({ model, input: "x", previous_response_id: plain.id });
        out.evicted = { status: 200 };
    } catch (e) {
        out.evicted = { status: e.status, code: e.code, message: e.message };
    }
    console.log(JSON.stringify(out));
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
