// Drives mlxgo's server with LangChain (@langchain/openai,
// @langchain/anthropic), the Vercel AI SDK (ai + @ai-sdk/openai-compatible)
// and the OpenAI SDK's zodResponseFormat helper, and prints what each saw
// as one JSON object; serve's clients_test.go checks it. BASE_URL serves
// the demo model, SCRIPTED_URL the scripted tool-using model.
const { z } = require('zod');
const OpenAI = require('openai');
const { zodResponseFormat } = require('openai/helpers/zod');
const { ChatOpenAI } = require('@langchain/openai');
const { ChatAnthropic } = require('@langchain/anthropic');
const { tool: lcTool } = require('@langchain/core/tools');
const ai = require('ai');
const { createOpenAICompatible } = require('@ai-sdk/openai-compatible');

const Answer = z.object({ ok: z.boolean(), count: z.number().int() }).strict();
const weather = { name: 'get_weather', description: 'Weather in a city', schema: z.object({ city: z.enum(['Paris', 'Rome']) }).strict() };

async function step(out, name, f) {
  process.stderr.write('step ' + name + '\n');
  try { out[name] = await f(); } catch (e) { out[name] = { error: String(e && e.message || e).slice(0, 300) }; }
}

async function main() {
  const base = process.env.BASE_URL, scripted = process.env.SCRIPTED_URL;
  const out = {};
  const msgs = [{ role: 'user', content: 'Call me Ishmael.' }];

  // OpenAI SDK: structured output through zodResponseFormat + parse.
  const oc = new OpenAI({ baseURL: base + '/v1', apiKey: 'none', maxRetries: 0 });
  await step(out, 'openaiParse', async () => {
    const r = await oc.chat.completions.parse({ model: 'mlxgo-demo', messages: msgs, max_tokens: 60, temperature: 0,
      response_format: zodResponseFormat(Answer, 'answer') });
    return r.choices[0].message.parsed;
  });

  // LangChain, OpenAI flavour: chat, stream, withStructuredOutput, a
  // forced tool call.
  const lc = new ChatOpenAI({ model: 'mlxgo-demo', apiKey: 'none', temperature: 0, maxTokens: 16, maxRetries: 0, configuration: { baseURL: base + '/v1' } });
  await step(out, 'lcChat', async () => (await lc.invoke(msgs.map(m => ['human', m.content]))).content);
  await step(out, 'lcStream', async () => {
    let text = '';
    for await (const ch of await lc.stream('Call me Ishmael.')) text += ch.content;
    return text;
  });
  await step(out, 'lcStructured', async () => {
    const lcs = new ChatOpenAI({ model: 'mlxgo-demo', apiKey: 'none', temperature: 0, maxTokens: 60, maxRetries: 0, configuration: { baseURL: base + '/v1' } });
    return await lcs.withStructuredOutput(Answer, { name: 'answer', method: 'jsonSchema' }).invoke('Answer in JSON.');
  });
  await step(out, 'lcToolRequired', async () => {
    const lct = new ChatOpenAI({ model: 'scripted', apiKey: 'none', temperature: 0, maxTokens: 200, maxRetries: 0, configuration: { baseURL: scripted + '/v1' } });
    const t = lcTool(async ({ city }) => 'sunny in ' + city, weather);
    const r = await lct.bindTools([t], { tool_choice: 'required' }).invoke('Hello');
    return r.tool_calls.map(c => ({ name: c.name, args: c.args }));
  });

  // LangChain, Anthropic flavour: chat and stream.
  const la = new ChatAnthropic({ model: 'mlxgo-demo', apiKey: 'none', temperature: 0, maxTokens: 16, maxRetries: 0, anthropicApiUrl: base });
  await step(out, 'laChat', async () => (await la.invoke('Call me Ishmael.')).content);
  await step(out, 'laStream', async () => {
    let text = '';
    for await (const ch of await la.stream('Call me Ishmael.')) text += typeof ch.content === 'string' ? ch.content : ch.content.map(p => p.text || '').join('');
    return text;
  });

  // Vercel AI SDK over the OpenAI-compatible provider.
  const prov = createOpenAICompatible({ name: 'mlxgo', baseURL: base + '/v1', apiKey: 'none', supportsStructuredOutputs: true });
  const provS = createOpenAICompatible({ name: 'mlxgo', baseURL: scripted + '/v1', apiKey: 'none', supportsStructuredOutputs: true });
  await step(out, 'aiText', async () => (await ai.generateText({ model: prov('mlxgo-demo'), prompt: 'Call me Ishmael.', maxOutputTokens: 16, temperature: 0, maxRetries: 0 })).text);
  await step(out, 'aiStream', async () => {
    const r = ai.streamText({ model: prov('mlxgo-demo'), prompt: 'Call me Ishmael.', maxOutputTokens: 16, temperature: 0, maxRetries: 0 });
    let text = '';
    for await (const t of r.textStream) text += t;
    return text;
  });
  await step(out, 'aiObject', async () => (await ai.generateObject({ model: prov('mlxgo-demo'), schema: Answer, prompt: 'Answer in JSON.', maxOutputTokens: 60, temperature: 0, maxRetries: 0 })).object);
  await step(out, 'aiStreamObject', async () => {
    const r = ai.streamObject({ model: prov('mlxgo-demo'), schema: Answer, prompt: 'Answer in JSON.', maxOutputTokens: 60, temperature: 0, maxRetries: 0,
      onError: () => {} });
    let partials = 0;
    for await (const _ of r.partialObjectStream) partials++;
    return await r.object;
  });
  await step(out, 'aiToolRequired', async () => {
    const r = await ai.generateText({ model: provS('scripted'), prompt: 'Hello', maxOutputTokens: 200, maxRetries: 0, toolChoice: 'required',
      tools: { get_weather: ai.tool({ description: weather.description, inputSchema: weather.schema }) } });
    return r.toolCalls.map(c => ({ name: c.toolName, args: c.input }));
  });
  // Vercel AI SDK embeddings through the same provider.
  await step(out, 'aiEmbed', async () => (await ai.embed({ model: prov.textEmbeddingModel('mlxgo-demo'), value: 'The whale', maxRetries: 0 })).embedding);
  await step(out, 'aiEmbedMany', async () => (await ai.embedMany({ model: prov.textEmbeddingModel('mlxgo-demo'), values: ['Call me Ishmael.', 'The whale'], maxRetries: 0 })).embeddings);
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(e); process.exit(1); });
