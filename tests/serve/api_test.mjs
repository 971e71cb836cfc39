// SPDX-License-Identifier: GPL-2.0-only
// The OpenAI API through the official JavaScript client (npm 'openai'):
// completions and chat completions, streamed and not, usage, stop
// strings, logprobs, structured outputs (response_format json_schema), the
// model list, a wrong API key (401) and bad
// requests (400 with the field named). MOEM_URL is the server's /v1 URL,
// MOEM_KEY its API key. The model is synthetic: its text is checked for
// consistency (streamed = whole, stop strings cut where they appear,
// usage = tokens generated), not for meaning.
// Prints TAP; exits 0 when every check passed.
import OpenAI from 'openai';

const url = process.env.MOEM_URL;
const key = process.env.MOEM_KEY || 'none';
const client = new OpenAI({ baseURL: url, apiKey: key, maxRetries: 0, timeout: 120000 });
let n = 0, failed = 0;

function ok(cond, what) {
	n++;
	if (!cond) failed++;
	console.log(`${cond ? 'ok' : 'not ok'} ${n} ${what}`);
}

async function expectError(what, status, param, fn) {
	try {
		await fn();
		ok(false, `${what}: accepted`);
	} catch (e) {
		ok(e instanceof OpenAI.APIError && e.status === status,
		   `${what}: ${status} (got ${e.status} ${e.message})`);
		if (param !== undefined)
			ok(e.param === param, `${what}: names '${param}' (got '${e.param}')`);
	}
}

const models = await client.models.list();
const model = models.data[0].id;
ok(models.data.length === 1 && typeof model === 'string', `models.list: ${model}`);

// Completions, whole.
{
	const prompt = 'Once upon a time';
	const r = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0 });
	ok(r.object === 'text_completion' && r.choices.length === 1, 'completion: shape');
	ok(r.choices[0].finish_reason === 'length', `completion: finish_reason ${r.choices[0].finish_reason}`);
	ok(r.usage.completion_tokens === 12 && r.usage.total_tokens === r.usage.prompt_tokens + 12,
	   `completion: usage ${JSON.stringify(r.usage)}`);
}

// Completions, streamed: chunks add up to the whole answer.
{
	const prompt = 'Streams are';
	const s = await client.completions.create({ model, prompt, max_tokens: 20, temperature: 0,
		stream: true, stream_options: { include_usage: true } });
	let text = '', finish = null, usage = null, chunks = 0;
	for await (const c of s) {
		chunks++;
		if (c.usage) usage = c.usage;
		for (const ch of c.choices) {
			text += ch.text;
			if (ch.finish_reason) finish = ch.finish_reason;
		}
	}
	ok(finish === 'length', `stream: finish_reason ${finish}`);
	ok(usage && usage.completion_tokens === 20, `stream: usage ${JSON.stringify(usage)}`);
	ok(chunks >= 2, `stream: ${chunks} chunks`);
	const whole = await client.completions.create({ model, prompt, max_tokens: 20, temperature: 0 });
	ok(whole.choices[0].text === text, 'stream: the same text as the whole answer');
}

// Chat, whole and streamed.
{
	const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }];
	const r = await client.chat.completions.create({ model, messages, max_tokens: 9, temperature: 0 });
	ok(r.object === 'chat.completion' && r.choices[0].message.role === 'assistant', 'chat: shape');
	ok(r.usage.completion_tokens === 9, `chat: usage ${JSON.stringify(r.usage)}`);
	const s = await client.chat.completions.create({ model, messages, max_tokens: 9, temperature: 0,
		stream: true, stream_options: { include_usage: true } });
	let text = '', role = null, usage = null, finish = null;
	for await (const c of s) {
		if (c.usage) usage = c.usage;
		for (const ch of c.choices) {
			if (ch.delta.role) role = ch.delta.role;
			if (ch.delta.content) text += ch.delta.content;
			if (ch.finish_reason) finish = ch.finish_reason;
		}
	}
	ok(role === 'assistant' && finish === 'length', `chat stream: role ${role}, finish ${finish}`);
	ok(text === r.choices[0].message.content, 'chat stream: the same text as the whole answer');
	ok(usage && usage.completion_tokens === 9, 'chat stream: usage');
}

