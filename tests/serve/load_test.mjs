// SPDX-License-Identifier: GPL-2.0-only
// Load, bounded, on moemd's real decoder: MOEM_CLIENTS concurrent
// streaming clients (official 'openai' client) send MOEM_REQUESTS
// requests in all, drawn from a set of prompts of different lengths;
// about one in five is abandoned mid-stream (the connection is closed);
// meanwhile the HBM budget is changed through moemctl. Answers (greedy,
// or seeded sampling; some in JSON mode or with a logit bias) do not
// depend on load or budgets (lossless policies), so each prompt's answer
// is first taken alone, and every request that was not abandoned
// must complete (429s are retried) with exactly that text, finish reason
// and usage. Then /metrics must come back to no running sequence, no
// queue, no live request and no KV in use, and moemd's resident memory
// to within the tolerance below of what it was after a warm-up wave.
import OpenAI from 'openai';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';

const url = process.env.MOEM_URL;
const base = url.replace(/\/v1$/, '');
const N = Number(process.env.MOEM_CLIENTS || 8);
const TOTAL = Number(process.env.MOEM_REQUESTS || 64);
const pid = Number(process.env.MOEM_PID);
const client = new OpenAI({ baseURL: url, apiKey: process.env.MOEM_KEY || 'none', maxRetries: 0,
	timeout: 300000 });
const TOLERANCE_MIB = 32; // glibc arenas and libmicrohttpd's pools settle at a plateau
let seed = 12345;
const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 4294967296);
const model = (await client.models.list()).data[0].id;
const stats = { done: 0, abandoned: 0, refused: 0, wrong: 0, errors: 0 };

function rssMiB() {
	const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
	return m ? Number(m[1]) / 1024 : 0;
}

async function metrics() {
	const t = await (await fetch(`${base}/metrics`)).text();
	const get = (name) => {
		const m = t.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm'));
		return m ? Number(m[1]) : NaN;
	};
	return { t, get };
}

// The prompts: different lengths (the longest spans several prefill chunks).
const words = ['alpha', 'river', 'stone', 'light', 'seven', 'north', 'quiet', 'paper'];
// Some ask for more than greedy text, which batching must not change either:
// a JSON object (constrained decoding), a logit bias, seeded sampling.
// Two sampled choices in one request (n: 2; each choice's chunks by its index).
const EXTRA = [{}, { response_format: { type: 'json_object' } }, { logit_bias: { 11: 5, 13: -100 } },
	{ temperature: 0.8, top_p: 0.9 }, { n: 2, temperature: 0.9 }];
const PROMPTS = Array.from({ length: 12 }, (_, k) => ({
	prompt: `request ${k}: ` + Array.from({ length: 2 + k * k * 3 }, (_, j) => words[(j * 5 + k) % 8]).join(' '),
	max_tokens: 6 + ((k * 7) % 26),
	seed: 1000 + k,
	...EXTRA[k % EXTRA.length],
}));
const want = [];

async function one(i) {
	const k = Math.floor(rnd() * PROMPTS.length);
	const { prompt, max_tokens, ...extra } = PROMPTS[k];
	const abandonAt = rnd() < 0.2 ? 1 + Math.floor(rnd() * 5) : -1;
	for (;;) {
		let stream;
		try {
			stream = await client.completions.create({ model, prompt, max_tokens, temperature: 0, ...extra,
				stream: true, stream_options: { include_usage: true } });
		} catch (e) {
			if (e.status === 429) {
				stats.refused++;
				await new Promise((r) => setTimeout(r, 50)); // Retry-After says 1 s; a load test asks sooner
				continue;
			}
			stats.errors++;
			console.log(`# request ${i}: ${e.status} ${e.message}`);
			return;
		}
		const texts = [], finishes = [];
		let chunks = 0, usage = null;
		try {
			for await (const c of stream) {
				if (c.usage) usage = c.usage;
				for (const ch of c.choices) {
					texts[ch.index] = (texts[ch.index] ?? '') + ch.text;
					if (ch.finish_reason) finishes[ch.index] = ch.finish_reason;
				}
				if (++chunks === abandonAt) {
					stream.controller.abort();
					stats.abandoned++;
					return;
				}
			}
		} catch (e) {
			if (abandonAt >= 0) return;
			stats.errors++;
			console.log(`# request ${i}: stream failed: ${e.message}`);
			return;
		}
		const w = want[k], text = texts.join('\u0001'), finish = finishes.join(',');
		if (text !== w.text || finish !== w.finish || !usage ||
		    usage.completion_tokens !== w.usage.completion_tokens ||
		    usage.prompt_tokens !== w.usage.prompt_tokens) {
			stats.wrong++;
			console.log(`# request ${i} (prompt ${k}): finish ${finish}, usage ${JSON.stringify(usage)}, ` +
				    `text ${JSON.stringify(text)}; alone: ${w.finish}, ${JSON.stringify(w.usage)}, ` +
				    `${JSON.stringify(w.text)}`);
		}
		stats.done++;
		return;
	}
}

