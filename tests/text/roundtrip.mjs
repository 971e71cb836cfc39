// SPDX-License-Identifier: GPL-2.0-only
// decode(encode(x)) == x, line by line. Qwen3's normalizer is NFC, so NFC(x)
// comes back; SentencePiece BPE (llama2) writes spaces as "▁", so a "▁" in the
// text comes back as a space.
// usage: node roundtrip.mjs CORPUS DECODED NAME
import fs from "node:fs";

const [corpusPath, decPath, name] = process.argv.slice(2);
const read = (p) => fs.readFileSync(p, "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
const corpus = read(corpusPath), dec = read(decPath);
let bad = 0;
for (let i = 0; i < corpus.length; i++) {
	const want = name === "qwen3" ? corpus[i].normalize("NFC") : name === "llama2" ? corpus[i].replaceAll("\u2581", " ") : corpus[i];
	if (dec[i] === want) continue;
	if (++bad <= 3) console.log(`  line ${i + 1}: ${JSON.stringify(want).slice(0, 120)}\n    got ${JSON.stringify(dec[i]).slice(0, 120)}`);
}
if (dec.length !== corpus.length) bad++;
if (bad) console.log(`  ${bad} lines do not round-trip`);
process.exit(bad ? 1 : 0);