// Stop strings end the text where they appear.
{
	const prompt = 'Stop test';
	const free = await client.completions.create({ model, prompt, max_tokens: 40, temperature: 0 });
	const t = free.choices[0].text;
	const stop = t.slice(10, 13);
	const r = await client.completions.create({ model, prompt, max_tokens: 40, temperature: 0, stop: [stop, 'NEVER'] });
	ok(r.choices[0].text === t.slice(0, t.indexOf(stop)), `stop '${stop}': '${r.choices[0].text}'`);
	ok(r.choices[0].finish_reason === 'stop', `stop: finish_reason ${r.choices[0].finish_reason}`);
	const s = await client.completions.create({ model, prompt, max_tokens: 40, temperature: 0, stop, stream: true });
	let text = '';
	for await (const c of s) for (const ch of c.choices) text += ch.text;
	ok(text === t.slice(0, t.indexOf(stop)), `stop, streamed: '${text}'`);
}

// Logprobs: one entry per generated token.
{
	const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'lp' }],
		max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2 });
	const lp = r.choices[0].logprobs.content;
	ok(lp.length === r.usage.completion_tokens, `chat logprobs: ${lp.length} entries`);
	ok(lp.every((e) => typeof e.logprob === 'number' && e.top_logprobs.length <= 2), 'chat logprobs: shape');
	const c = await client.completions.create({ model, prompt: 'lp', max_tokens: 4, logprobs: 1, temperature: 0 });
	ok(c.choices[0].logprobs.tokens.length === 4, 'completion logprobs: 4 tokens');
}

// Logprobs carry each token's own bytes (a character split over tokens
// too): joined and decoded as UTF-8 (lossy, as the server's text is) they
// are the answer; special tokens (<|...|>) are in the logprobs, not the text.
{
	const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'bytes' }],
		max_tokens: 48, temperature: 0, logprobs: true, top_logprobs: 5 });
	const lp = r.choices[0].logprobs.content.filter((e) => !/^<\|[^|]*\|>$/.test(e.token));
	const text = new TextDecoder().decode(Buffer.from(lp.flatMap((e) => e.bytes)));
	ok(text === r.choices[0].message.content,
	   `chat logprobs: bytes joined are the text (${JSON.stringify(text)} / ${JSON.stringify(r.choices[0].message.content)})`);
}

// Completions: text_offset the same streamed and whole; each position's
// top_logprobs holds the chosen (greedy: likeliest) token at its logprob,
// even where alternatives share its text.
{
	const req = { model, prompt: 'offsets', max_tokens: 24, temperature: 0, logprobs: 5 };
	const w = (await client.completions.create(req)).choices[0].logprobs;
	const s = await client.completions.create({ ...req, stream: true });
	const offs = [];
	for await (const c of s)
		for (const ch of c.choices) if (ch.logprobs) offs.push(...ch.logprobs.text_offset);
	ok(JSON.stringify(offs) === JSON.stringify(w.text_offset),
	   `completion logprobs: text_offset streamed ${JSON.stringify(offs)} = whole ${JSON.stringify(w.text_offset)}`);
	ok(w.top_logprobs.every((t, i) => t[w.tokens[i]] === w.token_logprobs[i]),
	   'completion logprobs: the chosen token in its top_logprobs, at its logprob');
}

