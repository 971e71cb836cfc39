// SPDX-License-Identifier: GPL-2.0-only
/*
 * libFuzzer harness: a chat template through moem_chat_parse and, when it
 * parses, moem_chat_render on a fixed conversation (with and without the
 * generation prompt). Errors are fine; crashes, leaks, hangs and unbounded
 * memory are not.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <moem/chat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char msgs[] =
		"[{\"role\":\"system\",\"content\":\"Be brief.\"},"
		"{\"role\":\"user\",\"content\":\"Hi <think>x</think>\"},"
		"{\"role\":\"assistant\",\"content\":\"Hello\",\"tool_calls\":[{\"function\":"
		"{\"name\":\"f\",\"arguments\":{\"a\":1}}}]},{\"role\":\"user\",\"content\":\"2\"}"
		"]";
	struct moem_chat_args a = {.messages_json = msgs,
				   .messages_len = sizeof(msgs) - 1,
				   .bos_token = "<s>",
				   .eos_token = "</s>"};
	struct moem_chat_template *t;

	if (moem_chat_parse((const char *)data, size, &t))
		return 0;
	for (int g = 0; g < 2; g++) {
		char *out;
		size_t len;

		a.add_generation_prompt = g;
		if (!moem_chat_render(t, &a, &out, &len))
			free(out);
	}
	moem_chat_free(t);
	return 0;
}
