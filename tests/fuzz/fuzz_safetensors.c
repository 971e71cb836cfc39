// SPDX-License-Identifier: GPL-2.0-only
/*
 * libFuzzer harness: a whole safetensors file image through the header
 * parser (moem_st_parse). Whatever it accepts must be self-consistent:
 * every tensor inside the file, lookups by name find it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <moem/safetensors.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct moem_st_file *f;

	if (moem_st_parse(data, size, size, "fuzz.safetensors", &f))
		return 0;
	for (uint32_t i = 0; i < moem_st_count(f); i++) {
		const struct moem_st_tensor *t = moem_st_at(f, i);

		if (t->offset + t->bytes > size || t->offset < 8 || moem_st_find(f, t->name) != t)
			abort();
	}
	(void)moem_st_metadata(f, "format");
	moem_st_close(f);
	return 0;
}
