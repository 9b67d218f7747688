"""A raw newline relay: starts a command and copies lines between it and this process's
stdin/stdout, unparsed. The physical floor of one extra stdio hop."""

from __future__ import annotations

import subprocess
import sys
import threading


def pump(source, sink) -> None:  # type: ignore[no-untyped-def]
    for line in iter(source.readline, b""):
        sink.write(line)
        sink.flush()
    sink.close()


def main() -> int:
    child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    out = threading.Thread(target=pump, args=(child.stdout, sys.stdout.buffer), daemon=True)
    out.start()
    pump(sys.stdin.buffer, child.stdin)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
