// SPDX-License-Identifier: GPL-2.0-only
// Encode throughput, moem against the other tokenizers measured in the same run.
// usage: node bench_report.mjs NAME MOEM.json OTHER.json...
import fs from "node:fs";
import os from "node:os";

const [name, ...files] = process.argv.slice(2);
const r = files.map((f) => JSON.parse(fs.readFileSync(f, "utf8").trim()));
const mb = (x) => x.bytes / 1e6 / x.seconds;
const moem = r[0];
console.log(`bench-text ${name}: ${moem.lines} texts, ${(moem.bytes / 1e6).toFixed(2)} MB, ${moem.tokens} tokens; ` +
	`${os.cpus()[0].model}, ${new Date().toISOString().slice(0, 10)}, one thread, best of 3`);
for (const x of r)
	console.log(`  ${x.impl.padEnd(6)} ${mb(x).toFixed(2).padStart(8)} MB/s  ${(mb(moem) / mb(x)).toFixed(2)}x moem/${x.impl}`);
console.log(`  moem: ${(moem.tokens / moem.seconds / 1e3).toFixed(0)}k tokens/s (100k tokens in ${(1e5 / (moem.tokens / moem.seconds)).toFixed(3)} s)`);
if (moem.doc_seconds) {
	console.log(`  one document of ${moem.doc_tokens} tokens (${(moem.doc_bytes / 1e6).toFixed(2)} MB) in one call: moem ${moem.doc_seconds.toFixed(3)} s`);
	for (const x of r.slice(1))
		if (x.doc_seconds)
			console.log(`    ${x.impl.padEnd(6)} ${x.doc_seconds.toFixed(3)} s  ${(x.doc_seconds / moem.doc_seconds).toFixed(2)}x moem/${x.impl}`);
}
