"""Helpers the integration tests share (stdlib only): a started server process, a request from
inside a network namespace, Prometheus text parsing, and a quiet shell command."""
import concurrent.futures
import fcntl
import http.client
import json
import os
import signal
import subprocess
import tempfile


def stop_process(proc, sig=signal.SIGTERM, timeout=30):
    """Sends sig and waits up to timeout s; kills it after that. Its exit status, or None if killed."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        return None


def child_pids(pid):
    """The child processes of pid: its main thread's first (the ranks it started, in order), then
    those other threads started (a rank restarted by the watcher thread)."""
    task_dir = f"/proc/{pid}/task"
    tids = sorted(os.listdir(task_dir), key=lambda t: (int(t) != pid, int(t)))
    out = []
    for tid in tids:
        try:
            with open(f"{task_dir}/{tid}/children") as f:
                out += [int(p) for p in f.read().split()]
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return out


def child_with(pid, flag, value):
    """The pid of pid's child process whose arguments hold `flag value` (--rank 1,
    --api-server-index 0); a restarted one included."""
    for child in child_pids(pid):
        with open(f"/proc/{child}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        if flag.encode() in argv and argv[argv.index(flag.encode()) + 1] == str(value).encode():
            return child
    raise RuntimeError(f"no child with {flag} {value} among {child_pids(pid)}")


def child_log():
    """A file for a server's stderr that its rank processes share, opened for append: the test
    reads it by seeking the same open file (its offset is shared with every child), and without
    O_APPEND a child writing during that read would land at the test's offset and overwrite
    earlier lines."""
    log = tempfile.TemporaryFile()
    fcntl.fcntl(log.fileno(), fcntl.F_SETFL, fcntl.fcntl(log.fileno(), fcntl.F_GETFL) | os.O_APPEND)
    return log


class ServeProcess:
    """A `moeserve serve` (or proxy) process on 127.0.0.1 whose stderr goes to a file (an unread
    pipe could fill up and block it), with the HTTP calls the tests make. `port` is set by the
    subclass's wait once the server logged it (--port 0)."""

    def __init__(self, cmd, env=None, timeout=60):
        self.host = "127.0.0.1"
        self.port = None
        self.timeout = timeout  # seconds for any single HTTP exchange
        self.log = child_log()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, env=env)

    def log_text(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def request(self, method, path, body=None):
        c = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        payload = r.read()
        c.close()
        return r.status, payload

    def complete(self, prompt, max_tokens):
        """The greedy text of one completion."""
        status, payload = self.request("POST", "/v1/completions",
                                       {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
        assert status == 200, (status, payload)
        return json.loads(payload)["choices"][0]["text"]

    def complete_all(self, prompts, max_tokens):
        """complete() of every prompt at once, each on its own connection."""
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            return list(pool.map(lambda p: self.complete(p, max_tokens), prompts))

    def metrics(self):
        status, payload = self.request("GET", "/metrics")
        assert status == 200
        return parse_metrics(payload)

    def children(self):
        return child_pids(self.proc.pid)

    def child_with(self, flag, value):
        return child_with(self.proc.pid, flag, value)

    def stop(self, timeout=30, sig=signal.SIGTERM):
        return stop_process(self.proc, sig, timeout)

    def assert_stops_cleanly(self, test, timeout=30):
        """SIGTERM; the test fails unless the exit status is 0, with the log's tail to say why (a
        sanitizer report of a rank, a shutdown that hung)."""
        status = self.stop(timeout)
        test.assertEqual(status, 0, "exit status %s; the log ends:\n%s" % (status, self.log_text()[-4000:]))


def netns_request(prefix, host, port, method, path, body, timeout):
    """(status, payload) of one HTTP request made by a tiny client run under `prefix` (e.g.
    `ip netns exec NS`), so that it reaches an address only that namespace has."""
    code = ("import http.client,json,sys\n"
            "c=http.client.HTTPConnection(sys.argv[1],int(sys.argv[2]),timeout=%d)\n"
            "b=sys.argv[5]\n"
            "c.request(sys.argv[3],sys.argv[4],body=b if b else None,headers={'Content-Type':'application/json'})\n"
            "r=c.getresponse();d=r.read();sys.stdout.write(str(r.status)+'\\n');sys.stdout.flush();"
            "sys.stdout.buffer.write(d)\n") % timeout
    out = subprocess.run([*prefix, "/usr/bin/python3", "-c", code, host, str(port), method, path,
                          json.dumps(body) if body is not None else ""], capture_output=True, timeout=timeout + 10)
    if out.returncode != 0:
        raise OSError(out.stderr.decode())
    status, _, payload = out.stdout.partition(b"\n")
    return int(status), payload


def parse_metrics(payload):
    """{series with labels: value} of a /metrics body."""
    out = {}
    for line in payload.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True).returncode