// Tools: Qwen3's chat template shows them and the calls and results of a
// conversation (the synthetic model is not expected to call one: the
// reading of calls is tested in tests/integration/http_test.c).
{
	const tools = [{ type: 'function', function: { name: 'weather', description: 'Get the weather',
		parameters: { type: 'object', properties: { city: { type: 'string' } },
			required: ['city'] } } }];
	const base = { model, messages: [{ role: 'user', content: 'Weather in Paris?' }],
		max_tokens: 4, temperature: 0 };
	const plain = await client.chat.completions.create(base);
	const withTools = await client.chat.completions.create({ ...base, tools });
	ok(withTools.usage.prompt_tokens > plain.usage.prompt_tokens + 20,
	   `tools: in the prompt (${plain.usage.prompt_tokens} -> ${withTools.usage.prompt_tokens} tokens)`);
	const none = await client.chat.completions.create({ ...base, tools, tool_choice: 'none' });
	ok(none.usage.prompt_tokens === plain.usage.prompt_tokens,
	   `tools: tool_choice none leaves them out (${none.usage.prompt_tokens})`);
	const c = withTools.choices[0];
	ok(c.finish_reason === 'tool_calls' ? c.message.tool_calls.length > 0
		: ['stop', 'length'].includes(c.finish_reason), `tools: finish_reason ${c.finish_reason}`);
	const after = await client.chat.completions.create({ ...base, tools, messages: [
		...base.messages,
		{ role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
			function: { name: 'weather', arguments: '{"city": "Paris"}' } }] },
		{ role: 'tool', tool_call_id: 'call_1', content: '18C, sunny' }] });
	ok(after.usage.prompt_tokens > withTools.usage.prompt_tokens + 10,
	   `tools: a call and its result in the prompt (${after.usage.prompt_tokens} tokens)`);
	let text = '';
	const calls = [];
	for await (const ch of await client.chat.completions.create({ ...base, tools, stream: true })) {
		text += ch.choices[0]?.delta?.content ?? '';
		calls.push(...(ch.choices[0]?.delta?.tool_calls ?? []));
	}
	ok(text === (c.message.content ?? '') && calls.length === (c.message.tool_calls ?? []).length,
	   'tools: streamed = whole');
	// chat_template_kwargs (vLLM's extension): Qwen3's enable_thinking false
	// closes an empty think block in the generation prompt
	const noThink = await client.chat.completions.create({ ...base,
		chat_template_kwargs: { enable_thinking: false } });
	ok(noThink.usage.prompt_tokens > plain.usage.prompt_tokens,
	   `chat_template_kwargs: enable_thinking false in the prompt (${plain.usage.prompt_tokens} -> ${noThink.usage.prompt_tokens} tokens)`);
	await expectError('chat_template_kwargs messages', 400, 'chat_template_kwargs.messages',
		() => client.chat.completions.create({ ...base, chat_template_kwargs: { messages: [] } }));
	// tool_choice required / named: one call in Qwen3's layout, its
	// arguments following the tool's parameters (max_tokens: room for the
	// random model's blanks, up to 64 bytes at each place JSON allows them)
	const tools2 = [...tools, { type: 'function', function: { name: 'clock',
		parameters: { type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } },
			required: ['zone'] } } }];
	tools2[0] = { type: 'function', function: { ...tools[0].function, parameters: {
		type: 'object', properties: { city: { type: 'string', maxLength: 8 } },
		required: ['city'] } } };
	for (const [choice, names] of [['required', ['weather', 'clock']],
		[{ type: 'function', function: { name: 'clock' } }, ['clock']]]) {
		const r = await client.chat.completions.create({ ...base, tools: tools2,
			tool_choice: choice, max_tokens: 400, seed: 5 });
		const ch = r.choices[0], calls = ch.message.tool_calls ?? [];
		let args = null;
		try { args = JSON.parse(calls[0]?.function?.arguments); } catch (e) { args = null; }
		const fits = args && (calls[0].function.name === 'clock'
			? ['UTC', 'CET'].includes(args.zone)
			: typeof args.city === 'string' && [...args.city].length <= 8);
		ok(ch.finish_reason === 'tool_calls' && calls.length === 1 &&
		   names.includes(calls[0].function.name) && fits,
		   `tool_choice ${JSON.stringify(choice)}: one call that fits (${ch.finish_reason}: ` +
		   `${JSON.stringify(calls)} ${JSON.stringify(ch.message.content)})`);
	}
	await expectError('tool_choice naming no tool', 400, 'tool_choice.function.name',
		() => client.chat.completions.create({ ...base, tools,
			tool_choice: { type: 'function', function: { name: 'nope' } } }));
	await expectError('tools on completions', 400, 'tools',
		() => client.completions.create({ model, prompt: 'x', tools }));
}

// vLLM's length extensions, with an end id forced by logit_bias (Qwen3's
// <|endoftext|>, 151643, a special token: no text): stop_token_ids ends the
// answer at it; min_tokens keeps it out of the first tokens.
{
	const base = { model, prompt: 'Hello', max_tokens: 6, logit_bias: { 151643: 100 } };
	const free = await client.completions.create(base);
	ok(free.choices[0].finish_reason === 'length' && free.usage.completion_tokens === 6,
	   `logit_bias alone: no end (${free.choices[0].finish_reason}, ${free.usage.completion_tokens})`);
	const stop = await client.completions.create({ ...base, stop_token_ids: [151643] });
	ok(stop.choices[0].finish_reason === 'stop' && stop.usage.completion_tokens === 1 &&
	   stop.choices[0].text === '',
	   `stop_token_ids: ends at it, no text (${stop.usage.completion_tokens} tokens)`);
	const min = await client.completions.create({ ...base, stop_token_ids: [151643], min_tokens: 3 });
	ok(min.choices[0].finish_reason === 'stop' && min.usage.completion_tokens === 4,
	   `min_tokens 3: ends at the 4th token (${min.usage.completion_tokens})`);
	await expectError('min_tokens over max_tokens', 400, 'min_tokens',
		() => client.completions.create({ ...base, min_tokens: 7 }));
	await expectError('stop_token_ids outside the vocabulary', 400, 'stop_token_ids[0]',
		() => client.completions.create({ ...base, stop_token_ids: [999999] }));
}

