// SPDX-License-Identifier: GPL-2.0-only
// Greedy results do not depend on load: the same request (temperature 0)
// answered alone, then again while 16 other streaming clients with
// different prompt lengths run, must give the same text. MOEM_EXPECT, if
// set, is the text a run under other budgets gave (compared too); the
// text is printed on the last line for the caller.
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.env.MOEM_URL, apiKey: process.env.MOEM_KEY || 'none',
	maxRetries: 0, timeout: 600000 });
const model = (await client.models.list()).data[0].id;
const probe = { model, prompt: 'The history of the region begins with', max_tokens: 24, temperature: 0 };
let n = 0, failed = 0;
const ok = (c, what) => { n++; if (!c) failed++; console.log(`${c ? 'ok' : 'not ok'} ${n} ${what}`); };

const alone = (await client.completions.create(probe)).choices[0].text;
const others = Array.from({ length: 16 }, async (_, i) => {
	const s = await client.completions.create({ model, prompt: 'word '.repeat(5 + i * 13),
		max_tokens: 40, temperature: 0, stream: true });
	for await (const c of s) void c;
});
const loaded = client.completions.create({ ...probe, stream: true }).then(async (s) => {
	let t = '';
	for await (const c of s) for (const ch of c.choices) t += ch.text;
	return t;
});
const [text] = await Promise.all([loaded, ...others]);
ok(text === alone, `greedy: alone and among 16 streams: ${JSON.stringify(alone)}`);
if (process.env.MOEM_EXPECT !== undefined)
	ok(alone === process.env.MOEM_EXPECT, 'greedy: the same under the other budget');
console.log(`1..${n}`);
console.log(`# text ${JSON.stringify(alone)}`);
process.exit(failed ? 1 : 0);
