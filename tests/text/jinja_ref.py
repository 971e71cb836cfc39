#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""Render chat-template cases as transformers' apply_chat_template does.

usage: jinja_ref.py TOKENIZER_DIR CASES.jsonl TEMPLATE|- NOW

Python's Jinja2 (Debian's python3-jinja2) in the environment transformers
builds (utils/chat_template_utils.py): ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols, its tojson (ensure_ascii off),
raise_exception and strftime_now (local time; NOW, seconds since 1970, fixes
it), and {% generation %} rendering its body as AssistantTracker does.
TEMPLATE "-" is the tokenizer_config.json's chat_template. Prints one JSON
string per case, or {"error":true} where rendering raises (JREF_DEBUG=1
says why on stderr); exits 2 when the template does not parse.
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def main():
    tokdir, cases, tmpl_path, now = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    with open(os.path.join(tokdir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    if tmpl_path == "-":
        src = cfg["chat_template"]
    else:
        with open(tmpl_path, encoding="utf-8") as f:
            src = f.read()

    def tok(t):
        return t.get("content") if isinstance(t, dict) else t

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(now).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        t = env.from_string(src)
    except jinja2.exceptions.TemplateSyntaxError as e:
        print("jinja2: cannot parse: %s" % e, file=sys.stderr)
        sys.exit(2)
    out = []
    with open(cases, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            c = json.loads(line)
            v = dict(messages=c["messages"],
                     add_generation_prompt=bool(c.get("add_generation_prompt")))
            v.update(c.get("vars") or {})
            if tok(cfg.get("bos_token")):
                v["bos_token"] = tok(cfg["bos_token"])
            if tok(cfg.get("eos_token")):
                v["eos_token"] = tok(cfg["eos_token"])
            try:
                out.append(json.dumps(t.render(**v), ensure_ascii=False))
            except Exception as e:  # raise_exception, and what Python refuses
                if os.environ.get("JREF_DEBUG"):
                    print("case %d: %s: %s" % (len(out) + 1, type(e).__name__, e),
                          file=sys.stderr)
                out.append('{"error":true}')
    sys.stdout.write("\n".join(out) + "\n")


main()
