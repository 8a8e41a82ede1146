# Disables the audit hook's lists (the readable verdict layer), then tries what the kernel
# layer must still refuse: reading /etc/passwd, a socket, a new process. Each refusal is
# collected and raised together, so the test can see every one of them.
import os
import sys
from alphaloop_factor import Factor

harness = sys.modules["alphaloop_worker"]
harness._inside = lambda path, roots: True
for s in (harness._NETWORK, harness._PROCESS, harness._FORBIDDEN_IMPORTS, harness._CTYPES):
    s.clear()


class F(Factor):
    def calc(self, data):
        results = []
        try:
            results.append("read " + open("/etc/passwd").read()[:20])
        except OSError as e:
            results.append(f"read refused: {e}")
        try:
            open("/tmp/alphaloop_sandbox_tamper.txt", "w").write("escaped")
            results.append("write succeeded")
        except OSError as e:
            results.append(f"write refused: {e}")
        try:
            import socket
            socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            results.append("socket created")
        except OSError as e:
            results.append(f"socket refused: {e}")
        try:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            results.append("fork succeeded")
        except OSError as e:
            results.append(f"fork refused: {e}")
        raise RuntimeError(" | ".join(results))
