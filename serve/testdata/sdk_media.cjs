// Sends image and audio chat requests to mlxgo's server with the official
// OpenAI Node SDK (plain and streamed) and a corrupt image, and prints what
// it observed as one JSON object; serve's media_sdk_test.go checks it.
// REQUESTS is a JSON object name → {messages, max_tokens}.
const OpenAI = require('openai');

async function main() {
  const c = new OpenAI({ baseURL: process.env.BASE_URL + '/v1', apiKey: 'none', maxRetries: 0 });
  const reqs = JSON.parse(process.env.REQUESTS);
  const out = {};
  for (const [name, q] of Object.entries(reqs)) {
    const body = { model: 'gemma4-mm', messages: q.messages, max_tokens: q.max_tokens, temperature: 0 };
    try {
      const r = await c.chat.completions.create(body);
      const st = await c.chat.completions.create({ ...body, stream: true });
      let streamed = '';
      for await (const ch of st) {
        for (const choice of ch.choices) streamed += choice.delta.content || '';
      }
      out[name] = { text: r.choices[0].message.content, streamed, prompt_tokens: r.usage.prompt_tokens };
    } catch (e) {
      out[name] = { status: e.status, message: e.message, type: e.error && e.error.type };
    }
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch(e => { console.error(e); process.exit(1); });
