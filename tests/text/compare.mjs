// SPDX-License-Identifier: GPL-2.0-only
// Compare two files of one JSON value per corpus line.
// usage: node compare.mjs EXPECTED ACTUAL CORPUS LABEL [REFERENCE]
// With REFERENCE (the Rust ids), a line may differ from EXPECTED only where
// EXPECTED also differs from REFERENCE and ACTUAL equals it.
import fs from "node:fs";

const [expPath, actPath, corpusPath, label, refPath] = process.argv.slice(2);
const read = (p) => fs.readFileSync(p, "utf8").split("\n").filter((l) => l.length);
const exp = read(expPath), act = read(actPath), corpus = read(corpusPath);
const ref = refPath ? read(refPath) : null;
let bad = 0, excused = 0;
if (exp.length !== act.length) {
	console.log(`  ${label}: ${exp.length} lines expected, ${act.length} produced`);
	process.exit(1);
}
for (let i = 0; i < exp.length; i++) {
	if (exp[i] === act[i]) continue;
	if (ref && act[i] === ref[i] && exp[i] !== ref[i]) {
		excused++;
		continue;
	}
	if (++bad <= 3)
		console.log(`  line ${i + 1}: ${corpus[i].slice(0, 120)}\n    ${label}: ${exp[i].slice(0, 160)}\n    moem: ${act[i].slice(0, 160)}`);
}
if (excused) console.log(`  ${label} differs from the Rust reference on ${excused} lines; moem agrees with Rust there`);
if (bad) console.log(`  ${bad} mismatches of ${exp.length}`);
process.exit(bad ? 1 : 0);
