// SPDX-License-Identifier: GPL-2.0-only
// Load, bounded: MOEM_CLIENTS concurrent streaming clients (official
// 'openai' client) send MOEM_REQUESTS requests in all, of different
// prompt lengths; about one in five is abandoned mid-stream (the
// connection is closed); meanwhile the HBM budget is changed through
// moemctl. Then: every request that was not abandoned completed (429s
// are retried after their Retry-After), with the fake model's exact text
// when MOEM_FAKE=1; /metrics comes back to no running sequence, no queue,
// no live request and no KV in use; moemd's resident memory is back
// within the tolerance below of what it was after a first warm-up wave.
import OpenAI from 'openai';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fakeAnswer } from './fake.mjs';

const url = process.env.MOEM_URL;
const base = url.replace(/\/v1$/, '');
const fake = process.env.MOEM_FAKE === '1';
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

async function one(i) {
	const prompt = `request ${i}: ` + 'x'.repeat(Math.floor(rnd() * 300));
	const max_tokens = 8 + Math.floor(rnd() * 40);
	const abandonAt = rnd() < 0.2 ? 1 + Math.floor(rnd() * 5) : -1;
	for (;;) {
		let stream;
		try {
			stream = await client.completions.create({ model, prompt, max_tokens, temperature: 0, stream: true });
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
		let text = '', chunks = 0, finish = null;
		try {
			for await (const c of stream) {
				for (const ch of c.choices) {
					text += ch.text;
					if (ch.finish_reason) finish = ch.finish_reason;
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
		if (finish !== 'length' || (fake && text !== fakeAnswer(prompt, max_tokens))) {
			stats.wrong++;
			console.log(`# request ${i}: finish ${finish}, text '${text}'`);
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

// Budget changes while requests stream: HBM budget down and up again.
let changes = 0, changing = true;
const budgets = ['256K', '512K', '0'];
async function changer() {
	while (changing && process.env.MOEMCTL) {
		await new Promise((res) => execFile(process.env.MOEMCTL,
			['--socket', process.env.MOEM_SOCK, 'set', 'hbm_bytes', budgets[changes % budgets.length]],
			(err) => { if (!err) changes++; res(); }));
		await new Promise((r) => setTimeout(r, 20));
	}
}

await wave(N, 0); // warm-up: every client once
const rss0 = rssMiB();
const ch = changer();
await wave(TOTAL, N);
changing = false;
await ch;

let m, settled = false;
for (const end = Date.now() + 60000; Date.now() < end;) {
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
ok(!stats.wrong, `${N} clients: every completed answer is the expected one (${stats.wrong} wrong)`);
ok(settled, `${N} clients: no running sequence, queue, live request or KV in use after the run`);
ok(!process.env.MOEMCTL || changes > 0, `${N} clients: ${changes} HBM budget changes during the run`);
// Under AddressSanitizer freed memory stays in its quarantine: RSS says nothing.
const asan = readFileSync(`/proc/${pid}/maps`, 'utf8').includes('libasan');
ok(asan || rss1 - rss0 < TOLERANCE_MIB, `${N} clients: RSS ${rss0.toFixed(1)} MiB after warm-up, ` +
   `${rss1.toFixed(1)} MiB after (tolerance ${TOLERANCE_MIB} MiB${asan ? '; not checked under ASan' : ''})`);
console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
