#!/usr/bin/env python3
"""Writes a one-layer OCI image layout (a directory skopeo copies from) out of
files on this machine: the stand-in images of the local node (hack/lib/node.sh).

    oci-layout.py OUT_DIR --file SRC:DEST[:MODE] ... [--dir DEST ...]
                  [--link DEST:TARGET ...] [--entrypoint JSON_LIST]
                  [--user UID] [--env K=V ...]

Reproducible: fixed times and owners, entries sorted, so the same inputs give
the same digest (the registry and containerd keep one copy).
"""
import argparse
import hashlib
import io
import json
import os
import sys
import tarfile


def add_dirs(tar, seen, path):
    parts = path.strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d and d not in seen:
            seen.add(d)
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)


def layer(files, dirs, links):
    buf = io.BytesIO()
    seen = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = [(d.strip("/"), None, 0o1777 if d.strip("/") == "tmp" else 0o755) for d in dirs]
        for spec in files:
            src, dest, *mode = spec.split(":")
            entries.append((dest.strip("/"), src, int(mode[0], 8) if mode else 0o755))
        # A symbolic link: ("link", target) in the source's place.
        for spec in links:
            dest, target = spec.split(":", 1)
            entries.append((dest.strip("/"), ("link", target), 0o777))
        for dest, src, mode in sorted(entries, key=lambda e: e[0]):
            add_dirs(tar, seen, dest)  # parents only: a --dir keeps its own mode
            if isinstance(src, tuple):
                info = tarfile.TarInfo(dest)
                info.type = tarfile.SYMTYPE
                info.linkname = src[1]
                info.mode = mode
                tar.addfile(info)
                continue
            if src is None:
                if dest in seen:
                    continue
                seen.add(dest)
                info = tarfile.TarInfo(dest)
                info.type = tarfile.DIRTYPE
                info.mode = mode
                tar.addfile(info)
                continue
            with open(src, "rb") as f:
                data = f.read()
            info = tarfile.TarInfo(dest)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_blob(out, data):
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(out, "blobs", "sha256", digest)
    with open(path, "wb") as f:
        f.write(data)
    return "sha256:" + digest, len(data)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--file", action="append", default=[])
    p.add_argument("--dir", action="append", default=[])
    p.add_argument("--link", action="append", default=[])
    p.add_argument("--entrypoint", default="[]")
    p.add_argument("--user", default="")
    p.add_argument("--env", action="append", default=[])
    a = p.parse_args()

    os.makedirs(os.path.join(a.out, "blobs", "sha256"), exist_ok=True)
    tar = layer(a.file, a.dir, a.link)
    layer_digest, layer_size = write_blob(a.out, tar)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": json.loads(a.entrypoint),
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"] + a.env,
            "User": a.user,
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "hack/lib/oci-layout.py"}],
    }
    config_digest, config_size = write_blob(a.out, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer_size}],
    }
    manifest_digest, manifest_size = write_blob(a.out, json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest, "size": manifest_size}],
    }
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(a.out, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    print(manifest_digest)


if __name__ == "__main__":
    sys.exit(main())
