#!/usr/bin/env python3
"""An independent reader of storectl's repository format 2, written from docs/repository-format.md
alone (not from storectl's code): restores one snapshot's database and external-data files.

Usage: decode-repository.py REPO SNAPSHOT_ID OUTPUT_DATABASE [PASSWORD_FILE]
Prints the SHA-256 of the database it wrote. Exits 1 on any mismatch."""
import base64, hashlib, hmac, json, os, struct, subprocess, sys

from cryptography.hazmat.primitives.ciphers.aead import AESGCM


def fail(message):
    print(f"decode-repository: {message}", file=sys.stderr)
    sys.exit(1)


repo, snapshot_id, output = sys.argv[1], sys.argv[2], sys.argv[3]
password_file = sys.argv[4] if len(sys.argv) > 4 else None


def read(key):
    with open(os.path.join(repo, key), "rb") as f:
        return f.read()


config = json.loads(read("config"))
if config["format"] != "storectl-repository" or config["version"] != 2:
    fail("not a format-2 repository")
encrypted = config["encryption"] == "aes-256-gcm"
# Layout 2 ("…-128"): 16-byte ids, indexes in runs, frames sealed as "frame"; layout 1: 32-byte ids.
id_bytes = 16 if config["contentIDs"].endswith("-128") else 32
encryption_key = identity_key = None

if encrypted:
    with open(password_file, "rb") as f:
        password = f.read().split(b"\n")[0].rstrip(b"\r")
    for name in sorted(os.listdir(os.path.join(repo, "keys"))):
        key_file = json.loads(read("keys/" + name))
        kdf = key_file["kdf"]
        wrapping = hashlib.scrypt(password, salt=base64.b64decode(kdf["salt"]), n=kdf["n"], r=kdf["r"], p=kdf["p"],
                                  maxmem=512 << 20, dklen=32)
        box = base64.b64decode(key_file["sealed"])
        try:
            master = AESGCM(wrapping).decrypt(box[:12], box[12:], ("key:" + key_file["id"]).encode())
        except Exception:
            continue
        encryption_key, identity_key = master[:32], master[32:]
        break
    else:
        fail("no key opens with this password")


def open_sealed(sealed, identity):
    if encrypted:
        return AESGCM(encryption_key).decrypt(sealed[:12], sealed[12:], identity.encode())
    plaintext, check = sealed[:-32], sealed[-32:]
    if hashlib.sha256(identity.encode() + b"\0" + plaintext).digest() != check:
        fail(f"{identity}: checksum mismatch")
    return plaintext


def content_id(data):
    if encrypted:
        return hmac.new(identity_key, data, hashlib.sha256).digest()[:id_bytes]
    return hashlib.sha256(data).digest()[:id_bytes]


if encrypted:
    check = open_sealed(base64.b64decode(config["keyCheck"]), "config:" + config["id"])
    if check != ("storectl-repository:" + config["id"]).encode():
        fail("the key check fails")


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n):
        if self.at + n > len(self.data):
            fail("truncated")
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def u8(self):
        return self.take(1)[0]

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]


def pack_contents(reader):
    frames = []
    for _ in range(reader.u32()):
        offset, sealed_length, raw_length, count = reader.u64(), reader.u32(), reader.u32(), reader.u32()
        blobs = []
        if id_bytes == 32:
            for _ in range(count):
                blobs.append((reader.u8(), reader.take(32), reader.u32(), reader.u32()))
        else:
            at = 0
            for _ in range(count):  # runs: type, length, n ids
                blob_type, length, n = reader.u8(), reader.u32(), reader.u32()
                for _ in range(n):
                    blobs.append((blob_type, reader.take(16), at, length))
                    at += length
            if at != raw_length:
                fail("a frame's runs do not fill it")
        frames.append((offset, sealed_length, raw_length, blobs))
    return frames


# Where every blob is: id -> (pack id hex, frame, blob offset, blob length).
where = {}
for name in os.listdir(os.path.join(repo, "index")):
    sealed = read("index/" + name)
    if hashlib.sha256(sealed).hexdigest() != name:
        fail(f"index {name} does not match its name")
    reader = Reader(open_sealed(sealed, "index"))
    if reader.take(4) != (b"SIX2" if id_bytes == 32 else b"SIX3"):
        fail(f"index {name}: bad magic")
    for _ in range(reader.u32()):
        pack = reader.take(32).hex()
        for frame in pack_contents(reader):
            for (_, blob_id, offset, length) in frame[3]:
                where.setdefault(blob_id, (pack, frame, offset, length))

frame_cache = {}


def blob(blob_id):
    if blob_id not in where:
        fail(f"blob {blob_id.hex()} is in no index")
    pack, (offset, sealed_length, raw_length, blobs), blob_offset, length = where[blob_id]
    key = (pack, offset)
    if key not in frame_cache:
        with open(os.path.join(repo, "data", pack[:2], pack), "rb") as f:
            f.seek(offset)
            sealed = f.read(sealed_length)
        if id_bytes == 32:
            identity = "frame:" + hashlib.sha256(b"".join(b[1] for b in blobs)).hexdigest()
        else:
            identity = "frame"
        compressed = open_sealed(sealed, identity)
        raw = subprocess.run(["zstd", "-d", "-c", "-q"], input=compressed, capture_output=True, check=True).stdout
        if len(raw) != raw_length:
            fail("a frame decompresses to the wrong length")
        frame_cache.clear()
        frame_cache[key] = raw
    data = frame_cache[key][blob_offset:blob_offset + length]
    if content_id(data) != blob_id:
        fail(f"blob {blob_id.hex()} does not match its id")
    return data


record = json.loads(open_sealed(read("snapshots/" + snapshot_id), "snapshot:" + snapshot_id))
if record["format"] != "storectl-snapshot" or record["manifest"]["snapshot"]["id"] != snapshot_id:
    fail("not this snapshot's record")
pages = record["pages"]
ids = []
for k, chunk_id in enumerate(pages["base"]):
    chunk = blob(bytes.fromhex(chunk_id))
    ids += [chunk[i:i + id_bytes] for i in range(0, len(chunk), id_bytes)]
if len(ids) != pages["baseCount"]:
    fail("the base holds the wrong number of ids")
if pages.get("delta"):
    reader = Reader(blob(bytes.fromhex(pages["delta"])))
    for _ in range(reader.u32()):
        page, blob_id = reader.u32(), reader.take(id_bytes)
        while len(ids) < page:
            ids.append(None)
        ids[page - 1] = blob_id
ids = ids[:pages["pageCount"]]
if hashlib.sha256(b"".join(ids)).hexdigest() != pages["digest"]:
    fail("the page map does not assemble to its digest")

database = hashlib.sha256()
with open(output, "wb") as out:
    for blob_id in ids:
        page = blob(blob_id)
        if len(page) != pages["pageSize"]:
            fail("a page of the wrong size")
        out.write(page)
        database.update(page)

folder = os.path.join(os.path.dirname(output), "external")
for file in record["files"]:
    data = b"".join(blob(bytes.fromhex(c)) for c in file["chunks"])
    if len(data) != file["bytes"] or hashlib.sha256(data).hexdigest() != file["sha256"]:
        fail(f"{file['path']} does not reassemble")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, os.path.basename(file["path"])), "wb") as f:
        f.write(data)

print(database.hexdigest())
