#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only
"""Conversations for the chat-template comparison: with and without a system
prompt, one and several turns, add_generation_prompt on and off, reasoning
(<think>) in assistant turns, tool calls and tool results, unicode and
whitespace at the edges of contents. One JSON object per line."""
import itertools
import json

SYSTEM = [None, "You are a helpful assistant.", "  Be brief.\n\n", "系统：请用中文回答。"]
USERS = ["Hello!", "What is 2+2?", "  spaces around  ", "Line one\nLine two\n", "emoji 👍🏽 and 中文",
         "<tool_response>\nok\n</tool_response>", ""]
ASSIST = ["Hi there.", "4", "<think>\nadd them\n</think>\n\nIt is 4.", "\n\nLeading newlines",
          "Sure: ```python\nprint(1)\n```"]


def main():
    out = []
    for sys_p, n_turns, gen in itertools.product(SYSTEM, [1, 2, 3], [False, True]):
        for k in range(len(USERS)):
            msgs = [] if sys_p is None else [{"role": "system", "content": sys_p}]
            for t in range(n_turns):
                msgs.append({"role": "user", "content": USERS[(k + t) % len(USERS)]})
                if t < n_turns - 1 or not gen:
                    msgs.append({"role": "assistant", "content": ASSIST[(k + t) % len(ASSIST)]})
            out.append({"messages": msgs, "add_generation_prompt": gen})
    # Qwen3's switches and tool messages.
    base = [{"role": "user", "content": "Weather in Paris?"}]
    out.append({"messages": base, "add_generation_prompt": True, "vars": {"enable_thinking": False}})
    out.append({"messages": base, "add_generation_prompt": True, "vars": {"enable_thinking": True}})
    out.append({"messages": base + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "18C"}, {"role": "tool", "content": "sunny"}],
        "add_generation_prompt": True})
    out.append({"messages": base, "add_generation_prompt": True, "vars": {"tools": [
        {"type": "function", "function": {"name": "weather", "description": "Get the weather",
                                          "parameters": {"type": "object", "properties": {
                                              "city": {"type": "string"}}}}}]}})
    out.append({"messages": base + [{"role": "assistant", "content": "a", "reasoning_content": "why"}],
                "add_generation_prompt": False})
    for c in out:
        print(json.dumps(c, ensure_ascii=False))


if __name__ == "__main__":
    main()
