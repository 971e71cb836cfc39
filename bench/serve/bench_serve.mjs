// SPDX-License-Identifier: GPL-2.0-only
// One serving measurement through the official OpenAI client: MOEM_CLIENTS
// concurrent streaming clients send MOEM_REQUESTS chat-free completions
// (prompts of 32..256 tokens' worth of text, MOEM_MAX_TOKENS each,
// greedy) to MOEM_URL. Prints one JSON line: requests/s, output tokens/s,
// time to first token and inter-token latency percentiles (ms).
import OpenAI from 'openai';

const url = process.env.MOEM_URL;
const N = Number(process.env.MOEM_CLIENTS || 1);
const TOTAL = Number(process.env.MOEM_REQUESTS || 16);
const MAX = Number(process.env.MOEM_MAX_TOKENS || 32);
const client = new OpenAI({ baseURL: url, apiKey: 'none', maxRetries: 0, timeout: 600000 });
const model = (await client.models.list()).data[0].id;
const words = 'the of and to in is was for on that with as by at from it his an were are which'.split(' ');
let seed = 7;
const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 4294967296);
const ttft = [], itl = [];
let tokens = 0, done = 0, next = 0;

async function one() {
	const n = 32 + Math.floor(rnd() * 224);
	const prompt = Array.from({ length: n }, () => words[Math.floor(rnd() * words.length)]).join(' ');
	const t0 = performance.now();
	let last = 0;
	const s = await client.completions.create({ model, prompt, max_tokens: MAX, temperature: 0,
		stream: true, stream_options: { include_usage: true } });
	for await (const c of s) {
		const now = performance.now();
		if (c.usage) tokens += c.usage.completion_tokens;
		if (!c.choices.length || !c.choices[0].text) continue;
		if (!last) ttft.push(now - t0);
		else itl.push(now - last);
		last = now;
	}
	done++;
}

const t0 = performance.now();
await Promise.all(Array.from({ length: N }, async () => {
	while (next++ < TOTAL) await one();
}));
const secs = (performance.now() - t0) / 1000;
const pct = (a, p) => {
	if (!a.length) return null;
	const s = [...a].sort((x, y) => x - y);
	return Number(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))].toFixed(2));
};
console.log(JSON.stringify({
	clients: N, requests: done, seconds: Number(secs.toFixed(3)),
	requests_per_s: Number((done / secs).toFixed(3)), output_tokens_per_s: Number((tokens / secs).toFixed(1)),
	ttft_ms: { p50: pct(ttft, 50), p90: pct(ttft, 90), p99: pct(ttft, 99) },
	itl_ms: { p50: pct(itl, 50), p90: pct(itl, 90), p99: pct(itl, 99) },
}));
