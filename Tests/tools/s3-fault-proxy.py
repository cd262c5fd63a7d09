#!/usr/bin/env python3
"""A loopback HTTP proxy in front of an S3 server that misbehaves on purpose, per request:

  --slowdown P   answer 503 SlowDown without forwarding
  --cut P        read the request, then close the connection without an answer (reset mid-request)
  --lost P       forward the request (the server does it), then close without an answer:
                 the client cannot know it succeeded, and must retry safely
  --corrupt P    flip one byte of a PUT's body on the way (the server must refuse it)
  --damage-first-read
                 flip one byte of the answer to the first GET of each pack (data/…): a second
                 read of it is whole (damage on the way, not in the repository)
  --loop-list    answer every ListObjectsV2 with the server's page, marked truncated and with the
                 same continuation token each time (a listing that never advances)
  --delay-ms N   hold every request N ms before forwarding it (a distant or slow bucket)
Each with probability P (0..1), from a seeded random generator. Prints its port on stdout.
  --log FILE     append a line per request: its time (Unix seconds), method and path (bench/idle.sh
                 counts what an idle follower sends)
  --tls CA_FILE  serve https with a new self-signed certificate for 127.0.0.1 (Python's
                 cryptography), written as PEM to CA_FILE for the client to trust

Usage: s3-fault-proxy.py UPSTREAM_PORT [--slowdown P] [--cut P] [--lost P] [--seed N] [--tls CA_FILE]
"""
import argparse, http.client, random, socket, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = argparse.ArgumentParser()
args.add_argument("upstream", type=int)
args.add_argument("--slowdown", type=float, default=0.0)
args.add_argument("--cut", type=float, default=0.0)
args.add_argument("--lost", type=float, default=0.0)
args.add_argument("--corrupt", type=float, default=0.0)
args.add_argument("--loop-list", action="store_true")
args.add_argument("--damage-first-read", action="store_true")
args.add_argument("--delay-ms", type=float, default=0.0)
args.add_argument("--seed", type=int, default=1)
args.add_argument("--tls", default=None)
args.add_argument("--log", default=None)
options = args.parse_args()
rng = random.Random(options.seed)
lock = threading.Lock()
counts = {"forwarded": 0, "slowdown": 0, "cut": 0, "lost": 0, "corrupt": 0}

log = open(options.log, "a", buffering=1) if options.log else None
damaged_once = set()

def pick():
    with lock:
        r = rng.random()
        if r < options.slowdown: return "slowdown"
        r -= options.slowdown
        if r < options.cut: return "cut"
        r -= options.cut
        if r < options.lost: return "lost"
        r -= options.lost
        if r < options.corrupt: return "corrupt"
        return "forwarded"

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        fate = pick()
        with lock:
            counts[fate] += 1
            if log: log.write("%.3f %s %s\n" % (time.time(), self.command, self.path))
        if fate == "cut":
            self.rfile.read(length // 2)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        body = self.rfile.read(length) if length else b""
        if options.delay_ms > 0: time.sleep(options.delay_ms / 1000)
        if fate == "corrupt" and body and self.command == "PUT":
            damaged = bytearray(body)
            damaged[len(damaged) // 2] ^= 0x5A
            body = bytes(damaged)
        if fate == "slowdown":
            payload = b"<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            self.send_response(503)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        upstream = http.client.HTTPConnection("127.0.0.1", options.upstream, timeout=60)
        upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for name, value in self.headers.items():
            if name.lower() not in ("connection", "keep-alive", "proxy-connection", "transfer-encoding", "expect"):
                upstream.putheader(name, value)
        upstream.endheaders(body if body else None)
        response = upstream.getresponse()
        data = response.read()
        upstream.close()
        if fate == "lost":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if options.damage_first_read and self.command == "GET" and "/data/" in self.path and response.status in (200, 206) and data:
            key = self.path.split("?")[0]
            with lock:
                first = key not in damaged_once
                damaged_once.add(key)
            if first:
                flipped = bytearray(data)
                flipped[len(flipped) // 2] ^= 0x5A
                data = bytes(flipped)
        if options.loop_list and self.command == "GET" and "list-type=2" in self.path and response.status == 200:
            text = data.decode("utf-8", "replace")
            for tag in ("IsTruncated", "NextContinuationToken"):
                start, end = text.find("<%s>" % tag), text.find("</%s>" % tag)
                if start >= 0 and end > start: text = text[:start] + text[end + len(tag) + 3:]
            text = text.replace("</ListBucketResult>", "<IsTruncated>true</IsTruncated><NextContinuationToken>again</NextContinuationToken></ListBucketResult>")
            data = text.encode()
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in ("connection", "keep-alive", "transfer-encoding", "content-length"):
                self.send_header(name, value)
        # HEAD answers carry the object's length, with no body.
        length = response.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data))
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any

def tls_context(ca_file):
    import datetime, ipaddress, os, ssl, tempfile
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "storectl test proxy")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    with open(ca_file, "wb") as f: f.write(pem)
    folder = tempfile.mkdtemp()
    cert_path, key_path = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    with open(cert_path, "wb") as f: f.write(pem)
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return context

class TLSServer(ThreadingHTTPServer):
    # The handshake runs in the request's thread, so a client that gives up on it (an untrusted
    # certificate) does not stall the accept loop.
    def finish_request(self, request, client_address):
        try:
            request = self.context.wrap_socket(request, server_side=True)
        except OSError:
            return
        super().finish_request(request, client_address)

if options.tls:
    server = TLSServer(("127.0.0.1", 0), Handler)
    server.context = tls_context(options.tls)
else:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
try:
    server.serve_forever()
finally:
    print(counts, file=sys.stderr, flush=True)