async function wave(count, start) {
	let next = start;
	const end = start + count;
	await Promise.all(Array.from({ length: N }, async () => {
		while (next < end) await one(next++);
	}));
}

// Live changes while requests stream: the HBM budget down and up again,
// and the batching settings (moemctl set, applied at step boundaries).
let changes = 0, batchChanges = 0, changing = true;
const budgets = ['256K', '512K', '0'];
const batching = [['max_batch', '3'], ['prefill_chunk', '16'], ['max_batch', '64'], ['prefill_chunk', '256']];
const moemctl = (args) => new Promise((res) => execFile(process.env.MOEMCTL,
	['--socket', process.env.MOEM_SOCK, 'set', ...args], (err) => res(!err)));
async function changer() {
	for (let i = 0; changing && process.env.MOEMCTL; i++) {
		if (await moemctl(['hbm_bytes', budgets[i % budgets.length]])) changes++;
		if (await moemctl(batching[i % batching.length])) batchChanges++;
		await new Promise((r) => setTimeout(r, 20));
	}
	await moemctl(['max_batch', '64']);
	await moemctl(['prefill_chunk', '256']);
}

// Each prompt's answer alone, before any load.
for (const p of PROMPTS) {
	const r = await client.completions.create({ model, temperature: 0, ...p });
	const cs = [...r.choices].sort((a, b) => a.index - b.index);
	want.push({ text: cs.map((c) => c.text).join('\u0001'), finish: cs.map((c) => c.finish_reason).join(','),
		usage: r.usage });
}
await wave(N, 0); // warm-up: every client once
const rss0 = rssMiB();
const ch = changer();
await wave(TOTAL, N);
changing = false;
await ch;

let m, settled = false;
for (const end = Date.now() + 120000; Date.now() < end;) {
	m = await metrics();
	if (m.get('moem_running_sequences') === 0 && m.get('moem_queue_requests') === 0 &&
	    m.get('moem_live_requests') === 0 && m.get('moem_used_bytes{tier="kv"}') === 0) {
		settled = true;
		break;
	}
	await new Promise((r) => setTimeout(r, 50));
}
const rss1 = rssMiB();
const expect = TOTAL + N - stats.abandoned;
let n = 0, failed = 0;
const ok = (c, what) => { n++; if (!c) failed++; console.log(`${c ? 'ok' : 'not ok'} ${n} ${what}`); };
ok(stats.done === expect && !stats.errors, `${N} clients: ${stats.done} of ${expect} completed, ` +
   `${stats.abandoned} abandoned, ${stats.refused} refused (429) and retried, ${stats.errors} errors`);
ok(!stats.wrong, `${N} clients: every completed answer is the one its prompt got alone (${stats.wrong} differ)`);
ok(settled, `${N} clients: no running sequence, queue, live request or KV in use after the run`);
ok(!process.env.MOEMCTL || changes > 0, `${N} clients: ${changes} HBM budget changes during the run`);
ok(!process.env.MOEMCTL || batchChanges > 0,
   `${N} clients: ${batchChanges} batching setting changes (max_batch, prefill_chunk) during the run`);
// Under AddressSanitizer freed memory stays in its quarantine: RSS says nothing.
const asan = readFileSync(`/proc/${pid}/maps`, 'utf8').includes('libasan');
ok(asan || rss1 - rss0 < TOLERANCE_MIB, `${N} clients: RSS ${rss0.toFixed(1)} MiB after warm-up, ` +
   `${rss1.toFixed(1)} MiB after (tolerance ${TOLERANCE_MIB} MiB${asan ? '; not checked under ASan' : ''})`);
console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
