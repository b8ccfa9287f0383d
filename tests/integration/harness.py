"""Helpers the integration tests share (stdlib only): a request from inside a network namespace,
Prometheus text parsing, and a quiet shell command."""
import json
import subprocess


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
