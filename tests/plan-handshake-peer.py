#!/usr/bin/python3
# The orchestrator's half of the planner's handshake (sfma-plan(1),
# --handshake-fd), without any stage: start `sfma-plan run MANIFEST` on
# ten pipes whose far ends are closed at once, print the line the planner
# announces, then either send the go ("go") or close the socket ("eof").
# Exits with the planner's status.
#
#   plan-handshake-peer.py SFMA_PLAN MANIFEST go|eof
import os
import socket
import subprocess
import sys

plan, manifest, mode = sys.argv[1:4]
ours, theirs = socket.socketpair()
args, keep, far = [plan, "run", manifest], [theirs.fileno()], []
for stage in ("model", "exec", "chain", "seal", "mem"):
    to_r, to_w = os.pipe()      # the planner writes to_w
    from_r, from_w = os.pipe()  # the planner reads from_r
    args += ["--to-" + stage, "/dev/fd/%d" % to_w, "--from-" + stage, "/dev/fd/%d" % from_r]
    keep += [to_w, from_r]
    far += [to_r, from_w]
args += ["--handshake-fd", str(theirs.fileno())]
planner = subprocess.Popen(args, pass_fds=keep)
for fd in keep[1:] + far:
    os.close(fd)
theirs.close()
line = ours.makefile("rb").readline()
sys.stdout.write(line.decode())
sys.stdout.flush()
if mode == "go" and line:
    ours.send(b"g")
ours.close()
sys.exit(planner.wait())
