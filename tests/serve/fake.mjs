// SPDX-License-Identifier: GPL-2.0-only
// What tests/serve/fake_model.c answers, computed independently: one byte
// a token, the text of FAKE_TEXT from (sum of the prompt's bytes) mod its
// length. A chat prompt is "role: content\n" lines and "assistant:".
export const FAKE_TEXT = 'The quick brown fox jumps over the lazy dog. ';

export function promptBytes(prompt) {
	return Buffer.from(prompt, 'utf8');
}

export function chatPrompt(messages) {
	return messages.map((m) => `${m.role}: ${m.content}\n`).join('') + 'assistant:';
}

export function fakeAnswer(prompt, n) {
	const b = promptBytes(prompt);
	let off = 0;
	for (const x of b) off += x;
	off %= FAKE_TEXT.length;
	let s = '';
	for (let i = 0; i < n; i++) s += FAKE_TEXT[(off + i) % FAKE_TEXT.length];
	return s;
}
