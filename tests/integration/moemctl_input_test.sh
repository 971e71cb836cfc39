#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# moemctl under bad input, as the control socket's adversarial pass found
# it (each check failed before its fix): extra arguments are a usage error
# before anything is sent ("moemctl stop run", meant as stop-run, stopped
# the daemon); --timeout takes whole milliseconds; an answer of the wrong
# shape is an error, not a crash, for every command's human output; raw
# skips blank lines (moemd answers none) and reads each answer before the
# next line; a connection moemd refuses (an error line, then close) shows
# moemd's reason, not "Broken pipe". The daemon is a fake one here (a
# small Python server on a UNIX socket) that answers what each test
# needs. Exit 0 pass, 1 fail.
set -u
B=${MOEM_BUILD:-build}
C=$B/bin/moemctl
tmp=$(mktemp -d /tmp/moem-ctlin-XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
ok() { echo "ok: $*"; }
bad() {
	echo "not ok: $*"
	fail=1
}
expect() { # expect RC MESSAGE_PART CMD...
	local want=$1 msg=$2
	shift 2
	"$@" >"$tmp/out" 2>&1
	local rc=$?
	if [ "$rc" = "$want" ] && grep -q -- "$msg" "$tmp/out"; then
		ok "exit $rc, '$msg': ${*#"$C "}"
	else
		bad "${*#"$C "}: exit $rc, want $want and '$msg'; said: $(tail -n 3 "$tmp/out")"
	fi
}

# A fake moemd: every non-blank line gets ANSWER with the request's id
# (ANSWER is a JSON object's members); it records what it was sent. With
# ANSWER "refuse" it answers each connection as moemd refuses one: an
# error line, then close, before reading anything. It says "listening",
# and "closed" after each refusal, on the FIFO open as fd 3 here: the
# events the test waits for (read -t, a generous deadline), not a poll.
fake() {
	rm -f "$tmp/s.sock" "$tmp/got" "$tmp/ev"
	exec 3<&-
	mkfifo "$tmp/ev" && exec 3<>"$tmp/ev" || { echo "not ok: mkfifo"; exit 1; }
	/usr/bin/python3 - "$tmp/s.sock" "$1" "$tmp/got" "$tmp/ev" <<'EOF' &
import json, os, socket, sys
path, answer, got, ev = sys.argv[1:5]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen(8)
ev = open(ev, "w", buffering=1)
ev.write("listening\n")
while True:
    c, _ = s.accept()
    if answer == "refuse":
        c.sendall(b'{"v":1,"id":null,"ok":false,"error":"too many control '
                  b'connections from uid 1001 (4 at once)","errno":16}\n')
        c.close()
        ev.write("closed\n")  # the event the late writer waits for
        continue
    f = c.makefile("rb")
    for line in f:
        with open(got, "ab") as g:
            g.write(line)
        if not line.strip():
            continue
        try:
            rid = json.loads(line).get("id", 0)
        except ValueError:
            rid = 0
        c.sendall(('{"v":1,"id":%d,%s}\n' % (rid, answer)).encode())
    c.close()
EOF
	pid=$!
	read -r -t 60 -u 3 ev && [ "$ev" = listening ] && return 0
	echo "not ok: the fake moemd did not start"
	exit 1
}
stop_fake() {
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	pid=
}

fake '"ok":true'
for cmd in "stop run" "stop-run now" "hello x" "verify x" "get a b" "status x"; do
	# shellcheck disable=SC2086
	expect 2 "usage: moemctl" "$C" --socket "$tmp/s.sock" $cmd
done
[ -e "$tmp/got" ] && bad "a usage error sent: $(cat "$tmp/got")" ||
	ok "nothing was sent for them"
expect 2 "milliseconds" "$C" --socket "$tmp/s.sock" --timeout 10x hello
expect 2 "milliseconds" "$C" --socket "$tmp/s.sock" --timeout 2147483648 hello
# an empty answer: each command's human output names what is missing
expect 1 "has no 'knob'" "$C" --socket "$tmp/s.sock" get
expect 1 "has no 'knob'" "$C" --socket "$tmp/s.sock" set hbm_bytes 1G
expect 1 "has no 'moemd'" "$C" --socket "$tmp/s.sock" hello
expect 1 "has no 'checked'" "$C" --socket "$tmp/s.sock" verify
expect 1 "has no 'stopping'" "$C" --socket "$tmp/s.sock" stop-run
expect 1 "has no 'on'" "$C" --socket "$tmp/s.sock" trace off
expect 1 "has no 'daemon'" "$C" --socket "$tmp/s.sock" status
expect 1 "has no 'run_id'" "$C" --socket "$tmp/s.sock" run
stop_fake

fake '"ok":true,"knobs":5'
expect 1 "has an odd 'knobs'" "$C" --socket "$tmp/s.sock" get
stop_fake

fake '"ok":true,"knob":["x"],"value":{},"on":"yes","checked":"7","stopping":1,"moemd":"0"'
expect 1 "has an odd 'knob'" "$C" --socket "$tmp/s.sock" get
expect 1 "has an odd 'knob'" "$C" --socket "$tmp/s.sock" set hbm_bytes 1G
expect 1 "has an odd 'on'" "$C" --socket "$tmp/s.sock" trace off
expect 1 "has an odd 'checked'" "$C" --socket "$tmp/s.sock" verify
expect 1 "has an odd 'stopping'" "$C" --socket "$tmp/s.sock" stop-run
expect 1 "has no 'protocol'" "$C" --socket "$tmp/s.sock" hello
stop_fake

# status iterates counters.phase_ns: a number there crashed it
fake '"ok":true,"daemon":{},"counters":{"steps":1,"step_ns":9,"phase_ns":5}'
expect 1 "has an odd 'phase_ns'" "$C" --socket "$tmp/s.sock" status
stop_fake
fake '"ok":true,"daemon":{},"pool":[]'
expect 1 "has an odd 'pool'" "$C" --socket "$tmp/s.sock" status
stop_fake

# moemd refuses the connection and closes it before moemctl sends (raw's
# stdin comes once the fake has said it closed, on fd 3): moemd's reason,
# not "send to moemd: Broken pipe" (hello sends before the close here, and
# got the reason before the fix too)
fake refuse
expect 1 "too many control connections from uid 1001" bash -c \
	"{ read -r -t 60 -u 3 ev; echo '{\"v\":1,\"id\":1,\"cmd\":\"hello\"}'; } |
	 '$C' --socket '$tmp/s.sock' raw"
expect 1 "too many control connections from uid 1001" "$C" --socket "$tmp/s.sock" hello
stop_fake

fake '"ok":true,"knob":"hbm_bytes","value":"0"'
printf '\n{"v":1,"id":7,"cmd":"get"}\n\n' >"$tmp/in"
expect 0 '"id":7' timeout 60 "$C" --socket "$tmp/s.sock" --timeout 5000 raw <"$tmp/in"
expect 0 "hbm_bytes 0" "$C" --socket "$tmp/s.sock" get
# 3000 lines: a raw that writes them all before reading an answer is
# dropped by moemd (4 MiB unread); this fake and it would block each other
for i in $(seq 1 3000); do echo "{\"v\":1,\"id\":$i,\"cmd\":\"get\"}"; done >"$tmp/in"
timeout 120 "$C" --socket "$tmp/s.sock" raw <"$tmp/in" >"$tmp/out" 2>&1
n=$(grep -c '"ok":true' "$tmp/out")
if [ "$n" = 3000 ]; then
	ok "raw: 3000 answers to 3000 lines"
else
	bad "raw: $n answers to 3000 lines; said: $(tail -n 2 "$tmp/out")"
fi
# endless input without a newline: refused once a line is past what
# moemd takes, not read into memory until the machine runs out
expect 1 "a line longer than 64.00 KiB" timeout 60 "$C" --socket "$tmp/s.sock" raw </dev/zero
stop_fake
exit $fail
