#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""Write the real chat templates llama.cpp's own tests carry into a folder.

usage: llama_templates.py SRC OUT

SRC is a checkout of llama.cpp's source (bench/llama/install.sh clones the
bundle node-llama-cpp ships): models/templates/*.jinja are templates copied
from the models' tokenizer_config.json files, and tests/test-chat-template.cpp
holds more of them as C++ string literals (name, template_str). Each becomes
OUT/<name>.jinja. Prints how many it wrote.
"""
import os
import re
import subprocess
import sys

ESC = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "\r"}
LIT = r'(?:U8C\()?(?:u8)?"((?:[^"\\\n]|\\.)*)"'


def unescape(s):
    return re.sub(r"\\(.)", lambda m: ESC[m.group(1)], s)


def git_show(src, path):
    return subprocess.run(["git", "-C", src, "show", "HEAD:" + path], check=True,
                          capture_output=True).stdout.decode("utf-8")


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    n = 0
    names = subprocess.run(["git", "-C", src, "ls-tree", "--name-only", "HEAD", "models/templates/"],
                           check=True, capture_output=True, text=True).stdout.split()
    for path in names:
        if path.endswith(".jinja"):
            with open(os.path.join(out, os.path.basename(path)), "w", encoding="utf-8") as f:
                f.write(git_show(src, path))
            n += 1
    text = git_show(src, "tests/test-chat-template.cpp")
    tmpl_re = re.compile(r"/\* \.template_str= \*/\s*" + LIT)
    for m in re.finditer(r"/\* \.name= \*/\s*" + LIT, text):
        t = tmpl_re.search(text, m.end())
        if not t or t.start() - m.end() > 40:
            continue  # a template read from a file: models/templates has it
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", unescape(m.group(1))).strip("-")[:80]
        with open(os.path.join(out, "test-" + slug + ".jinja"), "w", encoding="utf-8") as f:
            f.write(unescape(t.group(1)))
        n += 1
    print(n)


main()
