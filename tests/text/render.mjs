// SPDX-License-Identifier: GPL-2.0-only
// Render chat-template cases with @huggingface/jinja, the independent Jinja
// implementation moem's templates are compared with.
// usage: node render.mjs DIR CASES.jsonl [TEMPLATE]   (one JSON string per case)
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.env.MOEM_NPM ?? ".", "node_modules", "x.js"));
const { Template } = require("@huggingface/jinja");
const [dir, casesPath, tmplPath] = process.argv.slice(2);
const cfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
const tok = (t) => (t && typeof t === "object" ? t.content : t);
const source = tmplPath ? fs.readFileSync(tmplPath, "utf8") : cfg.chat_template;
const tmpl = new Template(source);
const out = [];
for (const line of fs.readFileSync(casesPath, "utf8").split("\n").filter((l) => l.length)) {
	const c = JSON.parse(line);
	const vars = { messages: c.messages, add_generation_prompt: !!c.add_generation_prompt, ...(c.vars ?? {}) };
	if (tok(cfg.bos_token)) vars.bos_token = tok(cfg.bos_token);
	if (tok(cfg.eos_token)) vars.eos_token = tok(cfg.eos_token);
	try {
		out.push(JSON.stringify(tmpl.render(vars)));
	} catch (e) {
		out.push(JSON.stringify({ error: true })); // raise_exception: moem prints the same
	}
}
fs.writeSync(1, out.join("\n") + "\n");
