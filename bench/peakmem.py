#!/usr/bin/env python3
"""Runs a command and writes its peak memory to OUTFILE: "<peak RSS KiB> <peak anonymous KiB>".

    python3 bench/peakmem.py OUTFILE COMMAND [ARGS...]

Peak RSS is GNU time's %M (the kernel's ru_maxrss): it counts the
executable's code mapped from the page cache, which on kernels that map a file's large folios
whole is 18-34 MiB of storectl's static binary before it has done anything (`storectl --version`:
18 MiB). Peak anonymous memory (RssAnon, sampled every 2 ms from /proc/PID/status) is what the
command itself allocated: heap, stacks, buffers, scrypt's 32 MiB. A sample can miss a spike
shorter than 2 ms. Exits with the command's status; its stdout and stderr pass through.
"""
import os
import subprocess
import sys
import time

def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 64
    out, command = sys.argv[1], sys.argv[2:]
    # Peak RSS from GNU time (a small C program: its fork's pages count in the peak before the
    # exec, a Python parent's 10 MiB would); anonymous memory sampled from its child.
    timed = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", out + ".time", *command])
    anon, child = 0, None
    while timed.poll() is None:
        try:
            if child is None:
                with open(f"/proc/{timed.pid}/task/{timed.pid}/children") as f:
                    pids = f.read().split()
                child = pids[0] if pids else None
            if child is not None:
                with open(f"/proc/{child}/status") as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            anon = max(anon, int(line.split()[1]))
                            break
        except OSError:
            pass
        time.sleep(0.002)
    with open(out + ".time") as f:
        rss = f.read().split()[-1]
    os.remove(out + ".time")
    with open(out, "w") as f:
        f.write(f"{rss} {anon}\n")
    return timed.returncode

if __name__ == "__main__":
    sys.exit(main())
