// Drives mlxgo's server with the official OpenAI and Anthropic Node SDKs
// and prints what it observed as one JSON object; serve's sdk_test.go
// checks it. BASE_URL serves the demo model, SCRIPTED_URL the scripted
// tool-using model.
const OpenAI = require('openai');
const Anthropic = require('@anthropic-ai/sdk');

async function main() {
  const base = process.env.BASE_URL, scripted = process.env.SCRIPTED_URL;
  const prompt = process.env.PROMPT, stop = process.env.STOP;
  const out = {};
  const c = new OpenAI({ baseURL: base + '/v1', apiKey: 'none', maxRetries: 0 });
  const msgs = [{ role: 'user', content: prompt }];
  const greedy = { model: 'mlxgo-demo', messages: msgs, max_tokens: 24, temperature: 0 };

  // First, while the prompt cache is empty: a cache hit would change the
  // prefill's chunking and with it bf16 rounding.
  const comp = await c.completions.create({ model: 'mlxgo-demo', prompt: 'The whale', max_tokens: 16, temperature: 0, logprobs: 2 });
  out.completion = { text: comp.choices[0].text, tokens: comp.choices[0].logprobs.tokens, top: comp.choices[0].logprobs.top_logprobs.map(t => Object.keys(t).length) };

  const r = await c.chat.completions.create(greedy);
  out.chat = { text: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: r.usage };

  const st = await c.chat.completions.create({ ...greedy, stream: true, stream_options: { include_usage: true } });
  const s = { text: '', roles: [], finish: null, usage: null, chunks: 0 };
  for await (const ch of st) {
    s.chunks++;
    if (ch.usage) s.usage = ch.usage;
    for (const choice of ch.choices) {
      if (choice.delta.role) s.roles.push(choice.delta.role);
      s.text += choice.delta.content || '';
      if (choice.finish_reason) s.finish = choice.finish_reason;
    }
  }
  out.stream = s;

  const t2 = await c.chat.completions.create({ ...greedy, max_tokens: 8,
    messages: [...msgs, { role: 'assistant', content: r.choices[0].message.content }, { role: 'user', content: 'And then?' }] });
  out.turn2 = t2.usage;
  out.turn2Text = t2.choices[0].message.content;


  const sr = await c.chat.completions.create({ ...greedy, stop: [stop] });
  out.stop = { text: sr.choices[0].message.content, finish: sr.choices[0].finish_reason };
  const ss = await c.chat.completions.create({ ...greedy, stop: stop, stream: true });
  out.stopStream = '';
  for await (const ch of ss) for (const choice of ch.choices) out.stopStream += choice.delta.content || '';

  const lp = await c.chat.completions.create({ ...greedy, max_tokens: 5, logprobs: true, top_logprobs: 3 });
  out.logprobs = lp.choices[0].logprobs.content.map(x => ({ token: x.token, logprob: x.logprob, top: x.top_logprobs.length, topFirst: x.top_logprobs[0].logprob }));

  const models = await c.models.list();
  out.models = models.data.map(m => m.id);

  const cs = new OpenAI({ baseURL: scripted + '/v1', apiKey: 'none', maxRetries: 0 });
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const m1 = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const a1 = await cs.chat.completions.create({ model: 'scripted', messages: m1, tools });
  const call = a1.choices[0].message.tool_calls[0];
  out.tool1 = { finish: a1.choices[0].finish_reason, name: call.function.name, args: JSON.parse(call.function.arguments) };
  const a2 = await cs.chat.completions.create({ model: 'scripted', tools,
    messages: [...m1, a1.choices[0].message, { role: 'tool', tool_call_id: call.id, content: 'sunny, 24C' }] });
  out.tool2 = { text: a2.choices[0].message.content, cached: a2.usage.prompt_tokens_details.cached_tokens };
  const s3 = await cs.chat.completions.create({ model: 'scripted', messages: m1, tools, stream: true });
  out.toolStream = { names: [], finish: null };
  for await (const ch of s3) for (const choice of ch.choices) {
    for (const tc of choice.delta.tool_calls || []) out.toolStream.names.push(tc.function.name);
    if (choice.finish_reason) out.toolStream.finish = choice.finish_reason;
  }
  const th = await cs.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'Please think.' }] });
  out.reasoning = { content: th.choices[0].message.content, reasoning: th.choices[0].message.reasoning_content };

  const an = new Anthropic({ baseURL: base, apiKey: 'none', maxRetries: 0 });
  const am = await an.messages.create({ model: 'mlxgo-demo', max_tokens: 24, temperature: 0, messages: msgs });
  out.anthropic = { text: am.content[0].text, stop: am.stop_reason, usage: am.usage };
  const ast = an.messages.stream({ model: 'mlxgo-demo', max_tokens: 24, temperature: 0, messages: msgs });
  let deltas = '';
  ast.on('text', (t) => { deltas += t; });
  const fin = await ast.finalMessage();
  out.anthropicStream = { text: fin.content[0].text, deltas, stop: fin.stop_reason };

  const at = new Anthropic({ baseURL: scripted, apiKey: 'none', maxRetries: 0 });
  const atools = [{ name: 'get_weather', description: 'Weather in a city', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
  const b1 = await at.messages.create({ model: 'scripted', max_tokens: 64, messages: m1, tools: atools });
  const tu = b1.content.find(b => b.type === 'tool_use');
  out.anth1 = { stop: b1.stop_reason, name: tu.name, input: tu.input };
  const b2 = await at.messages.create({ model: 'scripted', max_tokens: 64, tools: atools, messages: [...m1,
    { role: 'assistant', content: b1.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: 'sunny' }] }] });
  out.anth2 = { text: b2.content[0].text, stop: b2.stop_reason };
  const b3 = at.messages.stream({ model: 'scripted', max_tokens: 64, messages: m1, tools: atools });
  const f3 = await b3.finalMessage();
  const tu3 = f3.content.find(b => b.type === 'tool_use');
  out.anthStreamTool = { stop: f3.stop_reason, name: tu3 && tu3.name, input: tu3 && tu3.input };

  // The Responses API: plain, streamed, chained with previous_response_id,
  // retrieved; a function call and its output on the scripted model.
  const rsp = await c.responses.create({ model: 'mlxgo-demo', input: prompt, max_output_tokens: 24, temperature: 0 });
  out.responses = { text: rsp.output_text, status: rsp.status, usage: rsp.usage };
  const rst = c.responses.stream({ model: 'mlxgo-demo', input: prompt, max_output_tokens: 24, temperature: 0 });
  let rdeltas = '';
  const rtypes = [];
  rst.on('event', (e) => rtypes.push(e.type));
  rst.on('response.output_text.delta', (e) => { rdeltas += e.delta; });
  const rfin = await rst.finalResponse();
  out.responsesStream = { text: rfin.output_text, deltas: rdeltas, first: rtypes[0], last: rtypes[rtypes.length - 1], events: rtypes.length };
  const rc = await c.responses.create({ model: 'mlxgo-demo', input: 'And then?', previous_response_id: rsp.id, max_output_tokens: 8, temperature: 0 });
  out.responsesChain = { text: rc.output_text, prev: rc.previous_response_id === rsp.id, cached: rc.usage.input_tokens_details.cached_tokens };
  const rg = await c.responses.retrieve(rsp.id);
  out.responsesGet = rg.output_text;
  try {
    await c.responses.create({ model: 'mlxgo-demo', input: 'x', previous_response_id: 'resp_missing' });
    out.responsesMissing = 'accepted';
  } catch (e) {
    out.responsesMissing = { status: e.status, param: e.param };
  }
  const rtools = [{ type: 'function', name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
  const rt1 = await cs.responses.create({ model: 'scripted', input: 'What is the weather in Paris?', tools: rtools });
  const rcall = rt1.output.find(i => i.type === 'function_call');
  const rt2 = await cs.responses.create({ model: 'scripted', previous_response_id: rt1.id, tools: rtools,
    input: [{ type: 'function_call_output', call_id: rcall.call_id, output: 'sunny, 24C' }] });
  out.responsesTool = { name: rcall.name, args: JSON.parse(rcall.arguments), text: rt2.output_text };

  // Embeddings: the SDK asks for base64 and decodes it when no format is
  // given; float as asked.
  const eb = await c.embeddings.create({ model: 'mlxgo-demo', input: [prompt, 'The whale'] });
  const ef = await c.embeddings.create({ model: 'mlxgo-demo', input: prompt, encoding_format: 'float' });
  out.embeddings = { base64: eb.data.map(d => Array.from(d.embedding)), float: ef.data[0].embedding, tokens: eb.usage.prompt_tokens };

  const n2 = await c.chat.completions.create({ ...greedy, max_tokens: 4, n: 2 });
  out.n2 = n2.choices.map(ch => ch.index);
  try {
    await c.chat.completions.create({ ...greedy, temperature: 3 });
    out.badRequest = 'accepted';
  } catch (e) {
    out.badRequest = { status: e.status, param: e.param };
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(e); process.exit(1); });
