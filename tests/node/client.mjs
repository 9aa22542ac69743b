// The openai npm client against `hachi serve` on gemma4-micro (run by tests/test_serve.c):
//   node client.mjs BASE_URL API_KEY MODEL_ID
// A model list, a completion, a chat (plain and streamed), 3 concurrent clients against the
// same requests made one by one, prompt reuse (a follow-up chat, an edited last turn), and a
// chat's log-probabilities (plain and streamed).
// Prints one "ok ..." or "FAIL ..." line per check and "measure ..." lines; exits 1 on a failure.
import OpenAI from 'openai';

const [base, apiKey, modelId] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey, maxRetries: 0, timeout: 120000 });
let failed = 0;
function check(cond, what, detail = '') {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${what}${cond ? '' : ': ' + detail}`);
  if (!cond) failed++;
}

// A short passkey prompt in the format of ../shared/models/README.md.
const passkey = (key, name) =>
  `Once upon a time there was a little cat named ${name}. The pass key is ${key}. Remember it. ` +
  `${key} is the pass key. ${name} liked to play in the garden with his friend. What is the pass key? The pass key is`;
const usageOk = (u) => u && u.prompt_tokens > 0 && u.completion_tokens > 0 &&
  u.total_tokens === u.prompt_tokens + u.completion_tokens && u.prompt_tokens_details &&
  typeof u.prompt_tokens_details.cached_tokens === 'number';

// models
const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === modelId, 'models.list', JSON.stringify(models.data));

// completion: the key, the usage
const c = await client.completions.create({ model: modelId, prompt: passkey(48213, 'Tom'), max_tokens: 8, temperature: 0 });
check(c.choices[0].text.includes('48213'), 'completion answers the passkey', JSON.stringify(c.choices[0].text));
check(usageOk(c.usage) && c.usage.completion_tokens === 8 && c.choices[0].finish_reason === 'length',
  'completion usage', JSON.stringify(c.usage));

// chat: the reply continues an assistant message that starts the answer
const chatReq = (key, name) => ({
  model: modelId, max_tokens: 8, temperature: 0,
  messages: [{ role: 'user', content: [{ type: 'text', text: passkey(key, name) }] },
             { role: 'assistant', content: 'The pass key is' }],
});
const chat = await client.chat.completions.create(chatReq(61742, 'Sam'));
const reply = chat.choices[0].message.content;
check(chat.object === 'chat.completion' && chat.choices[0].message.role === 'assistant' && reply.includes('61742'),
  'chat answers the passkey', JSON.stringify(chat.choices[0]));
check(usageOk(chat.usage) && chat.usage.completion_tokens === 8, 'chat usage', JSON.stringify(chat.usage));

// streamed chat: role first, the same text in pieces, the finish reason, a usage chunk
const stream = await client.chat.completions.create({ ...chatReq(61742, 'Sam'), stream: true, stream_options: { include_usage: true } });
let text = '', role = null, finish = null, usage = null, pieces = 0;
for await (const ch of stream) {
  if (ch.usage) usage = ch.usage;
  for (const choice of ch.choices) {
    if (choice.delta.role) role = choice.delta.role;
    if (choice.delta.content) { text += choice.delta.content; pieces++; }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
check(role === 'assistant' && text === reply && pieces > 1 && finish === 'length', 'streamed chat',
  JSON.stringify({ role, text, reply, pieces, finish }));
check(usageOk(usage) && usage.completion_tokens === 8 && usage.prompt_tokens === chat.usage.prompt_tokens,
  'streamed usage', JSON.stringify(usage));

// 3 concurrent clients get the greedy answers of the same requests made one by one
const keys = [[31415, 'Ann'], [27182, 'Bob'], [16180, 'Max']];
const one = async (k) => (await client.completions.create({ model: modelId, prompt: passkey(k[0], k[1]), max_tokens: 24, temperature: 0 })).choices[0].text;
const seq = [];
for (const k of keys) seq.push(await one(k));
const par = await Promise.all(keys.map(one));
check(JSON.stringify(par) === JSON.stringify(seq) && seq.every((t, i) => t.includes(String(keys[i][0]))),
  '3 concurrent clients = sequential', JSON.stringify({ seq, par }));

// prompt reuse: a follow-up chat reuses the conversation and says what it would without reuse
const conv = [{ role: 'user', content: 'Tell me a story about a dog.' }];
const turn = async (messages, cache_prompt = true) => {
  const r = await client.chat.completions.create({ model: modelId, messages, max_tokens: 40, temperature: 0, cache_prompt });
  return { text: r.choices[0].message.content, usage: r.usage };
};
const t1 = await turn(conv);
const turns = [t1];
for (const u of ['What was the dog called?', 'And what did it like to eat?']) {
  conv.push({ role: 'assistant', content: turns[turns.length - 1].text }, { role: 'user', content: u });
  turns.push(await turn(conv));
}
const fresh = await turn(conv, false);
const last = turns[turns.length - 1];
check(last.usage.prompt_tokens_details.cached_tokens > 0 && fresh.usage.prompt_tokens_details.cached_tokens === 0 &&
  last.text === fresh.text && last.usage.prompt_tokens === fresh.usage.prompt_tokens,
  'follow-up reuses the conversation, same text as without reuse', JSON.stringify({ last, fresh }));
for (let i = 0; i < turns.length; i++)
  console.log(`measure multi-turn chat, turn ${i + 1}: prompt ${turns[i].usage.prompt_tokens} tokens, ` +
    `reused ${turns[i].usage.prompt_tokens_details.cached_tokens}`);

// a regenerated reply (the same prompt again) reuses all but its last token
const again = await turn(conv);
check(again.usage.prompt_tokens_details.cached_tokens === again.usage.prompt_tokens - 1 && again.text === last.text,
  'the same request again reuses its prompt', JSON.stringify(again.usage));

// the last turn edited: the conversation before it is reused (a ring checkpoint where the turn began)
const edited = conv.slice(0, -1).concat([{ role: 'user', content: 'And where did it sleep at night?' }]);
const e = await turn(edited);
const eFresh = await turn(edited, false);
const before = conv.slice(0, -1);
check(e.usage.prompt_tokens_details.cached_tokens > 0 && e.text === eFresh.text,
  'edited last turn reuses the conversation before it, same text', JSON.stringify({ e, eFresh }));
console.log(`measure edited last turn: prompt ${e.usage.prompt_tokens} tokens, reused ${e.usage.prompt_tokens_details.cached_tokens} ` +
  `(the ${before.length} messages before it)`);

// log-probabilities: each generated token's entry, greedy (so the token is its own first
// alternative), the alternatives in order, the tokens' texts the reply's; a stream's the same
const lpReq = { model: modelId, messages: [{ role: 'user', content: 'Tell me a story about a cat.' }], max_tokens: 12,
  temperature: 0, logprobs: true, top_logprobs: 3 };
const lp = await client.chat.completions.create(lpReq);
const items = lp.choices[0].logprobs?.content ?? [];
const ordered = (x) => x.top_logprobs.length === 3 &&
  x.top_logprobs.every((a, i) => a.logprob <= 0 && (i === 0 || a.logprob <= x.top_logprobs[i - 1].logprob));
// (the reply's first piece without the space its text lost, as the content has it)
check(items.length === lp.usage.completion_tokens && items.every((x, i) =>
  (x.token === x.top_logprobs[0].token || (i === 0 && ' ' + x.token === x.top_logprobs[0].token)) &&
  x.logprob === x.top_logprobs[0].logprob && ordered(x) && Buffer.from(x.bytes).toString() === x.token) &&
  items.map((x) => x.token).join('') === lp.choices[0].message.content,
  'chat logprobs: an entry a token, greedy, texts the reply', JSON.stringify(lp.choices[0]));
const lpStream = await client.chat.completions.create({ ...lpReq, stream: true });
const streamed = [];
for await (const ch of lpStream) for (const c of ch.choices) streamed.push(...(c.logprobs?.content ?? []));
check(JSON.stringify(streamed) === JSON.stringify(items), 'streamed logprobs are the same', JSON.stringify(streamed));

// a completion's logprobs in OpenAI's completion form, with echo: the prompt's tokens (the first has
// no log-probability), then the reply's; tokens make the text at their offsets; greedy: each
// token is its likeliest alternative; a stream's pieces join to the same arrays
const cReq = { model: modelId, prompt: 'The little dog ran', max_tokens: 10, temperature: 0, logprobs: 2, echo: true };
const cl = await client.completions.create(cReq);
const L = cl.choices[0].logprobs, cText = cl.choices[0].text, nPrompt = cl.usage.prompt_tokens;
const nTok = nPrompt + cl.usage.completion_tokens;
// (the BOS the server added is not in the text: its token is "")
check(L && L.tokens.length === nTok && L.token_logprobs.length === nTok && L.top_logprobs.length === nTok &&
  L.text_offset.length === nTok && L.token_logprobs[0] === null && L.top_logprobs[0] === null &&
  cText.startsWith(cReq.prompt) && L.tokens[0] === '' && L.tokens.join('') === cText &&
  L.text_offset.every((o, i) => o === L.tokens.slice(0, i).join('').length) &&
  L.token_logprobs.slice(nPrompt).every((v, i) => v === Math.max(...Object.values(L.top_logprobs[nPrompt + i]))),
  'completion logprobs with echo: every token, at its offset, greedy', JSON.stringify(cl.choices[0]));
const cs = await client.completions.create({ ...cReq, stream: true });
const joined = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
let sText = '';
for await (const ch of cs) for (const c of ch.choices) {
  sText += c.text;
  for (const k of Object.keys(joined)) joined[k].push(...(c.logprobs?.[k] ?? []));
}
check(sText === cText && JSON.stringify(joined) === JSON.stringify(L), 'streamed completion logprobs are the same', JSON.stringify(joined));

process.exit(failed ? 1 : 0);
