#!/usr/bin/env python3
"""A fault-injecting HTTP proxy between the operator and the API server.

The operator talks plain HTTP to this proxy; the proxy forwards every
request over HTTPS (the cluster's CA) to the real kube-apiserver, and
streams watch responses line by line. On command it misbehaves:

  POST /__fault/answer?code=500&method=PATCH&match=/pods/&n=3
        the next n requests whose method and path (regex) match are
        answered with a metav1.Status of that code (409, 410, 500, ...)
        instead of being forwarded
  POST /__fault/cut?match=/pods
        every open watch whose path matches is cut mid-stream (connection
        closed without the final chunk)
  POST /__fault/expire?match=/pods
        every open watch whose path matches receives an in-stream ERROR
        event with a 410 Status, then ends
  GET  /__fault/stats
        counters as JSON: requests, injected, cut, expire, watches

usage: faultproxy.py LISTEN_PORT UPSTREAM_URL CA_FILE PORT_FILE
(LISTEN_PORT 0 picks a free port, written to PORT_FILE).
"""
import http.client
import http.server
import json
import re
import socket
import ssl
import sys
import threading
import urllib.parse

UPSTREAM = urllib.parse.urlparse(sys.argv[2])
CTX = ssl.create_default_context(cafile=sys.argv[3])
LOCK = threading.Lock()
RULES = []            # [method, regex, code, remaining]
WATCHES = set()       # open watch handlers
STATS = {"requests": 0, "injected": 0, "cut": 0, "expire": 0, "watches": 0}
HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer",
       "upgrade", "proxy-connection", "content-length", "host"}


def status_body(code, reason, message):
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {},
                       "status": "Failure", "message": message,
                       "reason": reason, "code": code}).encode()


REASONS = {409: "Conflict", 410: "Expired", 500: "InternalError",
           503: "ServiceUnavailable", 429: "TooManyRequests"}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def control(self):
        u = urllib.parse.urlparse(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        what = u.path[len("/__fault/"):]
        with LOCK:
            if what == "stats":
                return self.reply(200, json.dumps(STATS).encode())
            if what == "answer":
                RULES.append([q.get("method", ""), re.compile(q.get("match", "")),
                              int(q.get("code", "500")), int(q.get("n", "1"))])
                return self.reply(200, b"ok\n")
            victims = [w for w in WATCHES if re.search(q.get("match", ""), w.path)]
        for w in victims:
            if what == "cut":
                w.cut()
            elif what == "expire":
                w.expire()
        with LOCK:
            STATS[what] = STATS.get(what, 0) + len(victims)
        return self.reply(200, ("%d\n" % len(victims)).encode())

    def injected(self):
        with LOCK:
            STATS["requests"] += 1
            for r in RULES:
                if r[3] > 0 and (not r[0] or r[0] == self.command) and r[1].search(self.path):
                    r[3] -= 1
                    STATS["injected"] += 1
                    return r[2]
        return 0

    def handle_any(self):
        if self.path.startswith("/__fault/"):
            return self.control()
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        code = self.injected()
        if code:
            return self.reply(code, status_body(code, REASONS.get(code, "Unknown"),
                                                "injected by the test proxy"))
        conn = http.client.HTTPSConnection(UPSTREAM.hostname, UPSTREAM.port,
                                           context=CTX, timeout=600)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            # the API server itself did not answer: say so, as a gateway would
            conn.close()
            sys.stderr.write("upstream %s %s: %s\n" % (self.command, self.path, e))
            return self.reply(502, status_body(502, "BadGateway", "upstream: %s" % e))
        watch = "watch=1" in self.path or "watch=true" in self.path
        if not watch or resp.status != 200:
            data = resp.read()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP:
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()
            return
        self.stream(conn, resp)

    def stream(self, conn, resp):
        self.wlock = threading.Lock()
        self.upstream = conn
        self.dead = False
        self.send_response(200)
        self.send_header("Content-Type", resp.getheader("Content-Type", "application/json"))
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        with LOCK:
            WATCHES.add(self)
            STATS["watches"] += 1
        try:
            while True:
                line = resp.readline()
                if not line:
                    break
                if not self.chunk(line):
                    break
            self.end()
        except (OSError, ValueError, http.client.HTTPException):
            pass
        finally:
            with LOCK:
                WATCHES.discard(self)
            conn.close()

    def chunk(self, data):
        with self.wlock:
            if self.dead:
                return False
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            return True

    def end(self):
        with self.wlock:
            if not self.dead:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                self.dead = True

    def cut(self):
        with self.wlock:
            self.dead = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            self.upstream.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass

    def expire(self):
        ev = json.dumps({"type": "ERROR", "object": json.loads(status_body(
            410, "Expired", "too old resource version: 1 (2)"))}).encode() + b"\n"
        try:
            self.chunk(ev)
            self.end()
        except OSError:
            pass
        try:
            self.upstream.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any


def main():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    srv.daemon_threads = True
    with open(sys.argv[4], "w") as f:
        f.write("%d\n" % srv.server_address[1])
    srv.serve_forever()


if __name__ == "__main__":
    main()