// response_format json_schema (structured outputs): the answer is an
// instance of the schema, its keys in the schema's order; logit_bias on ','
// (id 11) lets the random model end the integer.
{
	const schema = { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] },
		n: { type: 'integer' }, ok: { type: 'boolean' },
		// Pydantic's Field(ge=1, le=5) and Field(pattern=...)
		rating: { type: 'integer', minimum: 1, maximum: 5 },
		code: { type: 'string', pattern: '^[A-Z]{2}-\\d$' } },
		required: ['city', 'n', 'ok', 'rating', 'code'], additionalProperties: false };
	const messages = [{ role: 'user', content: 'A city as JSON' }];
	for (const seed of [1, 2]) {
		const r = await client.chat.completions.create({ model, messages, max_tokens: 200, seed,
			logit_bias: { 11: 4 }, response_format: { type: 'json_schema',
				json_schema: { name: 'city', strict: true, schema } } });
		const c = r.choices[0];
		let v = null;
		try { v = JSON.parse(c.message.content); } catch (e) { v = null; }
		ok(c.finish_reason === 'stop' && v !== null &&
		   Object.keys(v).join() === 'city,n,ok,rating,code' &&
		   ['Paris', 'Rome'].includes(v.city) && Number.isInteger(v.n) && typeof v.ok === 'boolean' &&
		   Number.isInteger(v.rating) && v.rating >= 1 && v.rating <= 5 &&
		   /^[A-Z]{2}-\d$/.test(v.code),
		   `json_schema: an instance (${c.finish_reason}: ${c.message.content})`);
	}
	await expectError('json_schema with a pattern it cannot follow', 400,
		'response_format.json_schema.schema',
		() => client.chat.completions.create({ model, messages, response_format: {
			type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object',
				properties: { a: { type: 'string', pattern: '^(?=a)' } } } } } }));
}

// Errors the client understands.
await expectError('wrong API key', 401, undefined, () =>
	new OpenAI({ baseURL: url, apiKey: 'wrong-key-123', maxRetries: 0 }).models.list());
await expectError('temperature 5', 400, 'temperature', () =>
	client.completions.create({ model, prompt: 'x', temperature: 5 }));
await expectError('unknown field', 400, 'frobnicate', () =>
	client.completions.create({ model, prompt: 'x', frobnicate: 1 }));
{
	// n: 2 choices, each its own sample; the client reads them by index
	const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }],
		n: 2, max_tokens: 5, seed: 3 });
	ok(r.choices.length === 2 && r.choices[0].index === 0 && r.choices[1].index === 1 &&
	   r.usage.completion_tokens === r.choices.length * 5,
	   `n = 2: two choices (${JSON.stringify(r.choices.map((c) => c.message.content))}, usage ${JSON.stringify(r.usage)})`);
}
{
	// Qwen3's checkpoint has 151936 rows, its tokenizer 151669 ids: at a
	// high temperature over a long answer the padding ids (no text) would
	// come up; none is ever sampled, the answer runs to its length
	const r = await client.completions.create({ model, prompt: 'x', max_tokens: 1500,
		temperature: 2, seed: 11, ignore_eos: true });
	ok(r.choices[0].finish_reason === 'length' && r.usage.completion_tokens === 1500,
	   `temperature 2, 1500 tokens: to the length (${r.choices[0].finish_reason}, ${r.usage.completion_tokens} tokens)`);
}
await expectError('n = 17', 400, 'n', () =>
	client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], n: 17 }));
await expectError('bad role', 400, 'messages[0].role', () =>
	client.chat.completions.create({ model, messages: [{ role: 'wizard', content: 'x' }] }));
await expectError('top_k past the sampler', 400, 'top_k', () =>
	client.completions.create({ model, prompt: 'x', top_k: 16777217, stream: true }));
await expectError('top_p 0 as a float', 400, 'top_p', () =>
	client.completions.create({ model, prompt: 'x', top_p: 1e-300 }));
await expectError('name not a string', 400, 'messages[0].name', () =>
	client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x', name: 5 }] }));
await expectError('unknown model', 404, 'model', () =>
	client.completions.create({ model: 'no-such-model', prompt: 'x' }));

console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
