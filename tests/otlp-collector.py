#!/usr/bin/python3
# otlp-collector.py DIR [ANSWER...] - a stand-in for an OTLP/HTTP collector
# on 127.0.0.1 (an ephemeral port, written to DIR/port once it listens).
# Each request is kept as DIR/req-N.json ({"method","path","headers"},
# header names in lower case) and DIR/req-N.body (the bytes), N from 1.
# The Nth request is answered with the Nth ANSWER, a JSON object
# {"status":S,"body":TEXT,"headers":{...}} (default: 200 with an empty
# ExportTraceServiceResponse, "{}"); a request that is not a POST to
# /v1/traces with Content-Type application/json gets 404 or 415, as a
# collector would. It serves at most 32 requests and stops after 60 s.
import json, os, sys, threading
from http.server import BaseHTTPRequestHandler, HTTPServer

out = sys.argv[1]
answers = [json.loads(a) for a in sys.argv[2:]]
count = 0


class Collector(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        global count
        count += 1
        n = count
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        meta = {"method": "POST", "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()}}
        with open(os.path.join(out, f"req-{n}.json"), "w") as f:
            json.dump(meta, f)
        with open(os.path.join(out, f"req-{n}.body"), "wb") as f:
            f.write(body)
        if self.path != "/v1/traces":
            answer = {"status": 404, "body": '{"message":"no such path"}'}
        elif (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            answer = {"status": 415, "body": '{"message":"application/json only"}'}
        else:
            answer = answers[n - 1] if n <= len(answers) else {}
        data = answer.get("body", "{}").encode()
        self.send_response(answer.get("status", 200))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in answer.get("headers", {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        if count >= 32:
            threading.Thread(target=server.shutdown).start()


server = HTTPServer(("127.0.0.1", 0), Collector)
threading.Timer(60, server.shutdown).start()
with open(os.path.join(out, "port.tmp"), "w") as f:
    f.write(str(server.server_address[1]))
os.rename(os.path.join(out, "port.tmp"), os.path.join(out, "port"))
server.serve_forever()
os._exit(0)
