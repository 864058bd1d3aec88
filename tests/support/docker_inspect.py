"""The shape of ``docker image inspect`` output for a vLLM nightly image, and a fake ``docker``.

No docker engine runs on the machines these tests run on, so the image metadata is a recorded
*shape*: the fields and nesting ``docker image inspect`` prints (a JSON list of image objects;
``Config.Env`` a list of ``NAME=value``, ``Config.Labels`` a mapping), with the values vLLM's
Dockerfile sets (``VLLM_BUILD_COMMIT``, the label ``ai.vllm.build.commit``). It is not a recording
of the real image: the digests and sizes are made up. ``fake_docker`` writes a ``docker`` script
that answers ``docker image inspect REF`` with it (and fails like docker for other images).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

PROD = "7f1a5398e9610d96c473931a26c0e12bbe0d0423"


def inspect_output(commit: str = PROD, *, tag: str = "nightly") -> list[dict[str, Any]]:
    """``docker image inspect vllm/vllm-openai:<tag>`` as docker prints it (one image)."""
    return [
        {
            "Id": "sha256:" + "ab" * 32,
            "RepoTags": [f"vllm/vllm-openai:{tag}"],
            "RepoDigests": ["vllm/vllm-openai@sha256:" + "cd" * 32],
            "Parent": "",
            "Comment": "buildkit.dockerfile.v0",
            "Created": "2026-09-23T04:12:55.123456789Z",
            "DockerVersion": "",
            "Author": "",
            "Config": {
                "Hostname": "",
                "Domainname": "",
                "User": "",
                "AttachStdin": False,
                "AttachStdout": False,
                "AttachStderr": False,
                "Tty": False,
                "OpenStdin": False,
                "StdinOnce": False,
                "Env": [
                    "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "NVIDIA_VISIBLE_DEVICES=all",
                    f"VLLM_BUILD_COMMIT={commit}",
                ],
                "Cmd": None,
                "Image": "",
                "Volumes": None,
                "WorkingDir": "/vllm-workspace",
                "Entrypoint": ["vllm", "serve"],
                "OnBuild": None,
                "Labels": {
                    "ai.vllm.build.commit": commit,
                    "maintainer": "NVIDIA CORPORATION <cudatools@nvidia.com>",
                    "org.opencontainers.image.ref.name": "ubuntu",
                    "org.opencontainers.image.version": "22.04",
                },
            },
            "Architecture": "arm64",
            "Os": "linux",
            "Size": 21474836480,
            "GraphDriver": {"Data": None, "Name": "overlayfs"},
            "RootFS": {"Type": "layers", "Layers": ["sha256:" + "ef" * 32]},
            "Metadata": {"LastTagTime": "2026-09-24T10:00:00.000000000Z"},
        }
    ]


def fake_docker(bin_dir: Path, images: dict[str, list[dict[str, Any]]]) -> Path:
    """A ``docker`` script in ``bin_dir`` answering ``docker image inspect REF`` for ``images``
    (REF -> inspect output) and failing like docker ("No such image", exit 1) for any other."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    data = bin_dir / "images.json"
    data.write_text(json.dumps(images))
    script = bin_dir / "docker"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"images = json.load(open({str(data)!r}))\n"
        "args = sys.argv[1:]\n"
        "if args[:2] != ['image', 'inspect'] or len(args) != 3:\n"
        "    sys.stderr.write('fake docker: only `docker image inspect REF`\\n'); sys.exit(2)\n"
        "if args[2] not in images:\n"
        "    print('[]'); sys.stderr.write(f'Error response from daemon: No such image: {args[2]}\\n'); sys.exit(1)\n"
        "print(json.dumps(images[args[2]], indent=4))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script
