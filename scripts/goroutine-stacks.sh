#!/usr/bin/env bash
# scripts/goroutine-stacks.sh PID [GROWTH_SECONDS]: the stacks of a running Go
# process (ragtime serve during make bench-streams, say), read with gdb.
#
# Without GROWTH_SECONDS: a census of the goroutines, grouped by the function
# each started in and its stack size — count, stack size, and the depth it is
# parked at (stack.hi − sched.sp), median and max. The process is stopped for
# the seconds gdb takes (a few for 10,000 goroutines).
#
# With GROWTH_SECONDS: for that long, every goroutine stack that grows from 8
# to 16 KB (a breakpoint on runtime.copystack) is printed with its start
# function, the depth it grew at and the return addresses found on its stack
# (deepest first; stale words from earlier calls are among them), at most 5.
# Ask the server something meanwhile. Needs gdb; the binary must keep its
# symbols (go build does).
set -euo pipefail
pid=${1:?usage: scripts/goroutine-stacks.sh PID [GROWTH_SECONDS]}
secs=${2:-}
command -v gdb >/dev/null || { echo "goroutine-stacks: needs gdb" >&2; exit 2; }
py=$(mktemp --suffix=.py); trap 'rm -f "$py"' EXIT
cat >"$py" <<'PY'
import collections, struct, gdb

def sym(pc):
    try:
        s = gdb.execute("info symbol 0x%x" % pc, to_string=True)
    except gdb.error:
        return None
    return None if "No symbol" in s else s.split(" in section")[0].strip()

def census():
    allgs = gdb.parse_and_eval("'runtime.allgs'")
    groups, depths = collections.Counter(), collections.defaultdict(list)
    for i in range(int(allgs['len'])):
        g = allgs['array'][i]
        if int(g['atomicstatus']['value']) != 4:  # _Gwaiting: parked
            continue
        lo, hi = int(g['stack']['lo']), int(g['stack']['hi'])
        k = (sym(int(g['startpc'])), hi - lo)
        groups[k] += 1
        depths[k].append(hi - int(g['sched']['sp']))
    print("goroutines parked: count, stack bytes, start function, parked depth p50 / max")
    total = 0
    for k, n in sorted(groups.items(), key=lambda x: -x[1]):
        d = sorted(depths[k])
        total += n * k[1]
        print("%6d %6d %s depth %d / %d" % (n, k[1], k[0], d[len(d) // 2], d[-1]))
    print("stack bytes of the parked goroutines:", total)

class Growth(gdb.Breakpoint):
    seen = 0
    def stop(self):
        f = gdb.selected_frame()
        if int(f.read_var("newsize")) != 16384:
            return False
        g = f.read_var("gp").dereference()
        lo, hi, sp = int(g['stack']['lo']), int(g['stack']['hi']), int(g['sched']['sp'])
        if hi - lo != 8192 or Growth.seen >= 5:
            return False
        Growth.seen += 1
        print("=== %s grew 8 -> 16 KB at depth %d, in %s" % (sym(int(g['startpc'])), hi - sp, sym(int(g['sched']['pc']))))
        mem = gdb.selected_inferior().read_memory(sp, hi - sp).tobytes()
        for off in range(0, len(mem) - 7, 8):
            s = sym(struct.unpack("<Q", mem[off:off + 8])[0])
            if s and "+" in s and not s.startswith("type:"):
                print("%6d %s" % (hi - sp - off, s))
        return False
PY
if [ -z "$secs" ]; then
  gdb -q -batch -p "$pid" -ex "source $py" -ex "python census()" 2>/dev/null | sed -n '/^goroutines parked/,$p'
else
  timeout --signal=INT "$secs" gdb -q -p "$pid" -ex "set pagination off" -ex "source $py" -ex "python Growth('runtime.copystack')" -ex continue </dev/null 2>/dev/null | grep -E "^(===| +[0-9]+ )" || true
fi
