#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""Generate the tokenizer test corpus, deterministically (same seed, same bytes).

Each output line is one sample as a JSON string, so samples can hold
newlines, carriage returns and tabs. The mix is what tokenizers get wrong:
English prose with contractions, code in several languages, CJK, Arabic with
marks, emoji with ZWJ sequences and modifiers, long whitespace and digit
runs, special tokens written as text, and unusual but valid UTF-8 (combining
sequences not in NFC, controls, noncharacters, private use, the byte-level
and SentencePiece marker characters themselves).

usage: gen_corpus.py [--lines N] [--seed S] > corpus.jsonl
"""
import argparse
import json
import random
import sys

WORDS = """the of and to in is was that for it as with be on by at this had not are but from
or have an they which one you were her all she there would their we him been has when who
will more no if out so said what up its about into than them can only other new some could
time these two may then do first any my now such like our over man me even most made after
also did many before must through back years where much your way well down should because
each just those people how too little state good very make world still own see men work long
get here between both life being under never day same another know while last might us great
old year off come since against go came right used take three model token expert memory
kernel GPU cache layer router decode prefill batch stream Hello World Python tokenizer""".split()

CONTRACTIONS = ["it's", "don't", "they're", "we've", "I'm", "you'll", "she'd", "IT'S",
                "Don'T", "can't", "won't", "o'clock", "rock 'n' roll", "'quoted'", "''"]

PUNCT = list(".,;:!?") + ["...", " -- ", "—", "–", "(", ")", "[", "]", "\"", "'", "/", "&",
                          "%", "$", "#", "@", "*", "…", "«", "»", "“", "”", "‘", "’"]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "int main(int argc, char **argv)\n{\n\tprintf(\"%d\\n\", argc);\n\treturn 0;\n}\n",
    "const x = await fetch(`/api/${id}`).then((r) => r.json());",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}",
    "for i in $(seq 1 10); do echo \"$i\" >> /tmp/out.txt; done",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "class Foo:\n\tdef __init__(self):\n\t\tself.x = {'a': 1, \"b\": [1, 2, 3]}\n",
    "if (err < 0) {\r\n\tgoto out_free;\r\n}\r\n",
    "x = [i**2 for i in range(100) if i % 3 == 0]  # squares",
    "<div class=\"row\"><span id='a1'>&amp;&lt;&gt;</span></div>",
    "{\"key\": [1, 2.5e-3, null, true], \"nested\": {\"a\": \"\\u00e9\"}}",
    "    \t  mixed indentation\n\t\t\tdeep\n",
    "a+=1;b-=2;c*=3;d/=4;e%=5;f<<=1;g>>=2;h&=3;i|=4;j^=5;",
    "std::vector<std::pair<int, std::string>> v{{1, \"one\"}, {2, \"two\"}};",
    "git commit -m \"fix: don't crash on empty input\" && git push origin HEAD:main",
]

SPECIAL_AS_TEXT = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "<s>", "</s>", "<unk>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>",
    "<｜Assistant｜>", "<|EOT|>", "<|im_sta", "<<s>>", "< s >", "<|fim_prefix|>", "[INST]",
    "[/INST]", "<0x0A>", "<|vision_pad|>", "<｜tool▁calls▁begin｜>",
]

EMOJI = ["😀", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🧑🏿‍💻", "🏳️‍🌈", "🇺🇸", "🇯🇵", "1️⃣", "❤️", "✌🏻",
         "👩‍❤️‍💋‍👨", "🤖", "🦄", "🔥", "©️", "™", "🫠", "🧬", "🐈‍⬛", "😶‍🌫️", "#️⃣"]

UNUSUAL = [
    "e\u0301", "a\u0308\u0304", "\u1100\u1161\u11a8", "\ufffd", "\ufdd0", "\uffff",
    "\ue000", "\U0010fffd", "\U0001d400\U0001d401", "\u212a", "\u017f", "\u0130", "\ufb01",
    "\u216b", "\u00ad", "\u200b", "\u200c", "\u200d", "\u2060", "\u202e", "\u202a",
    "\u00a0", "\u2009", "\u3000", "\u2028", "\u2029", "\x01", "\x7f", "\x1b[31m", "\u009f",
    "\u0085", "\u2581", "\u0120", "\u0100", "\u00e9", "\u00c5", "\u212b", "\u1e9b\u0323",
    "\U0001f3fb", "\ufe0f", "\u0300", "\U000e0041", "\u061c", "\u00bd", "\u2075", "\uff21",
    "\ufeff",
]

ARABIC_LETTERS = [chr(c) for c in range(0x0621, 0x064b)]
ARABIC_MARKS = [chr(c) for c in range(0x064b, 0x0653)]
ARABIC_DIGITS = [chr(c) for c in range(0x0660, 0x066a)]


def cjk_text(r):
    out = []
    for _ in range(r.randint(3, 40)):
        k = r.random()
        if k < 0.55:
            out.append(chr(r.randint(0x4e00, 0x9fa5)))
        elif k < 0.7:
            out.append(chr(r.randint(0x3041, 0x3096)))
        elif k < 0.8:
            out.append(chr(r.randint(0x30a1, 0x30fa)))
        elif k < 0.9:
            out.append(chr(r.randint(0xac00, 0xd7a3)))
        else:
            out.append(r.choice("。，、「」！？：；（）《》 ー…　"))
    return "".join(out)


def arabic_text(r):
    words = []
    for _ in range(r.randint(2, 12)):
        w = ""
        for _ in range(r.randint(2, 7)):
            w += r.choice(ARABIC_LETTERS)
            if r.random() < 0.25:
                w += r.choice(ARABIC_MARKS)
        words.append(w)
    if r.random() < 0.3:
        words.append("".join(r.choice(ARABIC_DIGITS) for _ in range(r.randint(1, 6))))
    s = " ".join(words)
    return s + r.choice(["", "،", "؟", ".", " (123)", " \u200f"])


def prose(r):
    out = []
    for i in range(r.randint(3, 30)):
        k = r.random()
        if k < 0.08:
            out.append(r.choice(CONTRACTIONS))
        elif k < 0.12:
            out.append(str(r.randint(0, 10 ** r.randint(1, 9))))
        else:
            w = r.choice(WORDS)
            if i == 0 or r.random() < 0.05:
                w = w.capitalize()
            if r.random() < 0.02:
                w = w.upper()
            out.append(w)
        if r.random() < 0.12:
            out[-1] += r.choice(PUNCT)
    return " ".join(out) + r.choice([".", "!", "?", "", "...", " :)", "\n"])


def whitespace_run(r):
    pieces = []
    for _ in range(r.randint(1, 6)):
        pieces.append(r.choice([" ", "  ", "\t", "\n", "\r\n", "\n\n\n", " " * r.randint(3, 40),
                                "\t" * r.randint(2, 9), "\u3000", "\u00a0", " \n ", "\r"]))
        if r.random() < 0.6:
            pieces.append(r.choice(WORDS))
    return "".join(pieces)


def digit_run(r):
    k = r.random()
    if k < 0.3:
        return "".join(r.choice("0123456789") for _ in range(r.randint(5, 80)))
    if k < 0.5:
        return "%d.%0*d" % (r.randint(0, 99999), r.randint(1, 8), r.randint(0, 9999))
    if k < 0.65:
        return "".join(chr(0xff10 + r.randint(0, 9)) for _ in range(r.randint(2, 12)))
    if k < 0.8:
        return "".join(chr(0x0966 + r.randint(0, 9)) for _ in range(r.randint(2, 12)))
    return "%s-%s-%s, %s:%s:%s" % tuple(str(r.randint(0, 9999)) for _ in range(6))


def emoji_text(r):
    out = []
    for _ in range(r.randint(1, 10)):
        out.append(r.choice(EMOJI))
        if r.random() < 0.4:
            out.append(" " + r.choice(WORDS) + " ")
    return "".join(out)


def special_text(r):
    out = []
    for _ in range(r.randint(1, 6)):
        out.append(r.choice(SPECIAL_AS_TEXT))
        if r.random() < 0.7:
            out.append(r.choice(["", " ", "\n", "user\n", "assistant\n"]) + prose(r))
    return "".join(out)


def unusual_text(r):
    out = []
    for _ in range(r.randint(1, 12)):
        out.append(r.choice(UNUSUAL))
        if r.random() < 0.5:
            out.append(r.choice(WORDS + [" ", "  ", "x", "1", "'s"]))
    return "".join(out)


KINDS = [(prose, 30), (lambda r: r.choice(CODE), 10), (cjk_text, 10), (arabic_text, 7),
         (emoji_text, 7), (whitespace_run, 8), (digit_run, 7), (special_text, 8),
         (unusual_text, 8)]


def sample(r):
    total = sum(w for _, w in KINDS)
    parts = []
    for _ in range(1 if r.random() < 0.7 else r.randint(2, 4)):
        x = r.uniform(0, total)
        for fn, w in KINDS:
            x -= w
            if x <= 0:
                parts.append(fn(r))
                break
        else:
            parts.append(prose(r))
    return r.choice(["", " ", "\n"]).join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=12000)
    ap.add_argument("--seed", type=int, default=20)
    a = ap.parse_args()
    r = random.Random(a.seed)
    out = sys.stdout
    # Fixed cases first: the edges every tokenizer must get right.
    fixed = ["", " ", "  ", "\n", "a", "Hello world", " Hello", "Hello  world  ", "\t\tx\n",
             "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<s>[INST] hi [/INST]",
             "a<s>b</s>c", "x" * 5000, " " * 300, "1" * 300, "\u2581\u2581x", "\u0120x"]
    for s in fixed:
        out.write(json.dumps(s, ensure_ascii=False) + "\n")
    for _ in range(a.lines - len(fixed)):
        out.write(json.dumps(sample(r), ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
