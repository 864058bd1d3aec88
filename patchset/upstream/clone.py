"""A real upstream as a blobless bare clone, fetched incrementally, with the queries of ``repo``.

For machines that can reach the upstream's git server (the release histories of ``history`` are
for those that cannot).
"""

from __future__ import annotations

import re
from pathlib import Path

from patchset.atomic import publish_dir
from patchset.errors import EnvironmentFailure, InputError
from patchset.upstream import cache
from patchset.upstream.git import run_git
from patchset.upstream.releases import ReleaseSpec, as_spec, is_spec_like
from patchset.upstream.repo import GitRepo


def _dir_for_url(url: str) -> Path:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", url.rstrip("/").split("://", 1)[-1]).strip("_")
    return cache.subdir("upstream") / (stem[-80:] + ("" if stem.endswith(".git") else ".git"))


class UpstreamClone(GitRepo):
    """A blobless bare clone of a real upstream (``--filter=blob:none``), fetched incrementally.

    Blobs are fetched lazily by git when read (``read_blob``, ``renames``), so the first clone
    of vLLM is small. ``sync()`` clones the first time and fetches branches and tags afterwards.
    """

    user_config = True  # clone, fetch and lazy blob reads reach the network: proxies, credentials

    def __init__(self, url: str, directory: Path | str | None = None) -> None:
        super().__init__(Path(directory) if directory is not None else _dir_for_url(url))
        self.url = url

    def resolve(self, ref: str | ReleaseSpec) -> str:
        """Like ``GitRepo.resolve``; ``PROJECT==VERSION`` maps to the upstream tag ``v<VERSION>``."""
        if isinstance(ref, ReleaseSpec) or (isinstance(ref, str) and is_spec_like(ref)):
            spec = as_spec(ref)
            sha = self.rev(f"refs/tags/{spec.tag}")
            if sha is None:
                raise InputError(
                    f"{spec}: tag {spec.tag} is not in the clone of {self.url}",
                    hint="run sync() to fetch new tags, or check the version",
                )
            return sha
        return super().resolve(ref)

    @property
    def cloned(self) -> bool:
        return (self.git_dir / "HEAD").exists()

    def sync(self) -> UpstreamClone:
        """Clone (first time) or fetch (afterwards) every branch and tag of the upstream."""
        if not self.cloned:
            if self.git_dir.exists() and any(self.git_dir.iterdir()):
                raise InputError(
                    f"{self.git_dir} exists and is not a git clone",
                    hint="remove it or choose another directory",
                )
            with publish_dir(self.git_dir) as tmp:
                proc = run_git(
                    ["clone", "-q", "--bare", "--filter=blob:none", "--", self.url, str(tmp)],
                    check=False,
                    user_config=True,
                )
                if proc.returncode != 0:
                    raise EnvironmentFailure(
                        f"cannot clone {self.url}: {proc.stderr.decode(errors='replace').strip()}",
                        hint="check the URL and the network",
                    )
                run_git(["config", "remote.origin.fetch", "+refs/heads/*:refs/heads/*"], cwd=tmp)
            return self
        have = self.git("config", "--get", "remote.origin.url", check=False).stdout.decode().strip()
        if have != self.url:
            raise InputError(
                f"{self.git_dir} is a clone of {have or 'nothing'}, not {self.url}",
                hint="use another directory for another upstream",
            )
        proc = self.git("fetch", "-q", "--prune", "--tags", "origin", check=False)
        if proc.returncode != 0:
            raise EnvironmentFailure(
                f"cannot fetch {self.url}: {proc.stderr.decode(errors='replace').strip()}",
                hint="check the network; the clone is unchanged",
            )
        return self
