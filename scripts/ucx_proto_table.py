"""UCX_PROTO_INFO=y output (stdin, from one or more processes) reduced to what a benchmark needs
to name: each distinct intra-node table of one operation over shared memory, once.

  UCX_LOG_FILE=/tmp/proto/ucx.%p.log UCX_PROTO_INFO=y ./target/release/examples/alltoall --ranks 2 ...
  cat /tmp/proto/ucx.*.log | python3 scripts/ucx_proto_table.py

(A file per process: processes that share one stderr can cut each other's lines.)

--op picks the operation's line as UCX prints it (default: a plain tag send of host memory).
Tables over TCP (the bootstrap's worker) are left out.
"""
import argparse
import re
import sys


def tables(stream, op):
    """Each distinct table whose operation line is `op`, from UCX's log lines on `stream`."""
    by_pid = {}
    for line in stream:
        m = re.match(r"^\[[^]]*\] \[[^:]*:(\d+) *:[^]]*\] *(.*)$", line.rstrip())
        if m:  # processes interleave their lines; UCX's prefix names the pid
            by_pid.setdefault(m[1], []).append(m[2])
    want = re.compile(r"\| " + re.escape(op) + r" +\|$")
    seen, keys = [], set()
    for lines in by_pid.values():
        for i, line in enumerate(lines[1:-1], start=1):
            if not (line.startswith("| ucp_context_") and "intra-node" in line and want.match(lines[i + 1])):
                continue
            table, rules = [], 0
            for t in lines[i - 1:]:  # from the rule above the title to the table's fourth rule
                table.append(t)
                rules += t.startswith("+")
                if rules == 4:
                    break
            text = "\n".join(table)
            same = "\n".join(table[2:])  # the same table under another configuration number
            if "tcp/" not in text and same not in keys:
                keys.add(same)
                seen.append(text)
    return seen


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", default="tagged message by ucp_tag_send* from host memory")
    found = tables(sys.stdin, ap.parse_args().op)
    print("\n".join(found) if found else "(no intra-node table for that operation in the input)")


if __name__ == "__main__":
    main()
